"""A loopback OpenAI-compatible Chat Completions server that a test scripts reply by reply.

It listens on 127.0.0.1 (a free port), speaks the real streaming wire format (SSE
``data: {...}`` lines ending in ``data: [DONE]``), records every request, and serves the
scripted replies in order::

    async with OpenAIChatServer([StreamReply(text_chunks("Hello", " there"))]) as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="test")
        ...
        assert server.requests[0]["messages"] == [...]

A reply is a ``StreamReply`` (steps: chunk dicts, ``RawData``, ``Pause``,
``CutConnection``) or an ``ErrorReply`` (an HTTP error with a JSON error body, optionally
with ``Retry-After``). Scripting a transient failure before a good reply is a list of
replies: ``[ErrorReply(429, retry_after=2), StreamReply(...)]``, ``[ErrorReply(503),
StreamReply(...)]``, or ``[StreamReply([CutConnection()]), StreamReply(...)]`` (the
connection closed before the headers). For a refused connection, start the server on
the port the client failed to reach (``port=``) once it has failed.
``aiohttp`` is imported when the server starts, not when this module is imported.

Under ``looptime`` (virtual time) the server's ``Pause`` steps take no wall-clock time.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._loopback import LoopbackServer

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "CutConnection",
    "ErrorReply",
    "OpenAIChatServer",
    "Pause",
    "RawData",
    "Reply",
    "Step",
    "StreamReply",
    "chunk",
    "encode_event",
    "text_chunks",
    "tool_call_delta",
    "usage_chunk",
]

JSONObject: TypeAlias = dict[str, Any]
DEFAULT_MODEL = "test-model"


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this many seconds (loop time) before the next step."""

    seconds: float


@dataclass(frozen=True, slots=True)
class RawData:
    """Bytes written to the stream verbatim: malformed chunks, comments, odd framing."""

    data: bytes | str


@dataclass(frozen=True, slots=True)
class CutConnection:
    """Close the TCP connection here, mid-response (before the headers if it comes first)."""


Step: TypeAlias = JSONObject | Pause | RawData | CutConnection
"""A chunk dict is sent as one SSE event: ``data: <json>\\n\\n``."""


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A ``200 text/event-stream`` reply."""

    steps: Sequence[Step]
    done: bool = True
    """Finish with ``data: [DONE]`` (unless a ``CutConnection`` came first)."""
    chunk_delay: float = 0.0
    """Pause before every write."""
    write_size: int | None = None
    """Send the encoded stream in writes of this many bytes, flushed one by one, so lines and
    UTF-8 characters are split at odd places. ``Pause`` and ``CutConnection`` still apply at
    their positions."""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """A plain (non-streamed) reply, normally an HTTP error.

    The body is OpenAI's ``{"error": {...}}`` unless ``body`` is given (a ``str`` is sent as
    plain text, anything else as JSON). Any status works, e.g. 200 with a JSON body to act
    as a server that ignores ``stream: true``.
    """

    status: int
    message: str = "error"
    type: str = "invalid_request_error"
    code: str | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_after: float | None = None
    """Sent as a ``Retry-After`` header, in seconds (as OpenAI does with a 429)."""


Reply: TypeAlias = StreamReply | ErrorReply
Script: TypeAlias = Callable[[JSONObject], Reply]


# -- chunk builders -------------------------------------------------------------------------


def chunk(
    *,
    content: str | None = None,
    role: str | None = None,
    tool_calls: Sequence[JSONObject] | None = None,
    finish_reason: str | None = None,
    usage: JSONObject | None = None,
    model: str = DEFAULT_MODEL,
    chunk_id: str = "chatcmpl-test",
) -> JSONObject:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: JSONObject = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = list(tool_calls)
    result: JSONObject = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        result["usage"] = usage
    return result


def text_chunks(*texts: str, finish_reason: str | None = "stop") -> list[JSONObject]:
    """A role chunk, one chunk per text, and a finish chunk (as OpenAI streams a reply)."""
    chunks = [chunk(role="assistant", content="")]
    chunks.extend(chunk(content=text) for text in texts)
    if finish_reason is not None:
        chunks.append(chunk(finish_reason=finish_reason))
    return chunks


def tool_call_delta(
    index: int,
    *,
    call_id: str | None = None,
    name: str | None = None,
    arguments: str | None = None,
) -> JSONObject:
    """One fragment of a streamed tool call (id and name normally come in the first one)."""
    function: JSONObject = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    fragment: JSONObject = {"index": index, "function": function}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    return fragment


def usage_chunk(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
) -> JSONObject:
    """The final ``stream_options.include_usage`` chunk: no choices, just usage
    (``cached_tokens`` goes in ``prompt_tokens_details``, as OpenAI reports it)."""
    usage: JSONObject = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": DEFAULT_MODEL,
        "choices": [],
        "usage": usage,
    }


def encode_event(data: JSONObject | str) -> bytes:
    """``data: <json>\\n\\n`` (a ``str`` is sent as is, e.g. ``"[DONE]"``)."""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


# -- the server -----------------------------------------------------------------------------


class OpenAIChatServer(LoopbackServer):
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 from a script.

    ``replies`` is either a sequence consumed one reply per request (more can be queued
    with ``add``), or a function from the request body to a reply. A request that finds
    the queue empty gets a 500 error. ``api_key``, when set, makes the server answer 401
    (as OpenAI does) to requests without ``Authorization: Bearer <api_key>``.
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Script = (),
        *,
        api_key: str | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(port=port)
        self._script: Script | None = None
        self._queue: deque[Reply] = deque()
        if callable(replies):
            self._script = replies
        else:
            self._queue.extend(replies)
        self._api_key = api_key
        self.requests: list[JSONObject] = []
        """The JSON body of every chat completions request, in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The headers of every chat completions request, parallel to ``requests``."""
        self._handlers: set[asyncio.Task[Any]] = set()

    def add(self, *replies: Reply) -> None:
        """Queue more replies."""
        self._queue.extend(replies)

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._handle)

    async def _before_cleanup(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # -- request handling -------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            return await self._respond(request)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        raw = await request.read()
        try:
            body: object = json.loads(raw)
        except ValueError:
            return _error_response(ErrorReply(400, "We could not parse the JSON body."))
        if not isinstance(body, dict):
            return _error_response(ErrorReply(400, "The body must be a JSON object."))
        self.requests.append(body)
        self.headers.append(dict(request.headers))

        authorization = request.headers.get("Authorization")
        if self._api_key is not None and authorization != f"Bearer {self._api_key}":
            return _error_response(
                ErrorReply(401, "Incorrect API key provided.", code="invalid_api_key")
            )

        if self._script is not None:
            reply = self._script(body)
        elif self._queue:
            reply = self._queue.popleft()
        else:
            reply = ErrorReply(500, "OpenAIChatServer: no scripted reply left", "server_error")

        if isinstance(reply, ErrorReply):
            return _error_response(reply)

        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **reply.headers,
            },
        )
        for item in _writes(reply):
            if isinstance(item, Pause):
                await asyncio.sleep(item.seconds)
            elif isinstance(item, _Yield):
                for _ in range(item.turns):
                    await asyncio.sleep(0)
            elif isinstance(item, CutConnection):
                if request.transport is not None:
                    request.transport.close()
                # Stop the handler; aiohttp drops the (already closed) connection quietly.
                raise asyncio.CancelledError
            else:
                if not response.prepared:
                    await response.prepare(request)
                await response.write(item)
        if not response.prepared:
            await response.prepare(request)
        await response.write_eof()
        return response


@dataclass(frozen=True, slots=True)
class _Yield:
    """Let the loop run a few times so the client reads a write before the next one."""

    turns: int = 8


_YIELD = _Yield()
_Write: TypeAlias = bytes | Pause | CutConnection | _Yield


def _writes(reply: StreamReply) -> list[_Write]:
    """The reply as a sequence of writes and control steps."""
    items: list[_Write] = []
    steps: list[Step] = list(reply.steps)
    ended = any(isinstance(step, CutConnection) for step in steps)
    if reply.done and not ended:
        steps.append(RawData(encode_event("[DONE]")))
    for step in steps:
        if isinstance(step, Pause | CutConnection):
            items.append(step)
        elif isinstance(step, RawData):
            items.append(step.data.encode() if isinstance(step.data, str) else step.data)
        else:
            items.append(encode_event(step))
    if reply.write_size is not None:
        items = _resplit(items, reply.write_size)
    if reply.chunk_delay > 0:
        delayed: list[_Write] = []
        for item in items:
            if isinstance(item, bytes):
                delayed.append(Pause(reply.chunk_delay))
            delayed.append(item)
        items = delayed
    return items


def _resplit(items: list[_Write], size: int) -> list[_Write]:
    """Regroup consecutive bytes into writes of ``size`` bytes, each followed by a yield."""
    if size < 1:
        raise ValueError("write_size must be at least 1")
    result: list[_Write] = []
    pending = b""

    def flush() -> None:
        nonlocal pending
        for start in range(0, len(pending), size):
            result.append(pending[start : start + size])
            result.append(_YIELD)
        pending = b""

    for item in items:
        if isinstance(item, bytes):
            pending += item
        else:
            flush()
            result.append(item)
    flush()
    return result


def _error_response(reply: ErrorReply) -> web.Response:
    from aiohttp import web

    headers = dict(reply.headers)
    if reply.retry_after is not None:
        headers["Retry-After"] = f"{reply.retry_after:g}"
    if isinstance(reply.body, str):
        return web.Response(status=reply.status, text=reply.body, headers=headers)
    body = reply.body
    if body is None:
        body = {
            "error": {
                "message": reply.message,
                "type": reply.type,
                "param": None,
                "code": reply.code,
            }
        }
    return web.json_response(body, status=reply.status, headers=headers)
