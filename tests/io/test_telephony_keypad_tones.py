"""In-band DTMF: the tones we send, through G.711 and resampling, read back by the detector;
and what the detector must not read as keys (noise, voices, chords)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.telephony.keypad_tones import (
    COLUMN_HZ,
    KEYPAD,
    PAUSES,
    ROW_HZ,
    detect_dtmf,
    dtmf_tones,
)
from rejoinder.models import g711

ALL_KEYS = "0123456789*#ABCD"
RATE = 8000


def _spectrum_peaks(samples: np.ndarray, rate: int, count: int) -> list[float]:
    """The ``count`` strongest frequencies (Hz) of a windowed FFT, strongest first."""
    windowed = samples.astype(np.float64) * np.hanning(len(samples))
    magnitude = np.abs(np.fft.rfft(windowed, n=16 * len(samples)))
    freqs = np.fft.rfftfreq(16 * len(samples), 1 / rate)
    peaks: list[float] = []
    for _ in range(count):
        i = int(magnitude.argmax())
        peaks.append(float(freqs[i]))
        magnitude[max(0, i - 16 * 8) : i + 16 * 8] = 0  # blank the lobe around it
    return peaks


def test_keypad_is_the_q23_grid() -> None:
    assert ROW_HZ == (697.0, 770.0, 852.0, 941.0)
    assert COLUMN_HZ == (1209.0, 1336.0, 1477.0, 1633.0)
    assert KEYPAD["1"] == (697.0, 1209.0)
    assert KEYPAD["5"] == (770.0, 1336.0)
    assert KEYPAD["9"] == (852.0, 1477.0)
    assert KEYPAD["0"] == (941.0, 1336.0)
    assert KEYPAD["*"] == (941.0, 1209.0)
    assert KEYPAD["#"] == (941.0, 1477.0)
    assert KEYPAD["D"] == (941.0, 1633.0)
    assert set(KEYPAD) == set(ALL_KEYS)
    assert PAUSES == {"w": 0.5, "W": 1.0}


@pytest.mark.parametrize("key", list(ALL_KEYS))
def test_each_key_sounds_its_two_frequencies(key: str) -> None:
    tone = dtmf_tones(key)
    assert tone.dtype == np.int16
    assert len(tone) == 800  # 0.1 s at 8 kHz
    peaks = sorted(_spectrum_peaks(tone, RATE, 2))
    low, high = KEYPAD[key]
    assert peaks[0] == pytest.approx(low, abs=3)
    assert peaks[1] == pytest.approx(high, abs=3)


def test_timing_gaps_and_pauses() -> None:
    assert len(dtmf_tones("")) == 0
    assert len(dtmf_tones("12")) == 800 + 560 + 800  # tone, 70 ms gap, tone
    assert len(dtmf_tones("1w2")) == 800 + 4000 + 800  # a pause replaces the gap
    assert len(dtmf_tones("1W2")) == 800 + 8000 + 800
    assert len(dtmf_tones("ww")) == 8000
    assert not dtmf_tones("wW").any()
    assert len(dtmf_tones("3", 16000, tone=0.05, gap=0.02)) == 800
    assert len(dtmf_tones("33", 16000, tone=0.05, gap=0.02)) == 800 + 320 + 800
    pieces = dtmf_tones("1w2")
    assert not pieces[800 : 800 + 4000].any()  # the pause is silence
    assert np.array_equal(dtmf_tones("a"), dtmf_tones("A"))  # lower-case a-d as upper


def test_edges_are_ramped_not_clicks() -> None:
    tone = dtmf_tones("1").astype(np.int32)
    peak = np.abs(tone).max()
    assert abs(tone[0]) < 0.01 * peak and abs(tone[-1]) < 0.01 * peak
    # Within the first millisecond the envelope is still small; by 5 ms it is full.
    assert np.abs(tone[:8]).max() < 0.15 * peak
    assert np.abs(tone[40:80]).max() > 0.9 * peak
    # No sample-to-sample jump bigger than the sinusoids themselves make at full level.
    assert np.abs(np.diff(tone)).max() <= 2 * np.pi * 1209 / RATE * peak


@pytest.mark.parametrize(
    "digits",
    ["12x", "1 2", "E", "#-", "١", "p", ",", "\n", "1W2w3!"],
)
def test_anything_else_is_a_clear_value_error(digits: str) -> None:
    with pytest.raises(ValueError, match="not a key"):
        dtmf_tones(digits)


def test_bad_parameters_raise() -> None:
    with pytest.raises(ValueError, match="amplitude"):
        dtmf_tones("1", amplitude=0.5)  # the pair could reach full scale
    with pytest.raises(ValueError, match="amplitude"):
        dtmf_tones("1", amplitude=0)
    with pytest.raises(ValueError, match="tone must be positive"):
        dtmf_tones("1", tone=0)
    with pytest.raises(ValueError, match="tone must be positive"):
        dtmf_tones("1", gap=-0.01)
    with pytest.raises(ValueError, match="sample_rate"):
        dtmf_tones("1", 3000)  # 1633 Hz needs more than 3266 samples a second
    with pytest.raises(ValueError, match="sample_rate"):
        detect_dtmf(np.zeros(800, np.int16), 8000.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D"):
        detect_dtmf(np.zeros((2, 800), np.int16), 8000)


@pytest.mark.parametrize(
    ("law", "encode", "decode"),
    [("ulaw", g711.ulaw_encode, g711.ulaw_decode), ("alaw", g711.alaw_encode, g711.alaw_decode)],
)
def test_levels_survive_g711_without_clipping(
    law: str, encode: Callable[[np.ndarray], bytes], decode: Callable[[bytes], np.ndarray]
) -> None:
    """No sample beyond the codec's largest level, so every one comes back within half a
    quantisation step (512 at the top segment, on the 16-bit scale, plus 3 for μ-law's
    14-bit truncation); a clipped sample would not."""
    for amplitude in (0.3, 0.49):  # the default, and the loudest allowed
        sent = dtmf_tones(ALL_KEYS, amplitude=amplitude)
        assert np.abs(sent.astype(np.int32)).max() < 32124  # μ-law's largest level (A-law 32256)
        heard = decode(encode(sent))
        error = heard.astype(np.float64) - sent
        assert np.abs(error).max() <= 515, (law, amplitude)
        snr = 10 * np.log10(np.mean(sent.astype(np.float64) ** 2) / np.mean(error**2))
        assert snr > 30, (law, amplitude, snr)  # companding noise only
        assert detect_dtmf(heard, RATE) == ALL_KEYS
    # the same check catches a pair too loud for the codec (0.6 per tone, clipped to int16)
    t = np.arange(800) / RATE
    loud = 0.6 * (np.sin(2 * np.pi * 697 * t) + np.sin(2 * np.pi * 1209 * t))
    too_loud = np.clip(np.round(loud * 32767), -32768, 32767).astype(np.int16)
    clipped = decode(encode(too_loud)).astype(np.float64) - np.round(loud * 32767)
    assert np.abs(clipped).max() > 2000


def test_decodes_after_ulaw_and_resampling_to_16k() -> None:
    digits = "0123456789*#ABCD1w2W3"
    sent = dtmf_tones(digits)
    heard = g711.ulaw_decode(g711.ulaw_encode(sent))
    assert detect_dtmf(heard, RATE) == digits.replace("w", "").replace("W", "")
    wideband = soxr.resample(heard, RATE, 16000)
    assert wideband.dtype == np.int16
    assert detect_dtmf(wideband, 16000) == "0123456789*#ABCD123"
    # and generated at 16 kHz, then down to the phone's 8 kHz and through A-law
    sent16 = dtmf_tones("*0#", 16000)
    down = soxr.resample(sent16, 16000, RATE)
    assert detect_dtmf(g711.alaw_decode(g711.alaw_encode(down)), RATE) == "*0#"


def test_repeated_keys_are_separate_presses() -> None:
    assert detect_dtmf(dtmf_tones("1111"), RATE) == "1111"
    assert detect_dtmf(dtmf_tones("55", gap=0.04), RATE) == "55"  # Q.24's shortest pause
    assert detect_dtmf(dtmf_tones("5", tone=2.0), RATE) == "5"  # a long press is one


@pytest.mark.parametrize("lead", range(0, 64, 9))
def test_duration_limits(lead: int) -> None:
    """40 ms tones decode at any alignment with the frames; 25 ms ones never do."""
    pad = np.zeros(lead, np.int16)
    assert detect_dtmf(np.concatenate([pad, dtmf_tones("8", tone=0.04)]), RATE) == "8"
    assert detect_dtmf(np.concatenate([pad, dtmf_tones("8", tone=0.025)]), RATE) == ""
    # a 10 ms dropout inside a tone is one press; 40 ms of silence makes two
    for hole, presses in ((0.01, "8"), (0.04, "88")):
        tone = dtmf_tones("8", tone=0.2).copy()
        start = 800 + lead
        tone[start : start + round(hole * RATE)] = 0
        assert detect_dtmf(tone, RATE) == presses


def _pair(low: float, high: float, low_level: float, high_level: float) -> np.ndarray:
    """0.1 s of two sinusoids at the given levels (fractions of full scale)."""
    t = np.arange(800) / RATE
    wave = low_level * np.sin(2 * np.pi * low * t) + high_level * np.sin(2 * np.pi * high * t)
    return np.round(wave * 32767).astype(np.int16)


def test_twist_limit() -> None:
    for twist_db, decoded in ((0, "6"), (6, "6"), (7.5, "6"), (8.5, ""), (12, "")):
        quiet = 0.3 * 10 ** (-twist_db / 20)
        assert detect_dtmf(_pair(770, 1477, 0.3, quiet), RATE) == decoded, twist_db
        assert detect_dtmf(_pair(770, 1477, quiet, 0.3), RATE) == decoded, twist_db


def test_frequency_tolerance() -> None:
    for key, (low, high) in KEYPAD.items():
        for off in (-0.015, 0.015):  # Q.24: must be accepted
            assert detect_dtmf(_pair(low * (1 + off), high, 0.3, 0.3), RATE) == key
            assert detect_dtmf(_pair(low, high * (1 + off), 0.3, 0.3), RATE) == key
        for off in (-0.05, 0.05):
            assert detect_dtmf(_pair(low * (1 + off), high, 0.3, 0.3), RATE) == ""
        for off in (-0.035, 0.035):
            assert detect_dtmf(_pair(low, high * (1 + off), 0.3, 0.3), RATE) == ""


def test_quiet_tones_and_silence() -> None:
    assert detect_dtmf(np.zeros(8000, np.int16), RATE) == ""
    assert detect_dtmf(np.zeros(100, np.int16), RATE) == ""  # shorter than a frame
    assert detect_dtmf(dtmf_tones("7", amplitude=0.01), RATE) == "7"  # about -40 dBFS each
    assert detect_dtmf(dtmf_tones("7", amplitude=0.002), RATE) == ""  # below -45 dBFS RMS


def _vowel(f0: float, rng: np.random.Generator, seconds: float = 1.0) -> np.ndarray:
    """A sung /a/: harmonics of ``f0`` (with vibrato) under formants at 700, 1220 and
    2600 Hz, the vowel whose first two formants sit on DTMF's 697 and 1209 Hz."""
    t = np.arange(round(seconds * RATE)) / RATE
    pitch = f0 * (1 + 0.02 * np.sin(2 * np.pi * 5 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    out = np.zeros_like(t)
    for h in range(1, int(3800 / f0)):
        f = h * f0
        gain = sum(
            1 / np.sqrt(1 + ((f - c) / (bw / 2)) ** 2)
            for c, bw in ((700, 90), (1220, 110), (2600, 160))
        )
        out += gain * np.sin(h * phase + rng.uniform(0, 2 * np.pi))
    return np.round(out / np.abs(out).max() * 12000).astype(np.int16)


@pytest.mark.parametrize("f0", [100.0, 116.0, 175.0, 233.0, 350.0])
def test_voices_are_not_keys(f0: float) -> None:
    rng = np.random.default_rng(int(f0))
    voice = _vowel(f0, rng)
    assert detect_dtmf(voice, RATE) == ""
    assert detect_dtmf(g711.ulaw_decode(g711.ulaw_encode(voice)), RATE) == ""


def test_noise_and_chords_are_not_keys() -> None:
    rng = np.random.default_rng(20261206)
    white = rng.normal(0, 4000, 5 * RATE)
    assert detect_dtmf(np.clip(white, -32768, 32767).astype(np.int16), RATE) == ""
    # noise shaped like speech's spectrum (most energy below 1 kHz)
    speechy = np.convolve(white, np.hanning(9) / np.hanning(9).sum(), mode="same")
    assert detect_dtmf(speechy.astype(np.int16), RATE) == ""
    t = np.arange(RATE) / RATE
    chord = sum(np.sin(2 * np.pi * f * t) for f in (600, 1000, 1400, 2000))  # no DTMF frequency
    assert detect_dtmf(np.round(chord * 5000).astype(np.int16), RATE) == ""
    # a real key pair with a loud third tone on top is refused, not guessed at
    busy = np.sin(2 * np.pi * 697 * t) + np.sin(2 * np.pi * 1209 * t) + np.sin(2 * np.pi * 1000 * t)
    assert detect_dtmf(np.round(busy * 6000).astype(np.int16), RATE) == ""
    # two rows with one column: no single key
    rows = sum(np.sin(2 * np.pi * f * t) for f in (697, 852, 1336))
    assert detect_dtmf(np.round(rows * 6000).astype(np.int16), RATE) == ""


@settings(max_examples=40, deadline=None)
@given(
    digits=st.text(st.sampled_from(ALL_KEYS), min_size=1, max_size=8),
    law=st.sampled_from(["ulaw", "alaw"]),
    rate=st.sampled_from([8000, 16000]),
    lead=st.integers(0, 400),
)
def test_any_key_sequence_round_trips(digits: str, law: str, rate: int, lead: int) -> None:
    """Sent at 8 kHz, through G.711, perhaps resampled to 16 kHz, after any lead-in."""
    sent = np.concatenate([np.zeros(lead, np.int16), dtmf_tones(digits)])
    encode, decode = (
        (g711.ulaw_encode, g711.ulaw_decode)
        if law == "ulaw"
        else (g711.alaw_encode, g711.alaw_decode)
    )
    heard = decode(encode(sent))
    if rate != RATE:
        heard = soxr.resample(heard, RATE, rate)
    assert detect_dtmf(heard, rate) == digits
