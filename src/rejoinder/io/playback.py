"""ReportedPlayback: an ``AudioOutput`` whose truth comes from the far end.

The server cannot hear the client's speaker. It sends agent audio out as fast as the
transport takes it and counts the samples it sent; the client reports, at least every
100 ms while it plays, how many agent samples it has played in total (``played``). A
segment (one reply's audio) *started* once the reported count passes its first sample,
and *finished* once it reaches its last: ``speaking`` follows the listener, not the
socket.

Barge-in: ``clear_buffer`` tells the client to drop what it has queued (the transport's
``send_clear``) and reports the segment finished at once, interrupted, at the position of
the last report (what the history keeps as heard; the listener may have heard a little
more, never less). Until the client's ``cleared`` report says where it stopped, the
mapping between samples sent and samples played is unknown; reports in between are
stale and ignored, and audio sent meanwhile is placed after that position.

Framework-free: both the WebSocket and the WebRTC transports use it, each with its own
``send_audio`` (a socket frame, a paced media track) and ``send_clear``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..models.audio import AudioFrame, AudioOutput, PlaybackFinished

__all__ = ["ReportedPlayback"]

logger = logging.getLogger("rejoinder")


@dataclass(slots=True)
class _Segment:
    start: int
    """First sample, counted from the current clear epoch's base."""
    end: int
    """One past the last sample captured so far."""
    on_started: Callable[[], None] | None
    on_finished: Callable[[PlaybackFinished], None] | None
    flushed: bool = False
    started: bool = False


class ReportedPlayback(AudioOutput):
    """Plays through ``send_audio`` and reports from the client's ``played`` counts.

    ``send_audio(frame)`` hands one frame (mono, at ``sample_rate``) to the transport;
    awaiting it is the transport's backpressure. ``send_clear()`` must drop whatever
    audio the transport still holds and tell the client to clear; it must not raise.
    """

    def __init__(
        self,
        sample_rate: int,
        send_audio: Callable[[AudioFrame], Awaitable[None]],
        send_clear: Callable[[], None],
    ) -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        super().__init__(sample_rate=sample_rate, can_pause=False)
        self._send_audio = send_audio
        self._send_clear = send_clear
        self._segments: list[_Segment] = []
        self._sent = 0
        """Samples handed to ``send_audio`` since the last clear."""
        self._base: int | None = 0
        """The client's played count at which this epoch's sample 0 plays (None: a clear
        was sent and its ``cleared`` report has not arrived)."""
        self._pending_clears = 0
        self._played = 0
        """The last report, as the client's cumulative count."""
        self._closed = False
        self.total_sent = 0
        """Every sample handed to the transport, ever (for metrics and tests)."""
        self.on_progress: Callable[[float, float | None], None] | None = None
        """Called with each report that moves the segment being heard: seconds of it
        heard, and its whole length once it is complete (``None`` before)."""
        self._last_progress: tuple[int, int, bool] | None = None

    # ---------------------------------------------------------------- reading

    @property
    def played_samples(self) -> int:
        """The client's last reported cumulative count."""
        return self._played

    @property
    def playing(self) -> bool:
        """A segment is audible now (started and not finished)."""
        return any(seg.started for seg in self._segments)

    @property
    def closed(self) -> bool:
        """The client is gone: nothing more can be heard."""
        return self._closed

    @property
    def pending(self) -> bool:
        """Some captured audio is not reported played yet."""
        return bool(self._segments)

    # --------------------------------------------------------- AudioOutput

    async def capture_frame(self, frame: AudioFrame) -> None:
        if frame.sample_rate != self.sample_rate:
            raise ValueError(f"expected {self.sample_rate} Hz audio, got {frame.sample_rate} Hz")
        if frame.num_channels != 1:
            raise ValueError("the client protocol carries mono audio")
        if self._closed:
            return  # the client is gone: nothing can be heard
        if not self._segments or self._segments[-1].flushed:
            # The listener is the one set for this segment (a speech takes the output's
            # reports with its first frame); earlier segments keep theirs.
            self._segments.append(
                _Segment(self._sent, self._sent, self._on_started, self._on_finished)
            )
        segment = self._segments[-1]
        samples = frame.samples_per_channel
        if samples == 0:
            return
        # Counted before the await: a report for it can only come after it was sent, and
        # a clear during the send must place it in the epoch it was sent in.
        self._sent += samples
        self.total_sent += samples
        segment.end = self._sent
        await self._send_audio(frame)

    def flush(self) -> None:
        if self._segments and not self._segments[-1].flushed:
            segment = self._segments[-1]
            segment.flushed = True
            if segment.end == segment.start:  # no audio: never audible, nothing to report
                self._segments.pop()
            self._advance()

    def clear_buffer(self) -> None:
        if not self._segments:
            return  # everything sent was reported played: the client holds nothing
        segments, self._segments = self._segments, []
        position = self._position()
        self._pending_clears += 1
        self._base = None
        self._sent = 0
        try:
            self._send_clear()
        finally:
            for segment in segments:
                if segment.started:
                    heard = 0 if position is None else min(segment.end, position) - segment.start
                    self._finish(segment, max(0, heard), interrupted=True)

    # -------------------------------------------------------- client reports

    def on_played(self, samples: int, *, cleared: bool = False) -> None:
        """A ``played`` report from the client (cumulative samples played)."""
        if cleared:
            if self._pending_clears == 0:
                return  # a cleared report for no clear: nothing to re-base
            self._pending_clears -= 1
            self._played = max(self._played, samples)
            if self._pending_clears == 0:
                self._base = samples
            self._advance()
            return
        if self._base is None:
            return  # stale: sent before the client processed our clear
        if samples <= self._played:
            return  # counts only grow; a repeat or a reordered report says nothing new
        self._played = samples
        self._advance()

    def close(self) -> None:
        """The client is gone: every open segment ends now, interrupted, where the last
        report left it. Later frames are dropped."""
        self._closed = True
        position = self._position()
        segments, self._segments = self._segments, []
        for segment in segments:
            if segment.started:
                heard = 0 if position is None else min(segment.end, position) - segment.start
                self._finish(segment, max(0, heard), interrupted=True)

    # -------------------------------------------------------------- internal

    def _position(self) -> int | None:
        """Samples of this epoch played, per the last report (None: unknown)."""
        if self._base is None:
            return None
        return min(self._sent, max(0, self._played - self._base))

    def _advance(self) -> None:
        position = self._position()
        if position is None:
            return
        while self._segments:
            segment = self._segments[0]
            if not segment.started and position > segment.start:
                segment.started = True
                if segment.on_started is not None:
                    segment.on_started()
            if not (segment.started and segment.flushed and position >= segment.end):
                if segment.started:
                    self._progress(segment, position)
                return
            self._segments.pop(0)
            self._finish(segment, segment.end - segment.start, interrupted=False)

    def _progress(self, segment: _Segment, position: int) -> None:
        if self.on_progress is None:
            return
        key = (id(segment), position, segment.flushed)
        if key == self._last_progress:
            return  # nothing moved
        self._last_progress = key
        assert self.sample_rate is not None
        heard = (min(position, segment.end) - segment.start) / self.sample_rate
        length = (segment.end - segment.start) / self.sample_rate if segment.flushed else None
        try:
            self.on_progress(heard, length)
        except Exception:  # a display hook must not break playback truth
            logger.exception("the playback progress callback failed")

    def _finish(self, segment: _Segment, samples: int, *, interrupted: bool) -> None:
        assert self.sample_rate is not None
        if segment.on_finished is not None:
            segment.on_finished(PlaybackFinished(samples / self.sample_rate, interrupted))
