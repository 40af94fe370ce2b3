"""``RNNoiseSuppressor``: RNNoise, a small recurrent network that removes noise from
speech, on the caller's audio.

RNNoise (Jean-Marc Valin, Xiph.Org; BSD-3-Clause, its trained model compiled into the
library) works on 10 ms blocks of 48 kHz audio and returns each block denoised, with its
own estimate of how likely the block is voice. The library and model come inside the
``pyrnnoise`` wheel (Apache-2.0 wrapper; a Linux, macOS and Windows build). Its Python
package imports audio-file tooling (audiolab, PyAV, matplotlib) the filter does not need,
so it is installed without its dependencies and never imported: its folder is found with
``importlib.util.find_spec`` and ``librnnoise`` loaded with ctypes, as
``providers/local/silero.py`` loads Silero's model file::

    pip install --no-deps pyrnnoise==0.4.5

It suppresses what does not sound like a voice: fans, traffic, hum, keyboards, a room's
hiss. Babble (other people talking) sounds like a voice and mostly stays. It costs about
0.5 ms of CPU per 10 ms block here (a 2-core VM): 5 % of one core per session, so the
chain runs it in a worker thread (``runs_in_thread``). bench/audio_filters.py measures it.

    https://github.com/xiph/rnnoise (the C API: rnnoise_create, rnnoise_process_frame)
    https://github.com/pengzhendong/pyrnnoise (the wheel's layout)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from ._missing import PYRNNOISE, missing
from .base import AudioFilter

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..models.audio import PCM16, AudioFrame
    from .blocks import BlockStream

__all__ = ["RNNoiseSuppressor", "library_path"]

RATE = 48000
BLOCK = 480  # rnnoise_get_frame_size(): 10 ms at 48 kHz

_LIBRARY = {"darwin": "librnnoise.dylib", "win32": "rnnoise.dll"}.get(sys.platform, "librnnoise.so")


def library_path() -> str:
    """Where the ``pyrnnoise`` wheel put ``librnnoise`` (``MissingExtra`` if nowhere)."""
    try:
        spec = importlib.util.find_spec("pyrnnoise")
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = os.path.join(folder, _LIBRARY)
        if os.path.isfile(path):
            return path
    raise missing(
        "RNNoiseSuppressor",
        "pyrnnoise" if not folders else f"pyrnnoise's {_LIBRARY}",
        f"pip install --no-deps {PYRNNOISE}",
    )


@functools.cache
def _library() -> Any:
    lib = ctypes.CDLL(library_path())
    lib.rnnoise_create.argtypes = [ctypes.c_void_p]
    lib.rnnoise_create.restype = ctypes.c_void_p
    lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
    lib.rnnoise_destroy.restype = None
    lib.rnnoise_get_frame_size.restype = ctypes.c_int
    floats = ctypes.POINTER(ctypes.c_float)
    lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, floats, floats]
    lib.rnnoise_process_frame.restype = ctypes.c_float
    size = lib.rnnoise_get_frame_size()
    if size != BLOCK:
        raise RuntimeError(f"this librnnoise works on {size}-sample blocks, not {BLOCK}")
    return lib


class RNNoiseSuppressor(AudioFilter):
    """RNNoise on the caller's audio (see the module's docstring). The chain resamples
    other rates to 48 kHz and back.

    ``mix``: how much of the original to keep under the denoised audio (0: none; 0.1
    keeps a noise floor 20 dB down, which can sound more natural to a recognizer).
    """

    sample_rates = (RATE,)
    runs_in_thread = True

    def __init__(self, *, mix: float = 0.0) -> None:
        if not 0.0 <= mix <= 1.0:
            raise ValueError(f"mix must be within 0-1, got {mix}")
        self.mix = float(mix)
        self._lib = _library()  # here, so a missing wheel is an error at construction
        self._state: int | None = None
        self._lock = threading.Lock()  # reset() from the loop while a worker filters
        self._blocks: BlockStream | None = None
        self._in: npt.NDArray[np.float32] | None = None
        self._out: npt.NDArray[np.float32] | None = None
        self.voice_probability = 0.0
        """RNNoise's estimate for the last block, 0 to 1."""

    def _start(self) -> BlockStream:
        import numpy as np

        from .blocks import BlockStream

        self._state = self._lib.rnnoise_create(None)
        if not self._state:
            raise MemoryError("rnnoise_create failed")
        self._in = np.zeros(BLOCK, np.float32)
        self._out = np.zeros(BLOCK, np.float32)
        self._blocks = BlockStream(BLOCK, self._block)
        return self._blocks

    def _block(self, block: PCM16, _reference: PCM16 | None) -> PCM16:
        import numpy as np

        assert self._in is not None and self._out is not None
        floats = ctypes.POINTER(ctypes.c_float)
        self._in[:] = block  # RNNoise takes floats on the int16 scale
        self.voice_probability = float(
            self._lib.rnnoise_process_frame(
                self._state, self._out.ctypes.data_as(floats), self._in.ctypes.data_as(floats)
            )
        )
        out = self._out if not self.mix else self._out + self.mix * self._in
        return np.clip(np.rint(out), -32768, 32767).astype(np.int16)

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        from ..models.audio import AudioFrame

        if frame.sample_rate != RATE:
            raise ValueError(f"RNNoise takes {RATE} Hz audio, got {frame.sample_rate} Hz")
        with self._lock:
            blocks = self._blocks if self._blocks is not None else self._start()
            return AudioFrame(blocks.push(frame.data), RATE)

    def reset(self) -> None:
        with self._lock:
            self._free()

    def _free(self) -> None:
        if self._state is not None:
            self._lib.rnnoise_destroy(self._state)
        self._state = None
        self._blocks = None

    def __del__(self) -> None:
        # At interpreter shutdown the library may be gone, or construction may have failed.
        with contextlib.suppress(Exception):
            self._free()
