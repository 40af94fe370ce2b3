"""The Messages stream, sans I/O: each server-sent event's data → ``ChatChunk``s.

The events (https://docs.anthropic.com/en/docs/build-with-claude/streaming):
``message_start`` (the message, with the input's usage), then per content block
``content_block_start``, ``content_block_delta`` (``text_delta``, ``input_json_delta``
for a tool's arguments, ``thinking_delta``, ``signature_delta``) and
``content_block_stop``; ``message_delta`` (the stop reason, the output's usage) and
``message_stop``. ``ping`` keeps the connection alive; ``error`` reports a failure
mid-stream (``overloaded_error`` among them). Unknown event and block types are skipped:
the API adds new ones within a version.

Text goes out as it comes. A tool call goes out whole when its block stops, with its
arguments as the JSON text the model streamed (an empty one as ``{}``; malformed text as
it is, for the tool runner to answer with an error). Usage goes out on the last chunk:
the prompt's tokens are the input's, cached or not, and ``cached_tokens`` those read from
the prompt cache. Thinking is not spoken.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ...models import ChatChunk, LLMError, ToolCallRequest, Usage
from .. import _json
from .._http import error_message_from_body

__all__ = ["StreamAssembler"]

logger = logging.getLogger("rejoinder.providers.anthropic")

_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
"""Error types worth another try (before anything was yielded)."""


@dataclass(slots=True)
class _ToolBlock:
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Feed it each event's data (``feed``), then ``end()`` at the end of the connection.
    ``stop_reason`` is the message's, once ``message_delta`` said it."""

    __slots__ = ("_blocks", "_input", "_output", "_started", "done", "stop_reason")

    def __init__(self) -> None:
        self._blocks: dict[int, _ToolBlock] = {}
        self._started = False
        self._input: tuple[int, int, int] | None = None
        """Input tokens: uncached, written to the cache, read from it."""
        self._output = 0
        self.done = False
        self.stop_reason: str | None = None

    def feed(self, data: str) -> ChatChunk | None:
        try:
            event = _json.loads(data)
        except ValueError as exc:
            raise _malformed(f"not JSON ({exc})", data) from None
        if not isinstance(event, dict):
            raise _malformed("not an object", data)
        kind = event.get("type")
        if kind == "error":
            raise _stream_error(event.get("error"))
        if kind == "message_start":
            self._message_start(event, data)
            return None
        if not self._started and kind != "ping":
            raise _malformed(f"{kind!r} before message_start", data)
        if kind == "content_block_start":
            return self._block_start(event, data)
        if kind == "content_block_delta":
            return self._block_delta(event, data)
        if kind == "content_block_stop":
            return self._block_stop(event, data)
        if kind == "message_delta":
            self._message_delta(event, data)
        elif kind == "message_stop":
            self.done = True
            return self._final_chunk()
        return None  # ping, or an event type this client does not know

    def end(self) -> ChatChunk | None:
        """The connection ended. Before ``message_stop`` that is a cut-off reply."""
        if self.done:
            return None
        self.done = True
        raise LLMError(
            "the stream ended before message_stop (the connection was cut)", retryable=True
        )

    # -- events -----------------------------------------------------------------------------

    def _message_start(self, event: dict[str, object], data: str) -> None:
        message = event.get("message")
        if not isinstance(message, dict):
            raise _malformed("message_start without a message", data)
        self._started = True
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._input = (
                _count(usage, "input_tokens"),
                _count(usage, "cache_creation_input_tokens"),
                _count(usage, "cache_read_input_tokens"),
            )
            self._output = _count(usage, "output_tokens")

    def _block_start(self, event: dict[str, object], data: str) -> ChatChunk | None:
        index, block = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            raise _malformed("content_block_start without an index and a block", data)
        if block.get("type") == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise _malformed("a tool_use block without an id and a name", data)
            self._blocks[index] = _ToolBlock(call_id, name)
        elif block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str) and text:
                return ChatChunk(delta=text)
        return None

    def _block_delta(self, event: dict[str, object], data: str) -> ChatChunk | None:
        index, delta = event.get("index"), event.get("delta")
        if not isinstance(index, int) or not isinstance(delta, dict):
            raise _malformed("content_block_delta without an index and a delta", data)
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                raise _malformed("a text_delta without text", data)
            return ChatChunk(delta=text) if text else None
        if kind == "input_json_delta":
            block = self._blocks.get(index)
            partial = delta.get("partial_json")
            if block is None or not isinstance(partial, str):
                raise _malformed("an input_json_delta outside a tool_use block", data)
            block.arguments.append(partial)
        return None  # thinking, signatures, citations: nothing to say aloud

    def _block_stop(self, event: dict[str, object], data: str) -> ChatChunk | None:
        index = event.get("index")
        if not isinstance(index, int):
            raise _malformed("content_block_stop without an index", data)
        block = self._blocks.pop(index, None)
        if block is None:
            return None
        arguments = "".join(block.arguments).strip() or "{}"
        return ChatChunk(tool_calls=(ToolCallRequest(block.call_id, block.name, arguments),))

    def _message_delta(self, event: dict[str, object], data: str) -> None:
        delta = event.get("delta")
        if isinstance(delta, dict):
            reason = delta.get("stop_reason")
            if isinstance(reason, str):
                self.stop_reason = reason
                if reason in ("max_tokens", "refusal", "model_context_window_exceeded"):
                    logger.warning("the reply stopped early: stop_reason %s", reason)
        usage = event.get("usage")
        if isinstance(usage, dict) and "output_tokens" in usage:
            self._output = _count(usage, "output_tokens")

    def _final_chunk(self) -> ChatChunk | None:
        if self._blocks:
            raise LLMError("malformed stream: message_stop with a tool_use block still open")
        if self._input is None:
            return None
        uncached, written, read = self._input
        usage = Usage(
            prompt_tokens=uncached + written + read,
            completion_tokens=self._output,
            cached_tokens=read,
        )
        return ChatChunk(usage=usage)


def _count(usage: dict[str, object], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def _stream_error(error: object) -> LLMError:
    kind = error.get("type") if isinstance(error, dict) else None
    try:
        body = _json.dumps({"error": error})
    except ValueError:
        return LLMError("malformed stream: an error object nested too deeply")
    message = error_message_from_body(body.encode())
    label = f" ({kind})" if isinstance(kind, str) else ""
    return LLMError(
        f"the server reported an error mid-stream{label}: {message}",
        retryable=kind in _RETRYABLE_ERRORS,
    )


def _malformed(problem: str, data: str) -> LLMError:
    excerpt = data.strip()
    excerpt = excerpt if len(excerpt) <= 200 else excerpt[:199] + "…"
    return LLMError(f"malformed stream event: {problem}: {excerpt!r}")
