"""The LLM conformance suite: ``LLMHarness`` (what a provider's test fills in for its own
server) and ``LLMConformance`` (the tests, which use only ``rj.LLM``'s public interface
and the harness).

The promises checked: the reply's text arrives in order and joins to what the server
sent; a tool call arrives whole, its arguments JSON; usage is reported once; a transient
failure before the first chunk is retried (and counted in ``StreamInfo.retries``), a
final one raises ``LLMError`` with ``retryable`` right and the cause in the message; a
cut, malformed data or a stall raise within a bounded time, never a shorter reply that
looks whole; ``chat`` does nothing until iterated; a stream stopped or cancelled midway
leaves nothing behind and the next request works; ``aclose`` is idempotent and releases
everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from ...models import LLM, ChatChunk, ChatContext, LLMError, ToolCallRequest, ToolDefinition, Usage
from ._common import (
    ServedHarness,
    Snapshot,
    aclose_is_idempotent,
    cancel_after_first,
    elapsed_since,
    only,
    stage,
    stall_bound,
    suite_marks,
    within,
)

__all__ = ["LLMConformance", "LLMHarness"]

GIVE_UP = 120.0
"""Seconds (virtual under looptime) within which any request must end, retries included."""

WEATHER = ToolDefinition(
    name="get_weather",
    description="Look up the weather.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)


class LLMHarness(ServedHarness, ABC):
    """What ``LLMConformance`` needs from a provider's test: a way to make the LLM, and
    a way to script what its server answers to the *next* request. Each scripting method
    queues one outcome (``times`` of them where it says so); the suite calls it just
    before the request. A scenario the server cannot stage raises ``NotSupported("why")``
    and the tests that need it are skipped with that reason."""

    stall_timeout: ClassVar[float] = 5.0
    """The longest a request to a server that went silent may take to fail, as the LLMs
    ``make`` returns are configured (for most providers: their read timeout)."""
    retries: ClassVar[int] = 2
    """How many times the LLMs ``make`` returns retry a transient failure (their
    ``max_retries``); at least 1. Give them a short backoff, so the suite stays fast
    where it does not run on virtual time."""

    @abstractmethod
    def make(self) -> LLM:
        """A new LLM that talks to the server, configured as ``stall_timeout`` and
        ``retries`` say."""

    @abstractmethod
    def attempts(self) -> int:
        """How many requests the server has received so far (refused ones included)."""

    @abstractmethod
    def reply_text(self, *chunks: str, usage: Usage | None = None) -> None:
        """The next request is answered with a reply streaming these text deltas, then
        the API's proper end. With ``usage``, the reply reports those token counts as the
        API does (``prompt_tokens`` and ``completion_tokens`` are checked)."""

    @abstractmethod
    def reply_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        """The next request is answered with one call of tool ``name`` (its arguments
        streamed in more than one piece where the API streams them), then the end."""

    @abstractmethod
    def fail_before_output(self, *, transient: bool, times: int = 1) -> str:
        """The next ``times`` requests fail before any output: a transient failure (HTTP
        429 or 503, an overloaded error) or a final one (HTTP 400 or 401). Returns text
        the LLM's error must contain to name the cause (the status, or the message)."""

    @abstractmethod
    def cut_mid_stream(self, *chunks: str) -> None:
        """The next reply streams these deltas, then the connection is cut (no end). With
        no deltas, the reply starts (whatever the API sends before any text) and is cut."""

    @abstractmethod
    def garbage(self, *chunks: str) -> None:
        """The next reply streams the first delta, then data that is not the API's
        protocol (a malformed event), then the other deltas and the proper end."""

    @abstractmethod
    def stall(self, *chunks: str) -> None:
        """The next reply streams these deltas (none: not even the response's start),
        then the server goes silent and keeps the connection open."""


def _user_says(text: str = "Hi") -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content=text)
    return ctx


async def _collect(stream: AsyncIterator[ChatChunk]) -> list[ChatChunk]:
    return [chunk async for chunk in stream]


async def _until_error(
    stream: AsyncIterator[ChatChunk],
    received: list[ChatChunk],
    first: asyncio.Event | None = None,
) -> LLMError | None:
    """Read ``stream`` into ``received`` (setting ``first`` at the first chunk); the
    ``LLMError`` that ended it, if one did."""
    try:
        with only(LLMError):
            async for chunk in stream:
                received.append(chunk)
                if first is not None:
                    first.set()
    except LLMError as error:
        return error
    return None


def _text(chunks: list[ChatChunk]) -> str:
    return "".join(chunk.delta for chunk in chunks)


async def _reply(llm: LLM, what: str, **options: Any) -> list[ChatChunk]:
    """The whole reply; an ``LLMError`` fails the test saying what was being asked."""
    try:
        with only(LLMError):
            return await within(GIVE_UP, _collect(llm.chat(_user_says(), **options)), what)
    except LLMError as error:
        raise AssertionError(f"{what} failed: {error}") from error


async def _retried_once(harness: LLMHarness, llm: LLM, what: str) -> None:
    """The request whose first try was just made to fail is tried again, succeeds, and
    its ``StreamInfo`` counts the retry."""
    harness.reply_text("Hello")
    before = harness.attempts()
    chunks = await _reply(llm, what)
    assert _text(chunks) == "Hello"
    assert harness.attempts() - before == 2
    info = chunks[0].info
    assert info is not None and info.retries == 1, f"StreamInfo should count 1 retry: {info}"


class LLMConformance:
    """The tests every ``rj.LLM`` must pass. Subclass it as ``Test...`` and provide a
    ``harness`` fixture (an ``LLMHarness`` over your server); see the package docstring."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = suite_marks()

    @pytest_asyncio.fixture
    async def llm(self, harness: LLMHarness) -> AsyncIterator[LLM]:
        """An LLM from the harness, closed after the test."""
        async with contextlib.aclosing(harness.make()) as made:
            yield made

    # -- a reply -----------------------------------------------------------------------------

    async def test_text_arrives_in_order_and_says_who_answered(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        harness.reply_text("Hel", "lo", " there")
        chunks = await _reply(llm, "a three-delta reply")
        assert _text(chunks) == "Hello there"
        assert [call for chunk in chunks for call in chunk.tool_calls] == []
        info = chunks[0].info
        assert info is not None, "the first chunk carries no StreamInfo (the metrics need it)"
        assert (info.model, info.provider) == (llm.model, llm.provider)
        assert info.retries == 0
        assert all(chunk.info is None for chunk in chunks[1:]), "StreamInfo is for chunk one"

    async def test_a_tool_call_arrives_whole_with_its_arguments(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        arguments = {"city": "Paris", "days": 2}
        stage(harness, "reply_tool_call", "get_weather", arguments)
        chunks = await _reply(llm, "a tool call", tools=[WEATHER])
        calls: list[ToolCallRequest] = [call for chunk in chunks for call in chunk.tool_calls]
        assert len(calls) == 1, f"one tool call was sent, {len(calls)} arrived: {calls}"
        [call] = calls
        assert call.name == "get_weather"
        assert isinstance(call.call_id, str) and call.call_id
        assert json.loads(call.arguments) == arguments

    async def test_usage_is_reported_once(self, harness: LLMHarness, llm: LLM) -> None:
        stage(harness, "reply_text", "Hi", usage=Usage(prompt_tokens=12, completion_tokens=5))
        chunks = await _reply(llm, "a reply with usage")
        usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
        assert len(usages) == 1, f"usage should come once (on the last chunk), got {usages}"
        assert (usages[0].prompt_tokens, usages[0].completion_tokens) == (12, 5)
        assert _text(chunks) == "Hi"

    async def test_chat_does_nothing_until_iterated(self, harness: LLMHarness, llm: LLM) -> None:
        before = harness.attempts()
        stream = llm.chat(_user_says())
        await asyncio.sleep(1.0)
        assert harness.attempts() == before, "chat() sent the request before being iterated"
        harness.reply_text("ok")
        try:
            with only(LLMError):
                assert _text(await within(GIVE_UP, _collect(stream), "the stream")) == "ok"
        except LLMError as error:
            raise AssertionError(f"the request failed: {error}") from error

    async def test_two_requests_at_once_both_complete(self, harness: LLMHarness, llm: LLM) -> None:
        harness.reply_text("Same ", "reply")
        harness.reply_text("Same ", "reply")
        both = await asyncio.gather(_reply(llm, "one request"), _reply(llm, "the other"))
        assert [_text(chunks) for chunks in both] == ["Same reply", "Same reply"]

    # -- failures before the first chunk -----------------------------------------------------

    async def test_a_transient_failure_before_output_is_retried_and_counted(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        stage(harness, "fail_before_output", transient=True)
        await _retried_once(harness, llm, "a retried request")

    async def test_a_cut_before_the_first_delta_is_retried(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        stage(harness, "cut_mid_stream")
        await _retried_once(harness, llm, "a request cut before its first delta")

    async def test_retries_give_up_with_a_retryable_error_naming_the_cause(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        cause = stage(harness, "fail_before_output", transient=True, times=harness.retries + 1)
        before = harness.attempts()
        received: list[ChatChunk] = []
        error = await within(GIVE_UP, _until_error(llm.chat(_user_says()), received), "retries")
        assert error is not None, f"no LLMError after every try failed; got {received}"
        assert received == []
        assert error.retryable is True
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == harness.retries + 1

    async def test_a_final_failure_is_not_retried_and_names_the_cause(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        cause = stage(harness, "fail_before_output", transient=False)
        before = harness.attempts()
        received: list[ChatChunk] = []
        error = await within(GIVE_UP, _until_error(llm.chat(_user_says()), received), "a 4xx")
        assert error is not None, f"no LLMError for a refused request; got {received}"
        assert error.retryable is False
        assert cause in str(error), f"the error does not name the cause ({cause!r}): {error}"
        assert harness.attempts() - before == 1, "a final failure was retried"
        harness.reply_text("still here")
        assert _text(await _reply(llm, "the request after")) == "still here"

    # -- failures mid-stream -----------------------------------------------------------------

    async def test_a_cut_mid_stream_raises_and_is_not_retried(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        stage(harness, "cut_mid_stream", "Hel", "lo")
        before = harness.attempts()
        received: list[ChatChunk] = []
        error = await within(GIVE_UP, _until_error(llm.chat(_user_says()), received), "a cut")
        text = _text(received)
        assert error is not None, f"a cut stream ended quietly, as if whole: {text!r}"
        assert "Hello".startswith(text)
        assert error.retryable is True, "a lost connection may work on another try"
        if text:  # once something was delivered, a retry would repeat it
            assert harness.attempts() - before == 1, "the request was retried after output"
        harness.reply_text("again")
        assert _text(await _reply(llm, "the request after a cut")) == "again"

    async def test_garbage_mid_stream_raises_or_is_skipped_never_truncates(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        stage(harness, "garbage", "Hel", "lo", " there")
        received: list[ChatChunk] = []
        error = await within(GIVE_UP, _until_error(llm.chat(_user_says()), received), "garbage")
        text = _text(received)
        if error is None:
            assert text == "Hello there", f"malformed data ended the reply quietly: {text!r}"
        else:
            assert "Hello there".startswith(text)
        harness.reply_text("again")
        assert _text(await _reply(llm, "the request after garbage")) == "again"

    @pytest.mark.parametrize("delivered", [(), ("Hel",)], ids=["before-output", "mid-stream"])
    async def test_a_stall_fails_within_the_timeout(
        self, harness: LLMHarness, llm: LLM, delivered: tuple[str, ...]
    ) -> None:
        stage(harness, "stall", *delivered)
        bound = stall_bound(harness.stall_timeout)
        received: list[ChatChunk] = []
        started = asyncio.get_running_loop().time()
        error = await within(bound, _until_error(llm.chat(_user_says()), received), "a stall")
        assert error is not None, f"a stalled stream ended quietly: {_text(received)!r}"
        assert _text(received) == "".join(delivered)
        assert error.retryable is True, "a timeout may work on another try"
        assert elapsed_since(started) <= bound

    # -- stopping early, closing -------------------------------------------------------------

    async def test_cancelling_mid_stream_leaves_nothing_behind(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        harness.reply_text("warm")  # pooled connections made now are not a leak
        await _reply(llm, "a first request")
        snapshot = Snapshot()
        stage(harness, "stall", "one")
        stream = llm.chat(_user_says())
        await cancel_after_first(stream, GIVE_UP, "the first delta", "the cancelled stream")
        await snapshot.assert_released("a cancelled stream")
        harness.reply_text("again")
        assert _text(await _reply(llm, "the request after a cancel")) == "again"

    async def test_closing_the_stream_early_leaves_nothing_behind(
        self, harness: LLMHarness, llm: LLM
    ) -> None:
        harness.reply_text("warm")
        await _reply(llm, "a first request")
        snapshot = Snapshot()
        stage(harness, "stall", "one")
        stream = llm.chat(_user_says())
        first = await within(GIVE_UP, anext(stream), "the first delta")
        assert first.delta == "one"
        close = getattr(stream, "aclose", None)
        if close is not None:  # an async generator: the consumer's way to stop it
            await within(5.0, close(), "closing the stream")
        await snapshot.assert_released("a stream closed early")
        harness.reply_text("again")
        assert _text(await _reply(llm, "the request after closing a stream")) == "again"

    async def test_aclose_ends_a_stream_in_progress(self, harness: LLMHarness) -> None:
        snapshot = Snapshot(harness.server_port)
        llm = harness.make()
        stage(harness, "stall", "one")
        received: list[ChatChunk] = []
        first = asyncio.Event()
        reading = asyncio.create_task(_until_error(llm.chat(_user_says()), received, first))
        await within(GIVE_UP, first.wait(), "the first delta")
        started = asyncio.get_running_loop().time()
        await within(10.0, llm.aclose(), "aclose with a stream open")
        error = await within(stall_bound(harness.stall_timeout), reading, "the open stream")
        assert error is not None, "the stream ended quietly when its LLM was closed under it"
        assert elapsed_since(started) < harness.stall_timeout, (
            "the open stream waited for its timeout instead of ending with aclose"
        )
        await snapshot.assert_released("aclose with a stream open")

    async def test_aclose_is_idempotent_and_releases_everything(self, harness: LLMHarness) -> None:
        async def request(llm: LLM) -> None:
            harness.reply_text("Hello")
            assert _text(await _reply(llm, "a request")) == "Hello"

        await aclose_is_idempotent(harness, "LLM", request)
