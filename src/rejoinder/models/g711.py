"""G.711 μ-law and A-law, the 8-bit companded PCM of the telephone network.

ITU-T Recommendation G.711 (1988) maps each 16-bit linear sample at 8 kHz to one byte:
μ-law (North America, Japan) on a 14-bit magnitude scale, A-law (everywhere else) on a
13-bit one, each as 8 segments of 16 steps whose size doubles from one segment to the next.
Phone lines (SIP/RTP payload types 0 and 8, Twilio and other media streams) carry it.

The results are bit-exact with the Sun reference implementation that CPython's ``audioop``
(width 2) uses: μ-law encodes ``sample >> 2`` with bias 0x84 (33 on that scale), A-law
encodes ``sample >> 3``, and the decoders return each step's midpoint scaled to 16 bits.
Every byte decodes and re-encodes to itself except μ-law 0x7F ("negative zero", decoded as
0 like 0xFF, which the encoder never emits). ``audioop`` was removed in Python 3.13.

Every conversion is one numpy fancy-index into a table built at import (with numpy ops, no
Python loop): 256 int16 values per law to decode, 65536 bytes per law to encode, indexed by
the samples viewed as uint16. No Python code runs per sample or per frame beyond the call
itself. Measured (``bench/g711_cost.py``, either law): a 20 ms frame (160 samples) costs
about 1.2 µs to encode and 1.1 µs to decode, mostly call overhead; a second of audio about
8 µs each way, so a call's two directions take ~0.01 % of a core. Computing each code in a
Python loop costs ~40 µs per frame, ~5 µs even with a Python list as the table. Building
the four tables takes ~3 ms and 130 KiB, once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rejoinder.models.audio import PCM16

__all__ = ["alaw_decode", "alaw_encode", "ulaw_decode", "ulaw_encode"]

_U8 = npt.NDArray[np.uint8]

# Segment end points: the first segment whose end is >= the magnitude holds it.
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], np.int32)
_ULAW_BIAS = 0x84  # on the 16-bit scale; 0x84 >> 2 == 33 on the 14-bit scale


def _all_samples() -> npt.NDArray[np.int32]:
    """Every int16 value, in the order of its uint16 bit pattern (0, 1, ..., -1)."""
    return np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32)


def _ulaw_encode_table() -> _U8:
    pcm = _all_samples() >> 2  # 14-bit
    mask = np.where(pcm < 0, 0x7F, 0xFF)
    mag = np.abs(pcm) + (_ULAW_BIAS >> 2)  # the reference's 32635 clip never bites at 14 bits
    seg = np.searchsorted(_ULAW_SEG_END, mag, side="left")
    code = (np.minimum(seg, 7) << 4) | ((mag >> (np.minimum(seg, 7) + 1)) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)  # out of range: the largest magnitude
    return (code ^ mask).astype(np.uint8)


def _alaw_encode_table() -> _U8:
    pcm = _all_samples() >> 3  # 13-bit
    mask = np.where(pcm >= 0, 0xD5, 0x55)
    mag = np.where(pcm >= 0, pcm, -pcm - 1)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left")
    shift = np.where(seg < 2, 1, np.minimum(seg, 7))
    code = (np.minimum(seg, 7) << 4) | ((mag >> shift) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def _ulaw_decode_table() -> PCM16:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0xF) << 3) + _ULAW_BIAS) << ((u >> 4) & 7)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def _alaw_decode_table() -> PCM16:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a >> 4) & 7
    t = (((a & 0xF) << 4) + np.where(seg == 0, 8, 0x108)) << np.where(seg > 0, seg - 1, 0)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ULAW_ENC = _ulaw_encode_table()
_ALAW_ENC = _alaw_encode_table()
_ULAW_DEC = _ulaw_decode_table()
_ALAW_DEC = _alaw_decode_table()
for _table in (_ULAW_ENC, _ALAW_ENC, _ULAW_DEC, _ALAW_DEC):
    _table.flags.writeable = False
del _table


def _as_uint16(pcm: PCM16) -> npt.NDArray[np.uint16]:
    if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16:
        got = pcm.dtype if isinstance(pcm, np.ndarray) else type(pcm).__name__
        raise ValueError(f"G.711 encodes int16 PCM, got {got}")
    if pcm.ndim != 1:
        raise ValueError(f"G.711 encodes 1-D PCM (channels interleaved), got {pcm.ndim}-D")
    return pcm.view(np.uint16)  # same bytes: -1 -> 65535, the table's last entry


def _as_bytes(data: bytes) -> _U8:
    return np.frombuffer(data, np.uint8)


def ulaw_encode(pcm: PCM16) -> bytes:
    """int16 samples -> one μ-law byte each."""
    return _ULAW_ENC[_as_uint16(pcm)].tobytes()


def ulaw_decode(data: bytes) -> PCM16:
    """μ-law bytes -> int16 samples (a new, writable array)."""
    return _ULAW_DEC[_as_bytes(data)]


def alaw_encode(pcm: PCM16) -> bytes:
    """int16 samples -> one A-law byte each."""
    return _ALAW_ENC[_as_uint16(pcm)].tobytes()


def alaw_decode(data: bytes) -> PCM16:
    """A-law bytes -> int16 samples (a new, writable array)."""
    return _ALAW_DEC[_as_bytes(data)]
