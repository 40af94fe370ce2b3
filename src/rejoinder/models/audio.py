"""Audio frames and the audio input/output interfaces.

A frame is int16 PCM in a numpy array, channels interleaved (shape ``(samples *
channels,)``). numpy is imported with this module, which ``import rejoinder`` loads only
on first use of an audio name, so text-only programs never pay for it.

An ``AudioOutput`` reports what the user can actually hear: *playback started* when the
first sample of a segment is audible, *playback finished* with the audible position and
whether it was cut short. The session derives ``speaking`` from those reports, never from
when audio was produced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PCM16 = npt.NDArray[np.int16]


class AudioFrame:
    """A piece of audio: ``data`` holds int16 samples, channels interleaved, at
    ``sample_rate`` Hz. What microphones deliver, voices yield and outputs play."""

    __slots__ = ("_duration", "_samples", "data", "num_channels", "sample_rate")

    def __init__(self, data: PCM16, sample_rate: int, num_channels: int = 1) -> None:
        if data.dtype != np.int16:
            raise TypeError(f"AudioFrame data must be int16, got {data.dtype}")
        if data.ndim != 1:
            raise ValueError("AudioFrame data must be 1-D (channels interleaved)")
        if sample_rate <= 0 or num_channels <= 0:
            raise ValueError("sample_rate and num_channels must be positive")
        if data.shape[0] % num_channels:
            raise ValueError(f"{data.shape[0]} samples do not split into {num_channels} channels")
        self.data = data
        self.sample_rate = sample_rate
        self.num_channels = num_channels
        # Read several times per frame on every path (delivery, meters, outputs): worked
        # out once here, since a frame's data is never replaced.
        self._samples = int(data.shape[0]) // num_channels
        self._duration = self._samples / sample_rate

    @classmethod
    def from_pcm(cls, pcm: bytes, sample_rate: int, num_channels: int = 1) -> AudioFrame:
        """From little-endian 16-bit PCM bytes (copied, so the frame owns its data)."""
        if len(pcm) % 2:
            raise ValueError("16-bit PCM needs an even number of bytes")
        return cls(np.frombuffer(pcm, dtype="<i2").astype(np.int16), sample_rate, num_channels)

    @classmethod
    def silence(cls, seconds: float, sample_rate: int, num_channels: int = 1) -> AudioFrame:
        """``seconds`` of digital silence."""
        samples = round(seconds * sample_rate)
        return cls(np.zeros(samples * num_channels, np.int16), sample_rate, num_channels)

    @property
    def samples_per_channel(self) -> int:
        """How many samples each channel holds."""
        return self._samples

    @property
    def duration(self) -> float:
        """Seconds of audio in the frame."""
        return self._duration

    def to_pcm(self) -> bytes:
        """The samples as little-endian 16-bit PCM bytes."""
        return self.data.astype("<i2", copy=False).tobytes()

    def __repr__(self) -> str:
        return (
            f"AudioFrame({self.duration * 1000:.1f} ms, {self.sample_rate} Hz, "
            f"{self.num_channels} ch)"
        )


@dataclass(frozen=True, slots=True)
class PlaybackFinished:
    """How a segment of agent audio ended, as its ``AudioOutput`` reports it: how much
    of it was heard, and whether it was cut short."""

    position: float
    """Seconds of the segment that were audible."""
    interrupted: bool
    """Cut short by ``clear_buffer`` (otherwise every captured sample was played)."""


class AudioInput(ABC):
    """A stream of microphone frames."""

    @abstractmethod
    def __aiter__(self) -> AsyncIterator[AudioFrame]: ...


class AudioOutput(ABC):
    """Plays agent audio, one segment (reply) at a time, and reports what was heard.

    Implementations call ``_report_started`` when a segment's first sample is audible
    and ``_report_finished`` exactly once per started segment.
    """

    def __init__(self, *, sample_rate: int | None, can_pause: bool) -> None:
        self.sample_rate = sample_rate
        """The rate frames must have (None: any rate is accepted)."""
        self.can_pause = can_pause
        self._on_started: Callable[[], None] | None = None
        self._on_finished: Callable[[PlaybackFinished], None] | None = None

    def set_listener(
        self,
        started: Callable[[], None] | None,
        finished: Callable[[PlaybackFinished], None] | None,
    ) -> None:
        """Set by the session that plays through this output."""
        self._on_started = started
        self._on_finished = finished

    @abstractmethod
    async def capture_frame(self, frame: AudioFrame) -> None:
        """Queue a frame of the current segment (starting one if none is open)."""

    @abstractmethod
    def flush(self) -> None:
        """No more frames for the current segment; it finishes once played out."""

    @abstractmethod
    def clear_buffer(self) -> None:
        """Stop now and drop what was not played (an interruption)."""

    def pause(self) -> None:
        """Hold playback where it is (only when ``can_pause``): the session pauses a
        reply the user may be interrupting, and resumes it if they were not."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause")

    def resume(self) -> None:
        """Go on playing from where ``pause`` held it."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause")

    def _report_started(self) -> None:
        if self._on_started is not None:
            self._on_started()

    def _report_finished(self, position: float, interrupted: bool) -> None:
        if self._on_finished is not None:
            self._on_finished(PlaybackFinished(position, interrupted))
