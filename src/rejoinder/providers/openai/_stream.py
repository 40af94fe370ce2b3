"""The Chat Completions stream, sans I/O: ``text/event-stream`` bytes → event data
(``SSEDecoder``, shared with other providers) → ``ChatChunk``s (``StreamAssembler``).
``chat.LLM`` feeds them what it reads; tests feed them bytes and strings directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...models import ChatChunk, LLMError, ToolCallRequest, Usage
from ...models.chat import new_id
from .. import _json
from .._http import error_message_from_body
from .._sse import SSEDecoder

__all__ = ["SSEDecoder", "StreamAssembler"]

# -- chunk assembly -------------------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""


class StreamAssembler:
    """Turns the data of each SSE event into ``ChatChunk``s (pure, no I/O).

    Text deltas pass through as they arrive. Tool-call fragments are merged by ``index``
    and released together when the stream gives a ``finish_reason``, says ``[DONE]``, or
    ends after a ``finish_reason``. Usage is reported once, in the last chunk (some servers
    repeat a running total in every chunk; the last one is the total). Raises ``LLMError``
    for a malformed chunk, an error object in the stream, or a stream that ends before the
    model finished.
    """

    __slots__ = ("_calls", "_usage", "done", "finished")

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None
        self.finished = False
        """A choice carried a ``finish_reason``."""
        self.done = False
        """``[DONE]`` arrived; nothing more will be read."""

    def feed(self, data: str) -> ChatChunk | None:
        if data.strip() == "[DONE]":
            self.done = True
            return self._final_chunk()
        try:
            obj: object = _json.loads(data)
        except _json.NestedTooDeeply:
            raise _malformed("nested too deeply", data) from None
        except ValueError:
            raise LLMError(f"malformed chunk (not JSON): {_excerpt(data)}") from None
        if not isinstance(obj, dict):
            raise _malformed("a chunk is not a JSON object", data)
        if obj.get("error") is not None:
            raise _stream_error(obj["error"])

        delta_text: list[str] = []
        choices = obj.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise _malformed("`choices` is not a list", data)
        for choice in choices:
            if not isinstance(choice, dict):
                raise _malformed("a choice is not an object", data)
            if choice.get("index") not in (0, None):
                continue  # only one completion is requested
            delta = choice.get("delta")
            if delta is None:
                delta = {}
            if not isinstance(delta, dict):
                raise _malformed("`delta` is not an object", data)
            content = delta.get("content")
            if content is not None:
                if not isinstance(content, str):
                    raise _malformed("`delta.content` is not a string", data)
                delta_text.append(content)
            tool_calls = delta.get("tool_calls")
            if tool_calls is not None:
                if not isinstance(tool_calls, list):
                    raise _malformed("`delta.tool_calls` is not a list", data)
                for fragment in tool_calls:
                    self._merge(fragment, data)
            if choice.get("finish_reason"):
                self.finished = True

        usage = _usage(obj.get("usage"), data)
        if usage is not None:
            self._usage = usage
        chunk = ChatChunk(delta="".join(delta_text))
        if self.finished:
            chunk = self._release_calls(chunk)
        return chunk if chunk != ChatChunk() else None

    def end(self) -> ChatChunk | None:
        """The stream ended (EOF) without ``[DONE]``."""
        if self.done:
            return None
        self.done = True
        if not self.finished:
            raise LLMError(
                "the stream ended before the model finished (no finish_reason and no [DONE])",
                retryable=True,
            )
        return self._final_chunk()

    def _final_chunk(self) -> ChatChunk | None:
        chunk = self._release_calls(ChatChunk(usage=self._usage))
        return chunk if chunk != ChatChunk() else None

    def _merge(self, fragment: object, data: str) -> None:
        if not isinstance(fragment, dict):
            raise _malformed("a tool call is not an object", data)
        index = fragment.get("index")
        call_id = fragment.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise _malformed("a tool call `id` is not a string", data)
        if index is None:
            # Some servers omit `index`: a new id starts a new call, no id continues the last.
            known = [i for i, c in self._calls.items() if call_id and c.call_id == call_id]
            if known:
                index = known[0]
            elif call_id or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        if not isinstance(index, int) or isinstance(index, bool):
            raise _malformed("a tool call `index` is not an integer", data)
        function = fragment.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict):
            raise _malformed("a tool call `function` is not an object", data)
        name = function.get("name")
        if name is not None and not isinstance(name, str):
            raise _malformed("a tool call `function.name` is not a string", data)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            # A few servers send an object, not JSON text.
            try:
                arguments = _json.dumps(arguments)
            except ValueError:
                raise _malformed("`function.arguments` nests too deeply", data) from None
        if arguments is not None and not isinstance(arguments, str):
            raise _malformed("a tool call `function.arguments` is not a string", data)

        call = self._calls.setdefault(index, _PartialCall())
        if call_id and call.call_id is None:
            call.call_id = call_id
        if name and call.name is None:
            call.name = name
        if arguments:
            call.arguments += arguments

    def _release_calls(self, chunk: ChatChunk) -> ChatChunk:
        if not self._calls:
            return chunk
        requests: list[ToolCallRequest] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise LLMError(f"malformed chunk: the tool call at index {index} has no name")
            requests.append(
                ToolCallRequest(
                    call_id=call.call_id or new_id("call"),
                    name=call.name,
                    arguments=call.arguments or "{}",
                )
            )
        self._calls.clear()
        return ChatChunk(delta=chunk.delta, tool_calls=tuple(requests), usage=chunk.usage)


def _usage(value: object, data: str) -> Usage | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _malformed("`usage` is not an object", data)
    prompt = value.get("prompt_tokens") or 0
    completion = value.get("completion_tokens") or 0
    if not isinstance(prompt, int) or not isinstance(completion, int):
        raise _malformed("`usage` token counts are not integers", data)
    details = value.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int) or isinstance(cached, bool):
        cached = None  # not reported (or not a count): unknown, not zero
    return Usage(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached)


def _stream_error(error: object) -> LLMError:
    """An ``{"error": ...}`` object sent inside the stream (OpenAI does this on server errors)."""
    try:
        body = _json.dumps({"error": error})
    except ValueError:
        return LLMError("malformed chunk: an error object nested too deeply")
    message = error_message_from_body(body.encode())
    retryable = False
    if isinstance(error, dict):
        # Only text counts: formatting an arbitrary (maybe deeply nested) value could fail.
        kind = " ".join(v for v in (error.get("type"), error.get("code")) if isinstance(v, str))
        retryable = "server_error" in kind or "rate_limit" in kind or "overloaded" in kind
    return LLMError(f"the server reported an error mid-stream: {message}", retryable=retryable)


def _malformed(problem: str, data: str) -> LLMError:
    return LLMError(f"malformed chunk: {problem}: {_excerpt(data)}")


def _excerpt(data: str, limit: int = 200) -> str:
    data = data.strip()
    return repr(data if len(data) <= limit else data[: limit - 1] + "…")
