"""``EchoReference``: the agent's audio laid out on the microphone's clock, for an echo
canceller.

An echo canceller subtracts from the microphone what the speaker played, as the room
delayed and coloured it; it needs that far end in step with the microphone. The server
does not hear the speaker, but its output knows what it handed over and when the listener
started hearing each segment: ``AudioOutput`` reports *playback started* when a segment's
first sample is audible (a WebSocket client's ``played`` count, a phone's echoed mark,
the RTP clock), and the session calls ``pause``, ``resume`` and ``clear_buffer`` on it.

So the reference is counted in microphone samples. Audio the output took is queued per
segment; once the segment is reported started, each microphone frame takes as many
samples of it as the frame has (at the microphone's rate), while it is not paused; when
the segment is cut (``clear_buffer``) or reported finished, the rest is dropped. The
microphone is paced by the caller's own clock, the speaker by the same device's, so
counting samples keeps the two together without any timestamps.

Reports come late: a WebSocket client reports ``played`` every 100 ms or so, so the first
sample was audible up to that long before the server knew. The echo canceller can use a
reference that comes early (WebRTC's AEC3 finds delays of a few hundred milliseconds by
itself), never one that comes late, so each segment starts ``lead`` seconds into its
audio: those first samples' echo is already in the microphone frames that went by.
``REFERENCE_LEAD`` (0.1 s) covers the 100 ms report interval.

Counting fails when a frame of the microphone is lost (the transport dropped audio it
could not keep up with); the canceller then finds the new delay by itself within a second
or so.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models.audio import PCM16, AudioFrame

__all__ = ["MAX_QUEUED_SECONDS", "REFERENCE_LEAD", "EchoReference"]

REFERENCE_LEAD = 0.1
"""Seconds of each segment's start skipped when it is reported started (see above)."""

MAX_QUEUED_SECONDS = 60.0
"""Agent audio kept for the reference before it plays (an output that sends far ahead);
beyond it, later audio has no reference."""


class _Segment:
    """One segment's audio (mono frames at the output's rate) and where it is."""

    __slots__ = ("flushed", "frames", "queued", "ready", "resampler", "skip", "started")

    def __init__(self) -> None:
        self.frames: deque[AudioFrame] = deque()
        self.queued = 0.0  # seconds in ``frames``
        self.flushed = False  # the output was told no more frames come
        self.started = False
        self.skip = 0.0  # seconds still to drop from the start (the lead)
        self.ready: PCM16 | None = None  # samples at the microphone's rate, not yet taken
        self.resampler: tuple[int, Any] | None = None  # (input rate, soxr stream)


class EchoReference:
    """See the module's docstring. The output side (``captured``, ``flushed``,
    ``started``, ``paused``, ``resumed``, ``cleared``, ``finished``) and the microphone
    side (``take``) are called on the event loop."""

    def __init__(
        self, *, lead: float = REFERENCE_LEAD, max_seconds: float = MAX_QUEUED_SECONDS
    ) -> None:
        if lead < 0:
            raise ValueError("lead must not be negative")
        if max_seconds <= 0:
            raise ValueError("max_seconds must be positive")
        self.lead = lead
        self.max_seconds = max_seconds
        self._segments: deque[_Segment] = deque()
        self._paused = False
        self.dropped_seconds = 0.0
        """Agent audio left without a reference (over ``max_seconds``)."""

    # ------------------------------------------------------------- the output

    @property
    def playing(self) -> bool:
        """A started segment is being heard (not paused)."""
        return bool(self._segments) and self._segments[0].started and not self._paused

    def captured(self, frame: AudioFrame) -> bool:
        """The output took ``frame`` for its current segment (a new one after a flush).
        False when it was not kept (empty, or over ``max_seconds``)."""
        if not frame.samples_per_channel:
            return False
        segments = self._segments
        if not segments or segments[-1].flushed:
            segments.append(_Segment())
        if sum(s.queued for s in segments) + frame.duration > self.max_seconds:
            self.dropped_seconds += frame.duration
            return False
        segment = segments[-1]
        segment.frames.append(_mono(frame))
        segment.queued += frame.duration
        return True

    def uncaptured(self) -> None:
        """The frame ``captured`` just kept was refused by the output after all (it
        raised): it never plays."""
        if self._segments and self._segments[-1].frames:
            segment = self._segments[-1]
            segment.queued -= segment.frames.pop().duration

    def flushed(self) -> None:
        """The current segment is complete; the next frame starts another."""
        if self._segments:
            self._segments[-1].flushed = True

    def started(self) -> None:
        """The first segment not yet heard is audible from now."""
        for segment in self._segments:
            if not segment.started:
                break
        else:
            segment = _Segment()  # reported before any audio reached us
            self._segments.append(segment)
        segment.started = True
        segment.skip = self.lead
        self._paused = False

    def finished(self) -> None:
        """The segment being heard ended (played out, or cut where it stood)."""
        if self._segments and self._segments[0].started:
            self._segments.popleft()
        self._paused = False

    def paused(self) -> None:
        self._paused = True

    def resumed(self) -> None:
        self._paused = False

    def cleared(self) -> None:
        """Everything not yet heard is dropped (an interruption)."""
        self._segments.clear()
        self._paused = False

    # --------------------------------------------------------- the microphone

    def take(self, samples: int, rate: int) -> PCM16 | None:
        """The far end for the next ``samples`` microphone samples at ``rate``, or
        ``None`` while nothing is being heard (silence)."""
        if not self.playing or samples <= 0:
            return None
        import numpy as np

        segment = self._segments[0]
        out = np.zeros(samples, np.int16)
        filled = 0
        while filled < samples:
            ready = segment.ready
            if ready is None or not ready.size:
                if not self._convert(segment, rate, samples - filled):
                    break  # the segment ran dry: silence until more arrives
                continue
            n = min(samples - filled, ready.shape[0])
            out[filled : filled + n] = ready[:n]
            segment.ready = ready[n:]
            filled += n
        return out

    def _convert(self, segment: _Segment, rate: int, wanted: int) -> bool:
        """Move queued frames into ``segment.ready`` at ``rate`` (dropping the lead);
        False when there is nothing to move."""
        import numpy as np

        from ..models.audio import AudioFrame

        while segment.frames:
            frame = segment.frames.popleft()
            segment.queued -= frame.duration
            if segment.skip > 0:  # the lead: audio whose echo went by already
                cut = min(frame.samples_per_channel, round(segment.skip * frame.sample_rate))
                segment.skip -= cut / frame.sample_rate
                if cut >= frame.samples_per_channel:
                    continue
                frame = AudioFrame(frame.data[cut:], frame.sample_rate)
            data = self._resample(segment, frame, rate)
            if data.size:
                segment.ready = data
                return True
        segment.ready = np.zeros(0, np.int16)
        return False

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
        stream = segment.resampler[1]
        out: PCM16 = np.ascontiguousarray(stream.resample_chunk(frame.data), np.int16)
        return out


def _mono(frame: AudioFrame) -> AudioFrame:
    if frame.num_channels == 1:
        return frame
    import numpy as np

    from ..models.audio import AudioFrame

    mixed = frame.data.reshape(-1, frame.num_channels).astype(np.int32).mean(axis=1)
    return AudioFrame(mixed.astype(np.int16), frame.sample_rate)
