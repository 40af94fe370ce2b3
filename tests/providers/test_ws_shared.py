"""What the WebSocket providers share (providers/_ws.py) decides the same for all of them:
a set-up that never ends is a retryable timeout with the socket closed, a set-up
cancelled half way closes its socket, a refused upgrade names the status, and a closed
HTTP session given to a provider is a clear error. And openai.Realtime's set-up reader
says what came instead of the event it waited for. Over 127.0.0.1, in real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import RealtimeError
from rejoinder.models.stt import STTError
from rejoinder.providers import _ws, deepgram
from rejoinder.providers._retry import RetryPolicy
from rejoinder.providers.openai._realtime_io import read_until

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(20)]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"ws://127.0.0.1:{runner.addresses[0][1]}/"

    yield start
    for runner in runners:
        await runner.cleanup()


def dialer(**options: Any) -> _ws.Dialer:
    settings: dict[str, Any] = {
        "who": "Test",
        "owner": "test.STT",
        "headers": {},
        "timeout": 0.3,
        "close_timeout": 0.2,
        "policy": RetryPolicy(0),
        "http_session": None,
        "error": STTError,
    }
    settings.update(options)
    return _ws.Dialer(**settings)


def silent_server(accepted: asyncio.Event, closed: asyncio.Event) -> Handler:
    async def silent(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        accepted.set()
        await ws.receive()  # the client's close
        closed.set()
        return ws

    return silent


async def test_a_set_up_that_never_ends_is_a_retryable_timeout_and_closes_its_socket(
    serve: Any,
) -> None:
    accepted, closed = asyncio.Event(), asyncio.Event()
    url = await serve(silent_server(accepted, closed))
    d = dialer()
    with pytest.raises(STTError, match="waiting for the session to begin") as caught:
        await d.open(url, setup=lambda ws: ws.receive())
    assert caught.value.retryable
    await asyncio.wait_for(closed.wait(), 2)
    await d.aclose()


async def test_a_set_up_cancelled_half_way_closes_its_socket(serve: Any) -> None:
    accepted, closed = asyncio.Event(), asyncio.Event()
    url = await serve(silent_server(accepted, closed))
    d = dialer(timeout=None)
    task = asyncio.ensure_future(d.open(url, setup=lambda ws: ws.receive()))
    await asyncio.wait_for(accepted.wait(), 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.wait_for(closed.wait(), 2)
    await d.aclose()


async def test_a_refused_upgrade_names_its_status_after_the_retries(serve: Any) -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503)

    url = await serve(busy)
    d = dialer(policy=RetryPolicy(1, 0.01, 0.01))
    with pytest.raises(
        STTError, match=r"HTTP 503: Service Unavailable \(gave up after 1 retries\)"
    ):
        await d.connect(url)
    await d.aclose()


async def test_a_closed_http_session_given_to_a_provider_is_a_clear_error(serve: Any) -> None:
    accepted, closed = asyncio.Event(), asyncio.Event()
    url = await serve(silent_server(accepted, closed))
    http = aiohttp.ClientSession()
    await http.close()
    stt = deepgram.STT(api_key="k", base_url=url, http_session=http, max_retries=0)
    with pytest.raises(STTError, match=r"http_session given to deepgram\.STT is closed"):
        await stt.recognize([AudioFrame(np.zeros(1600, np.int16), 16000)])
    await stt.aclose()


async def realtime_setup_error(serve: Any, send: Callable[[web.WebSocketResponse], Any]) -> str:
    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await send(ws)
        await ws.receive()  # until the client goes
        return ws

    url = await serve(handler)
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        with pytest.raises(RealtimeError) as caught:
            await asyncio.wait_for(read_until(ws, "session.created", None, lambda _: None), 2)
    return str(caught.value)


async def test_the_realtime_set_up_says_what_came_instead_of_session_created(serve: Any) -> None:
    async def binary(ws: web.WebSocketResponse) -> None:
        await ws.send_bytes(b"\x00\x01")

    async def close(ws: web.WebSocketResponse) -> None:
        await ws.close(code=4001, message=b"no session for you")

    said = await realtime_setup_error(serve, binary)
    assert "binary frame before session.created" in said and "closed" not in said
    said = await realtime_setup_error(serve, close)
    assert said == (
        "the server closed the connection before session.created (code 4001: no session for you)"
    )
