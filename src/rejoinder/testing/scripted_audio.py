"""Deterministic audio-side fakes: an energy VAD and a scripted recognizer.

Tests drive them with ``MemoryAudioInput``: push a tone (speech) or silence, on virtual
time. ``ScriptedVAD`` is a real, if simple, detector (RMS threshold with confirmation
times), so what a test pushes is what it detects; ``ScriptedSTT`` returns scripted text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np

from ..models.audio import AudioFrame
from ..models.stt import StreamingSTT, STTError, Transcript
from ..models.vad import VAD, VADEvent, VADStream


def speech_frame(seconds: float = 0.02, sample_rate: int = 16000) -> AudioFrame:
    """A loud tone that ``ScriptedVAD`` hears as speech."""
    t = np.arange(round(seconds * sample_rate)) / sample_rate
    return AudioFrame((np.sin(2 * np.pi * 220 * t) * 6000).astype(np.int16), sample_rate)


class ScriptedVAD(VAD):
    """Speech is any frame louder than ``threshold`` RMS; it starts after ``min_speech``
    seconds of it and ends after ``min_silence`` seconds of quiet."""

    def __init__(
        self, *, threshold: float = 500.0, min_speech: float = 0.06, min_silence: float = 0.3
    ) -> None:
        self.threshold, self.min_speech, self.min_silence = threshold, min_speech, min_silence

    def stream(self) -> VADStream:
        return _EnergyStream(self)


class _EnergyStream(VADStream):
    def __init__(self, vad: ScriptedVAD) -> None:
        self._vad = vad
        self._speaking = False
        self._voiced = 0.0  # speech seconds in the current run (or utterance)
        self._quiet = 0.0  # silence seconds in the current run

    @property
    def speaking(self) -> bool:
        return self._speaking

    @property
    def speech_seconds(self) -> float:
        return self._voiced if self._speaking else 0.0

    @property
    def hearing(self) -> bool:
        return not self._speaking and self._voiced > 0

    def push(self, frame: AudioFrame) -> list[VADEvent]:
        samples = frame.data.astype(np.float32)
        loud = (
            bool(samples.size) and float(np.sqrt(np.mean(samples * samples))) > self._vad.threshold
        )
        duration = frame.duration
        if not self._speaking:
            if not loud:
                self._voiced = 0.0
                self._quiet += duration
                return []
            self._voiced += duration
            if self._voiced + 1e-9 < self._vad.min_speech:
                return []
            self._speaking = True
            event = VADEvent("start_of_speech", self._voiced, self._quiet)
            self._quiet = 0.0
            return [event]
        if loud:
            self._voiced += self._quiet + duration  # a short pause inside speech is speech
            self._quiet = 0.0
            return []
        self._quiet += duration
        if self._quiet + 1e-9 < self._vad.min_silence:
            return []
        self._speaking = False
        event = VADEvent("end_of_speech", self._voiced, self._quiet)
        self._voiced = 0.0
        return [event]


class ScriptedSTT(StreamingSTT):
    """Returns ``transcripts`` in order, one per utterance (or a function of the
    utterance's audio seconds). While an utterance is spoken it reports, every
    ``interim_every`` seconds of audio, the words of the coming transcript heard so far.
    A transcript may be an ``rj.Transcript``, to script the recognizer's confidence
    (``transcribe`` returns it; ``recognize`` its text)."""

    def __init__(
        self,
        transcripts: Sequence[str | Transcript] | Callable[[float], str | Transcript],
        *,
        latency: float = 0.0,
        interim_every: float | None = 0.2,
        words_per_second: float = 3.0,
        fail: bool = False,
    ) -> None:
        self._transcripts = transcripts if callable(transcripts) else list(transcripts)
        self._next = 0
        self.latency = latency
        self.interim_every = interim_every
        self.words_per_second = words_per_second
        self.fail = fail
        self.utterances: list[float] = []
        """Seconds of audio of each recognized utterance."""
        self._heard = 0.0
        self._last_interim = 0.0

    def _upcoming(self, seconds: float) -> Transcript:
        if callable(self._transcripts):
            upcoming = self._transcripts(seconds)
        elif self._next < len(self._transcripts):
            upcoming = self._transcripts[self._next]
        else:
            upcoming = ""
        return upcoming if isinstance(upcoming, Transcript) else Transcript(upcoming)

    def push(self, frame: AudioFrame, on_interim: Callable[[str], None]) -> None:
        self._heard += frame.duration
        if self.interim_every is None or self._heard - self._last_interim < self.interim_every:
            return
        self._last_interim = self._heard
        words = self._upcoming(self._heard).text.split()
        heard_words = words[: int(self._heard * self.words_per_second)]
        if heard_words:
            on_interim(" ".join(heard_words))

    def reset(self) -> None:
        self._heard = self._last_interim = 0.0

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        seconds = sum(frame.duration for frame in frames)
        self.utterances.append(seconds)
        self.reset()
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.fail:
            raise STTError("scripted recognition failure")
        text = self._upcoming(seconds)
        if not callable(self._transcripts):
            self._next += 1
        return text
