"""AudioDelivery: a speech's text through the TTS to an audio output (see ``delivery``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..floor import Obligation
from ..io.text import TextOutput
from ..models.audio import AudioOutput, PlaybackFinished
from ..models.audio_utils import Resampler
from ..models.tts import TTS, SentenceSplitter
from .delivery import Delivery
from .turn_state import TurnState


class AudioDelivery(Delivery):
    def __init__(
        self,
        state: TurnState,
        reply: Obligation,
        text_output: TextOutput | None,
        *,
        tts: TTS,
        audio_output: AudioOutput,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        super().__init__(state, reply, text_output)
        self._tts = tts
        self._output = audio_output
        self._splitter = SentenceSplitter()
        self._sentences: asyncio.Queue[str | None] = asyncio.Queue()
        self._spoken: list[tuple[str, float, float]] = []  # sentence, start, duration
        self._captured = 0.0
        self._playing = False
        self._failure: Exception | None = None
        self._played: asyncio.Future[PlaybackFinished] = asyncio.get_running_loop().create_future()
        audio_output.set_listener(self._playback_started, self._playback_finished)
        self._synthesis = spawn(self._synthesize())

    async def push_text(self, text: str) -> None:
        await super().push_text(text)
        for sentence in self._splitter.push(text):
            self._sentences.put_nowait(sentence)

    async def finish(self) -> None:
        rest = self._splitter.flush()
        if rest:
            self._sentences.put_nowait(rest)
        self._sentences.put_nowait(None)
        await self._synthesis
        if self._failure is not None:
            raise self._failure
        self._end_text_segment()
        if self._captured > 0:
            self._output.flush()
            await asyncio.shield(self._played)

    def stop(self) -> None:
        self._synthesis.cancel()
        self._end_text_segment()
        if self._playing:
            self._output.clear_buffer()

    def heard(self) -> str:
        if not self._played.done():
            return ""
        position = self._played.result().position
        words: list[str] = []
        for sentence, start, duration in self._spoken:
            if duration <= 0:
                break
            if start + duration <= position + 1e-6:
                words.append(sentence)
            elif start < position:
                # Paced by this sentence's own speaking rate, cut back to a whole word.
                cut = int(len(sentence) * (position - start) / duration)
                partial = sentence[:cut].rsplit(" ", 1)[0] if " " in sentence[:cut] else ""
                if partial:
                    words.append(partial)
                break
        return " ".join(words)

    async def _synthesize(self) -> None:
        # The task lives in the activity's task group: a failure must not escape into it
        # (that would tear the whole activity down); ``finish`` re-raises it instead.
        try:
            await self._synthesize_sentences()
        except Exception as exc:
            self._failure = exc

    async def _synthesize_sentences(self) -> None:
        rate = self._output.sample_rate
        resampler: Resampler | None = None
        while (sentence := await self._sentences.get()) is not None:
            start = self._captured
            self._spoken.append((sentence, start, 0.0))
            async for frame in self._tts.synthesize(sentence):
                if rate is not None and frame.sample_rate != rate:
                    if resampler is None:
                        resampler = Resampler(frame.sample_rate, rate, frame.num_channels)
                    resampled = resampler.push(frame)
                    if resampled is None:
                        continue
                    frame = resampled
                await self._output.capture_frame(frame)
                self._captured += frame.duration
                self._spoken[-1] = (sentence, start, self._captured - start)
            if resampler is not None and (tail := resampler.flush()) is not None:
                await self._output.capture_frame(tail)
                self._captured += tail.duration
                self._spoken[-1] = (sentence, start, self._captured - start)
                resampler = None

    def _playback_started(self) -> None:
        self._playing = True
        self._state.set_audible(self._reply, True)

    def _playback_finished(self, event: PlaybackFinished) -> None:
        # Audible ends when the reply closes, in the same floor step: clearing it here
        # would report a 0 ms "thinking" between the end of audio and the close.
        self._playing = False
        if not self._played.done():
            self._played.set_result(event)
