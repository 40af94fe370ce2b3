"""G.711 μ-law and A-law: bit-exact with audioop, pinned by fixed vectors and table hashes."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.models.audio import PCM16
from rejoinder.models.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import audioop as _audioop

        audioop: ModuleType | None = _audioop
    except ImportError:  # removed in Python 3.13
        audioop = None

needs_audioop = pytest.mark.skipif(audioop is None, reason="audioop was removed in Python 3.13")

ALL_PCM = np.arange(65536, dtype=np.uint16).view(np.int16)  # 0, 1, ..., 32767, -32768, ..., -1
ALL_BYTES = bytes(range(256))

Encode = Callable[[PCM16], bytes]
Decode = Callable[[bytes], PCM16]
LAWS: dict[str, tuple[Encode, Decode]] = {
    "ulaw": (ulaw_encode, ulaw_decode),
    "alaw": (alaw_encode, alaw_decode),
}


@needs_audioop
@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_every_sample_and_every_byte_match_audioop(law: str) -> None:
    assert audioop is not None
    encode, decode = LAWS[law]
    lin2, to_lin = (
        (audioop.lin2ulaw, audioop.ulaw2lin)
        if law == "ulaw"
        else (audioop.lin2alaw, audioop.alaw2lin)
    )
    assert encode(ALL_PCM) == lin2(ALL_PCM.astype("<i2").tobytes(), 2)
    assert decode(ALL_BYTES).astype("<i2").tobytes() == to_lin(ALL_BYTES, 2)


# Taken from audioop (Python 3.11), so they hold without it.
ENCODED = {
    "ulaw": {0: 0xFF, 1: 0xFF, 3: 0xFF, 4: 0xFE, -1: 0x7E, -4: 0x7E, 100: 0xF2, -100: 0x72,
             1000: 0xCE, -1000: 0x4E, 8000: 0xA0, -8000: 0x20, 32767: 0x80, -32768: 0x00},
    "alaw": {0: 0xD5, 1: 0xD5, 7: 0xD5, -1: 0x55, -8: 0x55, 100: 0xD3, -100: 0x53,
             1000: 0xFA, -1000: 0x7A, 8000: 0x8A, -8000: 0x0A, 32767: 0xAA, -32768: 0x2A},
}  # fmt: skip
DECODED = {
    "ulaw": {0x00: -32124, 0x7F: 0, 0x80: 32124, 0xFF: 0, 0x7E: -8, 0xFE: 8, 0x2A: -5372},
    "alaw": {0x00: -5504, 0x55: -8, 0xD5: 8, 0x2A: -32256, 0xAA: 32256, 0x7F: -848, 0xFF: 848},
}
SHA256 = {  # of encode(ALL_PCM) and of decode(ALL_BYTES) as little-endian int16
    "ulaw": (
        "617fa4850d68d3906597e949f7625fb2fc46db479e29707f33159b3d131721cb",
        "3dab54339e520bb2c924826e3b72a917a2b612e9fd12fc867500f1d983a75827",
    ),
    "alaw": (
        "f77c76aa923ee25617453f87514828a12896227f82ff383bf3bb53d6ac7c2a0f",
        "e04788d110e58ff8c70c93b8480190d973e3b67876b6119abbaec766cc75c174",
    ),
}


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_fixed_vectors_and_table_hashes(law: str) -> None:
    encode, decode = LAWS[law]
    samples = np.array(list(ENCODED[law]), np.int16)
    assert list(encode(samples)) == list(ENCODED[law].values())
    assert decode(bytes(DECODED[law])).tolist() == list(DECODED[law].values())
    enc_hash, dec_hash = SHA256[law]
    assert hashlib.sha256(encode(ALL_PCM)).hexdigest() == enc_hash
    assert hashlib.sha256(decode(ALL_BYTES).astype("<i2").tobytes()).hexdigest() == dec_hash


def test_empty_strided_and_decoded_output() -> None:
    assert ulaw_encode(np.zeros(0, np.int16)) == alaw_encode(np.zeros(0, np.int16)) == b""
    for decode in (ulaw_decode, alaw_decode):
        out = decode(b"")
        assert out.dtype == np.int16
        assert out.shape == (0,)
        out = decode(b"\x00\x01")
        assert out.flags.writeable and out.flags.owndata
    strided = ALL_PCM[::7]
    assert ulaw_encode(strided) == ulaw_encode(strided.copy())


def step(law: str, code: int) -> int:
    """Width, in 16-bit units, of one quantisation step in ``code``'s segment."""
    if law == "ulaw":
        return 8 << ((~code >> 4) & 7)
    seg = ((code ^ 0x55) >> 4) & 7
    return 16 << max(seg - 1, 0)


@given(st.integers(-32768, 32767))
def test_ulaw_round_trip_is_within_half_a_step(x: int) -> None:
    code = ulaw_encode(np.array([x], np.int16))
    y = int(ulaw_decode(code)[0])
    if abs(x) >= 32640:  # past the last step's range: clipped to the largest magnitude
        assert code == (b"\x80" if x > 0 else b"\x00")
        assert y == (32124 if x > 0 else -32124)
    else:  # half a step, plus the 2 low bits the 14-bit encoder drops
        assert abs(y - x) <= step("ulaw", code[0]) // 2 + 3


@given(st.integers(-32768, 32767))
def test_alaw_round_trip_is_within_half_a_step(x: int) -> None:
    code = alaw_encode(np.array([x], np.int16))
    assert abs(int(alaw_decode(code)[0]) - x) <= step("alaw", code[0]) // 2  # clipping too


@given(st.integers(0, 255))
def test_bytes_survive_decode_then_encode(b: int) -> None:
    assert alaw_encode(alaw_decode(bytes([b]))) == bytes([b])
    # μ-law 0x7F is "negative zero": it decodes to 0, which encodes as 0xFF.
    assert ulaw_encode(ulaw_decode(bytes([b]))) == (b"\xff" if b == 0x7F else bytes([b]))


def test_the_encoders_never_emit_ulaw_negative_zero() -> None:
    assert set(ulaw_encode(ALL_PCM)) == set(range(256)) - {0x7F}
    assert set(alaw_encode(ALL_PCM)) == set(range(256))


@pytest.mark.parametrize("encode", [ulaw_encode, alaw_encode])
def test_encoders_reject_other_dtypes_and_shapes(encode: Encode) -> None:
    for bad in (np.zeros(4, np.float32), np.zeros(4, np.int32), np.zeros(4, ">i2")):
        with pytest.raises(ValueError, match="int16"):
            encode(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="int16"):
        encode([0, 1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D"):
        encode(np.zeros((2, 160), np.int16))
