"""A loopback GPT-Live server that a test scripts event by event.

It accepts the WebSocket upgrade on ``GET /v1/live/sessions`` (127.0.0.1, a free port),
answers ``session.start`` with ``session.started`` (id ``session_<n>`` for the n-th
connection) and ``session.close`` with ``session.closed``, records every client event, and
sends whatever the test scripts to the newest connection::

    async with GPTLiveServer() as server:
        model = GPTLive(api_key="test", base_url=server.base_url)
        session = model.session()
        await session.start(RealtimeConfig(instructions="Be brief.", tools=[WEATHER]))
        await server.response_created("dlg_1", "resp_1")
        await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
        await server.response_completed("dlg_1", "resp_1")
        ...  # the client reports ToolCallRequested; the test answers it
        await server.wait_for("response.create")
        assert server.received_types()[0] == "session.start"

Like the real service it sends no acknowledgements, and by default it is faithful where
the protocol says the service refuses something: a ``response.create`` that would submit
a partial batch of tool outputs, and an output for a call of a failed or incomplete
response, are answered with an ``error`` that echoes the client's ``event_id``.

``aiohttp`` is imported when the server starts, not when this module is imported. Under
``looptime`` (virtual time) waits such as ``wait_for`` cost no wall-clock time.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ._loopback import LoopbackServer
from ._wire_audio import decode as decode_audio
from ._wire_audio import encode as encode_audio

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["GPTLiveServer"]

JSONObject: TypeAlias = dict[str, Any]

SAMPLE_RATE = 24000
FRAME_SAMPLES = 2400
"""Output audio is sent in frames of 100 ms."""
AUDIBLE_SAMPLE = 0x1000
AUDIO_TYPES = {"audio/pcm": SAMPLE_RATE, "audio/pcmu": 8000, "audio/pcma": 8000}
"""The declared audio formats (§1.4) and the one rate each is served at."""


@dataclass(slots=True)
class _Call:
    delegation_id: str | None
    response_id: str | None
    state: Literal["open", "answered", "discarded"] = "open"


@dataclass(slots=True)
class _Connection:
    """One client connection and the backend state the fake keeps for it."""

    number: int
    ws: web.WebSocketResponse
    request: web.Request
    received: list[JSONObject] = field(default_factory=list)
    started: bool = False
    running: dict[str | None, str] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    answered_since_create: set[str] = field(default_factory=set)
    audio_type: str = "audio/pcm"
    """The session's audio format (§2.1 ``audio.format``), input and output alike."""
    audio_rate: int = SAMPLE_RATE


class GPTLiveServer(LoopbackServer):
    """Serves GPT-Live on 127.0.0.1 for tests; see the module docstring.

    Options (attributes, changeable at any time):

    - ``answer_start``: answer ``session.start`` with ``session.started`` (otherwise the
      test calls ``session_started()`` itself).
    - ``answer_close``: answer ``session.close`` with ``session.closed`` and close.
    - ``start_error``: an ``error`` object sent instead of ``session.started``; the
      connection is then closed (a refused session).
    - ``refuse_connections``: answer the upgrade with HTTP 503 (a service that is down);
      ``refuse(status, times=..., retry_after=...)`` answers the next ``times`` upgrades
      with ``status`` (and a ``Retry-After``), then accepts again. ``refused`` counts them.
    - ``refuse_partial_batch`` / ``refuse_discarded_outputs``: the faithful refusals.
    """

    def __init__(
        self,
        *,
        refuse_partial_batch: bool = True,
        refuse_discarded_outputs: bool = True,
        answer_start: bool = True,
        answer_close: bool = True,
        port: int = 0,
    ) -> None:
        super().__init__(port=port)
        self.refuse_partial_batch = refuse_partial_batch
        self.refuse_discarded_outputs = refuse_discarded_outputs
        self.answer_start = answer_start
        self.answer_close = answer_close
        self.start_error: JSONObject | None = None
        self.refuse_connections = False
        self.refused = 0
        """Upgrades answered with an HTTP error (``refuse_connections`` or ``refuse``)."""
        self._refusals: list[tuple[int, dict[str, str]]] = []
        self.received: list[JSONObject] = []
        """Every client event of every connection, in arrival order."""
        self.headers: list[dict[str, str]] = []
        """The handshake headers of every connection attempt that was accepted (e.g.
        ``OpenAI-Service-Tier``)."""
        self._connections: list[_Connection] = []
        self._changed: asyncio.Condition | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/live/sessions", self._handle)

    async def start(self) -> None:
        self._changed = asyncio.Condition()
        await super().start()

    async def _before_cleanup(self) -> None:
        for connection in self._connections:
            if not connection.ws.closed:
                self._abort(connection)

    def refuse(
        self, status: int = 503, *, times: int = 1, retry_after: float | None = None
    ) -> None:
        """Answer the next ``times`` upgrades with HTTP ``status``, with a ``Retry-After``
        header (seconds) when given; later ones are accepted again."""
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        self._refusals.extend([(status, headers)] * times)

    # -- what the client sent -----------------------------------------------------------

    @property
    def connections(self) -> int:
        """How many WebSocket connections were accepted so far."""
        return len(self._connections)

    def received_on(self, connection: int) -> list[JSONObject]:
        """The client events of the ``connection``-th connection (1-based)."""
        return self._connections[connection - 1].received

    def received_types(self, connection: int | None = None) -> list[str]:
        """Event types in arrival order (of one connection, 1-based, or of all)."""
        events = self.received if connection is None else self.received_on(connection)
        return [str(event.get("type")) for event in events]

    def of_type(self, event_type: str) -> list[JSONObject]:
        return [event for event in self.received if event.get("type") == event_type]

    @property
    def session_starts(self) -> list[JSONObject]:
        """The ``session`` body of every ``session.start``, in arrival order."""
        return [event.get("session") or {} for event in self.of_type("session.start")]

    def audio_format(self, connection: int | None = None) -> tuple[str, int]:
        """The audio type and rate a session started with (the newest, or the
        ``connection``-th, 1-based)."""
        state = self._current() if connection is None else self._connections[connection - 1]
        return state.audio_type, state.audio_rate

    def input_audio(self, connection: int | None = None) -> bytes:
        """The input audio appended so far, as sent (G.711 bytes for a G.711 session)."""
        events = self.received if connection is None else self.received_on(connection)
        return b"".join(
            base64.b64decode(str(event.get("audio", "")))
            for event in events
            if event.get("type") == "session.input_audio.append"
        )

    def input_pcm(self, connection: int | None = None) -> bytes:
        """The input audio decoded to 16-bit PCM at the session's rate (G.711 decoded)."""
        audio_type, _ = self.audio_format(connection)
        return decode_audio(audio_type, self.input_audio(connection))

    async def wait_for(self, event_type: str, count: int = 1, within: float = 5.0) -> JSONObject:
        """Wait (loop time) until ``count`` events of ``event_type`` arrived; return the
        ``count``-th. Raises ``TimeoutError`` after ``within`` seconds."""
        await self._wait(lambda: len(self.of_type(event_type)) >= count, within)
        return self.of_type(event_type)[count - 1]

    async def wait_connected(self, count: int = 1, within: float = 5.0) -> None:
        """Wait until ``count`` connections have sent ``session.start``."""
        await self._wait(lambda: len(self.of_type("session.start")) >= count, within)

    async def _wait(self, predicate: Callable[[], bool], within: float) -> None:
        assert self._changed is not None, "the server is not running"
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    # -- scripting: raw -----------------------------------------------------------------

    async def send(self, event: JSONObject) -> None:
        """Send one event to the newest connection."""
        await self.send_raw(json.dumps(event))

    async def send_raw(self, text: str) -> None:
        """Send a text frame verbatim (malformed JSON, odd shapes)."""
        await self._current().ws.send_str(text)

    async def send_binary(self, data: bytes) -> None:
        await self._current().ws.send_bytes(data)

    async def drop(self) -> None:
        """Cut the newest connection without a closing handshake (a lost network)."""
        self._abort(self._current())

    async def session_started(self, session_id: str | None = None) -> None:
        """Answer ``session.start`` by hand (with ``answer_start = False``)."""
        connection = self._current()
        connection.started = True
        session_id = session_id or f"session_{connection.number}"
        await self.send({"type": "session.started", "session": {"id": session_id}})

    async def session_closed(self, reason: str = "expired", seconds: float = 0.0) -> None:
        """End the newest session from the service side, then close its socket."""
        connection = self._current()
        await self.send({"type": "session.closed", "reason": reason, "usage": {"seconds": seconds}})
        await connection.ws.close()

    async def usage(self, seconds: float) -> None:
        await self.send({"type": "session.usage.updated", "usage": {"seconds": seconds}})

    async def error(
        self,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        client_event_id: str | None = None,
    ) -> None:
        await self.send(_error(message, code=code, kind=type, client_event_id=client_event_id))

    # -- scripting: backend (§3.2) ------------------------------------------------------

    async def delegation(self, delegation_id: str, target: str = "responses") -> None:
        await self.send(
            {
                "type": "session.delegation.created",
                "delegation": {"id": delegation_id, "target": target},
            }
        )

    async def response_created(self, delegation_id: str | None, response_id: str) -> None:
        self._current().running[delegation_id] = response_id
        await self._backend(delegation_id, "response.created", response={"id": response_id})

    async def function_call(
        self,
        delegation_id: str | None,
        call_id: str,
        name: str,
        arguments: JSONObject | str,
        *,
        status: str = "completed",
    ) -> None:
        connection = self._current()
        if status == "completed":
            response_id = connection.running.get(delegation_id)
            connection.calls[call_id] = _Call(delegation_id, response_id)
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        item = {
            "id": f"fc_{call_id}",
            "type": "function_call",
            "status": status,
            "call_id": call_id,
            "name": name,
            "arguments": text,
        }
        await self._backend(delegation_id, "response.output_item.done", item=item)

    async def response_completed(self, delegation_id: str | None, response_id: str) -> None:
        self._end_response(delegation_id, response_id, discard=False)
        await self._backend(delegation_id, "response.completed", response={"id": response_id})

    async def response_failed(
        self, delegation_id: str | None, response_id: str, message: str = "backend failed"
    ) -> None:
        self._end_response(delegation_id, response_id, discard=True)
        response = {"id": response_id, "error": {"code": "server_error", "message": message}}
        await self._backend(delegation_id, "response.failed", response=response)

    async def response_incomplete(
        self, delegation_id: str | None, response_id: str, reason: str = "max_output_tokens"
    ) -> None:
        self._end_response(delegation_id, response_id, discard=True)
        response = {"id": response_id, "incomplete_details": {"reason": reason}}
        await self._backend(delegation_id, "response.incomplete", response=response)

    # -- scripting: media ---------------------------------------------------------------

    async def output_transcript(
        self, text: str, start_ms: int | None = None, end_ms: int | None = None
    ) -> None:
        await self.send(_transcript("session.output_transcript.delta", text, start_ms, end_ms))

    async def input_transcript(
        self, text: str, start_ms: int | None = None, end_ms: int | None = None
    ) -> None:
        await self.send(_transcript("session.input_transcript.delta", text, start_ms, end_ms))

    async def speech(self, seconds: float = 0.1, then_silence: float = 1.0) -> None:
        """Audible PCM (every sample 0x1000), then zeros, in 100 ms output frames."""
        await self._audio(seconds, AUDIBLE_SAMPLE)
        await self.silence(then_silence)

    async def silence(self, seconds: float) -> None:
        await self._audio(seconds, 0)

    async def audio(self, pcm: bytes) -> None:
        """One output audio frame of PCM16 bytes at the session's rate (24 kHz, or 8 kHz
        for G.711), sent in the session's format (encoded to G.711 when it is one)."""
        audio_type = self._current().audio_type
        await self.audio_raw(encode_audio(audio_type, pcm))

    async def audio_raw(self, data: bytes) -> None:
        """One output audio frame of ``data`` as it is (already in the session's format)."""
        await self.send({"type": "session.output_audio.delta", "delta": _b64(data)})

    async def _audio(self, seconds: float, value: int) -> None:
        rate = self._current().audio_rate
        remaining = round(seconds * rate)
        while remaining > 0:
            samples = min(rate // 10, remaining)  # 100 ms frames
            remaining -= samples
            await self.audio(value.to_bytes(2, "little", signed=True) * samples)

    async def _backend(self, delegation_id: str | None, kind: str, **fields: Any) -> None:
        await self.send(
            {
                "type": "response.event",
                "delegation_id": delegation_id,
                "event": {"type": kind, **fields},
            }
        )

    def _end_response(self, delegation_id: str | None, response_id: str, *, discard: bool) -> None:
        connection = self._current()
        if connection.running.get(delegation_id) == response_id:
            del connection.running[delegation_id]
        if discard:
            # The service discards a failed or incomplete response's calls (§4.3).
            for call in connection.calls.values():
                if call.response_id == response_id and call.delegation_id == delegation_id:
                    call.state = "discarded"

    def _current(self) -> _Connection:
        if not self._connections:
            raise RuntimeError("no client has connected")
        return self._connections[-1]

    def _abort(self, connection: _Connection) -> None:
        transport = connection.request.transport
        if transport is not None:
            transport.abort()

    # -- the client side ----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import WSMsgType, web

        if self._refusals:
            self.refused += 1
            status, headers = self._refusals.pop(0)
            body = _error("refused by the test", code="refused")
            return web.json_response(body, status=status, headers=headers)
        if self.refuse_connections:
            self.refused += 1
            return web.json_response(_error("service unavailable", code="unavailable"), status=503)
        ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        self.headers.append(dict(request.headers))
        connection = _Connection(len(self._connections) + 1, ws, request)
        self._connections.append(connection)
        async for message in ws:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                event = json.loads(message.data)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            connection.received.append(event)
            self.received.append(event)
            await self._react(connection, event)
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()
        return ws

    async def _react(self, connection: _Connection, event: JSONObject) -> None:
        kind = event.get("type")
        event_id = event.get("event_id")
        if kind == "session.start":
            refusal = _format_error(connection, event.get("session"), event_id)
            if refusal is not None:  # the service refuses the session, as for start_error
                await connection.ws.send_json(refusal)
                await connection.ws.close()
            elif self.start_error is not None:
                await connection.ws.send_json({"type": "error", "error": self.start_error})
                await connection.ws.close()
            elif self.answer_start:
                connection.started = True
                session = {"id": f"session_{connection.number}"}
                await connection.ws.send_json({"type": "session.started", "session": session})
        elif kind == "session.close" and self.answer_close:
            closed = {
                "type": "session.closed",
                "reason": "close_requested",
                "usage": {"seconds": 0.0},
            }
            await connection.ws.send_json(closed)
            await connection.ws.close()
        elif kind == "response.item.create":
            await self._output(connection, event.get("item"), event_id)
        elif kind == "response.create":
            await self._create(connection, event_id)

    async def _output(self, connection: _Connection, item: object, event_id: object) -> None:
        if not isinstance(item, dict) or item.get("type") != "function_call_output":
            return
        call = connection.calls.get(str(item.get("call_id")))
        if call is None:
            return
        if call.state == "discarded" and self.refuse_discarded_outputs:
            message = f"no open call {item.get('call_id')}: its response did not complete"
            await connection.ws.send_json(
                _error(message, code="call_not_found", client_event_id=event_id)
            )
            return
        call.state = "answered"
        connection.answered_since_create.add(str(item.get("call_id")))

    async def _create(self, connection: _Connection, event_id: object) -> None:
        unanswered = [c for c in connection.calls.values() if c.state == "open"]
        if self.refuse_partial_batch and connection.answered_since_create and unanswered:
            message = f"{len(unanswered)} tool call(s) still need an output"
            await connection.ws.send_json(
                _error(message, code="partial_tool_outputs", client_event_id=event_id)
            )
            return
        connection.answered_since_create.clear()


def _error(
    message: str,
    *,
    code: str | None = None,
    kind: str | None = None,
    client_event_id: object = None,
    param: str | None = None,
) -> JSONObject:
    error: JSONObject = {"type": kind or "invalid_request_error", "message": message}
    if code is not None:
        error["code"] = code
    if param is not None:
        error["param"] = param
    if isinstance(client_event_id, str):
        error["client_event_id"] = client_event_id
    return {"type": "error", "error": error}


def _format_error(connection: _Connection, session: object, event_id: object) -> JSONObject | None:
    """Read ``session.audio.format`` into ``connection``; the ``error`` a malformed or
    unknown format gets (the session is then refused)."""
    audio = session.get("audio") if isinstance(session, dict) else None
    declared = audio.get("format") if isinstance(audio, dict) else None
    if declared is None:
        return None  # the default: 24 kHz PCM
    param = "session.audio.format"
    if not isinstance(declared, dict):
        message = f"Invalid type for '{param}': expected an object."
        return _error(message, code="invalid_type", client_event_id=event_id, param=param)
    audio_type = declared.get("type", "audio/pcm")
    if audio_type not in AUDIO_TYPES:
        supported = ", ".join(f"'{name}'" for name in AUDIO_TYPES)
        message = f"Invalid value: {audio_type!r}. Supported values are: {supported}."
        return _error(
            message, code="invalid_value", client_event_id=event_id, param=param + ".type"
        )
    rate = declared.get("rate", AUDIO_TYPES[audio_type])
    if rate != AUDIO_TYPES[audio_type] or isinstance(rate, bool):
        message = (
            f"Invalid value: {rate!r}. {audio_type} supports a rate of "
            f"{AUDIO_TYPES[audio_type]} only."
        )
        return _error(
            message, code="invalid_value", client_event_id=event_id, param=param + ".rate"
        )
    connection.audio_type, connection.audio_rate = audio_type, rate
    return None


def _transcript(kind: str, text: str, start_ms: int | None, end_ms: int | None) -> JSONObject:
    event: JSONObject = {"type": kind, "delta": text}
    if start_ms is not None:
        event["start_ms"] = start_ms
    if end_ms is not None:
        event["end_ms"] = end_ms
    return event


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
