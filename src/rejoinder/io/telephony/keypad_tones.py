"""In-band DTMF: keypad tones to send down a media stream, and a Goertzel detector for them.

A phone menu of another company listens for keys as tones in the audio itself: each key is
one low ("row") and one high ("column") frequency played together (ITU-T Q.23):

=========  ======  ======  ======  ======
           1209 Hz 1336 Hz 1477 Hz 1633 Hz
=========  ======  ======  ======  ======
 697 Hz      1       2       3       A
 770 Hz      4       5       6       B
 852 Hz      7       8       9       C
 941 Hz      *       0       #       D
=========  ======  ======  ======  ======

``dtmf_tones`` writes them as int16 PCM, ready for the stream's encoder. ``w`` is half a
second's pause and ``W`` a second's, the carriers' convention for sending keys (Twilio's
``sendDigits``, https://www.twilio.com/docs/voice/twiml/number#attributes-senddigits, and
Telnyx's send-DTMF command; Bandwidth's ``<SendDtmf>``,
https://dev.bandwidth.com/docs/voice/bxml/sendDtmf, documents both and that a pause stands
in for the gap between two tones, as here). Each tone has 5 ms raised-cosine edges (a hard
edge clicks and spreads energy across the band). The default level is 0.3 of full scale per
tone, about -7 dBm0 (a full-scale sine is +3.17 dBm0 in G.711): the pair peaks at 0.6 of
full scale, so μ-law and A-law carry it without clipping.

``detect_dtmf`` reads keys back (the tests decode what was sent, after G.711 and
resampling). It runs the Goertzel recurrence, vectorised with numpy over frames and
frequencies, on 25.6 ms frames (205 samples at 8 kHz, the classic choice: adjacent row
frequencies fall outside each other's main lobe) every 6.4 ms, probing each nominal
frequency and 1.5 % either side of it (Q.24's tolerance). A frame holds a key when the two
strongest frequencies carry most of its energy (``min_purity``), which is what speech and
music fail: their energy is spread over many harmonics. Its limits, honestly:

* twist: the two tones may differ by up to ``max_twist_db`` (8 dB) either way (7.5 dB
  decodes, 8.5 dB does not); real receivers often allow less one way (4 dB) than the other.
* duration: a key counts once about ``min_tone`` (32 ms) of it is seen: 40 ms tones always
  decode, 30 ms ones sometimes, 25 ms ones never (receivers to Q.24 typically must accept
  40 ms and must refuse about 20-23 ms). An interruption of up to 15 ms inside a tone is
  bridged; 30 ms or more of silence between two equal tones makes two presses.
* frequency: within 2.5 % is always accepted; beyond about 3.5 % (high group) or 4 % (low
  group) refused.
* a key with a loud third tone or voice on top of it is refused, not guessed at; and it is
  a test and diagnostic tool, not a certified Q.24 receiver.
"""

from __future__ import annotations

import math
from itertools import groupby
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from rejoinder.models.audio import PCM16

__all__ = ["COLUMN_HZ", "KEYPAD", "PAUSES", "ROW_HZ", "detect_dtmf", "dtmf_tones"]

ROW_HZ = (697.0, 770.0, 852.0, 941.0)
COLUMN_HZ = (1209.0, 1336.0, 1477.0, 1633.0)
_LAYOUT = ("123A", "456B", "789C", "*0#D")
KEYPAD: dict[str, tuple[float, float]] = {
    key: (ROW_HZ[r], COLUMN_HZ[c]) for r, keys in enumerate(_LAYOUT) for c, key in enumerate(keys)
}
"""Each key's (row, column) frequencies in Hz (ITU-T Q.23)."""

PAUSES = {"w": 0.5, "W": 1.0}
"""Pause characters and their lengths in seconds."""

_MAX_AMPLITUDE = 0.49  # per tone: the pair then peaks below G.711's largest level (32124)
_RAMP = 0.005  # seconds of raised-cosine edge on each side of a tone
_FRAME = 0.0256  # seconds: 205 samples at 8 kHz
_TOLERANCE = 0.015  # Q.24: a receiver must accept frequencies within 1.5 %
_MAX_DROPOUT = 0.02  # seconds of interruption inside a tone still read as one press


def dtmf_tones(
    digits: str,
    sample_rate: int = 8000,
    *,
    tone: float = 0.1,
    gap: float = 0.07,
    amplitude: float = 0.3,
) -> PCM16:
    """The keypad tones of ``digits`` as int16 PCM at ``sample_rate``, mono.

    ``digits`` holds ``0-9 * # A-D`` (``a-d`` too), ``w`` (0.5 s of silence) and ``W`` (1 s);
    anything else raises ``ValueError``. Each key sounds for ``tone`` seconds; two keys in a
    row are ``gap`` seconds apart, while a pause replaces the gap. ``amplitude`` is each of
    the two tones' peak as a fraction of full scale, at most 0.49 so the pair never clips
    (not even in G.711). No silence is added before the first or after the last key.
    """
    import numpy as np

    if not isinstance(sample_rate, int) or sample_rate < 2 * int(COLUMN_HZ[-1]) + 1:
        raise ValueError(f"sample_rate must be an int above {2 * COLUMN_HZ[-1]:.0f} Hz")
    if not tone > 0 or not gap >= 0 or not math.isfinite(tone + gap):
        raise ValueError(f"tone must be positive and gap zero or more, not {tone!r}, {gap!r}")
    if not 0 < amplitude <= _MAX_AMPLITUDE:
        raise ValueError(f"amplitude must be in (0, {_MAX_AMPLITUDE}], not {amplitude!r}")
    for at, char in enumerate(digits):
        if char.upper() not in KEYPAD and char not in PAUSES:
            raise ValueError(
                f"{char!r} at {at} is not a key (0-9 * # A-D) nor a pause (w, W) in {digits!r}"
            )
    length = round(tone * sample_rate)
    t = np.arange(length) / sample_rate
    ramp = min(round(_RAMP * sample_rate), length // 2)
    envelope = np.ones(length)
    if ramp:
        edge = 0.5 - 0.5 * np.cos(np.pi * np.arange(1, ramp + 1) / (ramp + 1))
        envelope[:ramp] = edge
        envelope[length - ramp :] = edge[::-1]
    pieces: list[npt.NDArray[np.float64]] = []
    after_tone = False
    for char in digits:
        if char in PAUSES:
            pieces.append(np.zeros(round(PAUSES[char] * sample_rate)))
            after_tone = False
            continue
        if after_tone:
            pieces.append(np.zeros(round(gap * sample_rate)))
        low, high = KEYPAD[char.upper()]
        wave = np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)
        pieces.append(amplitude * envelope * wave)
        after_tone = True
    if not pieces:
        return np.zeros(0, dtype=np.int16)
    return np.round(np.concatenate(pieces) * 32767).astype(np.int16)


def detect_dtmf(
    samples: npt.ArrayLike,
    sample_rate: int,
    *,
    min_tone: float = 0.032,
    max_twist_db: float = 8.0,
    min_purity: float = 0.75,
    min_level_dbfs: float = -45.0,
) -> str:
    """The keys heard in ``samples`` (mono PCM, int16 scale), in order, e.g. ``"12#"``.

    A key counts once per press: it must sound for about ``min_tone`` seconds, its two
    tones within ``max_twist_db`` of each other, carrying at least ``min_purity`` of the
    frame's energy, in a frame no quieter than ``min_level_dbfs`` (RMS, int16 full scale).
    See the module docstring for what that lets through and what it refuses.
    """
    import numpy as np

    if not isinstance(sample_rate, int) or sample_rate < 2 * int(COLUMN_HZ[-1]) + 1:
        raise ValueError(f"sample_rate must be an int above {2 * COLUMN_HZ[-1]:.0f} Hz")
    signal = np.asarray(samples, dtype=np.float64)
    if signal.ndim != 1:
        raise ValueError(f"samples must be one channel (1-D), not shape {signal.shape}")
    frame = round(_FRAME * sample_rate)
    hop = max(1, frame // 4)
    if len(signal) < frame:
        return ""
    frames = np.lib.stride_tricks.sliding_window_view(signal, frame)[::hop]
    nominal = np.array(ROW_HZ + COLUMN_HZ)
    probes = np.concatenate([nominal * (1 - _TOLERANCE), nominal, nominal * (1 + _TOLERANCE)])
    power = _goertzel_power(frames, probes, sample_rate).reshape(len(frames), 3, 8).max(axis=1)
    energy = np.einsum("ij,ij->i", frames, frames)
    loud = energy / frame >= (32768.0 * 10 ** (min_level_dbfs / 20)) ** 2
    # Share of the frame's energy at each frequency: 1.0 for a lone full-frame sinusoid.
    share = 2 * power / (frame * np.where(energy > 0, energy, 1.0)[:, None])
    row, col = share[:, :4].argmax(axis=1), share[:, 4:].argmax(axis=1)
    row_share = share[np.arange(len(frames)), row]
    col_share = share[np.arange(len(frames)), 4 + col]
    twist = np.abs(10 * np.log10(np.maximum(col_share, 1e-12) / np.maximum(row_share, 1e-12)))
    holds = loud & (row_share + col_share >= min_purity) & (twist <= max_twist_db)
    labels = [_LAYOUT[r][c] if h else "" for r, c, h in zip(row, col, holds, strict=True)]
    return _presses(labels, hop / sample_rate, frame / sample_rate, min_tone)


def _goertzel_power(
    frames: npt.NDArray[np.float64], freqs: npt.NDArray[np.float64], sample_rate: int
) -> npt.NDArray[np.float64]:
    """|X(f)|² of each frame at each frequency (any f, not only DFT bins): shape (frames, f).

    The Goertzel recurrence s[n] = x[n] + 2cos(ω)s[n-1] - s[n-2], run once per sample
    position across every frame and frequency at once.
    """
    import numpy as np

    coeff = 2 * np.cos(2 * np.pi * freqs / sample_rate)
    s1 = np.zeros((len(frames), len(freqs)))
    s2 = np.zeros_like(s1)
    for n in range(frames.shape[1]):
        s0 = frames[:, n, None] + coeff * s1 - s2
        s2 = s1
        s1 = s0
    result: npt.NDArray[np.float64] = s1 * s1 + s2 * s2 - coeff * s1 * s2
    return result


def _presses(labels: list[str], hop: float, frame: float, min_tone: float) -> str:
    """Runs of frame labels -> keys. A run of k frames that hold a key means about
    (k-1)*hop + 0.9*frame seconds of tone, and a run of k frames without one about
    k*hop - 0.6*frame of silence (both measured with ramped tones: a frame holds the key
    once about three quarters of it is tone)."""
    merged: list[tuple[str, int]] = []
    for label, run in groupby(labels):
        count = sum(1 for _ in run)
        if (
            label
            and len(merged) >= 2
            and merged[-2][0] == label
            and merged[-1][0] == ""
            and merged[-1][1] * hop - 0.6 * frame < _MAX_DROPOUT
        ):
            _, gap = merged.pop()
            _, before = merged.pop()
            merged.append((label, before + gap + count))
        else:
            merged.append((label, count))
    keys = [
        label for label, count in merged if label and (count - 1) * hop + 0.9 * frame >= min_tone
    ]
    return "".join(keys)
