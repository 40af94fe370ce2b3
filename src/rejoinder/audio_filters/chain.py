"""``FilterChain``: a session's filters, run in order on each frame of the microphone.

What the chain does so that a filter does not have to:

- **rates**: a filter that takes only some rates (``AudioFilter.sample_rates``: RNNoise
  48 kHz) gets each frame resampled to its first rate, and its output resampled back, by
  soxr's quick (cubic) streaming resampler: about 1 sample of delay where the default
  quality would add 25-50 ms to every turn; its images sit 35 dB down, which a noise
  suppressor's input and a VAD do not mind. A filter's reference is resampled alongside,
  so it stays aligned with the audio;
- **exact length**: each frame comes out with as many samples as it went in;
- **failures**: a filter that raises, or returns something that is not a frame of the
  same rate and length, is logged once and left out from then on (the audio passes on
  without it); the session never sees the exception;
- **cost**: the CPU seconds the filters took (``cpu_seconds``, per the thread that ran
  them) against the seconds of audio they were given (``audio_seconds``).

Mono only: a frame with several channels passes through unfiltered (logged once): every
transport delivers mono.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import AudioFilter
from .blocks import ExactLength

if TYPE_CHECKING:
    from ..models.audio import PCM16, AudioFrame

__all__ = ["FilterChain"]

logger = logging.getLogger("rejoinder")

_in_a_chain: weakref.WeakSet[AudioFilter] = weakref.WeakSet()
"""Every filter some chain holds: a filter's state is one caller's, never two."""


class _RateBridge:
    """A filter's own rate around frames at another (see the module's docstring)."""

    def __init__(self, in_rate: int, rate: int, with_reference: bool) -> None:
        import soxr  # type: ignore[import-untyped]  # ships no type information

        def stream(a: int, b: int) -> soxr.ResampleStream:
            return soxr.ResampleStream(a, b, 1, dtype="int16", quality="QQ")

        self.rate = rate
        self._up = stream(in_rate, rate)
        self._up_reference = stream(in_rate, rate) if with_reference else None
        self._down = stream(rate, in_rate)
        self._out = ExactLength()

    def run(self, filt: AudioFilter, frame: AudioFrame, reference: PCM16 | None) -> AudioFrame:
        import numpy as np

        from ..models.audio import AudioFrame

        data = self._up.resample_chunk(frame.data)
        ref = None
        if self._up_reference is not None:
            # Fed every frame, zeros too, so that it stays in step with the audio's stream.
            given = reference if reference is not None else np.zeros_like(frame.data)
            ref = self._up_reference.resample_chunk(given)
            if ref.shape[0] != data.shape[0]:  # the two streams' first chunks may differ by one
                ref = np.resize(ref, data.shape[0]) if ref.size else np.zeros_like(data)
            if reference is None and not ref.any():
                ref = None
        if data.size:
            inner = AudioFrame(np.ascontiguousarray(data, np.int16), self.rate)
            out = _checked(filt, inner, filt.process(inner, ref))
            self._out.put(self._down.resample_chunk(out.data))
        return AudioFrame(self._out.take(frame.samples_per_channel), frame.sample_rate)


def _checked(filt: AudioFilter, frame: AudioFrame, out: object) -> AudioFrame:
    from ..models.audio import AudioFrame

    if not isinstance(out, AudioFrame):
        raise TypeError(f"{type(filt).__name__}.process returned {type(out).__name__}")
    if out.sample_rate != frame.sample_rate or out.samples_per_channel != (
        frame.samples_per_channel
    ):
        raise ValueError(
            f"{type(filt).__name__}.process turned {frame!r} into {out!r}: a filter keeps "
            "the rate and the number of samples"
        )
    return out


class _Stage:
    __slots__ = ("bridge", "failed", "filter", "rate")

    def __init__(self, filt: AudioFilter) -> None:
        self.filter = filt
        self.rate: int | None = None
        self.bridge: _RateBridge | None = None
        self.failed = False

    def run(self, frame: AudioFrame, reference: PCM16 | None) -> AudioFrame:
        filt = self.filter
        if frame.sample_rate != self.rate:
            if self.rate is not None:  # another connection, at another rate
                filt.reset()
            self.rate = frame.sample_rate
            rates = filt.sample_rates
            self.bridge = (
                None
                if not rates or frame.sample_rate in rates
                else _RateBridge(frame.sample_rate, rates[0], filt.uses_reference)
            )
        ref = reference if filt.uses_reference else None
        if self.bridge is not None:
            return self.bridge.run(filt, frame, ref)
        return _checked(filt, frame, filt.process(frame, ref))

    def reset(self) -> None:
        self.rate, self.bridge = None, None
        self.filter.reset()


class FilterChain:
    """``filters`` run in order on each frame (``process``). Put an echo canceller first:
    a stage before it that delays the audio (a resampled one, by a sample or two) would
    shift the audio against the reference."""

    def __init__(self, filters: Sequence[AudioFilter]) -> None:
        filters = tuple(filters)
        for filt in filters:
            if not isinstance(filt, AudioFilter):
                raise TypeError(f"an audio filter must be an rj.AudioFilter, got {filt!r}")
        if len({id(f) for f in filters}) != len(filters):
            raise ValueError("the same filter appears twice: give each stage its own instance")
        for filt in filters:
            if filt in _in_a_chain:
                raise ValueError(
                    f"{type(filt).__name__} is already filtering another session's audio: "
                    "a filter holds one caller's state, so make one per session"
                )
        _in_a_chain.update(filters)
        self.filters = filters
        self._stages = [_Stage(f) for f in filters]
        self.uses_reference = any(f.uses_reference for f in filters)
        """Some filter wants the far end (what the agent played)."""
        self.runs_in_thread = any(f.runs_in_thread for f in filters)
        """Some filter is heavy: frames are processed in a worker thread."""
        self.cpu_seconds = 0.0
        """CPU time the filters took, in the thread that ran them."""
        self.audio_seconds = 0.0
        """Seconds of audio the chain was given."""
        self.failures: list[tuple[AudioFilter, BaseException]] = []
        """Each filter that failed (and was left out from then on), with its error."""
        self._told_channels = False

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        """``frame`` through every filter that has not failed; ``reference``: the far end
        at the same moments (``None``: silence)."""
        started = time.thread_time()
        self.audio_seconds += frame.duration
        try:
            if frame.num_channels != 1 or not frame.samples_per_channel:
                if frame.num_channels != 1 and not self._told_channels:
                    self._told_channels = True
                    logger.warning("audio filters take mono audio: %r passes unfiltered", frame)
                return frame
            for stage in self._stages:
                if stage.failed:
                    continue
                try:
                    frame = stage.run(frame, reference)
                except Exception as exc:  # the filter's bug is never the session's
                    stage.failed = True
                    self.failures.append((stage.filter, exc))
                    logger.exception(
                        "audio filter %s failed; the audio passes on without it",
                        type(stage.filter).__name__,
                    )
            return frame
        finally:
            self.cpu_seconds += time.thread_time() - started

    def reset(self) -> None:
        """Every filter forgets what it heard (the failed ones stay out; one whose
        ``reset`` raises is left out too, logged once)."""
        for stage in self._stages:
            if stage.failed:
                continue
            try:
                stage.reset()
            except Exception as exc:
                stage.failed = True
                self.failures.append((stage.filter, exc))
                logger.exception(
                    "audio filter %s failed to reset; the audio passes on without it",
                    type(stage.filter).__name__,
                )

    @property
    def cpu_ms_per_second(self) -> float:
        """Milliseconds of CPU per second of audio, so far."""
        return 1000 * self.cpu_seconds / self.audio_seconds if self.audio_seconds else 0.0
