"""G.711 CPU cost: μ-law and A-law encode + decode of 8 kHz telephone audio.

Times ``rejoinder.models.g711`` on a 20 ms frame (160 samples, what a phone call's RTP
packet or media-stream message carries) and on one second of audio (8000 samples), on
quiet noise plus a tone. Each figure is the best of ``--repeat`` runs of ``--number``
calls (the least disturbed one on a busy machine). Prints one JSON line per law: µs to
encode, to decode and both, per frame and per second of audio, and the share of one core
a call's two directions cost (encode what the agent says, decode what the caller says).

    python bench/g711_cost.py [--number 20000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from functools import partial

import numpy as np

from rejoinder.models import g711

RATE = 8000
FRAME = 160  # 20 ms at 8 kHz


def audio(samples: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(samples) / RATE
    x = 6000 * np.sin(2 * np.pi * 440 * t) + rng.normal(0, 300, samples)
    return np.clip(x, -32768, 32767).astype(np.int16)


def best_us(fn: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def run(law: str, number: int, repeat: int) -> dict[str, object]:
    encode, decode = {
        "ulaw": (g711.ulaw_encode, g711.ulaw_decode),
        "alaw": (g711.alaw_encode, g711.alaw_decode),
    }[law]
    out: dict[str, object] = {"law": law}
    both_frame = 0.0
    for name, samples, n in (("frame", FRAME, number), ("second", RATE, max(1, number // 20))):
        pcm = audio(samples)
        data = encode(pcm)
        enc = best_us(partial(encode, pcm), n, repeat)
        dec = best_us(partial(decode, data), n, repeat)
        out[f"encode_us_per_{name}"] = round(enc, 2)
        out[f"decode_us_per_{name}"] = round(dec, 2)
        out[f"both_us_per_{name}"] = round(enc + dec, 2)
        both_frame = both_frame or enc + dec
    # One call: encode 50 frames/s out and decode 50 frames/s in (1 % of a core = 1e4 µs/s).
    out["core_share_per_call_pct"] = round(both_frame * 50 / 1e4, 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    for law in ("ulaw", "alaw"):
        print(json.dumps(run(law, args.number, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
