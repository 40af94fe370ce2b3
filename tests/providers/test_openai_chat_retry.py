"""openai.LLM retries a transient failure that comes before anything was yielded, over
real sockets to the loopback Chat Completions server, on virtual time."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rejoinder.models import ChatChunk, ChatContext, LLMError
from rejoinder.providers import openai
from rejoinder.providers._retry import MAX_RETRY_AFTER, RetryPolicy, retry_after
from rejoinder.testing import advance, now
from rejoinder.testing.openai_chat_server import (
    CutConnection,
    ErrorReply,
    OpenAIChatServer,
    Pause,
    StreamReply,
    chunk,
    text_chunks,
)

# Real sockets on virtual time: see test_openai_chat.py for why this marker is enough.
pytestmark = pytest.mark.looptime(noop_cycles=2000)


@pytest.fixture
async def server() -> AsyncIterator[OpenAIChatServer]:
    async with OpenAIChatServer() as srv:
        yield srv


@pytest.fixture
async def make_llm(server: OpenAIChatServer) -> AsyncIterator[Any]:
    made: list[openai.LLM] = []

    def factory(**options: Any) -> openai.LLM:
        options.setdefault("base_url", server.base_url)
        llm = openai.LLM(model="m", api_key="sk-test", **options)
        made.append(llm)
        return llm

    yield factory
    for llm in made:
        await llm.aclose()


def user_says(text: str = "Hi") -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content=text)
    return ctx


async def reply_text(llm: openai.LLM) -> str:
    return "".join([c.delta async for c in llm.chat(user_says())])


async def fail(stream: AsyncIterator[ChatChunk]) -> tuple[list[ChatChunk], LLMError]:
    received: list[ChatChunk] = []
    try:
        async for c in stream:
            received.append(c)
    except LLMError as error:
        return received, error
    raise AssertionError(f"no LLMError; the stream ended normally after {received!r}")


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "retry" in r.getMessage()]


def free_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- what is retried ------------------------------------------------------------------------


async def test_429_then_200_succeeds_and_the_retry_is_logged_and_counted(
    server: OpenAIChatServer, make_llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(
        ErrorReply(429, "Rate limit reached.", "requests", "rate_limit_exceeded", retry_after=2),
        StreamReply(text_chunks("Hello")),
    )
    llm = make_llm()
    began = now()
    with caplog.at_level(logging.WARNING, logger="rejoinder"):
        assert await reply_text(llm) == "Hello"
    assert 2.0 <= now() - began < 2.5  # Retry-After: 2, as given (no jitter on top)
    assert llm.retries == 1
    assert len(server.requests) == 2
    [record] = retry_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.name.startswith("rejoinder")
    assert "HTTP 429" in record.getMessage()
    assert "in 2.00 s" in record.getMessage()
    assert "retry 1 of 3" in record.getMessage()


async def test_retry_after_ms_is_honoured(server: OpenAIChatServer, make_llm: Any) -> None:
    server.add(ErrorReply(429, headers={"retry-after-ms": "1500"}), StreamReply(text_chunks("ok")))
    began = now()
    assert await reply_text(make_llm()) == "ok"
    assert 1.5 <= now() - began < 2.0


async def test_503_then_200_waits_a_jittered_backoff(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(ErrorReply(503, "overloaded", "server_error"), StreamReply(text_chunks("ok")))
    llm = make_llm(retry_backoff=4.0)
    began = now()
    assert await reply_text(llm) == "ok"
    assert 2.0 <= now() - began <= 4.5  # between half and all of the 4 s backoff
    assert llm.retries == 1


async def test_backoff_doubles_up_to_the_cap(server: OpenAIChatServer, make_llm: Any) -> None:
    server.add(*[ErrorReply(500)] * 4, StreamReply(text_chunks("ok")))
    llm = make_llm(max_retries=4, retry_backoff=2.0, retry_backoff_cap=4.0)
    began = now()
    assert await reply_text(llm) == "ok"
    # Ceilings 2, 4, 4 (capped), 4: at least half of each, at most all of each.
    assert 7.0 <= now() - began <= 14.5
    assert llm.retries == 4


async def test_a_connection_closed_before_the_headers_is_retried(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(StreamReply([CutConnection()]), StreamReply(text_chunks("ok")))
    llm = make_llm()
    assert await reply_text(llm) == "ok"
    assert llm.retries == 1


async def test_a_cut_after_the_headers_but_before_any_chunk_is_retried(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    # The role chunk carries no text: nothing reached the caller, so a retry is safe.
    server.add(
        StreamReply([chunk(role="assistant", content=""), CutConnection()]),
        StreamReply(text_chunks("ok")),
    )
    llm = make_llm()
    assert await reply_text(llm) == "ok"
    assert llm.retries == 1


async def test_a_refused_connection_is_retried_until_the_server_is_up() -> None:
    port = free_port()
    llm = openai.LLM(
        model="m",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        retry_backoff=10.0,
        retry_backoff_cap=10.0,
    )
    try:
        task = asyncio.create_task(reply_text(llm))
        while llm.retries == 0:  # the first try was refused; the retry waits >= 5 s
            await advance(0.1)
        async with OpenAIChatServer([StreamReply(text_chunks("up"))], port=port) as server:
            assert await task == "up"
            assert len(server.requests) == 1
        assert llm.retries == 1
    finally:
        await llm.aclose()


# -- what is not ----------------------------------------------------------------------------


async def test_max_retries_zero_disables_retrying(
    server: OpenAIChatServer, make_llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(ErrorReply(503, "overloaded"), StreamReply(text_chunks("never")))
    llm = make_llm(max_retries=0)
    with caplog.at_level(logging.WARNING, logger="rejoinder"):
        _, error = await fail(llm.chat(user_says()))
    assert error.status == 503 and error.retryable
    assert str(error).endswith("overloaded")  # reported exactly as without retries
    assert llm.retries == 0
    assert len(server.requests) == 1
    assert retry_records(caplog) == []


async def test_exhausted_retries_raise_the_last_status(
    server: OpenAIChatServer, make_llm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(ErrorReply(503), ErrorReply(500), ErrorReply(502, "bad gateway"))
    llm = make_llm(max_retries=2)
    with caplog.at_level(logging.WARNING, logger="rejoinder"):
        _, error = await fail(llm.chat(user_says()))
    assert error.status == 502
    assert error.retryable
    assert "HTTP 502" in str(error) and "bad gateway" in str(error)
    assert "gave up after 2 retries" in str(error)
    assert llm.retries == 2
    assert len(server.requests) == 3
    assert ["HTTP 503" in r.getMessage() for r in retry_records(caplog)] == [True, False]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_non_transient_statuses_fail_at_once(
    server: OpenAIChatServer, make_llm: Any, status: int
) -> None:
    server.add(ErrorReply(status, "no such thing"), StreamReply(text_chunks("never")))
    llm = make_llm()
    began = now()
    _, error = await fail(llm.chat(user_says()))
    assert error.status == status and not error.retryable
    assert f"HTTP {status}" in str(error) and "no such thing" in str(error)
    assert llm.retries == 0
    assert len(server.requests) == 1
    assert now() - began < 0.1


async def test_nothing_is_retried_once_a_delta_was_delivered(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(
        StreamReply([chunk(content="Hel"), CutConnection()]), StreamReply(text_chunks("never"))
    )
    llm = make_llm()
    received, error = await fail(llm.chat(user_says()))
    assert "".join(c.delta for c in received) == "Hel"
    assert "connection lost mid-stream" in str(error)
    assert error.retryable  # the caller (e.g. FallbackLLM) may decide; the LLM does not
    assert llm.retries == 0
    assert len(server.requests) == 1


async def test_an_error_event_after_a_delta_is_not_retried(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(
        StreamReply(
            [chunk(content="Hi"), {"error": {"message": "overloaded", "type": "server_error"}}],
            done=False,
        ),
        StreamReply(text_chunks("never")),
    )
    llm = make_llm()
    received, error = await fail(llm.chat(user_says()))
    assert [c.delta for c in received] == ["Hi"] and "overloaded" in str(error)
    assert llm.retries == 0


async def test_a_retry_after_beyond_the_limit_is_not_waited_for(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(ErrorReply(429, "slow down", retry_after=3600), StreamReply(text_chunks("never")))
    llm = make_llm()
    began = now()
    _, error = await fail(llm.chat(user_says()))
    assert now() - began < 0.1
    assert error.status == 429 and "slow down" in str(error)
    assert "not retried" in str(error) and "3600" in str(error)
    assert llm.retries == 0


async def test_a_timeout_is_not_retried(server: OpenAIChatServer, make_llm: Any) -> None:
    # No headers for an hour; the 5 s read limit is the caller's bound on the whole wait.
    server.add(StreamReply([Pause(3600), *text_chunks("late")]), StreamReply(text_chunks("no")))
    llm = make_llm(timeout=openai.Timeout(connect=5, read=5))
    began = now()
    _, error = await fail(llm.chat(user_says()))
    assert "timed out" in str(error) and error.retryable
    assert 5 <= now() - began < 7
    assert llm.retries == 0


async def test_a_consumer_stopping_early_does_not_retry(
    server: OpenAIChatServer, make_llm: Any
) -> None:
    server.add(StreamReply([chunk(content="one"), Pause(3600), *text_chunks("two")]))
    llm = make_llm()
    stream = llm.chat(user_says())
    assert (await anext(stream)).delta == "one"
    await stream.aclose()  # type: ignore[attr-defined]
    assert llm.retries == 0
    assert len(server.requests) == 1


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
        ({"retry_backoff": -0.1}, "retry_backoff"),
        ({"retry_backoff": float("nan")}, "retry_backoff"),
        ({"retry_backoff_cap": float("inf")}, "retry_backoff_cap"),
        ({"retry_backoff": 2.0, "retry_backoff_cap": 1.0}, "retry_backoff_cap"),
    ],
)
def test_bad_retry_settings_are_a_clear_error(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        openai.LLM(model="m", api_key="k", **options)
    with pytest.raises(ValueError, match=named):
        openai.Realtime(api_key="k", **options)
    with pytest.raises(ValueError, match=named):
        openai.GPTLive(api_key="k", **options)


def test_backoff_is_bounded_jittered_and_never_overflows() -> None:
    policy = RetryPolicy(max_retries=2000, retry_backoff=0.5, retry_backoff_cap=8.0)
    for retry in range(1, 12):
        ceiling = min(8.0, 0.5 * 2 ** (retry - 1))
        waits = {policy.backoff(retry) for _ in range(50)}
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(waits) > 1  # jittered
    assert 4.0 <= policy.backoff(1500) <= 8.0
    assert RetryPolicy(retry_backoff=0, retry_backoff_cap=0).backoff(3) == 0


def test_next_wait_says_why_there_is_none() -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.next_wait(0, 1.25) == 1.25
    assert policy.next_wait(2) == "gave up after 2 retries"
    assert RetryPolicy(max_retries=0).next_wait(0) == ""
    assert "not retried" in str(policy.next_wait(0, MAX_RETRY_AFTER + 1))
    assert policy.next_wait(0, MAX_RETRY_AFTER) == MAX_RETRY_AFTER


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "nan"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_header(headers: dict[str, str] | None, seconds: float | None) -> None:
    assert retry_after(headers) == seconds
