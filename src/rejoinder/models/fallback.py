"""Fallback adapters: ordered LLMs, STTs or TTSs behind one interface.

A request goes to the first available LLM. One that fails *before producing anything* is
marked unavailable for ``retry_after`` seconds and the next one takes the same request, so
the user notices nothing but latency. A failure *after* output was produced is not retried
elsewhere: the user already heard the beginning, and starting over would repeat it, so
the error ends the reply (the session keeps what was heard).

An unavailable instance is probed again by the first request after its ``retry_after``
(a "half-open" circuit breaker): no background task is needed, so nothing outlives a
request. The same rules hold for TTS (a voice that failed mid-sentence is not restarted on
another voice: the sentence ends there) and STT (an utterance is recognized by the next
recognizer when one fails).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Generic, TypeVar

from .chat import ChatContext
from .llm import LLM, ChatChunk, LLMError, ToolChoice
from .stt import STT, STTError
from .tools import ToolDefinition
from .tts import TTS, TTSError, WordTiming

if TYPE_CHECKING:
    from .audio import AudioFrame

M = TypeVar("M")


class _Breaker(Generic[M]):
    """Which instances are down, and until when (loop time)."""

    def __init__(self, instances: Sequence[M], retry_after: float, what: str) -> None:
        if not instances:
            raise ValueError(f"a fallback needs at least one {what}")
        if not retry_after > 0:
            raise ValueError("retry_after must be positive")
        self.instances = list(instances)
        self.retry_after = retry_after
        self.what = what
        self._down_until: dict[int, float] = {}

    def available(self, instance: M) -> bool:
        until = self._down_until.get(id(instance))
        return until is None or asyncio.get_running_loop().time() >= until

    def candidates(self) -> list[M]:
        ready = [m for m in self.instances if self.available(m)]
        # With every one marked down, trying them all beats failing without a try.
        return ready or list(self.instances)

    def down(self, instance: M, error: Exception) -> None:
        logger.warning(
            "%s %r failed (%s); unavailable for %.0f s, trying the next one",
            self.what,
            instance,
            error,
            self.retry_after,
        )
        self._down_until[id(instance)] = asyncio.get_running_loop().time() + self.retry_after

    def up(self, instance: M) -> None:
        self._down_until.pop(id(instance), None)


logger = logging.getLogger("rejoinder")


class FallbackLLM(LLM):
    def __init__(self, llms: Sequence[LLM], *, retry_after: float = 30.0) -> None:
        self._breaker = _Breaker(llms, retry_after, "LLM")
        self.llms = self._breaker.instances

    @property
    def model(self) -> str:
        return "fallback(" + ", ".join(llm.model for llm in self.llms) + ")"

    @property
    def provider(self) -> str:
        return "fallback"

    def available(self, llm: LLM) -> bool:
        return self._breaker.available(llm)

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        return self._stream(chat_ctx, tools, tool_choice)

    async def _stream(
        self, chat_ctx: ChatContext, tools: Sequence[ToolDefinition], tool_choice: ToolChoice
    ) -> AsyncIterator[ChatChunk]:
        failures: list[str] = []
        retryable = False
        for llm in self._breaker.candidates():
            produced = False
            try:
                async with aclosing(llm.chat(chat_ctx, tools, tool_choice)) as stream:  # type: ignore[type-var]
                    async for chunk in stream:
                        produced = True
                        yield chunk
            except LLMError as exc:
                if produced:
                    raise  # already heard in part: end the reply, do not repeat it
                self._breaker.down(llm, exc)
                failures.append(f"{llm.model}: {exc}")
                retryable = retryable or exc.retryable
                continue
            self._breaker.up(llm)
            return
        raise LLMError("every LLM failed: " + "; ".join(failures), retryable=retryable)

    async def aclose(self) -> None:
        for llm in self.llms:
            await llm.aclose()


class FallbackTTS(TTS):
    """Voices in order. All must produce the same sample rate and channel count (the
    session resamples to the output, but a mid-reply voice switch should not change it)."""

    def __init__(self, voices: Sequence[TTS], *, retry_after: float = 30.0) -> None:
        self._breaker = _Breaker(voices, retry_after, "TTS")
        first = self._breaker.instances[0]
        if any(
            (v.sample_rate, v.num_channels) != (first.sample_rate, first.num_channels)
            for v in self._breaker.instances
        ):
            raise ValueError("FallbackTTS voices must share sample rate and channel count")
        super().__init__(sample_rate=first.sample_rate, num_channels=first.num_channels)

    def available(self, voice: TTS) -> bool:
        return self._breaker.available(voice)

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        failures: list[str] = []
        for voice in self._breaker.candidates():
            produced = False
            try:
                async with aclosing(voice.synthesize(text)) as stream:  # type: ignore[type-var]
                    async for item in stream:
                        produced = True
                        yield item
            except TTSError as exc:
                self._breaker.down(voice, exc)
                if produced:
                    raise  # part of the sentence was already captured: do not repeat it
                failures.append(f"{voice!r}: {exc}")
                continue
            self._breaker.up(voice)
            return
        raise TTSError("every TTS failed: " + "; ".join(failures))

    async def aclose(self) -> None:
        for voice in self._breaker.instances:
            await voice.aclose()


class FallbackSTT(STT):
    """Recognizers in order: an utterance one cannot transcribe goes to the next."""

    def __init__(self, recognizers: Sequence[STT], *, retry_after: float = 30.0) -> None:
        self._breaker = _Breaker(recognizers, retry_after, "STT")

    def available(self, stt: STT) -> bool:
        return self._breaker.available(stt)

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        failures: list[str] = []
        for stt in self._breaker.candidates():
            try:
                text = await stt.recognize(frames)
            except STTError as exc:
                self._breaker.down(stt, exc)
                failures.append(f"{stt!r}: {exc}")
                continue
            self._breaker.up(stt)
            return text
        raise STTError("every STT failed: " + "; ".join(failures))

    async def aclose(self) -> None:
        for stt in self._breaker.instances:
            await stt.aclose()
