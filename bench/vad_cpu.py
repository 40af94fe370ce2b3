"""Silero VAD CPU cost: many streams fed 16 kHz audio in 20 ms frames, on the real clock.

Each of ``--sessions`` streams gets ``--seconds`` of audio (eSpeak NG speech between
silences, rotated per stream so they are not in lockstep), pushed frame by frame and
stream by stream in turn, as a server handling that many calls would. ``push`` is
synchronous, so no event loop is involved. Prints one JSON line per ``batch_windows``
value: CPU seconds per session-second of audio and CPU µs per 20 ms frame.

    python bench/vad_cpu.py [--sessions 20] [--seconds 10] [--batch 1,4,10]

Needs the local extra and ``pip install --no-deps silero-vad==6.2.3``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.providers.local import EspeakTTS, SileroVAD

RATE = 16000
FRAME = 320  # 20 ms at 16 kHz
TEXT = (
    "Hello, this is a test of the offline voice agent. "
    "Please call me back tomorrow at three o'clock."
)


async def speech() -> AudioFrame:
    pcm = np.concatenate([frame.data async for frame in EspeakTTS().synthesize(TEXT)])
    return resample(AudioFrame(pcm, EspeakTTS().sample_rate), RATE)


def clip(seconds: float) -> np.ndarray:
    voice = asyncio.run(speech()).data
    audio = np.zeros(round(seconds * RATE), np.int16)
    start = RATE  # 1 s of silence, the speech, silence to the end
    n = min(voice.shape[0], audio.shape[0] - start)
    audio[start : start + n] = voice[:n]
    return audio


def run(audio: np.ndarray, sessions: int, batch: int) -> dict[str, object]:
    vad = SileroVAD(batch_windows=batch)
    streams = [vad.stream() for _ in range(sessions)]
    n_frames = audio.shape[0] // FRAME
    # Prebuild every frame outside the timed region (frames arrive ready-made in a server).
    feeds = [
        [
            AudioFrame(np.roll(audio, k * 7 * RATE // sessions)[i * FRAME : (i + 1) * FRAME], RATE)
            for i in range(n_frames)
        ]
        for k in range(sessions)
    ]
    warm = vad.stream()
    for frame in feeds[0][:50]:
        warm.push(frame)
    events = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(n_frames):
        for stream, frames in zip(streams, feeds, strict=True):
            events += len(stream.push(frames[i]))
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    audio_s = sessions * n_frames * FRAME / RATE
    return {
        "bench": "vad_cpu",
        "batch_windows": batch,
        "extra_latency_ms_max": round((batch - 1) * 32),
        "sessions": sessions,
        "audio_s_per_session": n_frames * FRAME / RATE,
        "events": events,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "cpu_s_per_session_s": round(cpu / audio_s, 5),
        "us_per_20ms_frame": round(cpu / (sessions * n_frames) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch", default="1,4,10", help="batch_windows values, comma-separated")
    args = parser.parse_args()
    audio = clip(args.seconds)
    for batch in (int(b) for b in args.batch.split(",")):
        print(json.dumps(run(audio, args.sessions, batch)), flush=True)


if __name__ == "__main__":
    main()
