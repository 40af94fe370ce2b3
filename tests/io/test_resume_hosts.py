"""Resuming on both hosts: the aiohttp app and the ASGI app under uvicorn (so a Ray Serve
replica), over real sockets on 127.0.0.1 in real time. The resume behaviour itself is
tested at length on aiohttp (``test_resume``); here each host must give the same answers,
and the ASGI host must hold a dropped socket's request while its session waits, since a
server that counts requests as load (Ray Serve) would otherwise send that session's place
to someone else. Also what operators see: ``/healthz``'s ``detached`` and the resume
counters in ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.app import GATE
from rejoinder.io.asgi import create_asgi_app
from rejoinder.io.protocol import AgentStateMessage, CloseCode, TranscriptMessage
from rejoinder.testing import ScriptedTTS

from ._client import VoiceClient, scripted_session
from .test_asgi_server import samples, uvicorn_serving
from .test_resume import LONG, MIC, cut_the_cable, refused, start, tone, until

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]


@dataclass
class Served:
    kind: str
    port: int
    app: Any
    sessions: list[rj.AgentSession[Any]] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    ongoing: list[int] = field(default_factory=lambda: [0])
    """WebSocket requests the server is still handling (ASGI: calls of the app not
    returned, which is what Ray Serve counts as a replica's ongoing requests)."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def get(self, http: aiohttp.ClientSession, path: str) -> Any:
        async with http.get(f"http://127.0.0.1:{self.port}{path}") as resp:
            return await (resp.json() if path == "/healthz" else resp.text())


Serve = Callable[..., Awaitable[Served]]


def resumes(text: str) -> dict[str, float]:
    """``rejoinder_resumes_total`` of a ``/metrics`` text, by outcome."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        s.labels["outcome"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "rejoinder_resumes_total"
    }


def counting(app: Any, ongoing: list[int]) -> Any:
    """``app`` with its WebSocket calls in progress counted in ``ongoing[0]``."""

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await app(scope, receive, send)
            return
        ongoing[0] += 1
        try:
            await app(scope, receive, send)
        finally:
            ongoing[0] -= 1

    return wrapper


@pytest.fixture(params=["aiohttp", "asgi"])
async def serve(request: pytest.FixtureRequest) -> AsyncIterator[Serve]:
    kind: str = request.param
    async with contextlib.AsyncExitStack() as stack:

        async def start_app(replies: list[list[Any]], said: list[str], **options: Any) -> Served:
            make = scripted_session(replies, said, lambda: ScriptedTTS(seconds_per_char=0.02))

            async def entrypoint(conn: Connection) -> None:
                session = make()
                served.sessions.append(session)
                served.conns.append(conn)
                session.on("close", lambda ev: served.closed.append(ev.reason))
                await conn.serve(session, rj.Agent(instructions="test"))

            if kind == "aiohttp":
                app: Any = create_app(entrypoint, webrtc=False, page=False, **options)
                server = TestServer(app, host="127.0.0.1")
                await server.start_server()
                stack.push_async_callback(server.close)
                assert server.port is not None
                served = Served(kind, server.port, app)
                return served
            app = create_asgi_app(entrypoint, page=False, **options)
            ongoing = [0]
            port = await stack.enter_async_context(uvicorn_serving(counting(app, ongoing)))
            stack.callback(app.state.gate.stop_admitting)  # its shutdown hook: drain first
            served = Served(kind, port, app, ongoing=ongoing)
            return served

        yield start_app


async def test_a_drop_mid_reply_is_resumed_and_the_rest_is_said(serve: Serve) -> None:
    served = await serve([[LONG]], ["Tell me."])
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        ready = await start(first)
        await first.speak(tone(0.5))
        await first.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await asyncio.sleep(0.5)  # hear some of it
        await cut_the_cable(first)
        conn, session = served.conns[0], served.sessions[0]
        await until(lambda: conn.detached, 2)
        await until(lambda: session.agent_state == "thinking", 2)
        if served.kind == "asgi":  # the dropped socket's request is held for its session
            assert served.ongoing[0] == 1
        health = await served.get(http, "/healthz")
        assert (health["sessions"], health["detached"]) == (1, 1)

        url = f"{served.url}?resume={ready.resume_token}"
        second = VoiceClient(await http.ws_connect(url), MIC, jitter=0.05)
        again = await start(second, resume=ready.resume_token)
        rest = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and not m.interrupted, 10
        )
        await second.until(lambda: second.states()[-1][1] == "listening", 5)
        if served.kind == "asgi":  # the first request returned once its session moved on
            await until(lambda: served.ongoing[0] == 1, 2)
        text = await served.get(http, "/metrics")
        health = await served.get(http, "/healthz")
        await second.close()

    assert again.resumed is True and again.session_id == ready.session_id
    heard = [m for m in session.history.messages() if m.role == "assistant"]
    assert heard[0].interrupted
    assert isinstance(rest, TranscriptMessage)
    assert heard[0].content.split() + rest.text.split() == LONG.split()
    assert [s for _, s in second.states()] == ["thinking", "speaking", "listening"]
    assert health["detached"] == 0 and samples(text)["rejoinder_sessions_detached"] == 0
    assert resumes(text) == {"resumed": 1, "expired": 0, "evicted": 0, "refused": 0}
    assert served.closed == []


@pytest.mark.parametrize("code", [1000, None, 1001])
async def test_only_a_goodbye_ends_the_session(serve: Serve, code: int | None) -> None:
    """1000 is the client's goodbye; 1001 (a page going away, a reload may resume) is a
    drop. A close frame without a code (a browser's bare ``close()``) is a goodbye on
    aiohttp, and a drop under uvicorn, which reports a broken connection with the same
    code (1005): there the session waits out its grace."""
    served = await serve([], [])
    ends = code == 1000 or (code is None and served.kind == "aiohttp")
    async with aiohttp.ClientSession() as http, http.ws_connect(served.url) as ws:
        client = VoiceClient(ws, MIC)
        await start(client)
        if code is None:  # aiohttp always sends a code: write a bare close frame instead
            await ws._writer.send_frame(b"", aiohttp.WSMsgType.CLOSE)
            await client.until(lambda: ws.closed, 2)  # the server's answer came
        else:
            await ws.close(code=code)
        await client.close()
    conn = served.conns[0]
    await until(lambda: conn.left or conn.detached, 2)
    assert conn.left is ends and conn.detached is not ends


async def test_a_session_not_resumed_in_time_ends_and_its_request_with_it(
    serve: Serve,
) -> None:
    served = await serve([], [], resume_grace=0.3, max_sessions=1)
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        await cut_the_cable(first)
        await until(lambda: served.conns[0].detached, 2)
        with pytest.raises(aiohttp.WSServerHandshakeError) as full:
            await http.ws_connect(served.url)  # the detached session holds its place
        await until(lambda: bool(served.closed), 3)
        await until(lambda: served.ongoing[0] == 0, 3)
        assert ready.resume_token is not None
        got, code = await refused(served.url, http, ready.resume_token)
        text = await served.get(http, "/metrics")
        health = await served.get(http, "/healthz")
    assert full.value.status == 503
    assert served.closed == ["the client did not come back within 0.3 s"]
    assert code == CloseCode.RESUME_FAILED and got[0]["code"] == "resume_failed"
    assert resumes(text) == {"resumed": 0, "expired": 1, "evicted": 0, "refused": 1}
    assert (health["sessions"], health["detached"]) == (0, 0)


async def test_with_resuming_off_a_drop_ends_the_session(serve: Serve) -> None:
    served = await serve([], [], resume_grace=0)
    async with aiohttp.ClientSession() as http:
        client = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(client)
        await cut_the_cable(client)
        await until(lambda: bool(served.closed), 3)
        await until(lambda: served.ongoing[0] == 0, 3)
        health = await served.get(http, "/healthz")
        metrics = await served.get(http, "/metrics")
    assert ready.resume_token is None and "detached" not in health
    assert "rejoinder_resumes" not in metrics


async def test_the_asgi_lifespans_end_closes_the_sessions_waiting_to_be_resumed() -> None:
    """At shutdown (uvicorn's lifespan, or a Ray replica stopping), a detached session is
    not kept waiting for a client that will be sent elsewhere."""
    closed: list[str] = []
    make = scripted_session([], [], lambda: ScriptedTTS())

    async def entrypoint(conn: Connection) -> None:
        session = make()
        session.on("close", lambda ev: closed.append(ev.reason))
        await conn.serve(session, rj.Agent(instructions="test"))

    app = create_asgi_app(entrypoint, page=False)
    async with uvicorn_serving(app) as port, aiohttp.ClientSession() as http:
        async with app.router.lifespan_context(app):
            client = VoiceClient(await http.ws_connect(f"ws://127.0.0.1:{port}/ws"), MIC)
            await start(client)
            await cut_the_cable(client)
            await until(lambda: app.state.resume.detached == 1, 2)
            assert closed == []
        await until(lambda: bool(closed), 3)
    assert closed == ["the server is shutting down"] and app.state.resume.closed


async def test_json_of_a_resume_refusal_is_the_same_on_both_hosts(serve: Serve) -> None:
    served = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(served.url) as ws:
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC, "resume": "nope"}))
        error = json.loads((await ws.receive(timeout=5)).data)
        await ws.receive(timeout=5)
    assert error == {
        "type": "error",
        "code": "resume_failed",
        "message": "no session to resume with this token (unknown, used or expired): start anew",
    }
    assert ws.close_code == CloseCode.RESUME_FAILED


async def test_a_drain_ends_the_sessions_waiting_and_keeps_no_more(serve: Serve) -> None:
    """Behind a load balancer, a client that comes back while its server drains is sent to
    another one: the sessions waiting for theirs end, and a drop from then on ends its
    session (``serve``'s SIGTERM, a Ray replica stopping, ``gate.drain``)."""
    served = await serve([], [])
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        await start(first)
        second = VoiceClient(await http.ws_connect(served.url), MIC)
        await start(second)
        await cut_the_cable(first)
        await until(lambda: served.conns[0].detached, 2)
        gate = served.app.state.gate if served.kind == "asgi" else served.app[GATE]
        gate.stop_admitting()
        await until(lambda: len(served.closed) == 1, 3)
        assert not served.conns[1].left  # a connected client's session goes on
        await cut_the_cable(second)
        await until(lambda: len(served.closed) == 2, 3)
        await until(lambda: served.ongoing[0] == 0, 3)
    assert served.closed == ["the server is shutting down", "the connection was lost"]
