"""``create_app``: every transport's sessions go through one ``SessionGate`` (a limit, a
drain), on real sockets and a real WebRTC peer on 127.0.0.1, in real time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.admission import SessionGate
from rejoinder.io.protocol import Ready
from rejoinder.io.webrtc import WebRTCOptions, available
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]


@dataclass
class Ended:
    """Transports of the connections whose entry point returned."""

    transports: list[str] = field(default_factory=list)
    event: asyncio.Event = field(default_factory=asyncio.Event)


def make_session() -> rj.AgentSession[Any]:
    return rj.AgentSession(
        llm=ScriptedLLM([["Hello."]]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(["Hi."]),
        tts=ScriptedTTS(),
        user_away_timeout=None,
    )


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestServer, SessionGate[Connection], Ended]]:
    ended = Ended()

    async def entrypoint(conn: Connection) -> None:
        await conn.serve(make_session(), rj.Agent(instructions="test"))
        ended.transports.append(conn.transport)
        ended.event.set()

    gate: SessionGate[Connection] = SessionGate(max_sessions=1)
    options = WebRTCOptions(host_addresses=["127.0.0.1"]) if available() else False
    app = create_app(entrypoint, gate=gate, webrtc=options)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server, gate, ended
    await server.close()


async def test_websocket_sessions_are_limited_and_closed_by_a_drain(served: Any) -> None:
    server, gate, ended = served
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(server.make_url("/ws"))
        await ws.send_json({"type": "start", "sample_rate": 16000})
        assert (await ws.receive_json(timeout=5))["type"] == "ready"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(server.make_url("/ws"))
        assert refused.value.status == 503
        async with http.get(server.make_url("/metrics")) as response:
            text = await response.text()
        samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        assert samples["rejoinder_sessions_live"] == 1
        assert samples["rejoinder_sessions_refused_total"] == 1

        # The drain time is up: the session is closed, the socket gets a normal close.
        assert await gate.drain(0.2) == 1
        closing = await ws.receive(timeout=5)
        while closing.type == aiohttp.WSMsgType.TEXT:
            closing = await ws.receive(timeout=5)
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert ws.close_code == 1000
        assert ended.transports == ["websocket"]
        await ws.close()


@pytest.mark.skipif(not available(), reason="the webrtc extra is not installed")
async def test_a_webrtc_offer_holds_its_place_until_its_session_starts(served: Any) -> None:
    from ._webrtc_client import WebRTCClient

    server, gate, ended = served
    offer_url = str(server.make_url("/api/offer"))
    async with aiohttp.ClientSession() as http:
        first = WebRTCClient(offer_url)
        await first.connect(http)  # answered; the peer has not connected yet
        second = WebRTCClient(offer_url)
        with pytest.raises(AssertionError, match="offer refused: 503"):
            await second.connect(http)
        await second.close()
        await first.wait_for(lambda m: isinstance(m, Ready), 10)
        assert gate.live == 1
        assert [c.transport for c in gate.connections] == ["webrtc"]
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(server.make_url("/ws"))
        assert refused.value.status == 503

        assert await gate.drain(0.2) == 1
        await asyncio.wait_for(ended.event.wait(), 10)
        assert ended.transports == ["webrtc"]
        assert gate.live == 0
        await first.close()
