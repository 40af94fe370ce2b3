"""Write the two sounds ``rj.BackgroundAudio`` ships: a room-tone loop and a keyboard-typing
loop, synthesized here from seeded noise (no recording, no third-party material).

    .venv/bin/python tools/make_background_sounds.py [--out DIR]

They are written to ``src/rejoinder/io/background_sounds/`` (16 kHz, 16-bit mono WAV, about
176 KB together), and are covered by the project's licence (Apache-2.0), like this script.
Running it again writes the same bytes (fixed seeds; numpy is pinned).

* ``room_tone.wav`` (3 s): the hum of a quiet room. Noise shaped in the frequency domain
  (about 1/f^1.2 from 40 Hz, falling away above 3 kHz, a faint ventilation band around
  250 Hz), synthesized with an inverse FFT: the result is periodic, so the loop has no
  seam at all. RMS about -40 dBFS: well under a voice at -20 dBFS.
* ``keyboard.wav`` (2.5 s): someone typing: bursts of 3-8 keystrokes 90-170 ms apart with
  pauses between them, now and then a space bar. A keystroke is a press (a click of
  band-limited noise, 1.5-6 kHz, decaying in a few ms, over a short low "thock") and a
  softer release 70-120 ms later. Events are placed modulo the loop's length, so a
  keystroke that runs over the end continues at the start: seamless too. Peaks about
  -12 dBFS (RMS about -37 dBFS).
"""

from __future__ import annotations

import argparse
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

RATE = 16000
OUT = Path(__file__).resolve().parent.parent / "src/rejoinder/io/background_sounds"

Signal = npt.NDArray[np.float64]


def room_tone(seconds: float = 3.0, seed: int = 20240501) -> Signal:
    """A seamless loop of room tone, as floats of full scale."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    magnitude = np.zeros_like(freqs)
    audible = freqs >= 40.0
    magnitude[audible] = freqs[audible] ** -0.6  # power ~ 1/f^1.2
    magnitude *= 1 / (1 + (freqs / 3000.0) ** 4)  # the room's soft top end
    magnitude *= 1 + 0.8 * np.exp(-(((freqs - 250.0) / 60.0) ** 2))  # a ventilation band
    spectrum = magnitude * np.exp(2j * np.pi * rng.random(freqs.shape))
    spectrum *= rng.rayleigh(1.0, freqs.shape)  # noise, not a comb of steady tones
    signal = np.fft.irfft(spectrum, n)
    return _at_rms(signal, -40.0)


def keyboard(seconds: float = 2.5, seed: int = 7) -> Signal:
    """A seamless loop of typing, as floats of full scale."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    out = np.zeros(n)
    t = 0.05
    while t < seconds:
        for _ in range(int(rng.integers(3, 9))):
            space = rng.random() < 0.12
            level = rng.uniform(0.7, 1.0) * (1.25 if space else 1.0)
            _add(out, _keystroke(rng, space) * level, round(t * RATE))
            release = t + rng.uniform(0.07, 0.12)
            _add(out, _keystroke(rng, space, release=True) * level * 0.45, round(release * RATE))
            t += rng.uniform(0.09, 0.17)
        t += rng.uniform(0.25, 0.6)  # a pause between words
    return out * (10 ** (-12 / 20) / np.max(np.abs(out)))


def _keystroke(rng: np.random.Generator, space: bool, *, release: bool = False) -> Signal:
    """One press (or release): a band-limited click over a short low thock."""
    length = round(0.04 * RATE)
    t = np.arange(length) / RATE
    click = rng.standard_normal(length) * np.exp(-t / (0.0025 if release else 0.004))
    spectrum = np.fft.rfft(click)
    freqs = np.fft.rfftfreq(length, 1 / RATE)
    low, high = (900.0, 4000.0) if space else (1500.0, 6000.0)
    spectrum[(freqs < low) | (freqs > high)] = 0
    click = np.fft.irfft(spectrum, length)
    click /= np.max(np.abs(click)) or 1.0
    pitch = rng.uniform(140.0, 200.0) if space else rng.uniform(220.0, 360.0)
    thock = np.sin(2 * np.pi * pitch * t) * np.exp(-t / (0.012 if space else 0.007))
    attack = np.minimum(1.0, t / 0.0005)  # half a millisecond: no step at the onset
    body: Signal = attack * (click + (0.9 if space else 0.5) * thock)
    return body


def _add(out: Signal, event: Signal, at: int) -> None:
    """Add ``event`` at sample ``at``, wrapping around the loop's end."""
    index = (at + np.arange(event.size)) % out.size
    np.add.at(out, index, event)


def _at_rms(signal: Signal, dbfs: float) -> Signal:
    rms = float(np.sqrt(np.mean(signal**2)))
    scaled: Signal = signal * (10 ** (dbfs / 20) / rms)
    return scaled


def write_wav(path: Path, signal: Signal) -> None:
    pcm = np.clip(np.round(signal * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(RATE)
        file.writeframes(pcm.tobytes())


SOUNDS = {"room_tone.wav": room_tone, "keyboard.wav": keyboard}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the directory to write to")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in SOUNDS.items():
        path = args.out / name
        write_wav(path, make())
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
