"""Audio on its way across the speech providers' WebSockets, decided once: a frame turned
into the wire's 16-bit mono PCM (channels averaged, resampled to the wire's rate by a
streaming resampler the caller keeps from frame to frame), and PCM bytes cut into pieces
of one size whatever lengths they arrive in (a sample may come split between two
messages). ``numpy`` and the resampler are imported on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.audio import AudioFrame
    from ..models.audio_utils import Resampler

__all__ = ["PCMCutter", "mono", "pcm16_mono", "resampler_tail"]


def mono(frame: AudioFrame) -> AudioFrame:
    """``frame`` with its channels averaged, each sample rounded to the nearest value
    (truncating would pull the mix towards zero); a mono frame as it is."""
    if frame.num_channels == 1:
        return frame
    import numpy as np

    from ..models.audio import AudioFrame

    mixed = frame.data.reshape(-1, frame.num_channels).mean(axis=1)
    return AudioFrame(np.round(mixed).astype(np.int16), frame.sample_rate)


def pcm16_mono(
    frame: AudioFrame, rate: int, resampler: Resampler | None
) -> tuple[bytes, Resampler | None]:
    """``frame`` as little-endian 16-bit mono PCM at ``rate``, and the streaming resampler
    to use for the next frame of the same stream (a new one when the input rate changed;
    none is needed while frames come at ``rate``)."""
    from ..models.audio_utils import Resampler

    frame = mono(frame)
    if frame.sample_rate == rate:
        return frame.to_pcm(), resampler
    if resampler is None or resampler.in_rate != frame.sample_rate:
        resampler = Resampler(frame.sample_rate, rate)
    resampled = resampler.push(frame)
    return (resampled.to_pcm() if resampled is not None else b""), resampler


def resampler_tail(resampler: Resampler | None) -> bytes:
    """What a stream's resampler still holds, as PCM: the end of the stream's audio."""
    if resampler is None:
        return b""
    tail = resampler.flush()
    return tail.to_pcm() if tail is not None else b""


class PCMCutter:
    """Cuts PCM bytes arriving in pieces of any length into pieces of ``size`` bytes;
    ``tail`` is what is left at the end, in whole 16-bit samples."""

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise ValueError(f"the piece size must be positive, got {size}")
        self.size = size
        self._pending = bytearray()

    @property
    def pending(self) -> int:
        """Bytes waiting for the next whole piece."""
        return len(self._pending)

    def push(self, pcm: bytes) -> list[bytes]:
        """The whole pieces ``pcm`` completes, in order."""
        self._pending += pcm
        cut = len(self._pending) - len(self._pending) % self.size
        if cut == 0:
            return []
        ready = bytes(self._pending[:cut])
        del self._pending[:cut]
        return [ready[at : at + self.size] for at in range(0, cut, self.size)]

    def tail(self) -> bytes:
        """What is left, emptied; an odd last byte (half a sample) is dropped."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest[: len(rest) - len(rest) % 2]
