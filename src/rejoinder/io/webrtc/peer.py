"""One WebRTC peer: its ``RTCPeerConnection``, every bounded wait, and its teardown.

``WebRTCPeer.answer(offer)`` checks the offer (an audio section and a data channel),
attaches the agent's track and returns the answer with its ICE candidates (gathering is
bounded by ``gather_timeout``). ``WebRTCPeer.run(entrypoint)`` then waits, each step
bounded, for the connection and for the client's data channel, builds the ``Connection``
the entry point receives, runs it, and closes everything when either side is done.

The peer counts as gone, and the entry point's ``Connection`` is told so, when the
connection state becomes ``failed`` or ``closed``, when the data channel closes, or when
the microphone track ends or stays silent past ``media_idle_timeout``. The client closing
its side (its peer connection, data channel or track) is its goodbye: the session ends.
A connection that fails or a microphone that goes silent is a drop: with resuming on (a
``ResumeRegistry``) the session is detached, this peer's media close, and the session
waits for its client. ``WebRTCPeer.resume`` is the peer of an offer that named the
session's token (``?resume=``): once connected it takes the session over
(``Connection.attach``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ...models.audio import AudioFrame

if TYPE_CHECKING:
    from ...session import AgentSession
    from ..resume import ResumeRegistry
from ..connection import Connection, Entrypoint
from ..link import ClientLink
from ..microphone import PushAudioInput
from ..playback import ReportedPlayback
from ..protocol import (
    Clear,
    ClientMessage,
    ErrorCode,
    ErrorMessage,
    Played,
    Ready,
    ServerMessage,
)
from . import _deps
from ._ice import offering, rtc_ice_servers
from .datachannel import ClientChannel
from .ice_config import ready_with_ice
from .media import (
    FRAME_SAMPLES,
    TRACK_RATE,
    AgentTrack,
    MicrophoneDecoder,
    decode_into,
    forward_microphone,
    shorten_receive_buffer,
    watch_microphone,
)
from .options import WebRTCOptions
from .video import CameraSampler

_deps.require()

from aiortc import (  # noqa: E402  # after the check that names the extra
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamTrack  # noqa: E402

logger = logging.getLogger("rejoinder.io.webrtc")

T = TypeVar("T")

LOSS_POLL = 1.0
"""Seconds between reads of the client's packet-loss count (its RTCP reports)."""
CLOSE_GRACE = 5.0
"""Seconds each closing step may take (aiortc's close, a cancelled task) before we go on."""


Runner = Callable[[Entrypoint, Connection], Awaitable[None]]
"""How the entry point is called (a host may count live sessions; as for WebSocket)."""


async def _call(entrypoint: Entrypoint, conn: Connection) -> None:
    await entrypoint(conn)


class OfferError(ValueError):
    """An offer this transport cannot answer (HTTP 400)."""


class PeerGone(Exception):
    """The peer left, or a bounded step ran out, before the session could start."""


class WebRTCPeer:
    """One client's peer connection, from its offer to its teardown."""

    def __init__(
        self,
        options: WebRTCOptions,
        *,
        remote: str | None = None,
        query: Mapping[str, str] | None = None,
        resume: ResumeRegistry | None = None,
        resuming: Connection | None = None,
    ) -> None:
        self.options = options
        self.remote = remote
        self.query = dict(query or {})
        self.pc = RTCPeerConnection(
            RTCConfiguration(iceServers=rtc_ice_servers(options.ice_servers))
        )
        self.track = AgentTrack(max_queued=options.max_queued_audio)
        # A resumed session keeps its microphone: this peer's audio is resampled to it.
        self.microphone = (
            resuming.audio_input
            if resuming is not None
            else PushAudioInput(
                options.input_sample_rate, batch_interval=options.mic_batch_interval
            )
        )
        self.connection: Connection | None = resuming
        self.link: ClientLink | None = None
        """This peer's link to its session (once its data channel is open)."""
        self._resume = resume
        self._agent_rate: int | None = None
        """The session's output rate, when it is not the track's (a resumed session)."""
        self._data: ClientChannel | None = None
        self.gone = asyncio.Event()
        """Set once the peer is gone (or closed by us)."""
        self.why_gone = ""
        self.dropped = False
        """It went without closing its side (a failed connection, a silent microphone):
        a drop, which a session that can be resumed survives."""
        self._connected = asyncio.Event()
        self._channel: asyncio.Future[RTCDataChannel] = asyncio.get_running_loop().create_future()
        self._remote_track: MediaStreamTrack | None = None
        self.camera: CameraSampler | None = None
        """The client's camera, if it shares one (``WebRTCOptions.accept_video``)."""
        self._decoder: MicrophoneDecoder | None = None
        """Decodes the microphone into ``microphone`` (None: ``forward_microphone`` does)."""
        self._audio_sender: RTCRtpSender | None = None
        self._lost_packets = 0
        """Agent-track packets the client reported lost (RTCP receiver reports)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.pc.on("connectionstatechange", self._state_changed)
        self.pc.on("track", self._track_received)
        self.pc.on("datachannel", self._channel_opened)

    # ---------------------------------------------------------- signalling

    async def answer(self, sdp: str) -> str:
        """The SDP answer to the client's offer (raises ``OfferError``, ``TimeoutError``).

        aiortc accepts some malformed offers it then fails to answer (a BUNDLE group that
        names no section, a section without a direction): whatever it raises while
        answering is the offer's fault, an ``OfferError``."""
        try:
            return await self._answer(sdp)
        except (OfferError, TimeoutError):
            raise
        except Exception as exc:
            logger.info("an offer from %s cannot be answered: %r", self.remote, exc)
            raise OfferError(f"the offer cannot be used: {type(exc).__name__}: {exc}") from None

    async def _answer(self, sdp: str) -> str:
        if "a=candidate:" not in sdp:
            raise OfferError(
                "the offer carries no ICE candidate: gather them before sending it (there is "
                "no trickle ICE here); a client on a loopback-only host offers none"
            )
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio"]
        if not audio:
            raise OfferError("the offer has no audio section (add an audio transceiver)")
        if self.pc.sctp is None:
            raise OfferError("the offer has no data channel (create one before the offer)")
        self._audio_sender = sender = self.pc.addTrack(self.track)
        video = [t for t in self.pc.getTransceivers() if t.kind == "video"]
        camera = video[0] if video and self.options.accept_video else None
        for transceiver in self.pc.getTransceivers():
            if transceiver is camera:
                # Received, never sent (a client that offers no video to send gets it
                # inactive all the same: aiortc answers the intersection).
                transceiver.direction = "recvonly"
            elif transceiver.sender is not sender:
                # Another video, or a second audio section: answered inactive, so
                # nothing of it is received, decoded or sent.
                transceiver.direction = "inactive"
        answer = await self.pc.createAnswer()
        with offering(self.options.host_addresses):
            try:
                async with asyncio.timeout(self.options.gather_timeout):
                    await self.pc.setLocalDescription(answer)
            except TimeoutError:
                raise TimeoutError(
                    f"gathering ICE candidates took longer than {self.options.gather_timeout} s"
                ) from None
        local = self.pc.localDescription
        if "a=candidate:" not in local.sdp:
            raise OfferError(
                "no local ICE candidate: this host offers no usable address (set "
                "WebRTCOptions.host_addresses, e.g. ['127.0.0.1'] on a loopback-only host)"
            )
        return local.sdp

    # ------------------------------------------------------------- session

    async def run(self, entrypoint: Entrypoint, runner: Runner | None = None) -> None:
        """Run the entry point for this peer (through ``runner``, which may count live
        sessions) and tear the peer down when either side is done.

        The ``Connection`` exists (and ``runner`` is entered) at once, before the peer has
        connected, so a place admitted for the offer is held while it connects. A session
        whose peer dropped (resuming on) goes on after this peer closed: this task, which
        holds the entry point's call, ends with the session."""
        playback = ReportedPlayback(TRACK_RATE, self._send_audio, self._send_clear)
        self.connection = conn = Connection(
            transport="webrtc",
            audio_input=self.microphone,
            audio_output=playback,
            send=self._send_message,
            remote=self.remote,
            query=self.query,
            # no start message here: the offer's URL asks for timeline messages
            wants_timeline=self._wants_timeline(),
            resume=self._resume,
        )
        self.link = conn.link
        conn.session_observers.append(self._session_started)
        try:
            await (runner or _call)(self._serve(entrypoint), conn)
        finally:
            conn.client_left()  # its entry point returned (or was cancelled): it is over
            await self.close()

    async def resume(self, conn: Connection, token: str, registry: ResumeRegistry) -> None:
        """Take ``conn``'s session over once this peer is connected (its offer named
        ``token``), carry it until the peer goes or the session ends, then close the peer
        (not the session). If the peer never connects, the token works again."""
        try:
            try:
                channel = await self._until_ready()
            except PeerGone as exc:
                logger.info("WebRTC peer %s (resuming): %s", self.remote, exc)
                registry.unclaim(token)
                return
            self._data = ClientChannel(
                channel, self._received, max_buffered=self.options.max_buffered_bytes
            )
            self.link = link = ClientLink(
                "webrtc",
                self._send_message,
                send_audio=self._send_audio,
                send_clear=self._send_clear,
                wants_timeline=self._wants_timeline(),
            )
            self._agent_rate = conn.audio_output.sample_rate  # the track resamples to 48 kHz
            if not conn.attach(link):
                registry.unclaim(token)
                self._data.send(
                    ErrorMessage(
                        code=ErrorCode.RESUME_FAILED,
                        message="the session ended before this connection took it over: start anew",
                    )
                )
                return
            if self.camera is not None and conn.session is not None:
                self.camera.attach(conn.session)
            if self._decoder is not None:
                self._decoder.start_pushing()
            self._watch_media(self._data)
            await self._carry(conn, link, conn.entry)
        finally:
            await self.close(end_session=False)

    def _wants_timeline(self) -> bool:
        return self.query.get("timeline", "").lower() in ("1", "true", "yes")

    def _session_started(self, session: AgentSession[Any]) -> None:
        if self.camera is not None:
            self.camera.attach(session)

    def _serve(self, entrypoint: Entrypoint) -> Entrypoint:
        async def serve(conn: Connection) -> None:
            try:
                channel = await self._until_ready()
            except PeerGone as exc:
                logger.info("WebRTC peer %s: %s", self.remote, exc)
                return
            self._data = ClientChannel(
                channel, self._received, max_buffered=self.options.max_buffered_bytes
            )
            self._watch_media(self._data)
            await self._run_entrypoint(entrypoint, conn)

        return serve

    def _watch_media(self, data: ClientChannel) -> None:
        """The peer is gone when its data channel closes or its microphone stops."""
        self._watch(self._wait_set(data.closed), "the data channel closed")
        if self._audio_sender is not None:
            self._spawn(self._count_losses(self._audio_sender))
        track, idle = self._remote_track, self.options.media_idle_timeout
        if track is not None and self._decoder is not None:
            self._watch_microphone(watch_microphone(track, self._decoder, idle_timeout=idle))
        elif track is not None:
            self._watch_microphone(forward_microphone(track, self.microphone, idle_timeout=idle))

    def _watch_microphone(self, work: Awaitable[str]) -> None:
        async def watched() -> None:
            if await work == "idle":
                self._leave(
                    f"no audio from the microphone for {self.options.media_idle_timeout} s",
                    dropped=True,
                )
            else:
                self._leave("the microphone track ended")

        self._spawn(watched())

    async def _run_entrypoint(self, entrypoint: Entrypoint, conn: Connection) -> None:
        entry = asyncio.ensure_future(entrypoint(conn))
        conn.entry = entry
        try:
            link = self.link
            assert link is not None
            await self._carry(conn, link, entry)
            if not entry.done():
                # This peer is closed; the session goes on (waiting for its client, or
                # carried by another connection) until its client is gone for good.
                await self.close(end_session=False)
                await _first(entry, conn.wait_left())
            if not entry.done():
                await asyncio.wait((entry,), timeout=self.options.leave_timeout)
                if not entry.done():
                    logger.warning(
                        "the entry point did not return %.0f s after its peer left; cancelling it",
                        self.options.leave_timeout,
                    )
        finally:
            if not entry.done():
                entry.cancel()
                await asyncio.wait((entry,), timeout=CLOSE_GRACE)
        if entry.done() and not entry.cancelled():
            entry.result()  # the entry point's failure is the runner's to see

    async def _carry(
        self, conn: Connection, link: ClientLink, entry: asyncio.Future[None] | None
    ) -> None:
        """Carry the session until its entry point returns, this peer goes (the session
        is detached, or ends when it cannot be resumed) or another connection takes it
        over."""
        ended = entry if entry is not None else asyncio.ensure_future(conn.wait_left())
        gone = asyncio.ensure_future(self.gone.wait())
        over = asyncio.ensure_future(link.over.wait())
        try:
            await asyncio.wait((ended, gone, over), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            over.cancel()
            if entry is None:
                ended.cancel()
        if self.gone.is_set() and link.current and not ended.done():
            logger.info("WebRTC peer %s left: %s", self.remote, self.why_gone)
            if self.dropped:
                link.lost(self.why_gone)
            else:
                link.goodbye()

    async def close(self, *, end_session: bool = True) -> None:
        """Close the peer connection and stop every task of this peer (idempotent).
        ``end_session``: the session this peer carries ends too (not one that another
        connection took over, nor, when False, one that waits to be resumed)."""
        if self._closed:
            return
        self._closed = True
        self._leave("closed by the server")
        self.track.stop()
        if self._decoder is not None:
            self._decoder.stop_pushing()  # the session's microphone is not this peer's
        if self.camera is not None:
            self.camera.detach()
        conn = self.connection
        if conn is None:
            self.microphone.close()
        elif end_session and (self.link is None or self.link.current):
            conn.client_left()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        try:
            await asyncio.wait_for(self.pc.close(), CLOSE_GRACE)
        except Exception as exc:  # an offer aiortc half-accepted can leave it inconsistent
            logger.warning(
                "closing the peer connection of %s failed (%r); stopping its transports",
                self.remote,
                exc,
            )
            await self._stop_transports()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_GRACE)

    async def _stop_transports(self) -> None:
        """What ``RTCPeerConnection.close`` does, one transport at a time, past failures."""
        stops: list[Callable[[], Awaitable[None]]] = []
        dtls: list[Any] = [self.pc.sctp.transport if self.pc.sctp is not None else None]
        for transceiver in self.pc.getTransceivers():
            stops.append(transceiver.stop)
            dtls.append(transceiver.receiver.transport)
        for transport in dtls:
            if transport is not None:
                stops.append(transport.stop)
                if transport.transport is not None:
                    stops.append(transport.transport.stop)
        for stop in stops:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stop(), CLOSE_GRACE)

    async def _until_ready(self) -> RTCDataChannel:
        options = self.options
        await self._bounded(
            self._connected.wait(),
            options.connect_timeout,
            f"not connected within {options.connect_timeout} s of the answer",
        )
        return await self._bounded(
            asyncio.shield(self._channel),
            options.data_channel_timeout,
            f"no data channel opened within {options.data_channel_timeout} s",
        )

    async def _bounded(self, work: Awaitable[T], seconds: float, what: str) -> T:
        """``work``, unless the peer leaves first or ``seconds`` pass (``PeerGone``)."""
        task = asyncio.ensure_future(work)
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait((task, gone), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if task.done():
            return task.result()
        task.cancel()
        raise PeerGone(self.why_gone if self.gone.is_set() else what)

    # ---------------------------------------------------------------- media

    async def _send_audio(self, frame: AudioFrame) -> None:
        self.track.push(frame)
        await self.track.wait_room()

    def _send_clear(self) -> None:
        """A barge-in: drop the queued audio now. The client cannot drop what is in
        flight, so the server says where the next audio will start, as the client's
        ``cleared`` report would: at the agent samples that went out."""
        sent = self._agent_samples(self.track.clear())
        conn = self.connection
        if conn is None:
            return
        self._send_message(Clear())
        playback = conn.audio_output
        asyncio.get_running_loop().call_soon(lambda: playback.on_played(sent, cleared=True))

    def _agent_samples(self, track_samples: int) -> int:
        """Samples at the track's rate as samples at the session's output rate (they
        differ for a session that began on another transport and resumed here)."""
        rate = self._agent_rate
        if rate is None or rate == TRACK_RATE:
            return track_samples
        return round(track_samples * rate / TRACK_RATE)

    def _send_message(self, message: ServerMessage) -> None:
        if self._data is not None:
            if isinstance(message, Ready):  # the ICE servers for the client's next offer
                session = self.connection.session if self.connection is not None else None
                user = session.id if session is not None else None
                message = ready_with_ice(message, self.options.ice, user)
            self._data.send(message)

    def _received(self, message: ClientMessage) -> None:
        conn = self.connection
        if conn is None:
            return
        if self.link is not None and not self.link.current:
            return  # another connection carries the session now
        if isinstance(message, Played):
            # The client counts the track samples it played from packets it received
            # (silence included): add those lost on the way, which it never played but the
            # track's clock passed, and turn the position into the agent samples that
            # went out before it. Its ``cleared`` flag is not used: the server re-bases
            # at the clear itself (see _send_clear).
            position = message.samples + self._lost_packets * FRAME_SAMPLES
            message = Played(samples=self._agent_samples(self.track.agent_played(position)))
        conn.receive(message)

    async def _count_losses(self, sender: RTCRtpSender) -> None:
        """Keep ``_lost_packets`` as the client's receiver reports give it (RTCP, about
        once a second): each lost packet is 20 ms of the track it did not play."""
        while True:
            await asyncio.sleep(LOSS_POLL)
            for stats in (await sender.getStats()).values():
                if stats.type == "remote-inbound-rtp":
                    self._lost_packets = max(0, int(stats.packetsLost))

    # --------------------------------------------------------------- events

    def _state_changed(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            self._connected.set()
        elif state in ("failed", "closed"):
            self._leave(f"the connection {state}", dropped=state == "failed")

    def _track_received(self, track: MediaStreamTrack) -> None:
        if track.kind == "video" and self.camera is None and self.options.accept_video:
            self.camera = CameraSampler(track, max_side=self.options.video_max_side)
            self._spawn(self.camera.run())
            session = self.connection.session if self.connection is not None else None
            if session is not None:
                self.camera.attach(session)
        if track.kind == "audio" and self._remote_track is None:
            self._remote_track = track
            for receiver in self.pc.getReceivers():
                if receiver.track is not track:
                    continue
                if not shorten_receive_buffer(receiver):
                    logger.warning("aiortc's receive buffer was not found; the mic is 60 ms late")
                self._decoder = decode_into(receiver, self.microphone)
                if self._decoder is not None and self.link is None and self.connection is not None:
                    # Resuming: the session's microphone hears this peer once it took over.
                    self._decoder.stop_pushing()
                if self._decoder is None:
                    logger.info("aiortc's decoder queue was not found; it decodes in its thread")

    def _channel_opened(self, channel: RTCDataChannel) -> None:
        if not self._channel.done():
            self._channel.set_result(channel)

    def _leave(self, why: str, *, dropped: bool = False) -> None:
        if not self.gone.is_set():
            self.why_gone = why
            self.dropped = dropped
            self.gone.set()

    def _watch(self, work: Awaitable[None], why: str) -> None:
        """Run ``work`` as this peer's task; when it ends, the peer is gone."""

        async def watched() -> None:
            await work
            self._leave(why)

        self._spawn(watched())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as this peer's task (cancelled when the peer closes)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _wait_set(event: asyncio.Event) -> None:
        await event.wait()


async def _first(future: asyncio.Future[None], work: Awaitable[None]) -> None:
    """Wait for ``future`` or ``work``, whichever ends first (``work`` is cancelled)."""
    other = asyncio.ensure_future(work)
    try:
        await asyncio.wait((future, other), return_when=asyncio.FIRST_COMPLETED)
    finally:
        other.cancel()
