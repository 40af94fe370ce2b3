"""Fixed-size blocks for engines that take exactly N samples at a time, and exact-length
output for a chain that must give back one frame per frame.

Engines work on fixed blocks (RNNoise: 480 samples at 48 kHz; WebRTC's audio processing:
10 ms) while microphones deliver whatever the transport carries (20 ms, 10 ms, a
WebSocket client's odd chunk). ``BlockStream`` cuts the stream into blocks and hands back,
for every push, exactly as many samples as were pushed. When a push does not fill the
last block, its output is not there yet: the stream then delays everything by that many
samples, once, with zeros in front (a 20 ms frame of 10 ms blocks never does).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

__all__ = ["BlockStream", "ExactLength"]

Samples = npt.NDArray[np.int16]


class ExactLength:
    """A queue of output samples that gives back exactly what was asked for: when the
    producer is behind (a resampler filling its filter, a block not yet full), the
    shortfall is made up with zeros in front, once, and the stream is that much later
    from then on."""

    def __init__(self) -> None:
        self._queue = np.zeros(0, np.int16)
        self.delay = 0
        """Samples of zeros put in front so far: the stream's added delay."""

    def put(self, samples: Samples) -> None:
        if samples.size:  # copied: a producer may reuse its buffer
            self._queue = np.concatenate((self._queue, samples))

    def take(self, count: int) -> Samples:
        short = count - self._queue.size
        if short > 0:
            self._queue = np.concatenate((np.zeros(short, np.int16), self._queue))
            self.delay += short
        out, self._queue = self._queue[:count], self._queue[count:]
        return out

    def clear(self) -> None:
        self._queue = np.zeros(0, np.int16)
        self.delay = 0


class BlockStream:
    """Cut mono int16 samples (and, in step, a reference) into blocks of ``size`` and run
    ``process(block, reference_block)`` on each; ``push`` returns as many samples as it
    was given (see the module's docstring)."""

    def __init__(
        self,
        size: int,
        process: Callable[[Samples, Samples | None], Samples],
    ) -> None:
        if size <= 0:
            raise ValueError("block size must be positive")
        self.size = size
        self._process = process
        self._pending = np.zeros(0, np.int16)
        self._pending_reference = np.zeros(0, np.int16)
        self._out = ExactLength()

    @property
    def delay(self) -> int:
        """Samples the output trails the input by (0 while every push fills its blocks)."""
        return self._out.delay

    def push(self, samples: Samples, reference: Samples | None = None) -> Samples:
        if reference is not None and reference.shape[0] != samples.shape[0]:
            raise ValueError(
                f"the reference has {reference.shape[0]} samples, the audio {samples.shape[0]}"
            )
        data = np.concatenate((self._pending, samples)) if self._pending.size else samples
        ref: Samples | None = None
        if reference is not None or self._pending_reference.size:
            given = reference if reference is not None else np.zeros(samples.shape[0], np.int16)
            ref = (
                np.concatenate((self._pending_reference, given))
                if self._pending_reference.size
                else given
            )
            if ref.shape[0] < data.shape[0]:  # the pending part came without a reference
                ref = np.concatenate((np.zeros(data.shape[0] - ref.shape[0], np.int16), ref))
        whole = data.shape[0] - data.shape[0] % self.size
        for start in range(0, whole, self.size):
            block_ref = None if ref is None else ref[start : start + self.size]
            out = self._process(data[start : start + self.size], block_ref)
            if out.shape[0] != self.size:
                raise ValueError(f"a block of {self.size} samples came back as {out.shape[0]}")
            self._out.put(out)
        self._pending = data[whole:].copy()
        self._pending_reference = np.zeros(0, np.int16) if ref is None else ref[whole:].copy()
        return self._out.take(samples.shape[0])

    def clear(self) -> None:
        self._pending = np.zeros(0, np.int16)
        self._pending_reference = np.zeros(0, np.int16)
        self._out.clear()
