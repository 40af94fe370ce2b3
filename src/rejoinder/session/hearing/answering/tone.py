"""How loud and how tonal a short window of audio is: the two measures the answering
detector reads (no I/O, no state).

Loudness is the window's RMS in dB below full scale. Tonality is the share of the
window's energy in the phone band (300-3400 Hz) that sits in its strongest spectral peak
(the peak's bin and its neighbours, which is where a Hann window puts a pure tone's
energy). A machine's beep is a pure tone: the share is well over 0.8 even under line
noise. Speech is a sum of harmonics whose pitch moves, and noise is spread over every
bin, so both stay far lower. The peak's frequency is returned too: a beep holds it from
one window to the next.

The same measure works at 8 kHz and 16 kHz: the window is a fixed duration, and it is
zero-padded to a power of two so the bins are a few tens of hertz wide either way.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ....models.audio import AudioFrame

__all__ = ["frame_samples", "loudness", "tonality"]

_BAND = (300.0, 3400.0)  # what a phone line carries
_PEAK_BINS = 2  # bins each side of the peak that hold a windowed tone's energy
_SILENT_DB = -100.0

_hann_cache: dict[int, npt.NDArray[np.float64]] = {}


def frame_samples(frame: AudioFrame) -> npt.NDArray[np.float64]:
    """The frame's first channel as floats in -1..1 (a phone call is mono; a stereo
    frame is heard by its first channel)."""
    data = frame.data
    if frame.num_channels > 1:
        data = data[:: frame.num_channels]
    return data.astype(np.float64) / 32768.0


def loudness(samples: npt.NDArray[np.float64]) -> float:
    """RMS of ``samples`` (floats in -1..1) in dB below full scale."""
    if samples.shape[0] == 0:
        return _SILENT_DB
    power = float(np.mean(samples * samples))
    return 10.0 * math.log10(power) if power > 1e-10 else _SILENT_DB


def tonality(samples: npt.NDArray[np.float64], rate: int) -> tuple[float, float]:
    """The share (0..1) of the in-band energy of ``samples`` in its strongest peak, and
    that peak's frequency in Hz."""
    n = int(samples.shape[0])
    if n < 16:
        return 0.0, 0.0
    window = _hann_cache.get(n)
    if window is None:
        window = _hann_cache[n] = np.hanning(n)
    size = 1 << (n - 1).bit_length()  # zero-padded to a power of two for the FFT
    spectrum = np.abs(np.fft.rfft(samples * window, size)) ** 2
    hz_per_bin = rate / size
    low = max(1, int(_BAND[0] / hz_per_bin))
    high = min(spectrum.shape[0] - 1, int(_BAND[1] / hz_per_bin) + 1)
    band = spectrum[low:high]
    total = float(band.sum())
    if total <= 1e-12:
        return 0.0, 0.0
    peak = int(np.argmax(band))
    # A Hann window spreads a tone over +-2 bins of n points; padding to size multiplies
    # the bins it covers by size / n.
    spread = math.ceil(_PEAK_BINS * size / n)
    around = float(band[max(0, peak - spread) : peak + spread + 1].sum())
    return around / total, (low + peak + _offset(band, peak)) * hz_per_bin


def _offset(band: npt.NDArray[np.float64], peak: int) -> float:
    """Where between bins the peak really is (a parabola through the log magnitudes of
    the peak and its neighbours): a steady tone then reads the same to a few hertz from
    one window to the next, where a voice's harmonic drifts."""
    if not 0 < peak < band.shape[0] - 1:
        return 0.0
    left, mid, right = (math.log(float(v) + 1e-20) for v in band[peak - 1 : peak + 2])
    curve = left - 2 * mid + right
    return 0.0 if curve >= 0 else max(-0.5, min(0.5, 0.5 * (left - right) / curve))
