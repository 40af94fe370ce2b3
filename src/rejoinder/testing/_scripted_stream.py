"""What the loopback servers of streamed chat APIs share: replies scripted as steps (event
objects, raw bytes, pauses, a cut connection), error replies, and a server that records
each request and answers it from a queue or a function. Each API's server
(``OpenAIChatServer``, ``AnthropicServer``) brings its path, how it checks the key, its
error body and how an event object is written on the wire. ``aiohttp`` is imported when
a server starts.
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

JSONObject: TypeAlias = dict[str, Any]


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
"""An event dict is one server-sent event, written as the server's API writes one
(``data: <json>`` for Chat Completions; ``event:`` and ``data:`` lines for Anthropic)."""


@dataclass(frozen=True, slots=True)
class StreamReply:
    """A ``200 text/event-stream`` reply."""

    steps: Sequence[Step]
    done: bool = True
    """Finish with the protocol's end marker, if it has one (``data: [DONE]`` for Chat
    Completions), unless a ``CutConnection`` came first."""
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

    The body is the server's own error object (OpenAI's ``{"error": {...}}``,
    Anthropic's ``{"type": "error", "error": {...}}``) unless ``body`` is given (a ``str``
    is sent as plain text, anything else as JSON). Any status works, e.g. 200 with a JSON
    body to act as a server that ignores ``stream: true``.
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


class ScriptedStreamServer(LoopbackServer):
    """Serves ``POST {path}`` on 127.0.0.1 from a script (see the subclasses).

    ``replies`` is either a sequence consumed one reply per request (more can be queued
    with ``add``), or a function from the request body to a reply. A request that finds
    the queue empty gets a 500 error. ``api_key``, when set, makes the server answer 401
    to requests that do not carry it as the API expects.
    """

    path = "/v1"
    end_of_stream: bytes | None = None
    """Written after the last step of a ``StreamReply`` whose ``done`` is true."""

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
        """The JSON body of every request, in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The headers of every request, parallel to ``requests``."""
        self._handlers: set[asyncio.Task[Any]] = set()

    def add(self, *replies: Reply) -> None:
        """Queue more replies."""
        self._queue.extend(replies)

    # -- what each API's server says ---------------------------------------------------------

    def _key_accepted(self, headers: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def _unauthorized(self) -> ErrorReply:
        raise NotImplementedError

    def _error_body(self, reply: ErrorReply) -> JSONObject:
        raise NotImplementedError

    def _encode(self, event: JSONObject) -> bytes:
        raise NotImplementedError

    # -- request handling -------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(self.path, self._handle)

    async def _before_cleanup(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            return await self._respond(request)
        finally:
            if task is not None:
                self._handlers.discard(task)

    def _error(self, reply: ErrorReply) -> web.Response:
        return error_response(reply, self._error_body(reply))

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        raw = await request.read()
        try:
            body: object = json.loads(raw)
        except ValueError:
            return self._error(ErrorReply(400, "We could not parse the JSON body."))
        if not isinstance(body, dict):
            return self._error(ErrorReply(400, "The body must be a JSON object."))
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self._api_key is not None and not self._key_accepted(request.headers):
            return self._error(self._unauthorized())

        if self._script is not None:
            reply = self._script(body)
        elif self._queue:
            reply = self._queue.popleft()
        else:
            name = type(self).__name__
            reply = ErrorReply(500, f"{name}: no scripted reply left", "server_error")

        if isinstance(reply, ErrorReply):
            return self._error(reply)

        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **reply.headers,
            },
        )
        for item in _writes(reply, self._encode, self.end_of_stream):
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


def _writes(
    reply: StreamReply, encode: Callable[[JSONObject], bytes], end: bytes | None
) -> list[_Write]:
    """The reply as a sequence of writes and control steps."""
    items: list[_Write] = []
    steps: list[Step] = list(reply.steps)
    ended = any(isinstance(step, CutConnection) for step in steps)
    if reply.done and end is not None and not ended:
        steps.append(RawData(end))
    for step in steps:
        if isinstance(step, Pause | CutConnection):
            items.append(step)
        elif isinstance(step, RawData):
            items.append(step.data.encode() if isinstance(step.data, str) else step.data)
        else:
            items.append(encode(step))
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


def error_response(reply: ErrorReply, default_body: JSONObject) -> web.Response:
    """``reply`` as a plain response; ``default_body`` unless the reply has its own."""
    from aiohttp import web

    headers = dict(reply.headers)
    if reply.retry_after is not None:
        headers["Retry-After"] = f"{reply.retry_after:g}"
    if isinstance(reply.body, str):
        return web.Response(status=reply.status, text=reply.body, headers=headers)
    body = default_body if reply.body is None else reply.body
    return web.json_response(body, status=reply.status, headers=headers)
