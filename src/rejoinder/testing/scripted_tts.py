"""ScriptedTTS: deterministic speech for tests, timed by a speaking rate on loop time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from ..models.audio import AudioFrame
from ..models.tts import TTS, StreamingTTS, TTSError, TTSStream, WordTiming


class ScriptedTTS(TTS):
    """Each character becomes ``seconds_per_char`` of a quiet tone, in 20 ms frames.

    ``latency`` delays the first frame of each synthesis (loop time); ``fail_on`` makes
    synthesis of any text containing it raise ``TTSError``; ``word_timings`` reports when
    each word is spoken. ``texts`` records every call.
    """

    def __init__(
        self,
        *,
        sample_rate: int = 24000,
        seconds_per_char: float = 0.05,
        latency: float = 0.0,
        fail_on: str | None = None,
        hang_on: str | None = None,
        word_timings: bool = False,
    ) -> None:
        super().__init__(sample_rate=sample_rate)
        self.word_timings = word_timings
        self.seconds_per_char = seconds_per_char
        self.latency = latency
        self.fail_on = fail_on
        self.hang_on = hang_on
        self.texts: list[str] = []
        self._frame = (np.full(sample_rate // 50, 300, np.int16), sample_rate)

    def duration_of(self, text: str) -> float:
        frames = round(len(text) * self.seconds_per_char * 50)
        return frames / 50

    def timings(self, text: str) -> list[WordTiming]:
        """Where each word of ``text`` falls in its audio (by character offset)."""
        result: list[WordTiming] = []
        offset = 0
        for word in text.split():
            offset = text.index(word, offset)
            start = offset * self.seconds_per_char
            result.append(WordTiming(word, start, start + len(word) * self.seconds_per_char))
            offset += len(word)
        return result

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        self.texts.append(text)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.hang_on is not None and self.hang_on in text:
            await asyncio.Event().wait()
        if self.fail_on is not None and self.fail_on in text:
            raise TTSError(f"scripted synthesis failure for {text!r}")
        if self.word_timings:
            for timing in self.timings(text):
                yield timing
        data, rate = self._frame
        for _ in range(round(self.duration_of(text) * 50)):
            yield AudioFrame(data, rate)


class ScriptedStreamingTTS(StreamingTTS):
    """Streams as text arrives: each word is voiced (``seconds_per_char`` per character,
    its trailing space included) once the space after it, or the end of input, comes.
    Reports word timings when ``word_timings`` is set."""

    def __init__(
        self, *, sample_rate: int = 24000, seconds_per_char: float = 0.05, word_timings: bool = True
    ) -> None:
        super().__init__(sample_rate=sample_rate)
        self.seconds_per_char = seconds_per_char
        self.word_timings = word_timings
        self.streams: list[_ScriptedStream] = []

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        stream = self.stream()
        stream.push_text(text)
        stream.end_input()
        async for item in stream:
            yield item

    def stream(self) -> _ScriptedStream:
        stream = _ScriptedStream(self)
        self.streams.append(stream)
        return stream


class _ScriptedStream(TTSStream):
    def __init__(self, tts: ScriptedStreamingTTS) -> None:
        self._tts = tts
        self.text = ""
        self._pending = ""
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._at = 0.0  # seconds of audio produced so far
        self._frames_due = 0.0

    def push_text(self, text: str) -> None:
        self.text += text
        self._pending += text
        *words, self._pending = self._pending.split(" ")
        for word in words:
            self._queue.put_nowait(word + " ")

    def end_input(self) -> None:
        if self._pending:
            self._queue.put_nowait(self._pending)
            self._pending = ""
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[AudioFrame | WordTiming]:
        spc = self._tts.seconds_per_char
        rate = self._tts.sample_rate
        frame = AudioFrame(np.full(rate // 50, 300, np.int16), rate)
        while (chunk := await self._queue.get()) is not None:
            word = chunk.strip()
            if word and self._tts.word_timings:
                yield WordTiming(word, self._at, self._at + len(word) * spc)
            self._at += len(chunk) * spc
            self._frames_due += len(chunk) * spc * 50
            while self._frames_due >= 1:
                self._frames_due -= 1
                yield frame
