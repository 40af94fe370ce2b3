"""ScriptedTTS: deterministic speech for tests, timed by a speaking rate on loop time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from ..models.audio import AudioFrame
from ..models.tts import TTS, TTSError


class ScriptedTTS(TTS):
    """Each character becomes ``seconds_per_char`` of a quiet tone, in 20 ms frames.

    ``latency`` delays the first frame of each synthesis (loop time); ``fail_on`` makes
    synthesis of any text containing it raise ``TTSError``. ``texts`` records every call.
    """

    def __init__(
        self,
        *,
        sample_rate: int = 24000,
        seconds_per_char: float = 0.05,
        latency: float = 0.0,
        fail_on: str | None = None,
        hang_on: str | None = None,
    ) -> None:
        super().__init__(sample_rate=sample_rate)
        self.seconds_per_char = seconds_per_char
        self.latency = latency
        self.fail_on = fail_on
        self.hang_on = hang_on
        self.texts: list[str] = []
        self._frame = (np.full(sample_rate // 50, 300, np.int16), sample_rate)

    def duration_of(self, text: str) -> float:
        frames = round(len(text) * self.seconds_per_char * 50)
        return frames / 50

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame]:
        self.texts.append(text)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.hang_on is not None and self.hang_on in text:
            await asyncio.Event().wait()
        if self.fail_on is not None and self.fail_on in text:
            raise TTSError(f"scripted synthesis failure for {text!r}")
        data, rate = self._frame
        for _ in range(round(self.duration_of(text) * 50)):
            yield AudioFrame(data, rate)
