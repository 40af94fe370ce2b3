"""The WebSocket transport: protocol v1 (``docs/protocol.md``) over ``GET /ws``.

Two layers. ``WebSocketPeer`` is framework-free: it is fed the frames a socket received
(``receive_text``, ``receive_bytes``), builds the ``Connection`` once the client's
``start`` arrived, and puts what must be sent (text, audio, a close) in its ``Outbox``,
which one writer drains. ``websocket_handler`` is the thin aiohttp layer on top: it
upgrades the request, pumps frames in and the outbox out, runs the entry point, and
bounds every wait (the ``start`` message, heartbeats, the entry point's exit).

One client's junk never reaches another: every failure is confined to its own peer, and
is answered with an ``error`` event (recoverable mistakes) or an ``error`` event and a
close code (``CloseCode``: non-JSON text 1007, oversize frames 1009, audio before
``start`` 1003, an invalid ``start`` 1008).

Resuming (with a ``ResumeRegistry``): a socket that ends without the client's close 1000
(a dropped network, a ping timeout) detaches its session instead of ending it; a
``start`` with ``resume`` takes a waiting (or still attached) session over, or is refused
with ``resume_failed`` and close 4004. The entry point runs in a task of its own, which
outlives the socket that started it; each socket waits for it, or for the moment it stops
carrying the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from aiohttp import WSMessage, WSMsgType, web

from ..models.audio import AudioFrame
from .connection import Connection, Entrypoint
from .hosting import SocketBinding, run_socket
from .link import ClientLink
from .mic_clock import MIC_BATCH_INTERVAL
from .microphone import PushAudioInput
from .outbox import CloseRequest, Outbox
from .playback import ReportedPlayback
from .protocol import (
    MAX_TEXT_CHARS,
    PROTOCOL_VERSION,
    Clear,
    CloseCode,
    ErrorCode,
    ErrorMessage,
    ProtocolError,
    Ready,
    ServerMessage,
    Start,
    encode,
    parse_client_message,
)
from .resume import ResumeRegistry
from .socket_loop import AiohttpFrames
from .webrtc.ice_config import ready_with_ice

if TYPE_CHECKING:
    from .webrtc.ice_config import IceConfig

__all__ = [
    "CloseRequest",
    "Outbox",
    "WebSocketOptions",
    "WebSocketPeer",
    "websocket_handler",
]

logger = logging.getLogger("rejoinder.io.websocket")


@dataclass(frozen=True, slots=True)
class WebSocketOptions:
    """Settings of the WebSocket transport (``create_app(websocket=...)``,
    ``create_asgi_app(websocket=...)``): the agent audio's rate, the limits a client must
    keep to, and how long the server waits for it."""

    output_sample_rate: int = 24000
    """Rate of the agent audio sent, unless ``match_tts_rate`` and the TTS has one."""
    match_tts_rate: bool = True
    """Send at the session's TTS rate (no resampling on the server)."""
    max_frame_bytes: int = 256 * 1024
    """Largest frame accepted (about 8 s of 16 kHz audio); larger: close 1009."""
    max_mic_seconds: float = 5.0
    """Microphone audio that may wait to be read by the session."""
    mic_batch_interval: float = MIC_BATCH_INTERVAL
    """Seconds between two hand-overs of microphone audio to the sessions, shared by all
    of them (see ``mic_clock``): a frame waits up to this long. 0: each at once."""
    start_timeout: float = 10.0
    """Seconds the client has to send ``start`` after connecting."""
    heartbeat: float | None = 5.0
    """Ping interval; a client that does not answer within half of it is dropped. Short,
    so a connection that died silently is seen within seconds: until then a reply the
    client stopped reporting is estimated to play on (``ReportedPlayback``), and a drop
    seen late finds more of it counted as heard."""
    max_queued_messages: int = 2000
    """Text messages the client may leave unread before it is dropped (close 4002)."""
    max_queued_audio_bytes: int = 1024 * 1024
    """Agent audio waiting to be written before the session is made to wait."""
    close_timeout: float = 30.0
    """How long the entry point gets to return after the client left."""
    ice: IceConfig | None = None
    """ICE servers for the client's next WebRTC connection, put in ``ready`` with TURN
    credentials minted for the session (a page that fell back to the WebSocket may try
    WebRTC again). ``create_app`` fills it from ``WebRTCOptions.ice``."""


class WebSocketPeer:
    """One client of the WebSocket transport, without the socket.

    ``resume``: where sessions wait for their client after a drop (None: a socket that
    ends, ends its session, and ``start.resume`` is refused)."""

    def __init__(
        self,
        options: WebSocketOptions | None = None,
        *,
        remote: str | None = None,
        query: Mapping[str, str] | None = None,
        resume: ResumeRegistry | None = None,
    ) -> None:
        self.options = options or WebSocketOptions()
        self.outbox = Outbox(
            max_messages=self.options.max_queued_messages,
            max_audio_bytes=self.options.max_queued_audio_bytes,
        )
        self.connection: Connection | None = None
        self.link: ClientLink | None = None
        """This socket's link to its session (after ``start``)."""
        self.resumed = False
        """Its ``start`` resumed a session that an earlier connection began."""
        self._remote = remote
        self._query = dict(query or {})
        self._resume = resume
        self._overrun_reported = False
        self._closing = False
        """This side asked to close the socket (a refusal, the session's end): when the
        socket is done, that is no drop. (The outbox also closes when the socket went away
        under its writer, or the client stopped reading: those are drops.)"""

    # ------------------------------------------------------------ sending

    def send(self, message: ServerMessage) -> None:
        if isinstance(message, Ready) and self.options.ice is not None:
            session = self.connection.session if self.connection is not None else None
            message = ready_with_ice(message, self.options.ice, session.id if session else None)
        self.outbox.put_text(encode(message))

    def fail(self, code: CloseCode, error_code: str, message: str) -> None:
        """Tell the client why, then close with ``code``."""
        self.send(ErrorMessage(code=error_code, message=message))
        self.close(code, message[:120])

    def close(self, code: CloseCode, reason: str) -> None:
        """Close the socket once what is queued was written."""
        self._closing = True
        self.outbox.close(code, reason)

    # ---------------------------------------------------------- receiving

    def receive_text(self, text: str) -> Connection | None:
        """A text frame. Returns the new ``Connection`` when it was the ``start``."""
        if self.outbox.closing:
            return None
        try:
            message = parse_client_message(text)
        except ProtocolError as exc:
            if exc.code == ErrorCode.INVALID_JSON:
                self.fail(CloseCode.INVALID_JSON, exc.code, exc.message)
            elif exc.code == ErrorCode.TOO_LARGE:
                self.fail(CloseCode.MESSAGE_TOO_BIG, exc.code, exc.message)
            elif self.connection is None and _looks_like_start(text):
                self.fail(CloseCode.POLICY_VIOLATION, exc.code, exc.message)
            else:
                self.send(ErrorMessage(code=exc.code, message=exc.message))
            return None
        if self.link is not None:
            self.link.receive(message)
            return None
        if self.connection is not None:  # refused a resume: nothing reaches a session
            return None
        if not isinstance(message, Start):
            self.send(
                ErrorMessage(
                    code=ErrorCode.NOT_STARTED, message=f"send start before {message.type}"
                )
            )
            return None
        return self._start(message)

    def receive_bytes(self, data: bytes) -> None:
        """A binary frame: microphone audio."""
        if self.outbox.closing:
            return
        link = self.link
        if link is None:
            self.fail(
                CloseCode.UNSUPPORTED_DATA,
                ErrorCode.NOT_STARTED,
                "binary audio before start (send start with the sample rate first)",
            )
            return
        if not link.push_pcm(data) and not self._overrun_reported:
            self._overrun_reported = True  # once: the client cannot do much about it
            self.send(
                ErrorMessage(
                    code=ErrorCode.AUDIO_OVERRUN,
                    message="microphone audio arrives faster than it is heard; dropping",
                )
            )

    def client_left(self, *, goodbye: bool = True) -> None:
        """The socket is done. ``goodbye``: the client closed it with 1000 (or the host
        cannot tell): the session ends. Otherwise (a drop) the session is detached for
        its client to resume, when resuming is on, unless the server was closing it."""
        self.outbox.close(CloseCode.NORMAL, "client left")
        link = self.link
        if link is None:
            return
        if goodbye or self._closing:
            link.goodbye()
        else:
            link.lost("the connection was lost")

    # ---------------------------------------------------------- internal

    def _start(self, message: Start) -> Connection | None:
        if message.protocol is not None and message.protocol != PROTOCOL_VERSION:
            self.fail(
                CloseCode.PROTOCOL_MISMATCH,
                ErrorCode.PROTOCOL_MISMATCH,
                f"this server speaks protocol {PROTOCOL_VERSION}, not {message.protocol}",
            )
            return None
        if message.resume is not None:
            return self._resumed(message, message.resume)
        return self._started(message)

    def _resumed(self, message: Start, token: str) -> Connection | None:
        registry = self._resume
        conn = registry.claim(token) if registry is not None else None
        link = ClientLink(
            "websocket",
            self.send,
            send_audio=self._send_audio,
            send_clear=self._send_clear,
            wants_timeline=message.timeline,
            mic_rate=message.sample_rate,
        )
        if conn is None or not conn.attach(link):
            why = (
                "this server does not resume sessions"
                if registry is None
                else "no session to resume with this token (unknown, used or expired)"
            )
            self.fail(CloseCode.RESUME_FAILED, ErrorCode.RESUME_FAILED, f"{why}: start anew")
            return None
        self.connection = conn
        self.link = link
        self.resumed = True
        return conn

    def _started(self, message: Start) -> Connection:
        playback = ReportedPlayback(
            self.options.output_sample_rate, self._send_audio, self._send_clear
        )
        self.connection = Connection(
            transport="websocket",
            audio_input=PushAudioInput(
                message.sample_rate,
                max_seconds=self.options.max_mic_seconds,
                batch_interval=self.options.mic_batch_interval,
            ),
            audio_output=playback,
            send=self.send,
            remote=self._remote,
            query=self._query,
            match_tts_rate=self.options.match_tts_rate,
            wants_timeline=message.timeline,
            resume=self._resume,
        )
        self.link = self.connection.link
        return self.connection

    async def _send_audio(self, frame: AudioFrame) -> None:
        await self.outbox.put_audio(frame.to_pcm())

    def _send_clear(self) -> None:
        self.outbox.clear_audio()
        self.send(Clear())


def _looks_like_start(text: str) -> bool:
    return len(text) <= MAX_TEXT_CHARS and '"start"' in text


# ----------------------------------------------------------------- aiohttp


Runner = Callable[[Entrypoint, Connection], Awaitable[None]]
"""How the entry point is called (``SessionGate.run`` counts live sessions)."""


async def _call(entrypoint: Entrypoint, conn: Connection) -> None:
    await entrypoint(conn)


def websocket_handler(
    entrypoint: Entrypoint,
    options: WebSocketOptions | None = None,
    *,
    run: Runner | None = None,
    resume: ResumeRegistry | None = None,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler for ``GET /ws``: one ``WebSocketPeer`` per request.
    ``resume``: where sessions wait for their client after a drop (None: resuming off)."""
    opts = options or WebSocketOptions()
    runner = run or _call

    async def handle(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            heartbeat=opts.heartbeat, max_msg_size=opts.max_frame_bytes, autoping=True
        )
        await ws.prepare(request)
        watched = _CloseFrameWatch(ws)
        _, binding = client_socket(
            entrypoint,
            opts,
            runner,
            remote=request.remote,
            query=dict(request.query),
            resume=resume,
            goodbye=watched.said_goodbye,
        )
        await run_socket(AiohttpFrames(cast("web.WebSocketResponse", watched), "ws"), binding)
        return ws

    return handle


class _CloseFrameWatch:
    """An aiohttp socket that remembers the code of the client's close frame. (aiohttp's
    own ``close_code`` does not tell: when its answer to that frame cannot be written, the
    client having gone already, it becomes 1006, the code of a dropped connection.)"""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws
        self.client_code: int | None = None
        """The code of the client's close frame (0: a frame without one); None: it sent
        no close frame (the connection broke, or a ping went unanswered)."""

    def said_goodbye(self) -> bool:
        """The client closed with 1000, or with no code (what a browser's ``close()``
        sends): it is done. Any other end (1001 from a page that reloads, an error code,
        no close frame at all) is a drop."""
        return self.client_code in (CloseCode.NORMAL, 0)

    async def receive(self) -> WSMessage:
        message = await self._ws.receive()
        if message.type == WSMsgType.CLOSE:
            self.client_code = int(message.data)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)


def client_socket(
    entrypoint: Entrypoint,
    opts: WebSocketOptions,
    runner: Runner,
    *,
    remote: str | None,
    query: dict[str, str],
    resume: ResumeRegistry | None = None,
    goodbye: Callable[[], bool] | None = None,
) -> tuple[WebSocketPeer, SocketBinding]:
    """One protocol v1 client, as either host plugs it into the socket loop: its peer,
    and what the loop does with its frames, its start and its leaving. ``goodbye``: did
    the client close the socket itself, with 1000 (asked when the socket is done; None:
    every end is a goodbye, and no session is ever detached)."""
    peer = WebSocketPeer(opts, remote=remote, query=query, resume=resume)

    def no_start() -> None:
        if peer.connection is None:
            peer.fail(CloseCode.START_TIMEOUT, ErrorCode.START_TIMEOUT, "no start message")

    def left() -> None:
        peer.client_left(goodbye=goodbye is None or goodbye())

    binding = SocketBinding(
        outbox=peer.outbox,
        receive_text=peer.receive_text,
        receive_bytes=peer.receive_bytes,
        run_agent=lambda conn: run_client_agent(runner, entrypoint, conn, peer),
        no_start=no_start,
        left=left,
        start_timeout=opts.start_timeout,
        close_timeout=opts.close_timeout,
        name="ws",
    )
    return peer, binding


async def run_client_agent(
    runner: Runner, entrypoint: Entrypoint, conn: Connection, peer: WebSocketPeer
) -> None:
    """Run the entry point for ``conn`` (unless an earlier connection did: a resumed
    session's), until it returns or this socket stops carrying the session; then close
    the socket as the session ended (1000, or 1011 when the entry point failed)."""
    link = peer.link
    assert link is not None
    entry = conn.entry
    if entry is None:
        conn.entry = entry = asyncio.ensure_future(_entry(runner, entrypoint, conn))
        entry.add_done_callback(_seen)
    try:
        returned = await link.until_over(entry)
    except asyncio.CancelledError:
        if link.current:  # the socket's close timeout: this session's entry point is stuck
            entry.cancel()
        raise
    if not returned:  # the session goes on without this socket
        if link.why_over == "replaced":
            peer.close(CloseCode.RESUMED, "the session was resumed by another connection")
        return
    exc = None if entry.cancelled() else entry.exception()
    if exc is not None:
        peer.fail(CloseCode.INTERNAL_ERROR, ErrorCode.INTERNAL, f"the agent failed: {exc!r}"[:300])
        return
    peer.close(CloseCode.NORMAL, "session ended")


async def _entry(runner: Runner, entrypoint: Entrypoint, conn: Connection) -> None:
    """The entry point's call, in a task of its own (it may outlive the first socket)."""
    try:
        await runner(entrypoint, conn)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("the entry point failed for %s", conn.id)
        raise


def _seen(entry: asyncio.Future[None]) -> None:
    """The entry point's failure was logged; the socket that waits for it says so."""
    if not entry.cancelled():
        entry.exception()
