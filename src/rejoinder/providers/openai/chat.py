"""An LLM for any OpenAI-compatible Chat Completions endpoint, streamed over SSE.

Works with OpenAI itself and with local servers that speak the same protocol (Ollama,
vLLM, llama.cpp, LM Studio, ...). ``aiohttp`` is imported on first use only, so importing
this module is cheap.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import models
from ...models import ChatChunk, ChatContext, LLMError, ToolCallRequest, ToolDefinition, Usage
from ...models.chat import new_id
from . import _convert
from ._auth import DEFAULT_BASE_URL, api_key_from, base_url_from

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_BASE_URL", "LLM", "SSEDecoder", "Timeout"]

logger = logging.getLogger("rejoinder.providers.openai")

_USER_AGENT = "rejoinder/0.1"
_MAX_LINE_BYTES = 16 * 1024 * 1024
_MAX_ERROR_BODY_BYTES = 64 * 1024
_RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class Timeout:
    """How long to wait, in seconds, before a request fails with a retryable ``LLMError``.

    ``None`` disables a limit.
    """

    connect: float | None = 10.0
    """Opening the connection (TCP and TLS), including waiting for a pooled connection."""
    read: float | None = 60.0
    """Longest silence from the server: until the response headers, and between stream reads.
    Keep-alive comments count as data, so a server that sends them never trips this."""
    total: float | None = None
    """The whole request, stream included."""


class LLM(models.LLM):
    """Chat Completions over HTTP with ``stream: true``.

    ``from rejoinder.providers import openai; openai.LLM(model="gpt-4o-mini")``.
    For a local server: ``openai.LLM(model="llama3.2", base_url="http://localhost:11434/v1")``.
    """

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float | None = None,
        timeout: Timeout | float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """
        Args:
            model: the model name the server knows.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``.
                When neither is set no ``Authorization`` header is sent (local servers).
            base_url: the API root, up to but excluding ``/chat/completions``; defaults to
                ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
            temperature: sampling temperature; ``None`` leaves it to the server.
            timeout: a ``Timeout``, or a number of seconds used for both connect and read;
                ``None`` means ``Timeout()`` (connect 10 s, read 60 s, no total limit).
            extra_headers: added to every request (they win over the defaults).
            extra_body: added to every request body (vendor options such as ``seed``).
            http_session: an ``aiohttp.ClientSession`` to use; it is not closed by
                ``aclose()``. By default the LLM creates its own on first use.
        """
        self._model = model
        self._api_key = api_key_from(api_key)
        self._base_url = base_url_from(base_url).rstrip("/")
        self._temperature = temperature
        if timeout is None:
            self._timeout = Timeout()
        elif isinstance(timeout, Timeout):
            self._timeout = timeout
        else:
            self._timeout = Timeout(connect=float(timeout), read=float(timeout))
        self._extra_headers = dict(extra_headers or {})
        self._extra_body = dict(extra_body or {})
        self._session = http_session
        self._owns_session = http_session is None

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "openai"

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        return f"openai.LLM(model={self._model!r}, base_url={self._base_url!r})"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        # The request body is built now, so later changes to chat_ctx do not leak into it;
        # the HTTP work happens while the returned stream is iterated.
        body = self.build_request(chat_ctx, tools, tool_choice)
        return self._stream(body)

    def build_request(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON body ``chat`` would POST (useful for logging and tests)."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": _convert.to_messages(chat_ctx),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = _convert.to_tools(tools)
            body["tool_choice"] = _convert.to_tool_choice(tool_choice)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        body.update(self._extra_body)
        return body

    async def aclose(self) -> None:
        """Close the HTTP session this LLM created (a session passed in is left open)."""
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            if not session.closed:
                await session.close()

    # -- HTTP ---------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            import aiohttp

            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "User-Agent": _USER_AGENT,
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._extra_headers)
        return headers

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[ChatChunk]:
        import aiohttp

        url = f"{self._base_url}/chat/completions"
        timeout = aiohttp.ClientTimeout(
            total=self._timeout.total,
            connect=self._timeout.connect,
            sock_connect=self._timeout.connect,
            sock_read=self._timeout.read,
        )
        try:
            payload = json.dumps(body).encode()
        except (TypeError, ValueError) as exc:
            raise LLMError(f"the request body is not JSON-serializable: {exc}") from exc
        try:
            response = await self._get_session().post(
                url, data=payload, headers=self._headers(), timeout=timeout
            )
        except Exception as exc:
            raise self._request_error(exc, url) from exc

        finished = False
        try:
            if response.status >= 300:
                raise await self._status_error(response, url)
            if response.content_type in ("application/json", "text/html"):
                message = _convert.error_message_from_body(await self._read_some(response))
                raise LLMError(
                    f"{url} answered {response.content_type} instead of an event stream: {message}",
                    status=response.status,
                )

            decoder = SSEDecoder()
            assembler = StreamAssembler()
            while not assembler.done:
                try:
                    data = await response.content.readany()
                except Exception as exc:
                    raise self._read_error(exc, url) from exc
                try:
                    events = decoder.feed(data) if data else decoder.flush()
                except ValueError as exc:
                    raise LLMError(f"malformed event stream from {url}: {exc}") from exc
                for event in events:
                    chunk = assembler.feed(event)
                    if chunk is not None:
                        yield chunk
                    if assembler.done:
                        break
                if not data:
                    chunk = assembler.end()
                    if chunk is not None:
                        yield chunk
                    break
            finished = True
        finally:
            if finished:
                response.release()
            else:
                # Cancelled, failed, or abandoned by the consumer: drop the connection so no
                # half-read stream goes back into the pool.
                response.close()

    async def _read_some(self, response: aiohttp.ClientResponse) -> bytes:
        """Read up to 64 KiB of a body, never raising."""
        data = bytearray()
        try:
            while len(data) < _MAX_ERROR_BODY_BYTES:
                piece = await response.content.readany()
                if not piece:
                    break
                data += piece
        except Exception:
            pass
        return bytes(data[:_MAX_ERROR_BODY_BYTES])

    async def _status_error(self, response: aiohttp.ClientResponse, url: str) -> LLMError:
        status = response.status
        message = _convert.error_message_from_body(await self._read_some(response))
        reason = f" {response.reason}" if response.reason else ""
        retryable = status in _RETRYABLE_STATUSES or status >= 500
        return LLMError(
            f"{url} returned HTTP {status}{reason}: {message}", retryable=retryable, status=status
        )

    def _request_error(self, exc: Exception, url: str) -> LLMError:
        """An exception from sending the request or waiting for the response headers."""
        import aiohttp

        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return LLMError(
                f"timed out connecting to {url} (after {self._timeout.connect}s)", retryable=True
            )
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return LLMError(
                f"timed out waiting for {url} to respond (no answer for {self._timeout.read}s)",
                retryable=True,
            )
        if isinstance(exc, TimeoutError):
            return LLMError(
                f"timed out waiting for {url} (total limit {self._timeout.total}s)", retryable=True
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return LLMError(f"TLS error connecting to {url}: {exc}")
        if isinstance(exc, aiohttp.ClientConnectorError):
            if isinstance(exc.os_error, ConnectionRefusedError):
                reason = "connection refused"
            else:
                reason = exc.os_error.strerror or str(exc.os_error) or str(exc)
            return LLMError(f"cannot connect to {url}: {reason}", retryable=True)
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return LLMError(f"{url} closed the connection before responding", retryable=True)
        if isinstance(exc, aiohttp.InvalidURL | ValueError):
            return LLMError(f"invalid request URL {url!r}: {exc}")
        if isinstance(exc, aiohttp.ClientError | OSError):
            return LLMError(f"request to {url} failed: {_describe(exc)}", retryable=True)
        return LLMError(f"request to {url} failed: {_describe(exc)}")

    def _read_error(self, exc: Exception, url: str) -> LLMError:
        """An exception from reading the body of a streaming response."""
        import aiohttp

        if isinstance(exc, aiohttp.ServerTimeoutError):
            return LLMError(
                f"timed out reading the stream from {url} (no data for {self._timeout.read}s)",
                retryable=True,
            )
        if isinstance(exc, TimeoutError):
            return LLMError(
                f"timed out reading the stream from {url} (total limit {self._timeout.total}s)",
                retryable=True,
            )
        if isinstance(exc, aiohttp.ClientError | OSError):
            return LLMError(
                f"connection lost mid-stream from {url}: {_describe(exc)}", retryable=True
            )
        return LLMError(f"reading the stream from {url} failed: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- server-sent events ---------------------------------------------------------------------

_EOL = re.compile(rb"\r\n|\r|\n")


class SSEDecoder:
    """Incremental ``text/event-stream`` decoder: bytes in any pieces → event data strings.

    Follows the SSE spec: lines end in CRLF, LF or CR; ``:`` starts a comment; an event's
    ``data:`` lines are joined with newlines and the event is dispatched at a blank line.
    At end of stream an event that lacks its blank line is still dispatched (lenient).
    Raises ``ValueError`` for bytes that are not UTF-8 or for an absurdly long line.
    """

    __slots__ = ("_buffer", "_data", "_started")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[str] = []
        self._started = False

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        events: list[str] = []
        start = 0
        while True:
            match = _EOL.search(self._buffer, start)
            if match is None:
                break
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # a CR at the end may be the first half of a CRLF split across reads
            self._line(bytes(self._buffer[start : match.start()]), events)
            start = match.end()
        del self._buffer[:start]
        if len(self._buffer) > _MAX_LINE_BYTES:
            raise ValueError(f"a line longer than {_MAX_LINE_BYTES} bytes")
        return events

    def flush(self) -> list[str]:
        """End of stream: dispatch what is left."""
        events: list[str] = []
        if self._buffer:
            line = bytes(self._buffer).removesuffix(b"\r")
            self._buffer.clear()
            self._line(line, events)
        self._line(b"", events)
        return events

    def _line(self, raw: bytes, events: list[str]) -> None:
        if not self._started:
            self._started = True
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw:
            if self._data:
                events.append("\n".join(self._data))
                self._data.clear()
            return
        if raw.startswith(b":"):
            return  # comment / keep-alive
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"a line that is not UTF-8 ({exc.reason})") from exc
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        # `event`, `id` and `retry` carry nothing the Chat Completions stream uses.


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
            obj: object = json.loads(data)
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
            arguments = json.dumps(arguments)  # a few servers send an object, not JSON text
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
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def _stream_error(error: object) -> LLMError:
    """An ``{"error": ...}`` object sent inside the stream (OpenAI does this on server errors)."""
    message = _convert.error_message_from_body(json.dumps({"error": error}).encode())
    retryable = False
    if isinstance(error, dict):
        kind = f"{error.get('type')} {error.get('code')}"
        retryable = "server_error" in kind or "rate_limit" in kind or "overloaded" in kind
    return LLMError(f"the server reported an error mid-stream: {message}", retryable=retryable)


def _malformed(problem: str, data: str) -> LLMError:
    return LLMError(f"malformed chunk: {problem}: {_excerpt(data)}")


def _excerpt(data: str, limit: int = 200) -> str:
    data = data.strip()
    return repr(data if len(data) <= limit else data[: limit - 1] + "…")
