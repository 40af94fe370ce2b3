"""What the loopback speech-to-text WebSocket servers (Deepgram, AssemblyAI) share: the
handshake refusals and per-connection faults the tests script, the record of what a
connection received, and the exchange's skeleton (read binary audio and JSON control
messages, tell speech from silence by the audio's peak, send JSON, close with a code,
carry out a fault once enough audio arrived). Each server brings its checks, its
messages and how it "hears". ``aiohttp`` is imported when a server starts.
"""

from __future__ import annotations

import array
import asyncio
import json
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from ._ws_server import WebSocketServer

if TYPE_CHECKING:
    from aiohttp import web


class ListenFault(Protocol):
    """The fields of a speech-to-text server's ``Fault`` the shared exchange reads."""

    @property
    def action(self) -> str: ...
    @property
    def after_bytes(self) -> int: ...
    @property
    def frames(self) -> tuple[str, ...]: ...


FaultT = TypeVar("FaultT", bound=ListenFault)


@dataclass(eq=False)
class ListenConnection:
    """What one accepted connection received."""

    query: dict[str, str]
    headers: dict[str, str]
    audio: bytearray = field(default_factory=bytearray)
    controls: list[dict[str, Any]] = field(default_factory=list)
    """Every text message from the client, decoded (``{"raw": ...}`` when not JSON)."""
    sent: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    """The code the server closed with (else the client's)."""
    closed: bool = False

    def control_types(self) -> list[str]:
        return [str(control.get("type")) for control in self.controls]


ConnectionT = TypeVar("ConnectionT", bound=ListenConnection)


class ListenServer(WebSocketServer[FaultT | None], Generic[FaultT, ConnectionT]):
    """A speech-to-text server: refusals, faults and connections, one handler each."""

    _root: ClassVar[str]
    """The API's root path (``/v1``): ``base_url`` ends with it."""
    _endpoint: ClassVar[str]
    """The WebSocket's path under the root (``/listen``)."""
    _connection_type: ClassVar[Callable[..., Any]]
    """The server's ``ListenConnection`` class (a class variable cannot name ``ConnectionT``)."""

    def __init__(self, *, faults: Iterable[FaultT | None] = (), port: int = 0) -> None:
        super().__init__(faults=faults, port=port)
        self._refusals: deque[tuple[int, str]] = deque()
        self.connections: list[ConnectionT] = []
        self.refused: list[int] = []
        """The status of every refused handshake, in order."""

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give a client: ``ws://127.0.0.1:<port>`` and the root."""
        return f"ws://127.0.0.1:{self.port}{self._root}"

    def add_faults(self, *faults: FaultT | None) -> None:
        self._faults.extend(faults)

    def refuse(self, status: int, times: int = 1, message: str = "Refused by the test.") -> None:
        """Answer the next ``times`` handshakes with HTTP ``status``."""
        self._refusals.extend([(status, message)] * times)

    def _check(self, request: web.Request) -> web.Response | None:
        """The refusal to answer the handshake with, if any."""
        raise NotImplementedError

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get(self._root + self._endpoint, self._serve)

    async def _converse(
        self, ws: web.WebSocketResponse, request: web.Request, connection: ConnectionT
    ) -> None:
        """The exchange on an accepted connection."""
        raise NotImplementedError

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        async with self._handling():
            refusal = self._check(request)
            if refusal is not None:
                self.refused.append(refusal.status)
                return refusal
            # No goodbye on close: cancelling the handler is how these servers stop.
            ws = await self._accept(request, goodbye_on_close=False)
            connection: ConnectionT = self._connection_type(
                dict(request.query), dict(request.headers)
            )
            self.connections.append(connection)
            try:
                await self._converse(ws, request, connection)
            finally:
                connection.closed = True
                if connection.close_code is None:
                    connection.close_code = ws.close_code
            return ws


class ListenStream(Generic[FaultT, ConnectionT]):
    """One connection's exchange: reads audio and control messages, answers JSON."""

    def __init__(
        self, ws: web.WebSocketResponse, request: web.Request, connection: ConnectionT
    ) -> None:
        self.ws, self.request, self.connection = ws, request, connection
        self.fault: FaultT | None = None
        self.muted = False

    idle_timeout: float | None = None
    """Seconds without a message before ``_idle`` (``None``: wait for ever)."""

    async def _opening(self) -> None:
        """What the server sends first."""

    async def _idle(self) -> None:
        """Nothing arrived for ``idle_timeout`` seconds: the connection ends."""

    async def _audio(self, data: bytes) -> bool:
        """A binary message; False when the connection is over."""
        raise NotImplementedError

    async def _control(self, control: dict[str, Any]) -> bool:
        """A text message, decoded and recorded; False when the connection is over."""
        raise NotImplementedError

    async def _close_fault(self, fault: FaultT) -> None:
        """Carry out a ``close`` fault: the service's error, then the close frame."""
        raise NotImplementedError

    async def run(self) -> None:
        from aiohttp import WSMsgType

        await self._opening()
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout):
                    message = await self.ws.receive()
            except TimeoutError:
                await self._idle()
                return
            if message.type == WSMsgType.BINARY:
                if not await self._audio(message.data):
                    return
            elif message.type == WSMsgType.TEXT:
                if not await self._control(self._decoded(message.data)):
                    return
            else:
                return

    def _decoded(self, text: str) -> dict[str, Any]:
        try:
            control = json.loads(text)
        except ValueError:
            control = None
        if not isinstance(control, dict):
            control = {"raw": text}
        self.connection.controls.append(control)
        return control

    async def _audio_arrived(self, data: bytes) -> bool:
        """Record ``data`` and carry out the fault if enough audio has come now; False when
        the connection is over."""
        connection = self.connection
        connection.audio += data
        fault = self.fault
        if fault is not None and len(connection.audio) >= fault.after_bytes:
            self.fault = None
            return await self._fault(fault)
        return True

    async def _fault(self, fault: FaultT) -> bool:
        """Carry out ``fault``; False when the connection is over."""
        if fault.action == "drop":
            if self.request.transport is not None:
                self.request.transport.close()
            return False
        if fault.action == "close":
            await self._close_fault(fault)
            return False
        if fault.action == "mute":
            self.muted = True
            return True
        for frame in fault.frames:
            await self.ws.send_str(frame)
        return True

    async def _close(self, code: int, reason: str = "") -> None:
        # Recorded here: after the handshake aiohttp keeps the code the client echoed.
        self.connection.close_code = code
        # A close frame's reason holds 123 bytes at the most.
        await self.ws.close(code=code, message=reason.encode()[:123])

    async def _send(self, message: dict[str, Any]) -> None:
        if self.muted:
            return
        self.connection.sent.append(message)
        await self.ws.send_str(json.dumps(message))


def is_loud(data: bytes, threshold: int) -> bool:
    """Whether 16-bit little-endian PCM ``data`` peaks above ``threshold``: speech."""
    samples = array.array("h")
    samples.frombytes(data[: len(data) // 2 * 2])
    if sys.byteorder == "big":
        samples.byteswap()
    return bool(samples) and max(max(samples), -min(samples)) > threshold


def sample_count(data: bytes) -> int:
    """How many whole 16-bit samples ``data`` holds."""
    return len(data) // 2
