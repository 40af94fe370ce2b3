"""Shared by the voice-latency benchmarks: spoken requests, a real-time microphone, the
offline stack, a probe that times every step of a turn, word error and summaries.

The requests are synthesized once with Piper (the offline stack's voice) and cached
under the system temporary directory. End of speech in a clip is the end of its last
10 ms block louder than -40 dB below the clip's peak (Piper leaves a few hundred ms of
near-silence after the words).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rejoinder as rj
from _fakes import percentile
from _words import word_errors
from rejoinder.models.audio import AudioFrame, AudioInput, AudioOutput
from rejoinder.models.tts import TTS

REQUESTS = (
    "What's the weather like tomorrow?",
    "Can you book a table for two at seven?",
    "Hello, this is a test of the offline voice agent.",
    "Please remind me to call my mother tonight.",
    "How long does it take to drive to the airport?",
    "Turn off the lights in the kitchen.",
    "What time does the pharmacy close today?",
    "I would like to order a large pizza with mushrooms.",
    "Tell me a short joke about computers.",
    "Set a timer for ten minutes.",
    "Who won the football match last night?",
    "Play some relaxing music in the living room.",
    "How many ounces are in a cup?",
    "Send a message to Sarah saying I am running late.",
    "What is the capital of Australia?",
    "Add milk and eggs to my shopping list.",
    "Can you explain how a rainbow forms?",
    "Schedule a meeting with the design team on Friday morning.",
    "Is it going to rain this weekend?",
    "Translate good morning into Spanish.",
    "Read me the latest news headlines.",
    "What is the square root of one hundred and forty four?",
    "Find a cheap hotel near the train station.",
    "Thank you, that will be all for now.",
)
RATE = 16000  # the microphone's rate
FRAME = 320  # 20 ms


@dataclass
class Clip:
    text: str
    pcm: np.ndarray  # int16 at RATE
    speech_end: float  # seconds from the clip's start


def _speech_end(pcm: np.ndarray) -> float:
    block = RATE // 100
    n = pcm.size // block
    rms = np.sqrt(np.mean(pcm[: n * block].astype(np.float64).reshape(n, block) ** 2, axis=1))
    loud = np.nonzero(rms > rms.max() * 10 ** (-40 / 20))[0]
    return float((loud[-1] + 1) * block / RATE)


async def clips(requests: Sequence[str] = REQUESTS) -> list[Clip]:
    """Every request spoken by Piper's default voice at 16 kHz (cached on disk)."""
    from rejoinder.models.audio_utils import resample
    from rejoinder.providers.local import PiperTTS

    folder = os.path.join(tempfile.gettempdir(), "rejoinder-bench-voice")
    os.makedirs(folder, exist_ok=True)
    tts: PiperTTS | None = None
    out: list[Clip] = []
    for text in requests:
        path = os.path.join(folder, hashlib.sha1(text.encode()).hexdigest()[:16] + ".npy")
        if not os.path.exists(path):  # noqa: ASYNC240 - a benchmark's set-up
            tts = tts or PiperTTS(first_clause=False)  # a speaker says it whole
            frames = [f async for f in tts.synthesize(text)]
            joined = AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate)
            np.save(path, resample(joined, RATE).data)
        pcm = np.load(path)
        out.append(Clip(text, pcm, _speech_end(pcm)))
    if tts is not None:
        await tts.aclose()
    return out


# --------------------------------------------------------------------- microphone


class PacedMic(AudioInput):
    """A microphone on the real clock: a 20 ms frame every 20 ms (silence unless a clip is
    playing), delivered when it has been "captured", as a sound card would. ``play``
    returns when the clip has been delivered and the capture time of its end of speech."""

    def __init__(self) -> None:
        self._queue: list[np.ndarray] = []
        self._done: asyncio.Future[float] | None = None
        self._speech_end_sample = 0
        self._closed = False

    async def play(self, clip: Clip) -> float:
        loop = asyncio.get_running_loop()
        pcm = np.concatenate([clip.pcm, np.zeros((-clip.pcm.size) % FRAME, np.int16)])
        self._queue = [pcm[i : i + FRAME] for i in range(0, pcm.size, FRAME)]
        self._speech_end_sample = round(clip.speech_end * RATE)
        self._done = loop.create_future()
        return await self._done

    def close(self) -> None:
        self._closed = True

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        silence = np.zeros(FRAME, np.int16)
        clip_start: float | None = None
        async for captured in paced_frames(lambda: self._closed):
            if self._queue:
                if clip_start is None:
                    clip_start = captured  # capture time of the clip's sample 0
                yield AudioFrame(self._queue.pop(0), RATE)
                if not self._queue and self._done is not None:
                    self._done.set_result(clip_start + self._speech_end_sample / RATE)
                    clip_start = None
            else:
                yield AudioFrame(silence, RATE)


async def paced_frames(closed: Callable[[], bool]) -> AsyncIterator[float]:
    """One tick per microphone frame, in real time, until ``closed()``: yields when each
    frame is due, with the time its first sample was captured."""
    t0 = time.perf_counter()
    k = 0
    while not closed():
        k += 1
        delay = t0 + k * FRAME / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        yield t0 + (k - 1) * FRAME / RATE


# ------------------------------------------------------------------------- probe


@dataclass
class Turn:
    text: str
    speech_end: float = 0.0
    vad_stop: float | None = None
    transcript_at: float | None = None
    transcript: str = ""
    thinking: float | None = None
    tts_request: float | None = None
    tts_first: float | None = None
    server_audio: float | None = None
    client_audio: float | None = None
    recognitions: list[tuple[float, float]] = field(default_factory=list)
    replies: int = 0
    """Turns the request was answered as (more than one: the user's pause ended a turn)."""

    def breakdown(self) -> dict[str, float]:
        """Seconds from the end of speech to each step."""
        t0 = self.speech_end
        steps = {
            "vad_stop": self.vad_stop,
            "transcript": self.transcript_at,
            "turn_end": self.thinking,
            "tts_request": self.tts_request,
            "tts_first_audio": self.tts_first,
            "server_audio": self.server_audio,
            "client_audio": self.client_audio,
        }
        return {k: v - t0 for k, v in steps.items() if v is not None}


class Probe:
    """Times one turn at a time from the session's events and the wrapped models."""

    def __init__(self) -> None:
        self.turn: Turn | None = None
        self.finished = asyncio.Event()

    def start(self, text: str) -> Turn:
        self.turn = Turn(text)
        self.finished.clear()
        return self.turn

    def attach(self, session: rj.AgentSession[Any]) -> None:
        def user_state(ev: Any) -> None:
            t = self.turn
            if t is not None and ev.new_state == "listening" and t.vad_stop is None:
                t.vad_stop = time.perf_counter()

        def transcribed(ev: Any) -> None:
            t = self.turn
            if t is not None and ev.is_final and t.transcript_at is None:
                t.transcript_at = time.perf_counter()
            if t is not None and ev.is_final:
                t.transcript = (t.transcript + " " + ev.transcript).strip()

        def agent_state(ev: Any) -> None:
            t = self.turn
            if t is None:
                return
            if ev.new_state == "thinking":
                t.replies += 1
                if t.thinking is None:
                    t.thinking = time.perf_counter()
            if ev.old_state == "speaking" and ev.new_state == "listening":
                self.finished.set()

        session.on("user_state_changed", user_state)
        session.on("user_input_transcribed", transcribed)
        session.on("agent_state_changed", agent_state)


class TimedSTT(rj.STT):
    """Records when each recognition ran (early ones included)."""

    def __init__(self, inner: rj.STT, probe: Probe) -> None:
        self.inner, self.probe = inner, probe

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        start = time.perf_counter()
        try:
            return await self.inner.recognize(frames)
        finally:
            if self.probe.turn is not None:
                self.probe.turn.recognitions.append((start, time.perf_counter()))


class TimedTTS(TTS):
    def __init__(self, inner: TTS, probe: Probe) -> None:
        super().__init__(sample_rate=inner.sample_rate)
        self.inner, self.probe = inner, probe

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame]:
        t = self.probe.turn
        if t is not None and t.tts_request is None:
            t.tts_request = time.perf_counter()
        async for frame in self.inner.synthesize(text):
            if t is not None and t.tts_first is None:
                t.tts_first = time.perf_counter()
            yield frame


class InstantOutput(AudioOutput):
    """Accepts frames at once; a segment finishes on flush (in-process runs)."""

    def __init__(self, probe: Probe, sample_rate: int) -> None:
        super().__init__(sample_rate=sample_rate, can_pause=False)
        self.probe = probe
        self._open = False
        self._seconds = 0.0

    async def capture_frame(self, frame: AudioFrame) -> None:
        t = self.probe.turn
        if t is not None and t.server_audio is None:
            t.server_audio = time.perf_counter()
        if not self._open:
            self._open = True
            self._report_started()
        self._seconds += frame.duration

    def flush(self) -> None:
        if self._open:
            self._open = False
            seconds, self._seconds = self._seconds, 0.0
            self._report_finished(seconds, False)

    def clear_buffer(self) -> None:
        self.flush()


# ---------------------------------------------------------------------- models


@dataclass
class Stack:
    vad: Any
    stt: Any
    tts: Any


async def offline_stack(vad_silence: float | None = None) -> Stack:
    """The offline voice stack with its shipped defaults, loaded ahead of time."""
    from rejoinder.providers.local import PiperTTS, SileroVAD, WhisperSTT

    stt, tts = WhisperSTT(), PiperTTS()
    await stt.load()
    await tts.load()
    vad = SileroVAD() if vad_silence is None else SileroVAD(min_silence_duration=vad_silence)
    return Stack(vad, stt, tts)


def add_what_if_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("what if (instead of the shipped defaults)")
    group.add_argument("--vad-silence", type=float, help="SileroVAD min_silence_duration")
    group.add_argument("--min-endpointing-delay", type=float)
    group.add_argument(
        "--smart-turn",
        action="store_true",
        help="turn_detection=SmartTurn() (and a 0.2 s VAD silence unless --vad-silence)",
    )


def what_if(args: argparse.Namespace) -> dict[str, Any]:
    """Session options (and ``vad_silence``) that replace the shipped defaults."""
    out: dict[str, Any] = {}
    if args.vad_silence is not None:
        out["vad_silence"] = args.vad_silence
    if args.min_endpointing_delay is not None:
        out["min_endpointing_delay"] = args.min_endpointing_delay
    if args.smart_turn:
        from rejoinder.providers.local import SmartTurn

        out["turn_detection"] = SmartTurn()
        out.setdefault("vad_silence", 0.2)
    return out


class LoopLag:
    """How late a 10 ms timer fires: the longest the event loop was blocked."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags.append(time.perf_counter() - t - 0.01)

    def stop(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
        ordered = sorted(lag * 1000 for lag in self.lags) or [0.0]
        return {"p99": round(percentile(ordered, 99), 1), "max": round(ordered[-1], 1)}


# --------------------------------------------------------------------- figures


def summary(turns: Sequence[Turn], final: str) -> dict[str, object]:
    """Median and p90 (ms) of every step, word error (of everything transcribed while
    the request was handled), recognitions per turn."""
    steps: dict[str, list[float]] = {}
    for turn in turns:
        for name, seconds in turn.breakdown().items():
            steps.setdefault(name, []).append(seconds * 1000)
    figures = {
        name: {
            "median": round(statistics.median(v), 1),
            "p90": round(percentile(sorted(v), 90), 1),
        }
        for name, v in steps.items()
    }
    errors = [word_errors(t.text, t.transcript) for t in turns]
    late = [
        (end - t.vad_stop) * 1000
        for t in turns
        if t.vad_stop is not None and t.recognitions
        for end in [max(e for _, e in t.recognitions)]
    ]
    return {
        "turns": len(turns),
        "end_of_speech_to_first_audio_ms": figures.get(final),
        "steps_ms_from_end_of_speech": figures,
        "recognition_tail_after_vad_stop_ms": {
            "median": round(statistics.median(late), 1) if late else None,
            "p90": round(percentile(sorted(late), 90), 1) if late else None,
        },
        "recognitions_per_turn": round(sum(len(t.recognitions) for t in turns) / len(turns), 2),
        "word_error_rate": round(sum(e for e, _ in errors) / sum(n for _, n in errors), 4),
        "requests_split_into_several_turns": sum(t.replies > 1 for t in turns),
        "transcripts": [t.transcript for t in turns],
    }
