"""Smart Turn (``rejoinder.providers.local.SmartTurn``): cost per decision and accuracy on
speech from the offline voices, on the real clock.

**Cost.** ``--decisions`` judgements (after 5 warm-up ones) of 8 s windows of real speech:
the 24 requests of ``_voice.REQUESTS`` spoken by Piper, joined at 16 kHz with 0.3 s
pauses, each window ending 0.2 s after a request's end of speech and handed over as
20 ms frames, as the session hands a turn to the detector. For each ``--threads`` value
(``SmartTurn(cpu_threads=n)``): wall ms of ``judge(frames)`` called in the main thread,
split into conversion to 16 kHz float, ``SmartTurn.features`` and the ONNX run; CPU ms of
the judging thread (``time.thread_time``) and of the process (onnxruntime's pool threads
too); wall ms of ``await detector.probability(frames)`` from an asyncio loop (the
``to_thread`` hop included), with the worker thread's CPU, and the longest a 10 ms timer
on that loop fired late while it judged (against the idle loop). Target: ≤ 30 ms per
decision on 2 cores.

**Accuracy.** A labelled set built by rule, not picked: the 24 requests are complete turns
(label 1); from each, the first max(2, floor(0.6 n)) of its n words make three incomplete
turns (label 0): ``comma`` (the cut ending in "," so the voice keeps a continuing
intonation), ``truncated`` (the cut without punctuation: read like a finished sentence, a
hard case, reported separately) and ``filler`` (the cut followed by ", um,"). Every text is
spoken by ``PiperTTS()`` and ``EspeakTTS()``, trimmed to end 0.2 s after its last 10 ms
block louder than -40 dB below its peak (what a VAD with 0.2 s of silence hands over) and
judged at its own rate with threshold 0.5. Reports accuracy per voice and category, and
for the set: accuracy, precision and recall of "complete", the false-cut rate (incomplete
judged complete: the user is cut off) and the false-wait rate (complete judged
incomplete), with every misclassified clip. For comparison, the session's rule without a
detector (complete when the transcript ends with . ! ? or …) applied to the *texts*: an
upper bound that assumes a perfect, punctuated transcript.

numpy's OpenBLAS threads (the extractor's filterbank product) count in the process's CPU,
not the judging thread's; ``OPENBLAS_NUM_THREADS=1`` keeps them to one (the JSON echoes
it). ``other_processes_cores`` is the CPU the rest of the machine used meanwhile. The clips
are cached under the system temporary directory, so reruns take under a minute on 2 cores.
Prints one JSON line, and a table on stderr::

    .venv/bin/python bench/smart_turn.py [--decisions 100] [--threads 1,2]

Needs the local extra and ``pip install --no-deps pipecat-ai==1.14.0``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from _voice import REQUESTS, LoopLag, percentile
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.models.tts import TTS
from rejoinder.providers.local import EspeakTTS, PiperTTS, SmartTurn
from rejoinder.providers.local.whisper import _utterance_float32

RATE = 16000
FRAME = 320  # 20 ms at 16 kHz
WINDOW = 8 * RATE
WARMUP = 5
TARGET_MS = 30.0
THRESHOLD = 0.5
TAIL_SECONDS = 0.2  # the silence a VAD with min_silence_duration=0.2 hands over
CATEGORIES = ("complete", "comma", "truncated", "filler")
VOICES: dict[str, Callable[[], TTS]] = {
    "piper": lambda: PiperTTS(first_clause=False),  # a speaker says each sentence whole
    "espeak": EspeakTTS,
}
CACHE = os.path.join(tempfile.gettempdir(), "rejoinder-bench-smart-turn")


# ------------------------------------------------------------------------ the set


def cut(text: str) -> str:
    """The first max(2, floor(0.6 n)) of the n words, trailing punctuation dropped."""
    words = text.split()
    keep = min(len(words) - 1, max(2, math.floor(0.6 * len(words))))
    return " ".join(words[:keep]).rstrip(".,!?…;:")


def labelled_texts() -> list[tuple[str, str, int]]:
    """(category, text, label): label 1 is a complete turn."""
    out: list[tuple[str, str, int]] = []
    for request in REQUESTS:
        head = cut(request)
        out.append(("complete", request, 1))
        out.append(("comma", head + ",", 0))
        out.append(("truncated", head, 0))
        out.append(("filler", head + ", um,", 0))
    return out


def text_rule(text: str) -> int:
    """The session's rule without a detector: a transcript that reads as finished."""
    return int(text.rstrip().endswith((".", "!", "?", "…")))


@dataclass
class Spoken:
    voice: str
    category: str
    text: str
    label: int
    pcm: np.ndarray  # int16 at the voice's rate, the whole clip
    rate: int

    def trimmed(self) -> np.ndarray:
        """Ends TAIL_SECONDS after the last 10 ms block louder than -40 dB under the peak."""
        block = self.rate // 100
        n = self.pcm.size // block
        blocks = self.pcm[: n * block].astype(np.float64).reshape(n, block)
        rms = np.sqrt(np.mean(blocks**2, axis=1))
        loud = np.nonzero(rms > rms.max() * 10 ** (-40 / 20))[0]
        end = (int(loud[-1]) + 1) * block + round(TAIL_SECONDS * self.rate)
        out = self.pcm[:end]
        if out.size < end:  # the voice left less silence than the VAD would wait for
            out = np.concatenate([out, np.zeros(end - out.size, np.int16)])
        return out

    def frames(self) -> list[AudioFrame]:
        pcm, step = self.trimmed(), self.rate // 50
        return [AudioFrame(pcm[i : i + step], self.rate) for i in range(0, pcm.size, step)]


async def synthesize(texts: Sequence[tuple[str, str, int]]) -> list[Spoken]:
    """Every text in every voice, cached on disk as int16 at the voice's rate."""
    os.makedirs(CACHE, exist_ok=True)
    out: list[Spoken] = []
    for voice, make in VOICES.items():
        tts: TTS | None = None
        for category, text, label in texts:
            key = hashlib.sha1(f"{voice}\0{text}".encode()).hexdigest()[:16]
            path = os.path.join(CACHE, f"{voice}-{key}.npz")
            if not os.path.exists(path):  # noqa: ASYNC240 - a benchmark's set-up
                tts = tts or make()
                frames = [f async for f in tts.synthesize(text)]
                pcm = np.concatenate([f.data for f in frames]).astype(np.int16)
                np.savez(path, pcm=pcm, rate=frames[0].sample_rate)
            with np.load(path) as saved:
                out.append(Spoken(voice, category, text, label, saved["pcm"], int(saved["rate"])))
        if tts is not None:
            await tts.aclose()
    return out


# ------------------------------------------------------------------------- cost


def timing_windows(spoken: Sequence[Spoken], count: int) -> list[list[AudioFrame]]:
    """``count`` 8 s windows of Piper speech at 16 kHz in 20 ms frames, each ending 0.2 s
    after one request's end of speech (requests joined with 0.3 s pauses)."""
    pieces: list[np.ndarray] = []
    ends: list[int] = []
    length = 0
    gap = np.zeros(round(0.3 * RATE), np.int16)
    for clip in spoken:
        pcm = resample(AudioFrame(clip.trimmed(), clip.rate), RATE).data
        pieces += [pcm, gap]
        length += pcm.size + gap.size
        ends.append(length - gap.size)
    stream = np.concatenate(pieces)
    ends = [end for end in ends if end >= WINDOW]
    windows = []
    for k in range(count):
        window = stream[ends[k % len(ends)] - WINDOW : ends[k % len(ends)]]
        windows.append([AudioFrame(window[i : i + FRAME], RATE) for i in range(0, WINDOW, FRAME)])
    return windows


def stats(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(percentile(ordered, 90), 2),
    }


def direct(detector: SmartTurn, windows: Sequence[list[AudioFrame]]) -> dict[str, Any]:
    """``judge`` in the main thread, then its steps one by one."""
    session, extractor = detector._ensure_loaded()
    wall, thread_cpu, process_cpu = [], [], []
    convert, features, model = [], [], []
    for i, frames in enumerate(windows):
        w0, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        detector.judge(frames)
        w1, t1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
        # The same work step by step (what judge does, without its checks).
        s0 = time.perf_counter()
        audio = _utterance_float32(frames)
        s1 = time.perf_counter()
        mel = SmartTurn.features(audio, extractor)
        s2 = time.perf_counter()
        session.run(None, {"input_features": mel[np.newaxis]})
        s3 = time.perf_counter()
        if i < WARMUP:
            continue
        wall.append((w1 - w0) * 1000)
        thread_cpu.append((t1 - t0) * 1000)
        process_cpu.append((p1 - p0) * 1000)
        convert.append((s1 - s0) * 1000)
        features.append((s2 - s1) * 1000)
        model.append((s3 - s2) * 1000)
    return {
        "wall_ms": stats(wall),
        "steps_wall_ms": {
            "to_16k_float": stats(convert),
            "features": stats(features),
            "model": stats(model),
        },
        "cpu_ms_judging_thread": stats(thread_cpu),
        "cpu_ms_process": stats(process_cpu),
    }


async def through_loop(detector: SmartTurn, windows: Sequence[list[AudioFrame]]) -> dict[str, Any]:
    """``await detector.probability(frames)`` from the loop, a 10 ms ticker alongside."""
    worker_cpu: list[float] = []
    judge = detector.judge

    def timed_judge(frames: Sequence[AudioFrame]) -> float:  # runs in the worker thread
        t0 = time.thread_time()
        try:
            return judge(frames)
        finally:
            worker_cpu.append((time.thread_time() - t0) * 1000)

    detector.judge = timed_judge  # type: ignore[method-assign]
    try:
        idle = LoopLag()
        idle.start()
        await asyncio.sleep(1.0)
        idle_lag = idle.stop()
        for frames in windows[:WARMUP]:
            await detector.probability(frames, "")
        worker_cpu.clear()
        wall = []
        lag = LoopLag()
        lag.start()
        await asyncio.sleep(0)  # the ticker's first timer is set before judging starts
        for frames in windows[WARMUP:]:
            t0 = time.perf_counter()
            await detector.probability(frames, "")
            wall.append((time.perf_counter() - t0) * 1000)
        judging_lag = lag.stop()
    finally:
        del detector.judge
    return {
        "wall_ms": stats(wall),
        "cpu_ms_worker_thread": stats(worker_cpu),
        "loop_lag_ms_while_judging": judging_lag,
        "loop_lag_ms_idle": idle_lag,
    }


def busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy (Linux), to tell a loaded machine."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def cost(threads: int, windows: Sequence[list[AudioFrame]]) -> dict[str, Any]:
    machine0, own0, wall0 = busy_cpu_s(), time.process_time(), time.perf_counter()
    detector = SmartTurn(cpu_threads=threads)
    t0 = time.perf_counter()
    detector._ensure_loaded()
    load_s = time.perf_counter() - t0
    out: dict[str, Any] = {"cpu_threads": threads, "load_s": round(load_s, 2)}
    out["direct"] = direct(detector, windows)
    out["probability"] = asyncio.run(through_loop(detector, windows))
    median = out["probability"]["wall_ms"]["median"]
    out["target_ms"] = TARGET_MS
    out["meets_target"] = median <= TARGET_MS
    machine1, own1, wall1 = busy_cpu_s(), time.process_time(), time.perf_counter()
    if machine0 is not None and machine1 is not None:
        # Cores' worth of CPU other processes used meanwhile (0 on a quiet machine).
        others = (machine1 - machine0 - (own1 - own0)) / (wall1 - wall0)
        out["other_processes_cores"] = round(max(0.0, others), 2)
    return out


# --------------------------------------------------------------------- accuracy


def figures(labels: Sequence[int], predicted: Sequence[int]) -> dict[str, Any]:
    pairs = list(zip(labels, predicted, strict=True))
    tp = sum(y == 1 and p == 1 for y, p in pairs)
    fp = sum(y == 0 and p == 1 for y, p in pairs)
    fn = sum(y == 1 and p == 0 for y, p in pairs)
    complete = sum(y == 1 for y, _ in pairs)
    incomplete = len(pairs) - complete

    def ratio(a: int, b: int) -> float | None:
        return round(a / b, 3) if b else None

    return {
        "count": len(pairs),
        "accuracy": ratio(sum(y == p for y, p in pairs), len(pairs)),
        "precision_complete": ratio(tp, tp + fp),
        "recall_complete": ratio(tp, tp + fn),
        "false_cut_rate": ratio(fp, incomplete),
        "false_wait_rate": ratio(fn, complete),
    }


def accuracy(spoken: Sequence[Spoken]) -> dict[str, Any]:
    detector = SmartTurn(threshold=THRESHOLD)
    probabilities = [detector.judge(clip.frames()) for clip in spoken]
    predicted = [int(p >= detector.threshold) for p in probabilities]
    labels = [clip.label for clip in spoken]
    by_voice: dict[str, Any] = {}
    for voice in VOICES:
        rows = [i for i, clip in enumerate(spoken) if clip.voice == voice]
        entry = figures([labels[i] for i in rows], [predicted[i] for i in rows])
        entry["categories"] = {}
        for category in CATEGORIES:
            picked = [i for i in rows if spoken[i].category == category]
            entry["categories"][category] = {
                "count": len(picked),
                "accuracy": round(sum(predicted[i] == labels[i] for i in picked) / len(picked), 3),
                "mean_probability": round(statistics.mean(probabilities[i] for i in picked), 3),
            }
        by_voice[voice] = entry
    easy = [i for i, clip in enumerate(spoken) if clip.category != "truncated"]
    wrong = [
        {
            "voice": clip.voice,
            "category": clip.category,
            "text": clip.text,
            "probability": round(p, 3),
        }
        for clip, p, y in zip(spoken, probabilities, predicted, strict=True)
        if y != clip.label
    ]
    texts = labelled_texts()
    rule_by_category = {
        category: figures(
            [y for c, _, y in texts if c == category],
            [text_rule(t) for c, t, _ in texts if c == category],
        )["accuracy"]
        for category in CATEGORIES
    }
    session_rule = as_the_session_decides(spoken, probabilities, detector.threshold)
    return {
        "threshold": detector.threshold,
        "all": figures(labels, predicted),
        "session_rule": session_rule,
        "without_truncated": figures([labels[i] for i in easy], [predicted[i] for i in easy]),
        "by_voice": by_voice,
        "misclassified": wrong,
        "text_rule_upper_bound": {
            "note": "text only: '. ! ? …' at the end of the exact text (a perfect transcript)",
            **figures([y for _, _, y in texts], [text_rule(t) for _, t, _ in texts]),
            "accuracy_by_category": rule_by_category,
        },
    }


def as_the_session_decides(
    spoken: Sequence[Spoken], probabilities: Sequence[float], threshold: float
) -> dict[str, Any]:
    """What ``AgentSession(turn_detection=SmartTurn())`` does with each clip: a complete
    verdict ends the turn at once unless the transcript trails off (``reads_finished``
    is False); the transcript is Whisper tiny.en's, as in the offline stack."""
    from rejoinder.providers.local import WhisperSTT
    from rejoinder.session.hearing.user_turns import reads_finished

    async def transcribe() -> list[str]:
        stt = WhisperSTT()
        await stt.load()
        try:
            return [(await stt.recognize(clip.frames())).strip() for clip in spoken]
        finally:
            await stt.aclose()

    transcripts = asyncio.run(transcribe())
    ends = [
        int(p >= threshold and reads_finished(text) is not False)
        for p, text in zip(probabilities, transcripts, strict=True)
    ]
    labels = [clip.label for clip in spoken]
    by_voice: dict[str, Any] = {}
    for voice in VOICES:
        rows = [i for i, clip in enumerate(spoken) if clip.voice == voice]
        entry = figures([labels[i] for i in rows], [ends[i] for i in rows])
        entry["categories"] = {
            category: round(
                statistics.mean(
                    ends[i] == labels[i] for i in rows if spoken[i].category == category
                ),
                3,
            )
            for category in CATEGORIES
        }
        by_voice[voice] = entry
    return {
        "note": "SmartTurn's verdict vetoed by a Whisper tiny.en transcript that trails off",
        **figures(labels, ends),
        "by_voice": by_voice,
    }


# ------------------------------------------------------------------------ report


def table(result: dict[str, Any]) -> str:
    lines = ["Smart Turn cost per decision (ms, median / p90)"]
    lines.append(
        f"{'threads':>7} {'judge wall':>12} {'features':>10} {'model':>12} "
        f"{'cpu thread':>12} {'cpu proc':>12} {'probability':>12} {'loop lag max':>12}"
    )
    for c in result["cost"]:
        d, p = c["direct"], c["probability"]

        def mp(s: dict[str, float]) -> str:
            return f"{s['median']:.1f}/{s['p90']:.1f}"

        lines.append(
            f"{c['cpu_threads']:>7} {mp(d['wall_ms']):>12} "
            f"{mp(d['steps_wall_ms']['features']):>10} {mp(d['steps_wall_ms']['model']):>12} "
            f"{mp(d['cpu_ms_judging_thread']):>12} {mp(d['cpu_ms_process']):>12} "
            f"{mp(p['wall_ms']):>12} {p['loop_lag_ms_while_judging']['max']:>12.1f}"
        )
    lines.append(f"target: probability() median <= {TARGET_MS:.0f} ms on 2 cores")
    acc = result["accuracy"]
    lines.append("")
    lines.append(f"Accuracy at threshold {acc['threshold']} (count, accuracy per category)")
    lines.append(f"{'voice':>7} " + " ".join(f"{c:>16}" for c in CATEGORIES) + f" {'all':>10}")
    for voice, v in acc["by_voice"].items():
        cells = [
            f"{v['categories'][c]['count']} {v['categories'][c]['accuracy']:.2f}"
            f" (p={v['categories'][c]['mean_probability']:.2f})"
            for c in CATEGORIES
        ]
        lines.append(f"{voice:>7} " + " ".join(f"{x:>16}" for x in cells) + f" {v['accuracy']:>10}")
    rule = acc["text_rule_upper_bound"]
    for name, f in (
        ("all", acc["all"]),
        ("no trunc.", acc["without_truncated"]),
        ("TEXT rule", rule),
        ("SESSION", acc["session_rule"]),
    ):
        lines.append(
            f"{name:>9}: n={f['count']} accuracy {f['accuracy']}"
            f" precision {f['precision_complete']} recall {f['recall_complete']}"
            f" false-cut {f['false_cut_rate']}"
            f" false-wait {f['false_wait_rate']}"
        )
    for voice, v in acc["session_rule"]["by_voice"].items():
        cells = " ".join(f"{c} {v['categories'][c]:.2f}" for c in CATEGORIES)
        lines.append(f"  SESSION {voice}: {cells}")
    lines.append(f"misclassified by the model alone ({len(acc['misclassified'])}):")
    for w in acc["misclassified"]:
        lines.append(f"  {w['voice']:<6} {w['category']:<9} p={w['probability']:.3f}  {w['text']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=100, help="measured judgements")
    parser.add_argument("--threads", default="1,2", help="cpu_threads values, comma-separated")
    args = parser.parse_args()
    started = time.perf_counter()
    spoken = asyncio.run(synthesize(labelled_texts()))
    synth_s = time.perf_counter() - started
    complete_piper = [s for s in spoken if s.voice == "piper" and s.category == "complete"]
    windows = timing_windows(complete_piper, WARMUP + args.decisions)
    result: dict[str, Any] = {
        "bench": "smart_turn",
        "cores": os.cpu_count(),
        # numpy's BLAS (the extractor's mel filterbank matmul) runs on its own threads
        # unless this is 1; the judging thread's CPU leaves that out, the process's not.
        "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "decisions": args.decisions,
        "window_s": WINDOW / RATE,
        "cost": [cost(int(n), windows) for n in args.threads.split(",")],
        "accuracy": accuracy(spoken),
        "synthesis_s": round(synth_s, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "total_s": round(time.perf_counter() - started, 1),
    }
    print(table(result), file=sys.stderr)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
