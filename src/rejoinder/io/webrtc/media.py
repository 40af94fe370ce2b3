"""The two audio tracks of a WebRTC session: the user's microphone in, the agent's voice out.

``forward_microphone`` reads the remote track aiortc decodes (48 kHz Opus, usually
stereo) into the session's microphone (a ``PushAudioInput``): mono frames at the rate
the session wants (16 kHz by default, what VADs and recognisers take), resampled with
soxr. With ``decode_into`` the receiver's packets are decoded on the event loop at the
microphone's hand-overs instead of in aiortc's decoder thread (``watch_microphone`` then
only watches the track for its end).

``AgentTrack`` is the local track aiortc sends. aiortc pulls one frame every 20 ms from
``recv()``; the track paces those pulls in real time (on a 20 ms grid of the loop's clock
that every track shares) and answers with agent audio when some is queued and with
silence otherwise. It hands aiortc encoded Opus packets (it encodes the agent's audio
itself and repeats one prepared packet for silence), so a listening session encodes
nothing and no frame takes a trip through aiortc's thread pool.

The track also keeps the map that turns the client's ``played`` reports into playback
truth. A WebRTC client can only count what comes out of the track, silence included: in a
browser, the inbound stream's samples played from packets it received (at 48 kHz; not the
audio it invented for gaps). The peer adds the packets the client reported lost (RTCP),
which the track's clock passed though nobody played them; the track remembers at which
position each run of agent audio went out, and ``agent_played(position)`` answers how
many agent samples went out before it: the count a WebSocket client would have reported.
Samples dropped by ``clear()`` never went out, so they are never counted.
"""

from __future__ import annotations

import asyncio
import fractions
import logging
import math
import threading
from collections import deque
from typing import Any

import numpy as np

from ...models.audio import PCM16, AudioFrame
from ...models.audio_utils import Resampler
from ..mic_clock import mic_clock
from ..microphone import PushAudioInput
from . import _deps

_deps.require()

import av  # noqa: E402  # after the check that names the extra to install
from aiortc import RTCRtpReceiver  # noqa: E402
from aiortc.codecs import get_decoder  # noqa: E402
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack  # noqa: E402

logger = logging.getLogger("rejoinder.io.webrtc")

TRACK_RATE = 48000
"""The agent track's rate: Opus in WebRTC always runs a 48 kHz clock."""
FRAME_SAMPLES = 960
"""20 ms at 48 kHz: one Opus packet."""
FRAME_SECONDS = FRAME_SAMPLES / TRACK_RATE
TIME_BASE = fractions.Fraction(1, TRACK_RATE)
OPUS_BITRATE = 32000
"""Bits per second for the agent's voice (mono speech; browsers send about as much)."""
TAIL_FRAMES = 3
"""Silent frames still fed through the encoder after audio ends, so its last samples come
out and the decoder fades out from the encoder's own state."""
CODEC_DELAY = 312
"""Samples by which a decoded Opus stream lags what was encoded (libopus's look-ahead at
48 kHz, 6.5 ms): agent sample ``k`` sent at track position ``p`` is heard at ``p + 312``."""
MAX_LAG = 0.1
"""A pull later than this behind schedule (a blocked loop) restarts the pacing clock
instead of sending the missed frames in a burst."""


def _opus_encoder() -> av.audio.codeccontext.AudioCodecContext:
    codec = av.CodecContext.create("libopus", "w")
    assert isinstance(codec, av.audio.codeccontext.AudioCodecContext)
    codec.bit_rate = OPUS_BITRATE
    codec.format = "s16"
    codec.layout = "mono"
    codec.sample_rate = TRACK_RATE
    codec.time_base = TIME_BASE
    codec.options = {"application": "voip"}
    return codec


def _encode(codec: av.audio.codeccontext.AudioCodecContext, pcm: PCM16) -> list[bytes]:
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = TRACK_RATE
    return [bytes(packet) for packet in codec.encode(frame)]


_silence_packet: bytes | None = None


def silence_packet() -> bytes:
    """One Opus packet of 20 ms of digital silence (made once, by encoding it)."""
    global _silence_packet
    if _silence_packet is None:
        codec = _opus_encoder()
        zeros = np.zeros(FRAME_SAMPLES, np.int16)
        packets: list[bytes] = []
        for _ in range(8):  # past the encoder's look-ahead, into its steady silence
            packets += _encode(codec, zeros)
        _silence_packet = packets[-1]
    return _silence_packet


def _mono(frame: av.AudioFrame) -> PCM16:
    """A decoded (packed s16) frame's samples, mixed down to one channel."""
    if frame.format.name != "s16":
        raise ValueError(f"expected s16 audio from the decoder, got {frame.format.name}")
    channels = len(frame.layout.channels)
    data: PCM16 = np.frombuffer(memoryview(frame.planes[0]), np.int16, frame.samples * channels)
    if channels == 1:
        return data.copy()
    if channels == 2:  # what aiortc's Opus decoder gives; halves cannot overflow
        both: PCM16 = (data[0::2] >> 1) + (data[1::2] >> 1)
        return both
    mixed = data.reshape(-1, channels).sum(axis=1, dtype=np.int32) // channels
    out: PCM16 = mixed.astype(np.int16)
    return out


MIC_PREFETCH = 1
"""Packets aiortc's receive buffer holds back before decoding a microphone packet. aiortc
uses 4 for audio (80 ms), as if the result were played on a clock; the session reads the
microphone as it comes, so the buffer only needs to put packets in order: one packet
(20 ms) does, and the user's speech reaches the VAD 60 ms sooner."""


def shorten_receive_buffer(receiver: RTCRtpReceiver) -> bool:
    """Set aiortc's audio reorder buffer to ``MIC_PREFETCH`` (False: this aiortc has no such
    buffer where 1.16 keeps it, and nothing was changed)."""
    buffer = getattr(receiver, "_RTCRtpReceiver__jitter_buffer", None)
    if buffer is None or not isinstance(getattr(buffer, "_prefetch", None), int):
        return False
    buffer._prefetch = MIC_PREFETCH
    return True


class MicrophoneDecoder:
    """Stands in for the queue an aiortc receiver hands complete encoded frames to, which
    its decoder thread reads. The frames wait for the microphone's next hand-over (a tick
    of the loop's ``MicClock``, see ``PushAudioInput``), where they are decoded, mixed
    down, resampled and pushed into ``into``, in the loop iteration in which every
    session's audio is handed over. A hop through a thread per frame cost more than the
    decoding (about 40 µs for 20 ms of Opus): the thread's wake-up, and the loop's own
    wake-up for each frame it handed back; decoding each frame as it arrives, at every
    client's own moment, ran with cold caches.

    aiortc still starts its thread, with this as its queue: ``get`` keeps it waiting
    until the receiver stops (``put(None)``), when it ends the remote track as always."""

    def __init__(self, into: PushAudioInput) -> None:
        self._into = into
        self._pending: list[tuple[Any, Any]] = []
        self._codec: str | None = None
        self._decoder: Any = None
        self._resampler: Resampler | None = None
        self._stopped = threading.Event()
        self.last_frame: float | None = None
        """The loop's time when the last frame arrived."""
        self.pushing = True
        """Decoded audio goes into ``into`` (False: a peer that does not carry its
        session, yet or any more; its frames still keep the track alive)."""

    def stop_pushing(self) -> None:
        self.pushing = False

    def start_pushing(self) -> None:
        self.pushing = True

    def put(self, item: tuple[Any, Any] | None) -> None:
        """From aiortc, on the loop: a codec and an encoded frame, or None to stop."""
        if item is None:
            self._hand_over()  # what came before the end is heard
            self._stopped.set()
            return
        loop = asyncio.get_running_loop()
        self.last_frame = loop.time()
        self._pending.append(item)
        if len(self._pending) == 1:
            if self._into.batch_interval:
                mic_clock(self._into.batch_interval).call_at_tick(self._hand_over)
            else:
                self._hand_over()

    def get(self) -> None:
        """From aiortc's decoder thread: nothing to decode there until the end."""
        self._stopped.wait()

    def _hand_over(self) -> None:
        pending, self._pending = self._pending, []
        if not self.pushing:
            return
        for codec, encoded in pending:
            if codec.name != self._codec:
                self._decoder = get_decoder(codec)
                self._codec = codec.name
            try:
                frames = self._decoder.decode(encoded)
            except av.FFmpegError as exc:  # keep the decoder's state, as aiortc does
                logger.warning("a microphone frame (%s) failed to decode: %s", codec.name, exc)
                continue
            for frame in frames:
                if isinstance(frame, av.AudioFrame):
                    self._push(frame)

    def _push(self, frame: av.AudioFrame) -> None:
        rate = frame.sample_rate
        resampler = self._resampler
        if resampler is None or resampler.in_rate != rate:
            resampler = self._resampler = Resampler(rate, self._into.sample_rate)
        out = resampler.push(AudioFrame(_mono(frame), rate))
        if out is not None:
            self._into.push(out)


def decode_into(receiver: RTCRtpReceiver, into: PushAudioInput) -> MicrophoneDecoder | None:
    """Have ``receiver``'s frames decoded into ``into`` at its hand-overs (see
    ``MicrophoneDecoder``; ``watch_microphone`` then tells when the track is done). Must be
    called before the receiver starts (the peer connection's ``track`` event is). None:
    this aiortc keeps its decoder elsewhere than 1.16 does, or it started, and nothing
    was changed (``forward_microphone`` reads the track)."""
    if (
        not hasattr(receiver, "_RTCRtpReceiver__decoder_queue")
        or getattr(receiver, "_RTCRtpReceiver__decoder_thread", True) is not None
    ):
        return None
    decoder = MicrophoneDecoder(into)
    receiver._RTCRtpReceiver__decoder_queue = decoder
    return decoder


async def watch_microphone(
    track: MediaStreamTrack, decoder: MicrophoneDecoder, *, idle_timeout: float | None = None
) -> str:
    """Return when the remote track ends (``"ended"``), or once it has delivered nothing
    for ``idle_timeout`` (``"idle"``; its frames go through ``decoder``, not the track)."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    def idle_since() -> float:
        return max(start, decoder.last_frame or start)

    while True:
        deadline = None if idle_timeout is None else idle_since() + idle_timeout
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    await track.recv()  # only the end comes this way
        except MediaStreamError:
            return "ended"
        except TimeoutError:
            if idle_timeout is None or loop.time() - idle_since() >= idle_timeout:
                return "idle"


async def forward_microphone(
    track: MediaStreamTrack, into: PushAudioInput, *, idle_timeout: float | None = None
) -> str:
    """Feed the remote audio track into ``into`` (mono, at its rate) until the track ends
    (``"ended"``), or has delivered nothing for ``idle_timeout`` (``"idle"``: a browser
    sends a packet every 20 ms, even of silence, while it is connected)."""
    loop = asyncio.get_running_loop()
    resampler: Resampler | None = None
    last = loop.time()
    while True:
        # One deadline for many frames, not a timer per frame: when it passes, the
        # track was idle for idle_timeout unless a frame came since it was set.
        deadline = None if idle_timeout is None else last + idle_timeout
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    received = await track.recv()
                    last = loop.time()
                    if not isinstance(received, av.AudioFrame):
                        continue
                    rate = received.sample_rate
                    if resampler is None or resampler.in_rate != rate:
                        resampler = Resampler(rate, into.sample_rate)
                    out = resampler.push(AudioFrame(_mono(received), rate))
                    if out is not None:
                        into.push(out)
        except MediaStreamError:
            return "ended"
        except TimeoutError:
            if idle_timeout is None or loop.time() - last >= idle_timeout:
                return "idle"


class _Run:
    """A stretch of agent audio that went out in one track frame."""

    __slots__ = ("agent_before", "count", "position")

    def __init__(self, position: int, agent_before: int, count: int) -> None:
        self.position = position
        self.agent_before = agent_before
        self.count = count


class AgentTrack(MediaStreamTrack):
    """The agent's voice: a queue of agent audio, cut into 20 ms frames pulled in real
    time, and the map from track positions to agent samples that went out.

    ``push`` queues audio; ``wait_room`` is the producer's backpressure (at most
    ``max_queued`` seconds wait in the queue); ``clear`` drops the queue (a barge-in).
    """

    kind = "audio"

    def __init__(self, *, max_queued: float = 1.0) -> None:
        super().__init__()
        self._queue: deque[PCM16] = deque()
        self._head = 0
        """Samples of ``_queue[0]`` already taken."""
        self.queued = 0
        """Agent samples waiting to go out."""
        self._max_queued = round(max_queued * TRACK_RATE)
        self._room = asyncio.Event()
        self._room.set()
        self._resampler: Resampler | None = None
        self.position = 0
        """Track samples that went out (silence included)."""
        self.agent_sent = 0
        """Agent samples that went out (never the dropped ones)."""
        self._runs: deque[_Run] = deque()
        self._frame = np.zeros(FRAME_SAMPLES, np.int16)
        self.ended = False
        self._encoder: av.audio.codeccontext.AudioCodecContext | None = None
        self._encoded: deque[bytes] = deque()
        self._tail = 0
        self._start: float | None = None
        self._pulled = 0
        self._silence = silence_packet()

    # ------------------------------------------------------------- filling

    def push(self, frame: AudioFrame) -> None:
        """Queue agent audio (resampled to 48 kHz mono when it is not)."""
        if self.ended:
            return
        data = frame.data
        if frame.num_channels != 1:
            data = (
                data.reshape(-1, frame.num_channels).sum(axis=1, dtype=np.int32)
                // frame.num_channels
            ).astype(np.int16)
            frame = AudioFrame(data, frame.sample_rate)
        if frame.sample_rate != TRACK_RATE:
            if self._resampler is None or self._resampler.in_rate != frame.sample_rate:
                self._resampler = Resampler(frame.sample_rate, TRACK_RATE)
            resampled = self._resampler.push(frame)
            if resampled is None:
                return
            data = resampled.data
        if data.shape[0] == 0:
            return
        self._queue.append(data)
        self.queued += data.shape[0]
        if self.queued >= self._max_queued:
            self._room.clear()

    async def wait_room(self) -> None:
        """Return once less than ``max_queued`` seconds are queued (or the track ended)."""
        await self._room.wait()

    def clear(self) -> int:
        """Drop what is queued; returns the agent samples that went out (the count the
        client's reports will reach once it has played them)."""
        self._queue.clear()
        self._head = 0
        self.queued = 0
        self._resampler = None
        self._room.set()
        return self.agent_sent

    def stop(self) -> None:
        """No more frames: drop the queue and release a waiting producer."""
        self.ended = True
        self.clear()
        super().stop()

    # -------------------------------------------------------------- frames

    def next_frame(self) -> tuple[PCM16, int]:
        """The next 20 ms frame (a view, valid until the next call) and how many of its
        samples are agent audio (at its start; the rest is silence)."""
        frame = self._frame
        filled = 0
        while filled < FRAME_SAMPLES and self._queue:
            chunk = self._queue[0]
            n = min(FRAME_SAMPLES - filled, chunk.shape[0] - self._head)
            frame[filled : filled + n] = chunk[self._head : self._head + n]
            filled += n
            self._head += n
            if self._head == chunk.shape[0]:
                self._queue.popleft()
                self._head = 0
        if filled < FRAME_SAMPLES:
            frame[filled:] = 0
        if filled:
            self._runs.append(_Run(self.position, self.agent_sent, filled))
            self.agent_sent += filled
            self.queued -= filled
            if self.queued < self._max_queued:
                self._room.set()
        self.position += FRAME_SAMPLES
        return frame, filled

    # ------------------------------------------------------------- reports

    def agent_played(self, played: int) -> int:
        """Agent samples the client has played once it played ``played`` track samples
        (those that went out before that position, less the codec's delay). Runs before
        it are forgotten: reports only grow."""
        position = played - CODEC_DELAY
        runs = self._runs
        while len(runs) > 1 and runs[1].position <= position:
            runs.popleft()
        if not runs or runs[0].position >= position:
            # Nothing of the remaining runs has played yet.
            return runs[0].agent_before if runs else self.agent_sent
        run = runs[0]
        return run.agent_before + min(run.count, position - run.position)

    # --------------------------------------------------------------- aiortc

    async def recv(self) -> av.Packet[Any]:
        """What aiortc's sender pulls: the next Opus packet, on a real-time schedule.

        The schedule is a 20 ms grid of the loop's clock, the same for every track (the
        first pull is answered at once, the next on the grid): the loop wakes once per
        frame for all the tracks it serves, not once for each."""
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._start is None:
            self._start = _on_grid(now)
        else:
            due = self._start + self._pulled * FRAME_SECONDS
            if now < due:
                await _sleep_until(loop, due)
            elif now - due > MAX_LAG:
                self._start = _on_grid(now) - self._pulled * FRAME_SECONDS
        if self.readyState != "live":
            raise MediaStreamError
        self._pulled += 1
        position = self.position
        pcm, agent = self.next_frame()
        if agent or self._tail:
            self._tail = TAIL_FRAMES if agent else self._tail - 1
            if self._encoder is None:
                self._encoder = _opus_encoder()
            self._encoded.extend(_encode(self._encoder, pcm))
        payload = self._encoded.popleft() if self._encoded else self._silence
        if not self._tail:
            self._encoded.clear()
        packet = av.Packet(payload)
        packet.pts = position
        packet.time_base = TIME_BASE
        return packet


def _on_grid(now: float) -> float:
    """The last multiple of a frame's length on the loop's clock, at or before ``now``."""
    return math.floor(now / FRAME_SECONDS) * FRAME_SECONDS


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """``asyncio.sleep`` to a time, not for a delay: tracks due at the same moment get
    timers due at exactly the same moment, which fire in one loop iteration."""
    done = loop.create_future()
    timer = loop.call_at(when, _set_done, done)
    try:
        await done
    finally:
        timer.cancel()


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
