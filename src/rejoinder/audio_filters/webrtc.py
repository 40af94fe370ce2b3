"""WebRTC's audio processing on the caller's audio: ``WebRTCEchoCanceller`` (AEC3, the
echo canceller Chrome runs) and ``WebRTCNoiseSuppressor`` (its classic noise suppressor).

Both come from the ``pywebrtc-audio`` wheel (Apache-2.0; the WebRTC code it builds is
BSD-3-Clause), a 0.4 MB Linux, macOS and Windows build of the audio processing module
that needs only numpy and releases the GIL while it works. They process 10 ms blocks
(``blocks.BlockStream`` cuts them; a 20 ms frame is two, with no added delay)::

    pip install 'rejoinder[filters]'       # or only: pip install pywebrtc-audio==0.2.0

AEC3 subtracts the far end (what the agent played, ``EchoReference``) as the room
delayed and coloured it, then suppresses what is left of the echo. It estimates the delay
itself, up to a few hundred milliseconds; ``stream_delay_ms`` is only a hint. A high-pass
filter runs before it (as in Chrome). While the agent is silent it has nothing to
subtract and the caller's audio passes nearly unchanged. Measured here (a 2-core VM):
about 0.25 ms of CPU per 20 ms frame, cheap enough for the event loop.

Browsers cancel echo themselves (``getUserMedia``'s ``echoCancellation``, on by default),
so a browser's audio needs no second canceller; a native app, a kiosk, the Node SDK or a
phone line whose handset does not cancel does.

    https://github.com/strands-labs/pywebrtc-audio (the API: AudioProcessor, NoiseSuppressor)
    https://webrtc.googlesource.com/src/+/refs/heads/main/modules/audio_processing/aec3/
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from ._missing import EXTRA, PYWEBRTC_AUDIO, missing
from .base import AudioFilter

if TYPE_CHECKING:
    from ..models.audio import PCM16, AudioFrame
    from .blocks import BlockStream

__all__ = ["WebRTCEchoCanceller", "WebRTCNoiseSuppressor"]


def _module() -> Any:
    try:
        import pywebrtc_audio  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise missing(
            "the WebRTC audio filters",
            "pywebrtc_audio",
            f"pip install 'rejoinder[{EXTRA}]' (or only: pip install {PYWEBRTC_AUDIO})",
        ) from exc
    return pywebrtc_audio


class _WebRTCFilter(AudioFilter):
    """One WebRTC processor per sample rate, fed 10 ms blocks."""

    def __init__(self) -> None:
        self._webrtc = _module()  # here, so a missing wheel is an error at construction
        self._rate: int | None = None
        self._processor: Any = None
        self._blocks: BlockStream | None = None

    @abstractmethod
    def _new_processor(self, rate: int) -> Any:
        """The engine for ``rate``."""

    @abstractmethod
    def _block(self, block: PCM16, reference: PCM16 | None) -> PCM16:
        """One 10 ms block through the engine."""

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        from ..models.audio import AudioFrame
        from .blocks import BlockStream

        rate = frame.sample_rate
        if rate != self._rate or self._blocks is None:
            if rate % 100:
                raise ValueError(f"WebRTC processes 10 ms blocks: {rate} Hz has none")
            self._processor = self._new_processor(rate)
            self._blocks = BlockStream(rate // 100, self._block)
            self._rate = rate
        return AudioFrame(self._blocks.push(frame.data, reference), rate)

    def reset(self) -> None:
        if self._processor is not None:
            self._processor.reset()
        if self._blocks is not None:
            self._blocks.clear()


class WebRTCEchoCanceller(_WebRTCFilter):
    """AEC3 on the caller's audio, given the far end (see the module's docstring).

    ``stream_delay_ms``: a hint of the speaker-to-microphone delay (0: let AEC3 find it).
    ``noise_suppression``: also run WebRTC's noise suppressor in the same pass (after the
    canceller, as Chrome does); ``ns_level`` 0-3 (6, 12, 18, 21 dB).
    """

    uses_reference = True
    sample_rates = (16000, 8000, 32000, 48000)

    def __init__(
        self, *, stream_delay_ms: int = 0, noise_suppression: bool = False, ns_level: int = 1
    ) -> None:
        if stream_delay_ms < 0:
            raise ValueError("stream_delay_ms must not be negative")
        if ns_level not in (0, 1, 2, 3):
            raise ValueError(f"ns_level must be 0-3, got {ns_level}")
        self.stream_delay_ms = int(stream_delay_ms)
        self.noise_suppression = bool(noise_suppression)
        self.ns_level = ns_level
        super().__init__()
        self._silence: PCM16 | None = None

    def _new_processor(self, rate: int) -> Any:
        import numpy as np

        self._silence = np.zeros(rate // 100, np.int16)
        return self._webrtc.AudioProcessor(
            sample_rate=rate,
            echo_cancellation=True,
            noise_suppression=self.noise_suppression,
            ns_level=self.ns_level,
            stream_delay_ms=self.stream_delay_ms,
        )

    def _block(self, block: PCM16, reference: PCM16 | None) -> PCM16:
        far = reference if reference is not None else self._silence
        out: PCM16 = self._processor.process(block, far)
        return out


class WebRTCNoiseSuppressor(_WebRTCFilter):
    """WebRTC's noise suppressor (``level`` 0-3: 6, 12, 18, 21 dB of suppression):
    spectral, no network, about a tenth of RNNoise's CPU; it removes steady noise (fans,
    hum, hiss) and leaves what changes like speech."""

    sample_rates = (16000, 32000, 48000)

    def __init__(self, *, level: int = 1) -> None:
        if level not in (0, 1, 2, 3):
            raise ValueError(f"level must be 0-3, got {level}")
        self.level = level
        super().__init__()

    def _new_processor(self, rate: int) -> Any:
        return self._webrtc.NoiseSuppressor(sample_rate=rate, level=self.level)

    def _block(self, block: PCM16, reference: PCM16 | None) -> PCM16:
        out: PCM16 = self._processor.process(block)
        return out
