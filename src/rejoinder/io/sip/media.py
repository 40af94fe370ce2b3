"""RtpCall: one SIP call's media — RTP in and out — and the ``Connection`` it feeds.

The signalling (``endpoint``, ``dialog``) negotiates the codec and addresses in SDP and
calls ``RtpCall.open``; this module does the rest of the audio:

* receiving: one UDP socket on an even port of ``SipMediaOptions.rtp_ports``. Packets are
  parsed (``rtp``; junk is dropped and logged once per kind, never raised), audio goes
  through the ``JitterBuffer`` and is decoded (G.711) onto the microphone on a 20 ms
  playout clock, which hands the session silence where a frame is missing and while
  nothing arrives (a trunk's silence suppression must still end the caller's turn).
  Telephone-events (RFC 4733) become ``conn.keypad(key)``: the session's ``dtmf`` events.
  Any other payload type is ignored, logged once per type.
* sending: ``RtpPlayback`` paces the agent's audio at 20 ms per packet, up to
  ``send_ahead`` early, and is the connection's speaker; its playback truth is each
  packet's play slot plus a fixed playout delay (see ``rtp_playback``). ``send_dtmf``
  sends keys as telephone-events on the same SSRC.
* symmetric RTP (RFC 4961) for NAT: until the first packet arrives we send to the SDP
  address; from then on to the address the far end's packets come from (*latching*), and
  packets from any other address are dropped (a stray or spoofed source cannot take the
  call's audio over once it is latched; the first packet of a negotiated payload type
  wins, so a spoofer who guessed the port and beat the far end's first packet would —
  the usual trade of symmetric RTP without SRTP). A re-INVITE (``update_remote``)
  latches afresh.
* hold (``set_hold``): nothing is sent, the agent's audio waits and is not heard (see
  ``rtp_playback``), what arrives (music on hold) is not given to the session, and the
  liveness timer is off.
* keepalive: after ``keepalive`` seconds of our silence, one packet of silence.
* liveness: no RTP for ``rtp_timeout`` seconds while not on hold calls ``on_dead`` once
  (the signalling hangs up). RTCP is neither sent nor read (no port is bound for it):
  a far end's RTCP BYE goes unseen, and its SIP BYE or the timeout ends the call.

References: RFC 3550 https://www.rfc-editor.org/rfc/rfc3550, RFC 4961
https://www.rfc-editor.org/rfc/rfc4961 (symmetric RTP), RFC 4733
https://www.rfc-editor.org/rfc/rfc4733, RFC 3264 §8.4 (hold).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ...models import g711
from ...models.audio import AudioFrame
from ..connection import Connection, PushAudioInput
from ..mic_clock import MIC_BATCH_INTERVAL
from ..protocol import ServerMessage
from ..telephony.dialects import CallInfo
from .jitter import JitterBuffer
from .ports import RtpSocket, bind_rtp_socket, check_port, is_ip, resolve
from .rfc4733 import DtmfReceiver, plan, press
from .rtp import BadPacket, RtpSender, parse_rtp
from .rtp_playback import PLAYOUT_DELAY, SEND_AHEAD, RtpPlayback

__all__ = ["RtpCall", "SipMediaOptions"]

logger = logging.getLogger("rejoinder.io.sip")

RATE = 8000
PACKET = 0.02
_CODECS: dict[str, Literal["mulaw", "alaw"]] = {"PCMU": "mulaw", "PCMA": "alaw"}
_DECODE = {"mulaw": g711.ulaw_decode, "alaw": g711.alaw_decode}
_ENCODE = {"mulaw": g711.ulaw_encode, "alaw": g711.alaw_encode}


@dataclass(frozen=True, slots=True)
class SipMediaOptions:
    """Settings of the RTP media of SIP calls."""

    rtp_ports: tuple[int, int] = (10000, 20000)
    """Inclusive range of the RTP ports (even ones are used); ``(0, 0)``: any port."""
    jitter_depth: float = 0.06
    """Seconds the caller's audio is held to put late packets back in order (fixed:
    see ``jitter``). 0.04-0.06 suits carrier trunks; more on a poor network."""
    jitter_capacity: float = 1.0
    """Seconds of the caller's audio held at most (the rest is dropped, oldest first)."""
    rtp_timeout: float = 60.0
    """Seconds without any RTP from the far end (not on hold) before the call is taken
    for dead. Long because a trunk with silence suppression sends nothing while its
    caller is quiet, and a caller may listen quietly to a long answer; short enough that
    a call whose far end vanished without a BYE is freed within a minute."""
    keepalive: float | None = 5.0
    """Seconds of our own silence after which one packet of silence is sent (then again
    each time): a NAT binding or a far end's RTP timeout would otherwise end a call in
    which the agent listens for long. None: never."""
    playout_delay: float = PLAYOUT_DELAY
    """Seconds from a packet's play slot (its RTP timestamp on the media clock) to the
    caller hearing it (the playback truth's estimate; see ``rtp_playback``)."""
    send_ahead: float = SEND_AHEAD
    """Seconds the agent's packets go out before their play slot, so that a stall of the
    event loop shorter than that (plus the far end's jitter buffer) is not heard. Small:
    a far end's jitter buffer drops what comes too early, and a barge-in cannot take back
    what was sent (see ``rtp_playback``). 0: exactly on time."""
    max_mic_seconds: float = 5.0
    mic_batch_interval: float = MIC_BATCH_INTERVAL

    def __post_init__(self) -> None:
        low, high = self.rtp_ports
        if (low, high) != (0, 0) and not 1024 <= low < high <= 65535:
            raise ValueError("rtp_ports must be (0, 0) or a range within 1024-65535")
        if not PACKET <= self.jitter_depth <= 1.0:
            raise ValueError("jitter_depth must be between 0.02 and 1.0 seconds")
        if self.jitter_capacity < self.jitter_depth:
            raise ValueError("jitter_capacity must be at least jitter_depth")
        if self.rtp_timeout <= 0 or self.max_mic_seconds <= 0:
            raise ValueError("rtp_timeout and max_mic_seconds must be positive")
        if self.keepalive is not None and self.keepalive <= 0:
            raise ValueError("keepalive must be positive (or None)")
        if not 0 <= self.playout_delay <= 2.0:
            raise ValueError("playout_delay must be between 0 and 2 seconds")
        if not 0 <= self.send_ahead <= 0.2:
            raise ValueError("send_ahead must be between 0 and 0.2 seconds")
        if self.mic_batch_interval < 0:
            raise ValueError("mic_batch_interval must not be negative")


class RtpCall:
    """The media of one SIP call (see the module docstring)."""

    @classmethod
    async def open(
        cls,
        *,
        bind_host: str,
        remote_host: str,
        remote_port: int,
        codec: str,
        payload_type: int,
        dtmf_payload_type: int | None,
        call_id: str,
        from_number: str | None,
        to_number: str | None,
        parameters: Mapping[str, str],
        remote: str | None,
        options: SipMediaOptions | None = None,
    ) -> RtpCall:
        """Bind the RTP socket and build the call's ``Connection``. Raises
        ``ValueError`` for a codec other than PCMU/PCMA or a bad payload type or port,
        ``ports.NoFreePort`` when the port range is full."""
        opts = options or SipMediaOptions()
        law, pt = _law(codec), _payload_type(payload_type)
        remote_host = await resolve(remote_host, check_port(remote_port))
        socket = await bind_rtp_socket(bind_host, opts.rtp_ports)
        sender = RtpSender(pt, clock_rate=RATE, origin=asyncio.get_running_loop().time())
        info = CallInfo(
            provider="sip",
            call_id=call_id,
            stream_id=f"{sender.ssrc:08x}",
            codec=law,
            sample_rate=RATE,
            from_number=from_number,
            to_number=to_number,
            parameters=dict(parameters),
        )
        call = cls(
            socket, sender, info, (remote_host, remote_port), dtmf_payload_type, remote, opts
        )
        socket.on_datagram = call._datagram
        return call

    def __init__(
        self,
        socket: RtpSocket,
        sender: RtpSender,
        info: CallInfo,
        target: tuple[str, int],
        dtmf_payload_type: int | None,
        remote: str | None,
        options: SipMediaOptions,
    ) -> None:
        """Use ``await RtpCall.open(...)``, which binds the socket."""
        loop = asyncio.get_running_loop()
        self.options = opts = options
        self.local_port = socket.port
        """The RTP port bound (for the SDP answer)."""
        self.on_dead: Callable[[str], None] | None = None
        """Called once when the far end stopped sending RTP (``rtp_timeout``)."""
        self._loop = loop
        self._socket = socket
        self._law = info.codec
        self._call_id = info.call_id
        self._payload_type = sender.payload_type
        self._dtmf_payload_type = dtmf_payload_type
        self._target = target
        self._latched: tuple[str, int] | None = None
        self._held = False
        self._closed = False
        self._reported: set[str] = set()
        self._rx_ssrc: int | None = None
        self._last_rx = loop.time()
        self._dead_timer: asyncio.TimerHandle | None = None
        self._frame_samples = int(RATE * PACKET)
        self._dtmf_lock = asyncio.Lock()
        self._resolving: asyncio.Task[None] | None = None
        self.dropped_sources = 0
        """Packets dropped because they came from another address than the latched one."""
        self.junk = 0
        """Datagrams ignored (junk, foreign sources, payload types not negotiated)."""
        self.keys_received = 0
        frames = max(1, round(opts.jitter_depth / PACKET))
        self.jitter = JitterBuffer(frames, max(frames, round(opts.jitter_capacity / PACKET)))
        self._dtmf = DtmfReceiver()
        self.sender = sender
        self.playback = RtpPlayback(
            RATE,
            send_packet=self._send_audio,
            timestamp_at=self.sender.timestamp_at,
            playout_delay=opts.playout_delay,
            send_ahead=opts.send_ahead,
        )
        self.connection = Connection(
            transport="sip",
            audio_input=PushAudioInput(
                RATE, max_seconds=opts.max_mic_seconds, batch_interval=opts.mic_batch_interval
            ),
            audio_output=self.playback,
            send=_no_client_channel,
            remote=remote,
            id=f"sip-{info.call_id}"[:96],
            call=info,
        )
        self._tick_due = loop.time() + PACKET
        self._tick_handle: asyncio.TimerHandle | None = loop.call_at(self._tick_due, self._tick)
        self._arm_liveness()
        self._keepalive_handle: asyncio.TimerHandle | None = None
        if opts.keepalive is not None:
            self._keepalive_handle = loop.call_later(opts.keepalive, self._keepalive)

    # ------------------------------------------------------------- reading

    @property
    def held(self) -> bool:
        return self._held

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sending_to(self) -> tuple[str, int]:
        """Where our RTP goes: the latched source, else the SDP address."""
        if self._latched is not None:
            return self._latched[0], int(self._latched[1])
        return self._target

    # ------------------------------------------------------- signalling side

    def update_remote(
        self, host: str, port: int, payload_type: int, codec: str, dtmf_payload_type: int | None
    ) -> None:
        """A re-INVITE moved or changed the media: new address (latched afresh), codec
        and payload types."""
        law, pt = _law(codec), _payload_type(payload_type)
        check_port(port)  # all checked before anything changes
        self._payload_type = self.sender.payload_type = pt
        self._dtmf_payload_type = dtmf_payload_type
        if law != self._law:
            self._law = law
            self.jitter.reset()
            call = self.connection.call
            if call is not None:
                self.connection.call = dataclasses.replace(call, codec=law)
        self._latched = None
        self._rx_ssrc = None
        self._target = (host, port)
        if not is_ip(host) and not self._closed:
            self._resolving = self._loop.create_task(
                self._resolve_target(host, port), name="rejoinder-rtp-resolve"
            )

    def set_hold(self, held: bool) -> None:
        """The far end put the call on hold (True) or took it off (False)."""
        if held == self._held or self._closed:
            return
        self._held = held
        if held:
            self.playback.hold()
            self.jitter.reset()  # music on hold is not the caller speaking
        else:
            self.playback.unhold()
            self._last_rx = self._loop.time()  # the far end resumes: a full timeout again
            self._arm_liveness()

    async def send_dtmf(self, digits: str) -> None:
        """Press ``digits`` (``0-9 * # A-D``, ``w`` 0.5 s and ``W`` 1 s pauses) as
        RFC 4733 telephone-events. Raises ``ValueError`` for other characters and
        ``RuntimeError`` when the far end offered no telephone-event, or the call is on
        hold or over."""
        steps = plan(digits)
        async with self._dtmf_lock:
            await press(
                steps,
                timestamp_at=self.sender.timestamp_at,
                send=self._send_event,
                check=self._check_keys_can_go,
                clock_rate=RATE,
            )

    def _check_keys_can_go(self) -> None:
        if self._closed:
            raise RuntimeError("the call is over: keys cannot be sent")
        if self._dtmf_payload_type is None:
            raise RuntimeError("the far end offered no telephone-event: cannot send keys")
        if self._held:
            raise RuntimeError("the call is on hold: keys would not be heard")

    def _send_event(self, payload: bytes, timestamp: int, marker: bool) -> None:
        pt = self._dtmf_payload_type
        assert pt is not None
        data = self.sender.packet(payload, timestamp=timestamp, marker=marker, payload_type=pt)
        self._socket.sendto(data, self.sending_to)

    def client_left(self, reason: str) -> None:
        """The caller hung up (or the call is gone): the session ends with ``reason``
        and the media stops."""
        self._stop()
        self.connection.client_left(reason)

    async def aclose(self) -> None:
        """Stop the media and close the socket (idempotent). A session still running
        ends (``"call ended"``)."""
        self.client_left("call ended")
        try:
            await asyncio.wait_for(asyncio.shield(self._socket.closed), 1.0)
        except TimeoutError:
            logger.warning("the RTP socket did not close within a second")

    # ------------------------------------------------------------ receiving

    def _datagram(self, data: bytes, source: tuple[str, int]) -> None:
        if self._closed:
            return
        if self._latched is not None and source != self._latched:
            self.dropped_sources += 1
            self._note("RTP from an address other than the latched one")
            return
        packet = parse_rtp(data)
        if isinstance(packet, BadPacket):
            self._note(packet.reason)
            return
        pt = packet.payload_type
        if pt != self._payload_type and pt != self._dtmf_payload_type:
            self._note(f"RTP payload type {pt}, not negotiated")
            return
        if self._latched is None:
            self._latched = source
            if source != self._target:
                logger.info("RTP latched to %s:%d (SDP said %s:%d)", *source, *self._target)
        self._last_rx = self._loop.time()
        if packet.ssrc != self._rx_ssrc:
            if self._rx_ssrc is not None:
                logger.info("the far end's RTP changed source (SSRC %08x)", packet.ssrc)
            self._rx_ssrc = packet.ssrc
            self.jitter.reset()
            self._dtmf = DtmfReceiver()
        if pt == self._payload_type:
            if not self._held:
                self.jitter.push(packet.sequence, packet.payload)
            return
        key = self._dtmf.receive(packet.timestamp, packet.payload)
        if key is not None:
            self.keys_received += 1
            self.connection.keypad(key)

    def _tick(self) -> None:
        """The playout clock: one frame to the microphone every 20 ms."""
        if self._closed:
            return
        payload = self.jitter.pop()
        if payload:
            pcm = _DECODE[self._law](payload)
            self._frame_samples = len(pcm)
        else:
            pcm = np.zeros(self._frame_samples, np.int16)
        if not self.connection.audio_input.push(AudioFrame(pcm, RATE)):
            self._note("caller audio arrives faster than the session hears it")
        now = self._loop.time()
        self._tick_due += len(pcm) / RATE
        if self._tick_due < now - 0.2:
            self._tick_due = now  # the loop stalled: skip ahead rather than burst
        self._tick_handle = self._loop.call_at(self._tick_due, self._tick)

    def _arm_liveness(self) -> None:
        if self._dead_timer is not None:
            self._dead_timer.cancel()
        due = self._last_rx + self.options.rtp_timeout
        self._dead_timer = self._loop.call_at(due, self._check_liveness)

    def _check_liveness(self) -> None:
        self._dead_timer = None
        if self._closed or self._held:
            return
        if self._loop.time() < self._last_rx + self.options.rtp_timeout:
            self._arm_liveness()
            return
        logger.warning("no RTP for %.0f s: the call is taken for dead", self.options.rtp_timeout)
        on_dead, self.on_dead = self.on_dead, None
        if on_dead is not None:
            try:
                on_dead(f"no RTP for {self.options.rtp_timeout:g} s")
            except Exception:
                logger.exception("the on_dead callback failed")

    # -------------------------------------------------------------- sending

    def _keepalive(self) -> None:
        quiet = self.options.keepalive
        if self._closed or quiet is None:
            return
        self.playback.keepalive(quiet)
        # Checked every second at most (rather than re-armed on every packet sent).
        self._keepalive_handle = self._loop.call_later(min(quiet, 1.0), self._keepalive)

    def _send_audio(self, frame: AudioFrame, timestamp: int, marker: bool) -> None:
        if self._closed or self._held:
            return
        payload = _ENCODE[self._law](frame.data)
        data = self.sender.packet(payload, timestamp=timestamp, marker=marker)
        self._socket.sendto(data, self.sending_to)

    # ------------------------------------------------------------- internal

    async def _resolve_target(self, host: str, port: int) -> None:
        address = await resolve(host, port)
        if self._target == (host, port):  # not moved again meanwhile
            self._target = (address, port)

    def _stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        for handle in (self._tick_handle, self._dead_timer, self._keepalive_handle):
            if handle is not None:
                handle.cancel()
        self._socket.close()

    def _note(self, kind: str) -> None:
        self.junk += 1
        if kind not in self._reported and len(self._reported) < 32:
            self._reported.add(kind)  # once per kind: a flood must not flood the log
            logger.warning("SIP call %s: ignoring a datagram (%s)", self._call_id, kind)


def _law(codec: str) -> Literal["mulaw", "alaw"]:
    try:
        return _CODECS[codec.upper()]
    except KeyError:
        raise ValueError(f"unsupported codec {codec!r}: PCMU or PCMA") from None


def _payload_type(pt: int) -> int:
    if not 0 <= pt <= 127:
        raise ValueError(f"payload type {pt} out of range")
    return pt


def _no_client_channel(_: ServerMessage) -> None:
    """A phone line has no event channel: states and transcripts stay on the server."""
