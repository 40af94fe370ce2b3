"""openai.Realtime and GPTLive retry their first connection after a transient failure
(refused TCP connection, HTTP 429 or 5xx to the upgrade) and fail at once otherwise;
over real WebSockets to the loopback servers, on virtual time."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest

from rejoinder.models.realtime import RealtimeConfig, RealtimeError, RealtimeSession
from rejoinder.providers.openai.gpt_live import GPTLive
from rejoinder.providers.openai.realtime import Realtime
from rejoinder.testing import advance, now
from rejoinder.testing.gpt_live_server import GPTLiveServer
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

# Real sockets on virtual time: see test_openai_chat.py for why this marker is enough.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

CONFIG = RealtimeConfig(instructions="Be brief.")


def free_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def retry_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# -- openai.Realtime ------------------------------------------------------------------------


def realtime(server: OpenAIRealtimeServer, **options: Any) -> Realtime:
    return Realtime(api_key="sk-test", base_url=server.base_url, **options)


async def test_realtime_retries_a_429_honouring_retry_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(429, times=1, retry_after=2)
        session = realtime(server).session()
        began = now()
        with caplog.at_level(logging.WARNING, logger="rejoinder"):
            await session.start(CONFIG)
        try:
            assert 2.0 <= now() - began < 2.5
            assert session.connect_retries == 1
            assert server.refused == 1 and len(server.connections) == 1
            [message] = retry_records(caplog)
            assert "HTTP 429" in message and "in 2.00 s" in message
        finally:
            await session.aclose()


async def test_realtime_retries_5xx_then_starts() -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(503, times=2)
        session = realtime(server, retry_backoff=1.0).session()
        began = now()
        await session.start(CONFIG)
        try:
            assert 1.5 <= now() - began <= 3.5  # half to all of 1 s, then of 2 s
            assert session.connect_retries == 2
            assert server.of_type("session.update")  # configured on the third connection
        finally:
            await session.aclose()


async def test_realtime_gives_up_after_max_retries_with_the_last_status() -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(502)
        session = realtime(server, max_retries=2).session()
        with pytest.raises(RealtimeError, match="HTTP 502") as caught:
            await session.start(CONFIG)
        assert "gave up after 2 retries" in str(caught.value)
        assert not caught.value.fatal and caught.value.code == "http_502"
        assert server.refused == 3
        assert session.connect_retries == 2
        await session.aclose()


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_realtime_fails_at_once_on_a_refusal_that_will_not_pass(status: int) -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(status)
        session = realtime(server).session()
        began = now()
        with pytest.raises(RealtimeError, match=f"HTTP {status}"):
            await session.start(CONFIG)
        assert now() - began < 0.1
        assert server.refused == 1 and session.connect_retries == 0
        await session.aclose()


async def test_realtime_max_retries_zero_fails_on_the_first_refusal() -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(503, times=1)
        session = realtime(server, max_retries=0).session()
        with pytest.raises(RealtimeError, match="HTTP 503") as caught:
            await session.start(CONFIG)
        assert "retries" not in str(caught.value)
        assert server.refused == 1 and session.connect_retries == 0
        await session.aclose()


async def test_realtime_retries_a_refused_connection_until_the_server_is_up() -> None:
    port = free_port()
    model = Realtime(
        api_key="sk-test",
        base_url=f"http://127.0.0.1:{port}/v1",
        retry_backoff=10.0,
        retry_backoff_cap=10.0,
    )
    session = model.session()
    start = asyncio.create_task(session.start(CONFIG))
    while session.connect_retries == 0:
        await advance(0.1)
    async with OpenAIRealtimeServer(port=port) as server:
        await start
        assert len(server.connections) == 1
        await session.aclose()


async def test_realtime_aclose_during_a_retry_wait_fails_start_promptly() -> None:
    async with OpenAIRealtimeServer() as server:
        server.refuse(503)
        session = realtime(server, retry_backoff=60.0, retry_backoff_cap=60.0).session()
        start = asyncio.create_task(session.start(CONFIG))
        while session.connect_retries == 0:
            await advance(0.1)
        began = now()
        await session.aclose()
        with pytest.raises(RealtimeError, match="closed while connecting"):
            await start
        assert now() - began < 1
        assert server.refused == 1


# -- GPTLive --------------------------------------------------------------------------------


def gpt_live(server: GPTLiveServer, **options: Any) -> GPTLive:
    return GPTLive(api_key="sk-test", base_url=server.base_url, **options)


async def closed(session: RealtimeSession) -> None:
    await session.aclose()
    tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("gpt-live")]
    assert [t for t in tasks if not t.done()] == []


async def test_gpt_live_retries_a_429_honouring_retry_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with GPTLiveServer() as server:
        server.refuse(429, retry_after=3)
        session = gpt_live(server).session()
        began = now()
        with caplog.at_level(logging.WARNING, logger="rejoinder"):
            await session.start(CONFIG)
        assert 3.0 <= now() - began < 3.5
        assert session.connect_retries == 1
        assert server.refused == 1 and server.connections == 1
        [message] = retry_records(caplog)
        assert "HTTP 429" in message and "in 3.00 s" in message
        await closed(session)


async def test_gpt_live_retries_5xx_then_starts() -> None:
    async with GPTLiveServer() as server:
        server.refuse(500, times=1)
        server.refuse(503, times=1)
        session = gpt_live(server).session()
        await session.start(CONFIG)
        assert session.connect_retries == 2
        assert server.received_types() == ["session.start"]
        await closed(session)


async def test_gpt_live_gives_up_after_max_retries_with_the_last_status() -> None:
    async with GPTLiveServer() as server:
        server.refuse(503, times=1)
        server.refuse(500, times=1)
        session = gpt_live(server, max_retries=1).session()
        with pytest.raises(RealtimeError, match="HTTP 500") as caught:
            await session.start(CONFIG)
        assert "gave up after 1 retries" in str(caught.value)
        assert server.refused == 2 and server.connections == 0
        await closed(session)


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_gpt_live_fails_at_once_on_a_refusal_that_will_not_pass(status: int) -> None:
    async with GPTLiveServer() as server:
        server.refuse(status, times=5)
        session = gpt_live(server).session()
        began = now()
        with pytest.raises(RealtimeError, match=f"HTTP {status}") as caught:
            await session.start(CONFIG)
        assert now() - began < 0.1
        assert caught.value.fatal is (status in (401, 403))
        assert server.refused == 1 and session.connect_retries == 0
        await closed(session)


async def test_gpt_live_a_refused_session_is_not_retried() -> None:
    # The upgrade worked; the service refused the session itself: not a transient failure.
    async with GPTLiveServer() as server:
        server.start_error = {"type": "invalid_request_error", "code": "x", "message": "no"}
        session = gpt_live(server).session()
        with pytest.raises(RealtimeError, match="no"):
            await session.start(CONFIG)
        assert server.connections == 1 and session.connect_retries == 0
        await closed(session)


async def test_gpt_live_retries_a_refused_connection_until_the_server_is_up() -> None:
    port = free_port()
    session = GPTLive(
        api_key="sk-test",
        base_url=f"http://127.0.0.1:{port}/v1",
        retry_backoff=10.0,
        retry_backoff_cap=10.0,
    ).session()
    start = asyncio.create_task(session.start(CONFIG))
    while session.connect_retries == 0:
        await advance(0.1)
    async with GPTLiveServer(port=port) as server:
        await start
        assert server.connections == 1
        await closed(session)


async def test_gpt_live_aclose_during_a_retry_wait_fails_start_promptly() -> None:
    async with GPTLiveServer() as server:
        server.refuse_connections = True
        session = gpt_live(server, retry_backoff=60.0, retry_backoff_cap=60.0).session()
        start = asyncio.create_task(session.start(CONFIG))
        while session.connect_retries == 0:
            await advance(0.1)
        began = now()
        await session.aclose()
        with pytest.raises(RealtimeError, match="closed while connecting"):
            await start
        assert now() - began < 1
        assert server.refused == 1  # no connection attempt after aclose
        await closed(session)
