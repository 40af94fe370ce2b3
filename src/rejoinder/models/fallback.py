"""FallbackLLM: ordered LLMs behind one interface.

A request goes to the first available LLM. One that fails *before producing anything* is
marked unavailable for ``retry_after`` seconds and the next one takes the same request, so
the user notices nothing but latency. A failure *after* output was produced is not retried
elsewhere: the user already heard the beginning, and starting over would repeat it, so
the error ends the reply (the session keeps what was heard).

An unavailable LLM is probed again by the first request after its ``retry_after`` (a
"half-open" circuit breaker): no background task is needed, so nothing outlives a request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

from .chat import ChatContext
from .llm import LLM, ChatChunk, LLMError, ToolChoice
from .tools import ToolDefinition

logger = logging.getLogger("rejoinder")


class FallbackLLM(LLM):
    def __init__(self, llms: Sequence[LLM], *, retry_after: float = 30.0) -> None:
        if not llms:
            raise ValueError("FallbackLLM needs at least one LLM")
        if not retry_after > 0:
            raise ValueError("retry_after must be positive")
        self.llms = list(llms)
        self.retry_after = retry_after
        self._unavailable_until: dict[int, float] = {}

    @property
    def model(self) -> str:
        return "fallback(" + ", ".join(llm.model for llm in self.llms) + ")"

    @property
    def provider(self) -> str:
        return "fallback"

    def available(self, llm: LLM) -> bool:
        until = self._unavailable_until.get(id(llm))
        return until is None or asyncio.get_running_loop().time() >= until

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        return self._stream(chat_ctx, tools, tool_choice)

    def _candidates(self) -> list[LLM]:
        ready = [llm for llm in self.llms if self.available(llm)]
        # With every one marked down, trying them all beats failing without a try.
        return ready or list(self.llms)

    async def _stream(
        self, chat_ctx: ChatContext, tools: Sequence[ToolDefinition], tool_choice: ToolChoice
    ) -> AsyncIterator[ChatChunk]:
        failures: list[str] = []
        retryable = False
        for llm in self._candidates():
            produced = False
            try:
                async with aclosing(llm.chat(chat_ctx, tools, tool_choice)) as stream:  # type: ignore[type-var]
                    async for chunk in stream:
                        produced = True
                        yield chunk
            except LLMError as exc:
                if produced:
                    raise  # already heard in part: end the reply, do not repeat it
                self._mark_down(llm, exc)
                failures.append(f"{llm.model}: {exc}")
                retryable = retryable or exc.retryable
                continue
            self._unavailable_until.pop(id(llm), None)
            return
        raise LLMError("every LLM failed: " + "; ".join(failures), retryable=retryable)

    def _mark_down(self, llm: LLM, exc: LLMError) -> None:
        logger.warning(
            "LLM %s failed (%s); unavailable for %.0f s, trying the next one",
            llm.model,
            exc,
            self.retry_after,
        )
        self._unavailable_until[id(llm)] = asyncio.get_running_loop().time() + self.retry_after

    async def aclose(self) -> None:
        for llm in self.llms:
            await llm.aclose()
