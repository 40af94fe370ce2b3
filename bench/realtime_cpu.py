"""CPU cost of the realtime receive path per 100 ms of agent audio (no socket):
GPT-Live's output segmentation (``BurstDetector``) on speech and on silence, and the
base64 decode a client does for each ``session.output_audio.delta``.

Prints microseconds per 100 ms frame; a real-time stream must stay far below 100,000."""

from __future__ import annotations

import base64
import time

import numpy as np

from rejoinder.models.audio import AudioFrame
from rejoinder.models.bursts import BurstDetector

RATE = 24000
FRAMES = 3000  # 5 minutes of audio


def per_frame_us(frames: list[AudioFrame]) -> float:
    detector = BurstDetector()
    start = time.perf_counter()
    for frame in frames:
        detector.push(frame)
    return (time.perf_counter() - start) / len(frames) * 1e6


def main() -> None:
    rng = np.random.default_rng(0)
    speech = [
        AudioFrame((rng.standard_normal(2400) * 3000).astype(np.int16), RATE) for _ in range(FRAMES)
    ]
    silence = [AudioFrame(np.zeros(2400, np.int16), RATE) for _ in range(FRAMES)]
    mixed = [speech[i] if (i // 20) % 2 else silence[i] for i in range(FRAMES)]
    encoded = base64.b64encode(speech[0].to_pcm()).decode()
    start = time.perf_counter()
    for _ in range(FRAMES):
        AudioFrame.from_pcm(base64.b64decode(encoded), RATE)
    decode_us = (time.perf_counter() - start) / FRAMES * 1e6
    print(f"burst detector, speech : {per_frame_us(speech):7.1f} us per 100 ms frame")
    print(f"burst detector, silence: {per_frame_us(silence):7.1f} us per 100 ms frame")
    print(f"burst detector, 2 s on/off: {per_frame_us(mixed):7.1f} us per 100 ms frame")
    print(f"base64 + AudioFrame decode: {decode_us:7.1f} us per 100 ms frame")


if __name__ == "__main__":
    main()
