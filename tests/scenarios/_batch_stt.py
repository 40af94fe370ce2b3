"""A recognizer that does not stream, for tests of what the session does with a pass
over the words so far: it returns its transcripts in order (the last one repeats), each
after ``latency`` seconds of the loop's clock, and keeps how much audio each call got."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import rejoinder as rj
from rejoinder.models.audio import AudioFrame


class BatchSTT(rj.STT):
    def __init__(
        self,
        transcripts: Sequence[str | rj.Transcript],
        *,
        latency: float = 0.0,
        fail_on: frozenset[int] = frozenset(),
    ) -> None:
        self._transcripts = [
            t if isinstance(t, rj.Transcript) else rj.Transcript(t) for t in transcripts
        ]
        self.latency = latency
        self.fail_on = fail_on
        """Which calls (counted from 0) raise instead."""
        self.calls: list[tuple[float, float]] = []
        """(loop time, seconds of audio) of each call."""

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> rj.Transcript:
        n = len(self.calls)
        self.calls.append((asyncio.get_running_loop().time(), sum(f.duration for f in frames)))
        if self.latency:
            await asyncio.sleep(self.latency)
        if n in self.fail_on:
            raise rj.STTError("scripted recognition failure")
        return self._transcripts[min(n, len(self._transcripts) - 1)]
