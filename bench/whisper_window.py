"""Whisper's encoder window: word error and time of ``WhisperSTT()`` (a 10 s window)
against ``WhisperSTT(min_window=30.0)`` (faster-whisper's full 30 s window, as before).

    python bench/whisper_window.py [--snr 15,5]

The utterances are the 24 requests of ``_voice.py`` spoken by Piper, plus 6 runs of 3
and 6 of them in a row (0.4 s apart, 7-16 s). Each is recognized as the session hands it
over: 0.3 s of pre-roll, and after the speech 0.5 s of silence for the full window (the
VAD's end, as before) or 0.12 s for the short one (the user's first pause). With
``--snr``, white noise at those signal-to-noise ratios (dB) is added as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import numpy as np

from _voice import RATE, clips, word_errors
from rejoinder.models.audio import AudioFrame
from rejoinder.providers.local import WhisperSTT


def noisy(pcm: np.ndarray, snr_db: float | None, seed: int) -> np.ndarray:
    if snr_db is None:
        return pcm
    f = pcm.astype(np.float64)
    power = float(np.mean(f[np.abs(f) > 100] ** 2))
    noise = np.random.default_rng(seed).normal(0, np.sqrt(power / 10 ** (snr_db / 10)), f.size)
    return np.clip(f + noise, -32768, 32767).astype(np.int16)


async def bench(snrs: list[float | None]) -> dict[str, object]:
    spoken = await clips()
    items = [(c.text, c.pcm[: round(c.speech_end * RATE)]) for c in spoken]
    gap = np.zeros(round(0.4 * RATE), np.int16)
    for k in (3, 6):
        for first in (0, 8, 16):
            run = [spoken[(first + j) % len(spoken)] for j in range(k)]
            pcm = np.concatenate(
                [p for c in run for p in (c.pcm[: round(c.speech_end * RATE)], gap)][:-1]
            )
            items.append((" ".join(c.text for c in run), pcm))
    short, full = WhisperSTT(), WhisperSTT(min_window=30.0)
    await short.load()
    await full.load()
    out: dict[str, object] = {"bench": "whisper_window", "utterances": len(items)}
    for snr in snrs:
        errors = {"short": 0, "full": 0}
        seconds: dict[str, list[float]] = {"short": [], "full": []}
        words = 0
        for n, (text, speech) in enumerate(items):
            for name, stt, after in (("short", short, 0.12), ("full", full, 0.5)):
                before = np.zeros(round(0.3 * RATE), np.int16)
                pcm = np.concatenate([before, speech, np.zeros(round(after * RATE), np.int16)])
                pcm = noisy(pcm, snr, n)
                frames = [AudioFrame(pcm[i : i + 320], RATE) for i in range(0, pcm.size, 320)]
                t0 = time.perf_counter()
                heard = await stt.recognize(frames)
                seconds[name].append(time.perf_counter() - t0)
                e, w = word_errors(text, heard)
                errors[name] += e
            words += w
        out["clean" if snr is None else f"snr_{snr:g}_db"] = {
            "word_error_rate": {k: round(v / words, 4) for k, v in errors.items()},
            "median_ms": {k: round(statistics.median(v) * 1000, 1) for k, v in seconds.items()},
            "max_ms": {k: round(max(v) * 1000, 1) for k, v in seconds.items()},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snr", default="15,5", help="noise levels in dB, comma-separated")
    args = parser.parse_args()
    snrs: list[float | None] = [None, *(float(x) for x in args.snr.split(",") if x)]
    print(json.dumps(asyncio.run(bench(snrs)), separators=(",", ":")))


if __name__ == "__main__":
    main()
