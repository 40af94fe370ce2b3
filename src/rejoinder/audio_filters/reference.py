"""``EchoReference``: the agent's audio laid out on the microphone's clock, for an echo
canceller.

An echo canceller subtracts from the microphone what the speaker played, as the room
delayed and coloured it; it needs that far end in step with the microphone, a little
early rather than late. The server does not hear the speaker, but its output knows what
it handed over, and reports *playback started* when a segment's first sample is audible
(a WebSocket client's ``played`` count, a phone's echoed mark, the RTP clock); the session
calls ``pause``, ``resume`` and ``clear_buffer`` on it.

So the reference is counted in microphone samples. Audio the output took is queued per
segment (one reply's audio), and a playhead walks through it: each microphone frame takes
as many samples as it has (at the microphone's rate), from the moment the segment's first
frame was handed to the output, straight on into the next segment, standing still while
the output is paused; a cut (``clear_buffer``) drops everything, a segment reported
finished is dropped where the playhead stood. The microphone is paced by the caller's
clock and the speaker by the same device's, so counting samples keeps the two together
without timestamps.

Most outputs play what they are handed at once (a phone line, RTP, a WebRTC track, a
client that plays as it receives), so the playhead starts right. One that buffers ahead
(a client with a deep jitter buffer, a server sending a whole reply at once) plays later
than it took the audio, and the playhead would run ahead of the echo by more than the
canceller can bridge (AEC3: a few hundred milliseconds). When the segment is reported
audible, so if the playhead is more than ``MAX_AHEAD`` into it, it goes back to ``lead``:
a report comes up to one report interval after the first sample played (a WebSocket
client reports every 100 ms), and a reference early by that much is one the canceller
handles, where a late one it cannot use at all.

Counting fails when a frame of the microphone is lost (the transport dropped audio it
could not keep up with); the canceller then finds the new delay by itself within a second
or so.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models.audio import PCM16, AudioFrame

__all__ = ["MAX_AHEAD", "MAX_QUEUED_SECONDS", "REFERENCE_LEAD", "EchoReference"]

REFERENCE_LEAD = 0.1
"""Where the playhead goes back to, in seconds into a segment, when the segment is
reported audible and the playhead had run too far ahead (see above)."""

MAX_AHEAD = 0.3
"""How far into a segment the playhead may be when the segment is reported audible
before it goes back to ``lead`` (AEC3 finds an early reference up to about that)."""

MAX_QUEUED_SECONDS = 60.0
"""Agent audio kept for the reference before it plays (an output that sends far ahead);
beyond it, later audio has no reference."""


class _Segment:
    """One segment's audio: frames at the output's rate not yet converted, and the
    samples at the microphone's rate converted so far (kept whole: the playhead may go
    back)."""

    __slots__ = ("audio", "flushed", "frames", "held", "queued", "reported", "resampler")

    def __init__(self) -> None:
        self.frames: deque[AudioFrame] = deque()
        self.queued = 0.0  # seconds in ``frames``
        self.held = 0.0  # seconds captured, converted or not
        self.audio: PCM16 | None = None
        self.flushed = False  # the output was told no more frames come
        self.reported = False  # the output reported it audible
        self.resampler: tuple[int, Any] | None = None  # (input rate, soxr stream)


class EchoReference:
    """See the module's docstring. The output side (``captured``, ``flushed``,
    ``started``, ``paused``, ``resumed``, ``cleared``, ``finished``) and the microphone
    side (``take``) are called on the event loop."""

    def __init__(
        self,
        *,
        lead: float = REFERENCE_LEAD,
        max_ahead: float = MAX_AHEAD,
        max_seconds: float = MAX_QUEUED_SECONDS,
    ) -> None:
        if lead < 0 or max_ahead < lead:
            raise ValueError("need 0 <= lead <= max_ahead")
        if max_seconds <= 0:
            raise ValueError("max_seconds must be positive")
        self.lead = lead
        self.max_ahead = max_ahead
        self.max_seconds = max_seconds
        self._segments: deque[_Segment] = deque()
        self._head = 0  # the playhead: the segment it is in (an index) ...
        self._position = 0  # ... and the sample within it, at ``_rate``
        self._rate: int | None = None
        self._paused = False
        self.dropped_seconds = 0.0
        """Agent audio left without a reference (over ``max_seconds``)."""
        self.realigned = 0
        """Times a report took the playhead back (the output had buffered ahead)."""

    # ------------------------------------------------------------- the output

    @property
    def playing(self) -> bool:
        """There is agent audio under the playhead, and the output is not paused."""
        return bool(self._segments) and not self._paused

    def captured(self, frame: AudioFrame) -> bool:
        """The output took ``frame`` for its current segment (a new one after a flush).
        False when it was not kept (empty, or over ``max_seconds``)."""
        if not frame.samples_per_channel:
            return False
        segments = self._segments
        if not segments or segments[-1].flushed:
            segments.append(_Segment())
        if sum(s.held for s in segments) + frame.duration > self.max_seconds:
            self.dropped_seconds += frame.duration
            return False
        segment = segments[-1]
        segment.frames.append(_mono(frame))
        segment.queued += frame.duration
        segment.held += frame.duration
        return True

    def uncaptured(self) -> None:
        """The frame ``captured`` just kept was refused by the output after all (it
        raised): it never plays."""
        if self._segments and self._segments[-1].frames:
            segment = self._segments[-1]
            duration = segment.frames.pop().duration
            segment.queued -= duration
            segment.held -= duration

    def flushed(self) -> None:
        """The current segment is complete; the next frame starts another."""
        if self._segments:
            self._segments[-1].flushed = True

    def started(self) -> None:
        """The first segment not yet reported is audible from now: if the playhead is
        far into it (or not there yet), it goes to ``lead``."""
        index = next((i for i, s in enumerate(self._segments) if not s.reported), None)
        if index is None:
            return  # a report for audio we never kept
        self._segments[index].reported = True
        self._paused = False
        rate = self._rate
        if rate is None:
            return  # the microphone has not been read yet: the playhead starts at 0
        if index > self._head or (
            index == self._head and self._position > round(self.max_ahead * rate)
        ):
            self._head, self._position = index, round(self.lead * rate)
            self.realigned += 1

    def finished(self) -> None:
        """The first segment reported audible ended (played out, or cut where it
        stood): it is dropped, and the playhead goes on from the next one."""
        index = next((i for i, s in enumerate(self._segments) if s.reported), None)
        if index is None:
            return
        del self._segments[index]
        if self._head > index:
            self._head -= 1
        elif self._head == index:
            self._position = 0
        self._paused = False

    def paused(self) -> None:
        self._paused = True

    def resumed(self) -> None:
        self._paused = False

    def cleared(self) -> None:
        """Everything not yet heard is dropped (an interruption)."""
        self._segments.clear()
        self._head = self._position = 0
        self._paused = False

    # --------------------------------------------------------- the microphone

    def take(self, samples: int, rate: int) -> PCM16 | None:
        """The far end for the next ``samples`` microphone samples at ``rate``, or
        ``None`` while nothing is under the playhead (silence)."""
        if not self.playing or samples <= 0:
            return None
        import numpy as np

        if rate != self._rate:
            if self._rate is not None:  # another connection: start the segments over
                for segment in self._segments:
                    segment.audio = None
                self._position = 0
            self._rate = rate
        out = np.zeros(samples, np.int16)
        filled = 0
        while filled < samples and self._head < len(self._segments):
            segment = self._segments[self._head]
            audio = self._convert(segment, rate, self._position + samples - filled)
            n = min(samples - filled, audio.shape[0] - self._position)
            if n > 0:
                out[filled : filled + n] = audio[self._position : self._position + n]
                filled += n
                self._position += n
            if filled < samples:
                if not segment.flushed or segment.frames:
                    break  # more of it is coming: silence until it does
                self._head += 1  # straight on into the next segment
                self._position = 0
        return out if filled else None

    def _convert(self, segment: _Segment, rate: int, wanted: int) -> PCM16:
        """``segment``'s audio at ``rate``, converted until it has ``wanted`` samples
        (or all its frames are)."""
        import numpy as np

        audio = segment.audio if segment.audio is not None else np.zeros(0, np.int16)
        if audio.shape[0] >= wanted or not segment.frames:
            segment.audio = audio
            return audio
        parts = [audio]
        have = audio.shape[0]
        while segment.frames and have < wanted:
            frame = segment.frames.popleft()
            segment.queued -= frame.duration
            data = self._resample(segment, frame, rate)
            parts.append(data)
            have += data.shape[0]
        segment.audio = np.concatenate(parts)
        return segment.audio

    @staticmethod
    def _resample(segment: _Segment, frame: AudioFrame, rate: int) -> PCM16:
        import numpy as np

        if frame.sample_rate == rate:
            return frame.data
        import soxr  # type: ignore[import-untyped]  # ships no type information

        if segment.resampler is None or segment.resampler[0] != frame.sample_rate:
            # Quick (cubic): a reference a few ms late would be worse than a rough one.
            stream = soxr.ResampleStream(frame.sample_rate, rate, 1, dtype="int16", quality="QQ")
            segment.resampler = (frame.sample_rate, stream)
        out: PCM16 = np.ascontiguousarray(segment.resampler[1].resample_chunk(frame.data), np.int16)
        return out


def _mono(frame: AudioFrame) -> AudioFrame:
    if frame.num_channels == 1:
        return frame
    import numpy as np

    from ..models.audio import AudioFrame

    mixed = frame.data.reshape(-1, frame.num_channels).astype(np.int32).mean(axis=1)
    return AudioFrame(mixed.astype(np.int16), frame.sample_rate)
