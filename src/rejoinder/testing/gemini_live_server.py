"""A loopback Gemini Live API (BidiGenerateContent) server that a test scripts message by
message.

It accepts the WebSocket on the API's path (127.0.0.1, a free port), checks ``?key=``
when told to, answers ``setup`` with ``setupComplete`` (and a resumable
``sessionResumptionUpdate`` when the client asked for resumption), issues and honours
resumption handles, records every client message, and sends whatever the test scripts
to the newest connection. Like the service it sends its JSON in binary frames, and it
reports errors by closing the socket with a code and a reason::

    async with GeminiLiveServer() as server:
        model = google.Live(api_key="test", base_url=server.base_url)
        session = model.session()
        await session.start(RealtimeConfig(instructions="Be brief.", tools=[WEATHER]))
        await server.input_transcript("Weather in Paris?")
        await server.tool_call(("call_1", "get_weather", {"city": "Paris"}))
        await server.wait_for("toolResponse")
        await server.answer("It is sunny.", seconds=0.5)   # transcript, audio, complete

Faults: ``refuse(status)`` answers upgrades with an HTTP error, ``setup_error`` closes
instead of completing the setup, ``answer_setup = False`` stalls it, ``drop()`` cuts the
TCP connection, ``close(code, reason)`` is an error close, ``send_raw`` / ``send_binary``
send garbage, ``go_away(seconds)`` announces the end (and ``close_after`` ends it), and
``max_connection_seconds`` is a short server-side connection limit with its GoAway.
``aiohttp`` is imported when the server starts; under ``looptime`` waits cost no
wall-clock time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._loopback import LoopbackServer

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["GeminiLiveServer", "LiveConnection", "message_kind"]

JSONObject: TypeAlias = dict[str, Any]

PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
OUTPUT_RATE = 24000
INPUT_MIME = "audio/pcm;rate=16000"
FRAME_SECONDS = 0.1
INVALID_ARGUMENT = b"Request contains an invalid argument."


def speech_pcm(seconds: float, rate: int = OUTPUT_RATE, frequency: float = 440.0) -> bytes:
    """A tone as 16-bit little-endian mono PCM: audible, never silent."""
    samples = round(seconds * rate)
    step = 2 * math.pi * frequency / rate
    return array("h", (round(8000 * math.sin(step * (i + 1))) for i in range(samples))).tobytes()


def message_kind(message: JSONObject) -> str:
    """``setup``, ``clientContent``, ``toolResponse``, or ``realtimeInput.<field>``
    (``audio``, ``activityStart``, ``activityEnd``, ``audioStreamEnd``, ``text``)."""
    for kind in ("setup", "clientContent", "toolResponse"):
        if kind in message:
            return kind
    realtime = message.get("realtimeInput")
    if isinstance(realtime, dict) and realtime:
        return "realtimeInput." + str(next(iter(realtime)))
    return "unknown"


@dataclass(eq=False)
class LiveConnection:
    """One client connection, as the server saw it."""

    number: int
    query: dict[str, str]
    setup: JSONObject = field(default_factory=dict)
    """The ``setup`` body the client sent."""
    resumed_from: str | None = None
    """The handle this connection resumed, if it did."""
    received: list[JSONObject] = field(default_factory=list)
    closed: bool = False
    close_code: int | None = None
    """The code the server closed it with (``None``: the client closed it, or it was cut)."""
    _ws: web.WebSocketResponse | None = field(default=None, repr=False)
    _request: web.Request | None = field(default=None, repr=False)
    _timers: list[asyncio.Task[None]] = field(default_factory=list, repr=False)

    def kinds(self) -> list[str]:
        return [message_kind(message) for message in self.received]


class GeminiLiveServer(LoopbackServer):
    """Serves the Live API's WebSocket on 127.0.0.1; see the module docstring.

    Options (attributes, changeable at any time): ``answer_setup``, ``setup_error`` (a
    ``(code, reason)`` close instead of ``setupComplete``), ``resumption_updates`` (send a
    resumable handle after the setup, after each scripted ``turn_complete`` and after
    client content that asks for no answer), ``binary_frames``, ``max_connection_seconds``
    and ``go_away_notice`` (the limit's GoAway comes that long before it).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        answer_setup: bool = True,
        resumption_updates: bool = True,
        binary_frames: bool = True,
        max_connection_seconds: float | None = None,
        go_away_notice: float = 1.0,
        port: int = 0,
    ) -> None:
        super().__init__(port=port)
        self.api_key = api_key
        self.answer_setup = answer_setup
        self.resumption_updates = resumption_updates
        self.binary_frames = binary_frames
        self.max_connection_seconds = max_connection_seconds
        self.go_away_notice = go_away_notice
        self.setup_error: tuple[int, str] | None = None
        self.refused = 0
        """Upgrades answered with an HTTP error (``refuse``)."""
        self.connections: list[LiveConnection] = []
        self.received: list[JSONObject] = []
        """Every client message of every connection, in arrival order."""
        self.handles: list[str] = []
        """Every resumption handle issued, oldest first."""
        self._refusals: list[tuple[int, dict[str, str]]] = []
        self._changed: asyncio.Condition | None = None

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give ``google.Live``: the host, as the API's is."""
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get(PATH, self._handle)

    async def start(self) -> None:
        self._changed = asyncio.Condition()
        await super().start()

    async def _before_cleanup(self) -> None:
        for connection in self.connections:
            self._cancel_timers(connection)
            if not connection.closed:
                self._abort(connection)

    def refuse(
        self, status: int = 503, *, times: int = 1, retry_after: float | None = None
    ) -> None:
        """Answer the next ``times`` upgrades with HTTP ``status`` (and a
        ``Retry-After``, seconds, when given); later ones are accepted again."""
        headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
        self._refusals.extend([(status, headers)] * times)

    # -- what the client sent -------------------------------------------------------------

    def kinds(self, connection: int | None = None) -> list[str]:
        """Message kinds in arrival order (of one connection, 1-based, or of all)."""
        return [message_kind(message) for message in self._messages(connection)]

    def of_kind(self, kind: str, connection: int | None = None) -> list[JSONObject]:
        return [m for m in self._messages(connection) if message_kind(m) == kind]

    def _messages(self, connection: int | None) -> list[JSONObject]:
        return self.received if connection is None else self.connections[connection - 1].received

    @property
    def setups(self) -> list[JSONObject]:
        """The ``setup`` body of every connection, in order."""
        return [connection.setup for connection in self.connections]

    def function_responses(self) -> list[JSONObject]:
        """Every ``functionResponses`` entry the client sent, in order."""
        return [
            entry
            for message in self.of_kind("toolResponse")
            for entry in message["toolResponse"].get("functionResponses", [])
        ]

    def client_texts(self, connection: int | None = None) -> list[tuple[str, str, bool]]:
        """``(role, text, turnComplete)`` of every text part of ``clientContent``."""
        texts: list[tuple[str, str, bool]] = []
        for message in self.of_kind("clientContent", connection):
            content = message["clientContent"]
            for turn in content.get("turns", []):
                for part in turn.get("parts", []):
                    texts.append((turn.get("role"), part.get("text"), content.get("turnComplete")))
        return texts

    def input_pcm(self, connection: int | None = None) -> bytes:
        """The 16 kHz PCM audio the client sent."""
        return b"".join(
            base64.b64decode(message["realtimeInput"]["audio"]["data"])
            for message in self.of_kind("realtimeInput.audio", connection)
        )

    async def wait_for(self, kind: str, count: int = 1, within: float = 5.0) -> JSONObject:
        """Wait (loop time) until ``count`` messages of ``kind`` arrived; return the last."""
        await self._wait(lambda: len(self.of_kind(kind)) >= count, within)
        return self.of_kind(kind)[count - 1]

    async def wait_connected(self, count: int = 1, within: float = 5.0) -> LiveConnection:
        """Wait until ``count`` connections have sent their setup; return the last."""
        await self._wait(lambda: sum(1 for c in self.connections if c.setup) >= count, within)
        return [c for c in self.connections if c.setup][count - 1]

    async def wait_closed(self, connection: int, within: float = 5.0) -> None:
        await self._wait(lambda: self.connections[connection - 1].closed, within)

    async def _wait(self, predicate: Callable[[], bool], within: float) -> None:
        assert self._changed is not None, "the server is not running"
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(predicate)

    # -- scripting: raw -------------------------------------------------------------------

    async def send(self, message: JSONObject) -> None:
        """Send one server message to the newest connection."""
        await self._send_to(self._current(), message)

    async def _send_to(self, connection: LiveConnection, message: JSONObject) -> None:
        ws = connection._ws
        assert ws is not None
        text = json.dumps(message)
        if self.binary_frames:
            await ws.send_bytes(text.encode())
        else:
            await ws.send_str(text)

    async def send_raw(self, text: str) -> None:
        """A text frame as it is (garbage, odd shapes)."""
        await self._ws().send_str(text)

    async def send_binary(self, data: bytes) -> None:
        """A binary frame as it is."""
        await self._ws().send_bytes(data)

    async def drop(self) -> None:
        """Cut the newest connection without a closing handshake (a lost network)."""
        connection = self._current()
        self._abort(connection)
        await self._wait(lambda: connection.closed, 5.0)

    async def close(self, code: int = 1011, reason: str = "Internal error encountered.") -> None:
        """End the newest connection the way the service reports an error."""
        connection = self._current()
        await self._close_with(connection, code, reason.encode())
        await self._wait(lambda: connection.closed, 5.0)

    # -- scripting: the model -------------------------------------------------------------

    async def audio(self, seconds: float = 0.5) -> None:
        """Model audio: 100 ms of 24 kHz tone per message."""
        frames = max(1, round(seconds / FRAME_SECONDS))
        data = base64.b64encode(speech_pcm(FRAME_SECONDS)).decode("ascii")
        part = {"inlineData": {"mimeType": f"audio/pcm;rate={OUTPUT_RATE}", "data": data}}
        for _ in range(frames):
            await self.send({"serverContent": {"modelTurn": {"parts": [part]}}})

    async def output_transcript(self, text: str) -> None:
        await self.send({"serverContent": {"outputTranscription": {"text": text}}})

    async def input_transcript(self, text: str, *, finished: bool = False) -> None:
        transcription: JSONObject = {"text": text}
        if finished:
            transcription["finished"] = True
        await self.send({"serverContent": {"inputTranscription": transcription}})

    async def generation_complete(self) -> None:
        await self.send({"serverContent": {"generationComplete": True}})

    async def turn_complete(self, usage: JSONObject | None = None) -> None:
        """``turnComplete`` (with ``usageMetadata`` beside it when given), then, with
        ``resumption_updates``, a new resumable handle."""
        message: JSONObject = {"serverContent": {"turnComplete": True}}
        if usage is not None:
            message["usageMetadata"] = usage
        await self.send(message)
        connection = self._current()
        if self.resumption_updates and connection.setup.get("sessionResumption") is not None:
            await self.resumption_update(connection)

    async def interrupted(self) -> None:
        await self.send({"serverContent": {"interrupted": True}})

    async def answer(self, text: str, seconds: float = 0.5) -> None:
        """A whole spoken turn: its transcript, its audio, generation and turn complete."""
        await self.output_transcript(text)
        await self.audio(seconds)
        await self.generation_complete()
        await self.turn_complete()

    async def tool_call(self, *calls: tuple[str, str, JSONObject]) -> None:
        """``toolCall`` with ``(id, name, args)`` function calls."""
        function_calls = [{"id": i, "name": name, "args": args} for i, name, args in calls]
        await self.send({"toolCall": {"functionCalls": function_calls}})

    async def tool_call_cancellation(self, *ids: str) -> None:
        await self.send({"toolCallCancellation": {"ids": list(ids)}})

    async def usage(self, prompt: int, response: int) -> None:
        await self.send(
            {"usageMetadata": {"promptTokenCount": prompt, "responseTokenCount": response}}
        )

    # -- scripting: the session -----------------------------------------------------------

    async def resumption_update(
        self, connection: LiveConnection | None = None, *, resumable: bool = True
    ) -> str | None:
        """A ``sessionResumptionUpdate`` (to the newest connection unless told); a
        resumable one carries a new handle, returned."""
        target = connection or self._current()
        if not resumable:
            update = {"resumable": False, "newHandle": ""}
            await self._send_to(target, {"sessionResumptionUpdate": update})
            return None
        handle = f"handle_{len(self.handles) + 1}"
        self.handles.append(handle)
        update = {"newHandle": handle, "resumable": True}
        await self._send_to(target, {"sessionResumptionUpdate": update})
        return handle

    async def setup_complete(self) -> None:
        """Complete the newest connection's setup by hand (with ``answer_setup = False``)."""
        connection = self._current()
        await self._send_to(connection, {"setupComplete": {}})
        self._limit(connection)
        if self.resumption_updates and connection.setup.get("sessionResumption") is not None:
            await self.resumption_update(connection)

    async def go_away(self, time_left: float, *, close_after: bool = False) -> None:
        """``goAway``; ``close_after``: the connection then ends after ``time_left``."""
        connection = self._current()
        await self.send({"goAway": {"timeLeft": f"{time_left:g}s"}})
        if close_after:
            self._close_later(connection, time_left)

    # -- connection handling --------------------------------------------------------------

    def _current(self) -> LiveConnection:
        for connection in reversed(self.connections):
            if not connection.closed:
                return connection
        raise RuntimeError("GeminiLiveServer: no client is connected")

    def _ws(self) -> web.WebSocketResponse:
        ws = self._current()._ws
        assert ws is not None
        return ws

    async def _close_with(self, connection: LiveConnection, code: int, reason: bytes) -> None:
        connection.close_code = code
        assert connection._ws is not None
        await connection._ws.close(code=code, message=reason)

    def _abort(self, connection: LiveConnection) -> None:
        request = connection._request
        if request is not None and request.transport is not None:
            request.transport.abort()

    def _cancel_timers(self, connection: LiveConnection) -> None:
        for task in connection._timers:
            if task is not asyncio.current_task():
                task.cancel()
        connection._timers.clear()

    def _later(
        self, connection: LiveConnection, delay: float, action: Callable[[], Awaitable[None]]
    ) -> None:
        async def run() -> None:
            await asyncio.sleep(delay)
            if not connection.closed:
                await action()

        connection._timers.append(asyncio.create_task(run()))

    def _close_later(self, connection: LiveConnection, delay: float) -> None:
        async def close() -> None:
            assert connection._ws is not None
            # Shielded: the handler's own ending must not cut the closing handshake.
            closing = self._close_with(connection, 1000, b"The connection reached its limit.")
            await asyncio.shield(closing)

        self._later(connection, delay, close)

    def _limit(self, connection: LiveConnection) -> None:
        """The server-side connection limit: GoAway ``go_away_notice`` before, then close."""
        limit = self.max_connection_seconds
        if limit is None:
            return
        notice = min(self.go_away_notice, limit)

        async def announce() -> None:
            await self._send_to(connection, {"goAway": {"timeLeft": f"{notice:g}s"}})

        self._later(connection, limit - notice, announce)
        self._close_later(connection, limit)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import WSMsgType, web

        if self._refusals:
            self.refused += 1
            status, headers = self._refusals.pop(0)
            body = {"error": {"code": status, "message": "refused by the test"}}
            return web.json_response(body, status=status, headers=headers)
        ws = web.WebSocketResponse(max_msg_size=16 * 1024 * 1024)
        await ws.prepare(request)
        connection = LiveConnection(
            len(self.connections) + 1, dict(request.query), _ws=ws, _request=request
        )
        self.connections.append(connection)
        await self._notify()
        try:
            if self.api_key is not None and request.query.get("key") != self.api_key:
                reason = "API key not valid. Please pass a valid API key."
                await self._close_with(connection, 1008, reason.encode())
                return ws
            async for frame in ws:
                if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    continue
                try:
                    message: object = json.loads(frame.data)
                except ValueError:
                    message = None
                if not isinstance(message, dict):
                    await self._close_with(
                        connection, 1007, b"Request contains an invalid argument."
                    )
                    break
                connection.received.append(message)
                self.received.append(message)
                await self._react(connection, ws, message)
                await self._notify()
        finally:
            connection.closed = True
            self._cancel_timers(connection)
            await self._notify()
        return ws

    async def _react(
        self, connection: LiveConnection, ws: web.WebSocketResponse, message: JSONObject
    ) -> None:
        kind = message_kind(message)
        if not connection.setup:
            if kind != "setup":  # the API wants setup first, and only once
                await self._close_with(connection, 1007, b"The first message must be a setup.")
                return
            await self._setup(connection, ws, message["setup"])
        elif kind == "setup":
            await self._close_with(connection, 1007, b"Only one setup is allowed per connection.")
        elif kind == "realtimeInput.audio":
            mime = message["realtimeInput"]["audio"].get("mimeType")
            if mime != INPUT_MIME:
                await self._close_with(
                    connection, 1007, f"Unsupported audio type {mime!r}.".encode()
                )
        elif kind == "clientContent":
            content = message["clientContent"]
            if self.resumption_updates and not content.get("turnComplete"):
                await self.resumption_update(connection)

    async def _setup(
        self, connection: LiveConnection, ws: web.WebSocketResponse, setup: object
    ) -> None:
        if not isinstance(setup, dict) or not str(setup.get("model", "")).startswith("models/"):
            await self._close_with(connection, 1007, INVALID_ARGUMENT)
            return
        connection.setup = setup
        resumption = setup.get("sessionResumption")
        handle = resumption.get("handle") if isinstance(resumption, dict) else None
        if handle:
            if handle not in self.handles:
                await self._close_with(connection, 1007, b"Invalid session resumption handle.")
                return
            connection.resumed_from = handle
        if self.setup_error is not None:
            code, reason = self.setup_error
            await self._close_with(connection, code, reason.encode())
            return
        if not self.answer_setup:
            return
        await self._send_to(connection, {"setupComplete": {}})
        self._limit(connection)
        if self.resumption_updates and resumption is not None:
            await self.resumption_update(connection)

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()
