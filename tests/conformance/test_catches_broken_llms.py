"""The LLM suite fails providers that break its promises: each broken LLM here is a
working one with one fault, and the test it breaks must fail on it (an AssertionError
from the suite's own checks, not an error of the test itself)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from rejoinder.models import LLM, ChatChunk, ChatContext, LLMError, ToolChoice, ToolDefinition
from rejoinder.providers import openai
from rejoinder.testing.conformance import LLMConformance
from rejoinder.testing.openai_chat_server import OpenAIChatServer

from .test_openai_llm import OpenAIChatHarness

pytestmark = pytest.mark.looptime(noop_cycles=2000)


class Wrapper(LLM):
    """Passes everything to a working openai.LLM."""

    def __init__(self, inner: openai.LLM) -> None:
        self.inner = inner

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def provider(self) -> str:
        return self.inner.provider

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        return self.inner.chat(chat_ctx, tools, tool_choice)

    async def aclose(self) -> None:
        await self.inner.aclose()


class SwallowsErrors(Wrapper):
    """Ends the reply quietly when the stream fails: a truncated reply looks whole."""

    async def _swallow(self, stream: AsyncIterator[ChatChunk]) -> AsyncIterator[ChatChunk]:
        try:
            async for chunk in stream:
                yield chunk
        except LLMError:
            return

    def chat(self, chat_ctx: ChatContext, *args: Any, **kwargs: Any) -> AsyncIterator[ChatChunk]:
        return self._swallow(super().chat(chat_ctx, *args, **kwargs))


class WrongError(Wrapper):
    """Lets the transport's exception out instead of an LLMError."""

    async def _translate(self, stream: AsyncIterator[ChatChunk]) -> AsyncIterator[ChatChunk]:
        try:
            async for chunk in stream:
                yield chunk
        except LLMError as error:
            raise ConnectionError(str(error)) from None

    def chat(self, chat_ctx: ChatContext, *args: Any, **kwargs: Any) -> AsyncIterator[ChatChunk]:
        return self._translate(super().chat(chat_ctx, *args, **kwargs))


class NeverCloses(Wrapper):
    """``aclose`` does nothing: its pooled connection stays open."""

    async def aclose(self) -> None:
        return None


class LeavesATask(Wrapper):
    """Each request starts a helper task that nobody stops."""

    def __init__(self, inner: openai.LLM) -> None:
        super().__init__(inner)
        self.helpers: list[asyncio.Task[None]] = []

    def chat(self, chat_ctx: ChatContext, *args: Any, **kwargs: Any) -> AsyncIterator[ChatChunk]:
        self.helpers.append(asyncio.ensure_future(asyncio.sleep(3600)))
        return super().chat(chat_ctx, *args, **kwargs)

    async def aclose(self) -> None:
        await super().aclose()
        for helper in self.helpers:  # so the test itself leaves nothing behind
            helper.cancel()


class Eager(Wrapper):
    """Starts the request in ``chat`` instead of when the stream is iterated."""

    def __init__(self, inner: openai.LLM) -> None:
        super().__init__(inner)
        self.pumps: list[asyncio.Task[None]] = []

    def chat(self, chat_ctx: ChatContext, *args: Any, **kwargs: Any) -> AsyncIterator[ChatChunk]:
        queue: asyncio.Queue[ChatChunk | None] = asyncio.Queue()
        stream = super().chat(chat_ctx, *args, **kwargs)

        async def pump() -> None:
            async for chunk in stream:
                queue.put_nowait(chunk)
            queue.put_nowait(None)

        task = asyncio.ensure_future(pump())
        self.pumps.append(task)

        async def read() -> AsyncIterator[ChatChunk]:
            while (chunk := await queue.get()) is not None:
                yield chunk
            await task

        return read()

    async def aclose(self) -> None:
        for task in self.pumps:
            task.cancel()
        await asyncio.gather(*self.pumps, return_exceptions=True)
        await super().aclose()


class BrokenHarness(OpenAIChatHarness):
    def __init__(self, server: OpenAIChatServer, broken: Callable[[openai.LLM], LLM]) -> None:
        super().__init__(server)
        self.broken = broken
        self.made: list[openai.LLM] = []

    def make(self) -> LLM:  # type: ignore[override]
        working = super().make()
        self.made.append(working)
        return self.broken(working)

    async def release(self) -> None:
        """Close what the broken LLMs left open, so this test leaves nothing behind."""
        for working in self.made:
            await working.aclose()


Test = Callable[..., Awaitable[None]]
suite = LLMConformance()


async def fails(test: Test, broken: Callable[[openai.LLM], LLM], **arguments: Any) -> str:
    """Run ``test`` against the broken LLM; the message of the AssertionError it fails with."""
    async with OpenAIChatServer() as server:
        harness = BrokenHarness(server, broken)
        llm = harness.make()
        try:
            with pytest.raises(AssertionError) as failed:
                await test(harness=harness, llm=llm, **arguments)
        finally:
            await llm.aclose()
            await harness.release()
    return str(failed.value)


async def test_a_control_passes_the_tests_the_broken_ones_fail() -> None:
    async with OpenAIChatServer() as server:
        harness = BrokenHarness(server, Wrapper)
        llm = harness.make()
        await suite.test_a_cut_mid_stream_raises_and_is_not_retried(harness=harness, llm=llm)
        await suite.test_cancelling_mid_stream_leaves_nothing_behind(harness=harness, llm=llm)
        await suite.test_chat_does_nothing_until_iterated(harness=harness, llm=llm)
        await llm.aclose()
        await suite.test_aclose_is_idempotent_and_releases_everything(harness=harness)


async def test_a_cut_that_ends_the_reply_quietly_fails() -> None:
    message = await fails(suite.test_a_cut_mid_stream_raises_and_is_not_retried, SwallowsErrors)
    assert "a cut stream ended quietly" in message


async def test_garbage_that_ends_the_reply_quietly_fails() -> None:
    message = await fails(
        suite.test_garbage_mid_stream_raises_or_is_skipped_never_truncates, SwallowsErrors
    )
    assert "malformed data ended the reply quietly" in message


async def test_a_stall_that_ends_the_reply_quietly_fails() -> None:
    message = await fails(
        suite.test_a_stall_fails_within_the_timeout, SwallowsErrors, delivered=("Hel",)
    )
    assert "a stalled stream ended quietly" in message


async def test_a_final_failure_reported_as_an_empty_reply_fails() -> None:
    message = await fails(
        suite.test_a_final_failure_is_not_retried_and_names_the_cause, SwallowsErrors
    )
    assert "no LLMError for a refused request" in message


async def test_no_retries_fails() -> None:
    def no_retries(llm: openai.LLM) -> LLM:
        return Wrapper(openai.LLM(model="m", base_url=llm.base_url, max_retries=0))

    message = await fails(
        suite.test_a_transient_failure_before_output_is_retried_and_counted, no_retries
    )
    assert "a retried request failed" in message and "503" in message


async def test_a_connection_left_open_by_aclose_fails() -> None:
    async with OpenAIChatServer() as server:
        harness = BrokenHarness(server, NeverCloses)
        try:
            with pytest.raises(AssertionError, match=r"aclose left (1 connection|tasks running)"):
                await suite.test_aclose_is_idempotent_and_releases_everything(harness=harness)
        finally:
            await harness.release()


async def test_a_task_left_running_fails() -> None:
    message = await fails(suite.test_cancelling_mid_stream_leaves_nothing_behind, LeavesATask)
    assert "a cancelled stream left tasks running" in message


async def test_a_request_sent_before_iterating_fails() -> None:
    message = await fails(suite.test_chat_does_nothing_until_iterated, Eager)
    assert "chat() sent the request before being iterated" in message


async def test_an_error_of_the_wrong_kind_fails_naming_the_promised_one() -> None:
    message = await fails(suite.test_a_cut_mid_stream_raises_and_is_not_retried, WrongError)
    assert "ConnectionError raised where the interface promises LLMError" in message
