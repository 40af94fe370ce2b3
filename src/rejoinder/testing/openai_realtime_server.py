"""A loopback OpenAI Realtime (WebSocket) server that a test scripts event by event.

It listens on 127.0.0.1 (a free port) at ``GET /v1/realtime``, sends ``session.created``
when a client connects, answers each ``session.update`` with ``session.updated``, and
records every client event. Everything else is up to the test, which sends server
events to the current connection::

    async with OpenAIRealtimeServer() as server:
        model = openai.Realtime(base_url=server.base_url, api_key="sk-test")
        session = model.session()
        await session.start(RealtimeConfig(instructions="Be brief."))
        await server.response_created("resp_1")
        await server.audio("resp_1", "item_1", seconds=0.3)
        await server.audio_done("resp_1", "item_1")
        await server.response_done("resp_1")
        await server.wait_for("input_audio_buffer.append")
        assert server.received_types()[0] == "session.update"

``drop()`` cuts the TCP connection without a closing handshake (a network failure);
``refuse(status)`` makes later connection attempts fail with that HTTP status (all of
them, or the next ``times``, optionally with a ``Retry-After``), and
``api_key`` makes the server answer 401 to a wrong ``Authorization`` header. Waits are
bounded; under ``looptime`` (virtual time) they cost no wall-clock time. ``aiohttp`` is
imported when the server starts, not when this module is imported.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._loopback import LoopbackServer
from ._wire_audio import decode as decode_audio
from ._wire_audio import encode as encode_audio

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["OpenAIRealtimeServer", "RealtimeConnection", "tone_pcm"]

JSONObject = dict[str, Any]
SAMPLE_RATE = 24000
FRAME_SECONDS = 0.1


AUDIO_TYPES = {"audio/pcm": SAMPLE_RATE, "audio/pcmu": 8000, "audio/pcma": 8000}
"""The GA format types and their one rate (G.711 declares none: it is 8 kHz)."""


def tone_pcm(
    seconds: float, frequency: float = 440.0, amplitude: int = 8000, rate: int = SAMPLE_RATE
) -> bytes:
    """A sine tone as 16-bit little-endian mono PCM at ``rate`` (audible, never silent)."""
    samples = round(seconds * rate)
    step = 2 * math.pi * frequency / rate
    data = array("h", (round(amplitude * math.sin(step * (i + 1))) for i in range(samples)))
    return data.tobytes()


@dataclass(eq=False)
class RealtimeConnection:
    """One client connection, as the server saw it."""

    model: str | None
    """The ``model`` query parameter."""
    headers: dict[str, str]
    session_id: str
    received: list[JSONObject] = field(default_factory=list)
    """This connection's client events, in order."""
    closed: bool = False
    input_format: str = "audio/pcm"
    """``session.audio.input.format.type`` as configured (the default until set)."""
    output_format: str = "audio/pcm"
    """``session.audio.output.format.type`` as configured."""
    _ws: web.WebSocketResponse | None = field(default=None, repr=False)
    _transport: asyncio.Transport | None = field(default=None, repr=False)


class OpenAIRealtimeServer(LoopbackServer):
    """Serves ``GET /v1/realtime`` WebSockets on 127.0.0.1; see the module docstring."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        session_created: bool = True,
        answer_session_update: bool = True,
        port: int = 0,
    ) -> None:
        """
        Args:
            api_key: when set, a connection without ``Authorization: Bearer <api_key>``
                is refused with HTTP 401, as OpenAI does.
            session_created: send ``session.created`` as soon as a client connects.
            answer_session_update: answer each ``session.update`` with ``session.updated``.
            port: listen on this port (0: a free one).
        """
        super().__init__(port=port)
        self._api_key = api_key
        self._session_created = session_created
        self._answer_session_update = answer_session_update
        self._refuse_status: int | None = None
        self._refuse_times: int | None = None
        self._refuse_headers: dict[str, str] = {}
        self.refused = 0
        """Connection attempts answered with an HTTP error (bad key or ``refuse``)."""
        self.connections: list[RealtimeConnection] = []
        self.received: list[JSONObject] = []
        """Every client event of every connection, in arrival order."""
        self._changed = asyncio.Condition()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._counter = 0

    # -- lifecycle ------------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/realtime", self._handle)

    async def _before_cleanup(self) -> None:
        for connection in self.connections:
            if connection._transport is not None:
                connection._transport.abort()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    # -- inspection -----------------------------------------------------------------------

    def received_types(self) -> list[str]:
        return [str(event.get("type")) for event in self.received]

    def of_type(self, event_type: str) -> list[JSONObject]:
        return [event for event in self.received if event.get("type") == event_type]

    def input_audio(self, connection: RealtimeConnection | None = None) -> bytes:
        """The audio appended so far (of one connection, or all), as sent: G.711 bytes
        for a G.711 input format."""
        events = self.received if connection is None else connection.received
        return b"".join(
            base64.b64decode(str(event.get("audio", "")))
            for event in events
            if event.get("type") == "input_audio_buffer.append"
        )

    def input_pcm(self, connection: RealtimeConnection | None = None) -> bytes:
        """The appended audio decoded to 16-bit PCM at the input format's rate (of one
        connection, or of the newest one's format)."""
        fmt = (connection or self.connections[-1]).input_format
        return decode_audio(fmt, self.input_audio(connection))

    async def wait_for(self, event_type: str, count: int = 1, within: float = 5.0) -> JSONObject:
        """Wait (at most ``within`` seconds) until ``count`` client events of ``event_type``
        arrived; return the last of them."""
        try:
            async with asyncio.timeout(within), self._changed:
                await self._changed.wait_for(lambda: len(self.of_type(event_type)) >= count)
        except TimeoutError:
            raise TimeoutError(
                f"no {count}x {event_type} within {within}s; received {self.received_types()}"
            ) from None
        return self.of_type(event_type)[count - 1]

    async def wait_connected(self, count: int = 1, within: float = 5.0) -> RealtimeConnection:
        """Wait until ``count`` connections were accepted; return the last."""
        try:
            async with asyncio.timeout(within), self._changed:
                await self._changed.wait_for(lambda: len(self.connections) >= count)
        except TimeoutError:
            raise TimeoutError(
                f"{len(self.connections)} connection(s) within {within}s, wanted {count}"
            ) from None
        return self.connections[count - 1]

    def refuse(
        self,
        status: int | None = 503,
        *,
        times: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer new connection attempts with this HTTP status (``None``: accept again):
        every attempt, or only the next ``times``. ``retry_after`` adds a ``Retry-After``
        header (seconds)."""
        self._refuse_status = status
        self._refuse_times = times
        self._refuse_headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}

    # -- scripting: raw -------------------------------------------------------------------

    async def send(self, event: JSONObject) -> None:
        """Send a server event to the current connection (an ``event_id`` is added)."""
        self._counter += 1
        await self.send_raw(json.dumps({"event_id": f"event_{self._counter}", **event}))

    async def send_raw(self, text: str) -> None:
        """Send a text frame verbatim (malformed JSON, odd shapes)."""
        ws = self._current()._ws
        assert ws is not None
        await ws.send_str(text)

    async def drop(self) -> None:
        """Cut the current connection without a closing handshake."""
        connection = self._current()
        if connection._transport is not None:
            connection._transport.abort()
        async with asyncio.timeout(5.0), self._changed:
            await self._changed.wait_for(lambda: connection.closed)

    # -- scripting: server events ---------------------------------------------------------

    async def response_created(self, response_id: str) -> None:
        await self.send(
            {
                "type": "response.created",
                "response": {
                    "id": response_id,
                    "object": "realtime.response",
                    "status": "in_progress",
                    "output": [],
                    "output_modalities": ["audio"],
                },
            }
        )

    async def audio(self, response_id: str, item_id: str, seconds: float = 0.5) -> None:
        """``response.output_audio.delta`` events of 100 ms of tone each, in the output
        format (8 kHz G.711 for ``audio/pcmu``/``audio/pcma``)."""
        fmt = self._current().output_format
        frames = max(1, round(seconds / FRAME_SECONDS))
        tone = tone_pcm(FRAME_SECONDS, rate=AUDIO_TYPES[fmt])
        chunk = base64.b64encode(encode_audio(fmt, tone)).decode("ascii")
        for _ in range(frames):
            await self.send(_content(response_id, item_id, "response.output_audio.delta", chunk))

    async def audio_bytes(self, response_id: str, item_id: str, data: bytes) -> None:
        """One ``response.output_audio.delta`` carrying ``data`` as it is (wire bytes)."""
        delta = base64.b64encode(data).decode("ascii")
        await self.send(_content(response_id, item_id, "response.output_audio.delta", delta))

    async def audio_done(self, response_id: str, item_id: str) -> None:
        await self.send(
            {
                "type": "response.output_audio.done",
                "response_id": response_id,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
            }
        )

    async def transcript(self, response_id: str, item_id: str, text: str) -> None:
        """The agent audio's transcript: one delta with ``text``, then the done event."""
        await self.send(
            _content(response_id, item_id, "response.output_audio_transcript.delta", text)
        )
        done = _content(response_id, item_id, "response.output_audio_transcript.done", "")
        del done["delta"]
        await self.send({**done, "transcript": text})

    async def function_call(
        self,
        response_id: str,
        call_id: str,
        name: str,
        arguments: str = "{}",
        item_id: str | None = None,
    ) -> None:
        """A function call as the API streams it: item added, arguments done, item done."""
        item_id = item_id or f"item_{call_id}"
        item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        await self.send(
            {
                "type": "response.output_item.added",
                "response_id": response_id,
                "output_index": 0,
                "item": item,
            }
        )
        await self.send(
            {
                "type": "response.function_call_arguments.done",
                "response_id": response_id,
                "item_id": item_id,
                "output_index": 0,
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }
        )
        await self.send(
            {
                "type": "response.output_item.done",
                "response_id": response_id,
                "output_index": 0,
                "item": {**item, "status": "completed", "arguments": arguments},
            }
        )

    async def response_done(
        self,
        response_id: str,
        status: str = "completed",
        error: str | None = None,
        reason: str | None = None,
    ) -> None:
        """``response.done``; ``error`` fills ``status_details.error``, ``reason`` the reason
        (defaults: ``turn_detected`` for cancelled, ``max_output_tokens`` for incomplete)."""
        details: JSONObject | None = None
        if status != "completed" or error is not None:
            details = {"type": status}
            if status == "cancelled":
                details["reason"] = reason or "turn_detected"
            elif status == "incomplete":
                details["reason"] = reason or "max_output_tokens"
            if error is not None or status == "failed":
                details["error"] = {
                    "type": "server_error",
                    "code": None,
                    "message": error or "The server had an error.",
                }
        await self.send(
            {
                "type": "response.done",
                "response": {
                    "id": response_id,
                    "object": "realtime.response",
                    "status": status,
                    "status_details": details,
                    "output": [],
                },
            }
        )

    async def speech_started(self, audio_start_ms: int = 0, item_id: str = "item_user") -> None:
        await self.send(
            {
                "type": "input_audio_buffer.speech_started",
                "audio_start_ms": audio_start_ms,
                "item_id": item_id,
            }
        )

    async def speech_stopped(self, audio_end_ms: int = 0, item_id: str = "item_user") -> None:
        await self.send(
            {
                "type": "input_audio_buffer.speech_stopped",
                "audio_end_ms": audio_end_ms,
                "item_id": item_id,
            }
        )

    async def committed(self, item_id: str = "item_user") -> None:
        """``input_audio_buffer.committed``: the user's audio became a conversation item."""
        await self.send({"type": "input_audio_buffer.committed", "item_id": item_id})

    async def input_transcription(self, item_id: str, text: str) -> None:
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.completed",
                "item_id": item_id,
                "content_index": 0,
                "transcript": text,
            }
        )

    async def input_transcription_failed(self, item_id: str, message: str) -> None:
        await self.send(
            {
                "type": "conversation.item.input_audio_transcription.failed",
                "item_id": item_id,
                "content_index": 0,
                "error": {"type": "transcription_error", "code": None, "message": message},
            }
        )

    async def error(
        self,
        message: str,
        code: str | None = None,
        type: str | None = None,
        event_id: str | None = None,
    ) -> None:
        """An ``error`` event; ``event_id`` names the client event it answers."""
        await self.send(
            {
                "type": "error",
                "error": {
                    "type": type or "invalid_request_error",
                    "code": code,
                    "message": message,
                    "param": None,
                    "event_id": event_id,
                },
            }
        )

    # -- connection handling --------------------------------------------------------------

    def _current(self) -> RealtimeConnection:
        for connection in reversed(self.connections):
            if not connection.closed:
                return connection
        raise RuntimeError("OpenAIRealtimeServer: no client is connected")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            return await self._serve(request)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import WSMsgType, web

        authorization = request.headers.get("Authorization")
        if self._api_key is not None and authorization != f"Bearer {self._api_key}":
            self.refused += 1
            return _http_error(401, "Incorrect API key provided.", "invalid_api_key")
        if self._refuse_status is not None:
            self.refused += 1
            response = _http_error(self._refuse_status, "Refused by the test.", None)
            response.headers.update(self._refuse_headers)
            if self._refuse_times is not None:
                self._refuse_times -= 1
                if self._refuse_times <= 0:
                    self.refuse(None)
            return response

        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connection = RealtimeConnection(
            model=request.query.get("model"),
            headers=dict(request.headers),
            session_id=f"sess_{len(self.connections) + 1}",
            _ws=ws,
            _transport=request.transport,
        )
        await self._record_connection(connection)
        try:
            if self._session_created:
                await self.send({"type": "session.created", "session": self._session(connection)})
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    event: object = json.loads(message.data)
                except ValueError:
                    event = None
                if not isinstance(event, dict):
                    event = {"type": None, "raw": message.data}
                await self._record_event(connection, event)
                refusal = _format_error(connection, event)
                if refusal is not None:  # the update is not applied; the session goes on
                    await ws.send_str(json.dumps(refusal))
                elif event.get("type") == "session.update" and self._answer_session_update:
                    update = event.get("session")
                    session = self._session(connection)
                    session.update(update if isinstance(update, dict) else {})
                    await ws.send_str(json.dumps({"type": "session.updated", "session": session}))
        finally:
            connection.closed = True
            await self._notify()
        return ws

    def _session(self, connection: RealtimeConnection) -> JSONObject:
        return {
            "id": connection.session_id,
            "object": "realtime.session",
            "type": "realtime",
            "model": connection.model,
            "output_modalities": ["audio"],
            "instructions": "",
            "tools": [],
        }

    async def _record_connection(self, connection: RealtimeConnection) -> None:
        self.connections.append(connection)
        await self._notify()

    async def _record_event(self, connection: RealtimeConnection, event: JSONObject) -> None:
        connection.received.append(event)
        self.received.append(event)
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


def _content(response_id: str, item_id: str, event_type: str, delta: str) -> JSONObject:
    return {
        "type": event_type,
        "response_id": response_id,
        "item_id": item_id,
        "output_index": 0,
        "content_index": 0,
        "delta": delta,
    }


def _format_error(connection: RealtimeConnection, event: JSONObject) -> JSONObject | None:
    """Apply a ``session.update``'s audio formats to ``connection``, or return the
    ``error`` the API answers a malformed or unknown one with (nothing is applied)."""
    if event.get("type") != "session.update":
        return None
    session = event.get("session")
    audio = session.get("audio") if isinstance(session, dict) else None
    found: dict[str, str] = {}
    for direction in ("input", "output"):
        side = audio.get(direction) if isinstance(audio, dict) else None
        if not isinstance(side, dict) or "format" not in side:
            continue
        declared, param = side["format"], f"session.audio.{direction}.format"
        if not isinstance(declared, dict):
            message = f"Invalid type for '{param}': expected an object, but got {declared!r}."
            return _event_error(message, "invalid_type", param, event.get("event_id"))
        kind = declared.get("type")
        if kind not in AUDIO_TYPES:
            supported = ", ".join(f"'{name}'" for name in AUDIO_TYPES)
            message = f"Invalid value: {kind!r}. Supported values are: {supported}."
            return _event_error(message, "invalid_value", f"{param}.type", event.get("event_id"))
        rate = declared.get("rate", AUDIO_TYPES[kind])
        if isinstance(rate, bool) or rate != AUDIO_TYPES[kind]:
            message = f"Invalid value: {rate!r}. Supported values are: {AUDIO_TYPES[kind]}."
            return _event_error(message, "invalid_value", f"{param}.rate", event.get("event_id"))
        found[direction] = kind
    connection.input_format = found.get("input", connection.input_format)
    connection.output_format = found.get("output", connection.output_format)
    return None


def _event_error(message: str, code: str, param: str, event_id: object) -> JSONObject:
    return {
        "type": "error",
        "event_id": "event_format",
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "param": param,
            "event_id": event_id if isinstance(event_id, str) else None,
        },
    }


def _http_error(status: int, message: str, code: str | None) -> web.Response:
    from aiohttp import web

    body = {"error": {"type": "invalid_request_error", "code": code, "message": message}}
    return web.json_response(body, status=status)
