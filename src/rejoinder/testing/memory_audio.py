"""In-memory audio I/O that plays and records in (virtual) real time.

``MemoryAudioOutput`` keeps no playback task and sleeps per frame nowhere: a segment's
audible span is computed from loop time (start, pauses, captured duration), and one timer
fires at its end. That is exact on virtual time and costs nothing per frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from ..models.audio import AudioFrame, AudioInput, AudioOutput


class MemoryAudioOutput(AudioOutput):
    """Accepts frames instantly and "plays" them on the loop clock."""

    def __init__(
        self, sample_rate: int = 24000, *, can_pause: bool = True, max_lead: float | None = None
    ) -> None:
        if max_lead is not None and max_lead < 0:
            raise ValueError("max_lead must be >= 0")
        super().__init__(sample_rate=sample_rate, can_pause=can_pause)
        self.max_lead = max_lead
        """With a value, ``capture_frame`` waits while more than this many seconds are
        captured but not yet played: an output that takes audio only in real time, as a
        phone line or a WebRTC track does (None: every frame is taken at once)."""
        self.frames: list[AudioFrame] = []
        """Every frame that was (at least partly) audible, in order."""
        self.played_seconds = 0.0
        self.segments: list[float] = []
        """The audible duration of each finished segment."""
        self._queued: list[AudioFrame] = []
        self._duration = 0.0
        self._started_at: float | None = None
        self._paused_at: float | None = None
        self._paused_for = 0.0
        self._flushed = False
        self._end_timer: asyncio.TimerHandle | None = None

    @property
    def playing(self) -> bool:
        """A segment is playing (or paused)."""
        return self._started_at is not None

    @property
    def paused(self) -> bool:
        """The segment playing is paused."""
        return self._paused_at is not None

    async def capture_frame(self, frame: AudioFrame) -> None:
        if self.sample_rate is not None and frame.sample_rate != self.sample_rate:
            raise ValueError(f"expected {self.sample_rate} Hz audio, got {frame.sample_rate} Hz")
        while self.max_lead is not None and self._started_at is not None:
            ahead = self._duration - self.position() - self.max_lead
            if ahead <= 1e-3:  # a clock tick: below it, sleeping would not move time
                break
            # Paused, the position stands still: look again a little later.
            await asyncio.sleep(0.05 if self._paused_at is not None else ahead)
        if self._started_at is None:
            self._started_at = self._now()
            self._paused_for, self._flushed = 0.0, False
            self._report_started()
        self._queued.append(frame)
        self._duration += frame.duration

    def flush(self) -> None:
        if self._started_at is None:
            return
        self._flushed = True
        self._schedule_end()

    def clear_buffer(self) -> None:
        if self._started_at is not None:
            self._finish(interrupted=True)

    def pause(self) -> None:
        if not self.can_pause:
            super().pause()
        if self._started_at is not None and self._paused_at is None:
            self._paused_at = self._now()
            self._cancel_end()

    def resume(self) -> None:
        if not self.can_pause:
            super().resume()
        if self._paused_at is not None:
            self._paused_for += self._now() - self._paused_at
            self._paused_at = None
            self._schedule_end()

    def position(self) -> float:
        """Seconds of the current segment heard so far."""
        if self._started_at is None:
            return 0.0
        until = self._paused_at if self._paused_at is not None else self._now()
        return min(self._duration, max(0.0, until - self._started_at - self._paused_for))

    def _schedule_end(self) -> None:
        if not self._flushed or self._paused_at is not None or self._started_at is None:
            return
        self._cancel_end()
        end = self._started_at + self._paused_for + self._duration
        self._end_timer = asyncio.get_running_loop().call_at(end, self._finish, False)

    def _cancel_end(self) -> None:
        if self._end_timer is not None:
            self._end_timer.cancel()
            self._end_timer = None

    def _finish(self, interrupted: bool) -> None:
        position = self._duration if not interrupted else self.position()
        self._cancel_end()
        heard = 0.0
        for frame in self._queued:
            if heard >= position:
                break
            self.frames.append(frame)
            heard += frame.duration
        self.played_seconds += position
        self.segments.append(position)
        self._queued, self._duration = [], 0.0
        self._started_at = self._paused_at = None
        self._report_finished(position, interrupted)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()


class MemoryAudioInput(AudioInput):
    """A microphone a test feeds. Pushed audio is delivered in 20 ms frames, paced in
    (virtual) real time like a real microphone."""

    def __init__(self, sample_rate: int = 16000, *, frame_ms: int = 20) -> None:
        self.sample_rate = sample_rate
        self._frame_samples = sample_rate * frame_ms // 1000
        self._queue: asyncio.Queue[AudioFrame | None] = asyncio.Queue()

    async def push(self, frame: AudioFrame) -> None:
        """Let ``frame``'s duration pass, then deliver it: like a real microphone, a frame
        is available once it has been captured."""
        if frame.sample_rate != self.sample_rate:
            raise ValueError(f"expected {self.sample_rate} Hz audio, got {frame.sample_rate} Hz")
        await asyncio.sleep(frame.duration)
        self._queue.put_nowait(frame)

    async def push_pcm(self, pcm: bytes) -> None:
        """16-bit mono PCM, split into frames and delivered in real time."""
        data = AudioFrame.from_pcm(pcm, self.sample_rate).data
        for start in range(0, data.shape[0], self._frame_samples):
            chunk = data[start : start + self._frame_samples]
            await self.push(AudioFrame(chunk, self.sample_rate))

    async def push_silence(self, seconds: float) -> None:
        """``seconds`` of silence, delivered in real time as the microphone hears it."""
        # Frame by frame: an hour of silence (a rig's background feed) would otherwise be
        # hundreds of MB held at once, for as long as any of its frames lived.
        remaining = round(seconds * self.sample_rate)
        while remaining > 0:
            samples = min(remaining, self._frame_samples)
            await self.push(AudioFrame(np.zeros(samples, np.int16), self.sample_rate))
            remaining -= samples

    def close(self) -> None:
        """End the microphone's stream once what was pushed is delivered."""
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        while (frame := await self._queue.get()) is not None:
            yield frame
