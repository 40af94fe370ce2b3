"""Resampling (soxr) and re-buffering to fixed-size windows, without per-frame garbage.

Both run on every audio frame, so they avoid what they can: the re-buffer yields views of
one preallocated array, and the resampler keeps one soxr stream per direction.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import soxr  # type: ignore[import-untyped]  # ships no type information

from .audio import PCM16, AudioFrame


class FrameRebuffer:
    """Cut a stream of samples into windows of exactly ``size`` samples per channel.

    ``push`` yields views of an internal buffer: use (or copy) each window before the
    generator is advanced. Leftover samples wait for the next push.
    """

    def __init__(self, size: int, num_channels: int = 1) -> None:
        if size <= 0:
            raise ValueError("window size must be positive")
        self._window = size * num_channels
        self._buffer = np.empty(self._window, np.int16)
        self._filled = 0

    @property
    def pending(self) -> int:
        """Samples (all channels) waiting for the next window."""
        return self._filled

    def push(self, data: PCM16) -> Iterator[PCM16]:
        taken = 0
        total = data.shape[0]
        while taken < total:
            n = min(self._window - self._filled, total - taken)
            self._buffer[self._filled : self._filled + n] = data[taken : taken + n]
            self._filled += n
            taken += n
            if self._filled == self._window:
                self._filled = 0
                yield self._buffer

    def clear(self) -> None:
        self._filled = 0


class Resampler:
    """Streaming int16 resampler; a no-op when the rates already match."""

    def __init__(self, in_rate: int, out_rate: int, num_channels: int = 1) -> None:
        self.in_rate, self.out_rate, self.num_channels = in_rate, out_rate, num_channels
        self._stream = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, num_channels, dtype="int16")
        )

    def push(self, frame: AudioFrame, *, last: bool = False) -> AudioFrame | None:
        """Resample one frame; returns None while soxr is still filling its filter."""
        if frame.sample_rate != self.in_rate or frame.num_channels != self.num_channels:
            raise ValueError(
                f"expected {self.in_rate} Hz x{self.num_channels}, got {frame.sample_rate} Hz "
                f"x{frame.num_channels}"
            )
        if self._stream is None:
            return frame
        shaped = frame.data.reshape(-1, self.num_channels)
        out = self._stream.resample_chunk(shaped, last=last)
        if out.size == 0:
            return None
        return AudioFrame(
            np.ascontiguousarray(out, np.int16).reshape(-1), self.out_rate, self.num_channels
        )

    def flush(self) -> AudioFrame | None:
        """The samples soxr still holds (call at the end of a stream)."""
        empty = AudioFrame(np.zeros(0, np.int16), self.in_rate, self.num_channels)
        return self.push(empty, last=True)


def resample(frame: AudioFrame, out_rate: int) -> AudioFrame:
    """One-shot resampling of a whole clip."""
    if frame.sample_rate == out_rate:
        return frame
    shaped = frame.data.reshape(-1, frame.num_channels)
    out = soxr.resample(shaped, frame.sample_rate, out_rate)
    return AudioFrame(np.ascontiguousarray(out, np.int16).reshape(-1), out_rate, frame.num_channels)
