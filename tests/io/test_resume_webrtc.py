"""Resuming over WebRTC (real peer connections on 127.0.0.1, in real time): the offer to
``/api/offer?resume=TOKEN`` takes the session over; a token that is gone gets 410, a newer
offer takes a connecting one's place; and a session may come back on the other
transport (WebSocket → WebRTC and back), the agent's audio resampled to the track's 48 kHz
and the reports turned back into the session's samples."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.app import WEBRTC
from rejoinder.io.protocol import AgentStateMessage, Ready, TranscriptMessage
from rejoinder.io.webrtc import WebRTCOptions
from rejoinder.io.webrtc._ice import offering
from rejoinder.testing import ScriptedTTS

from ._client import VoiceClient, scripted_session
from ._webrtc_client import RATE, WebRTCClient

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(40)]

LONG = "This answer goes on and on for quite a while, so that it can be cut short."


def tone(seconds: float, rate: int = RATE, hz: float = 220.0) -> np.ndarray[Any, Any]:
    t = np.arange(round(seconds * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * 6000).astype(np.int16)


def tone_tts(**options: Any) -> ScriptedTTS:
    """ScriptedTTS speaking a 400 Hz tone (its default DC level would not survive Opus)."""
    tts = ScriptedTTS(**options)
    tts._frame = (tone(0.02, tts.sample_rate, 400.0), tts.sample_rate)
    return tts


@dataclass
class Served:
    base: str
    sessions: list[rj.AgentSession[Any]] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    webrtc: Any = None
    """The app's ``WebRTCServer``."""

    @property
    def offer(self) -> str:
        return f"{self.base}/api/offer"

    @property
    def ws(self) -> str:
        return self.base.replace("http", "ws", 1) + "/ws"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(make_session: Callable[[], rj.AgentSession[Any]], **options: Any) -> Served:
        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            served.sessions.append(session)
            served.conns.append(conn)
            session.on("close", lambda ev: served.closed.append(ev.reason))
            await conn.serve(session, rj.Agent(instructions="test"))

        options.setdefault("media_idle_timeout", 0.3)  # a vanished peer is seen quickly
        rtc = WebRTCOptions(host_addresses=["127.0.0.1"], **options)
        app = create_app(entrypoint, webrtc=rtc, page=False)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        served = Served(str(server.make_url("")).rstrip("/"), webrtc=app[WEBRTC])
        return served

    yield start
    for server in servers:
        await server.close()


def scripted(replies: list[list[Any]], transcripts: list[str], **tts: Any) -> Any:
    return scripted_session(replies, transcripts, lambda: tone_tts(**tts))


async def until(condition: Callable[[], bool], within: float) -> None:
    """Poll the server's side (its objects change without a message to wait on)."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_a_dropped_peer_resumes_with_the_token_on_the_offers_url(serve: Any) -> None:
    served = await serve(scripted([[LONG]], ["Tell me."], seconds_per_char=0.02))
    async with aiohttp.ClientSession() as http:
        first = WebRTCClient(served.offer, jitter=0.05)
        await first.connect(http)
        ready = await first.wait_for(lambda m: isinstance(m, Ready), 5)
        assert isinstance(ready, Ready) and ready.resume_token is not None
        first.mic.say(tone(0.5))
        await first.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await asyncio.sleep(0.6)
        first.mic.stall()  # the peer vanishes: no more packets, no close
        await until(lambda: served.conns[0].detached, 5)
        await first.close()
        session, conn = served.sessions[0], served.conns[0]
        await until(lambda: conn.detached, 5)
        await until(lambda: session.agent_state == "thinking", 2)
        heard = [m for m in session.history.messages() if m.role == "assistant"]
        assert len(heard) == 1 and heard[0].interrupted

        began = asyncio.get_running_loop().time()
        second = WebRTCClient(f"{served.offer}?resume={ready.resume_token}", jitter=0.05)
        await second.connect(http)
        again = await second.wait_for(lambda m: isinstance(m, Ready), 5)
        resumed_in = asyncio.get_running_loop().time() - began
        rest = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and not m.interrupted, 10
        )
        await second.until(lambda: second.states()[-1][1] == "listening", 5)
        await second.close()

    assert isinstance(again, Ready) and again.resumed and again.session_id == ready.session_id
    assert resumed_in < 2.0
    assert isinstance(rest, TranscriptMessage)
    assert heard[0].content.split() + rest.text.split() == LONG.split()
    assert [s for _, s in second.states()] == ["thinking", "speaking", "listening"]
    # the rest was heard on the new peer's track, counted from its own zero
    assert second.audible_frames and second.audible_frames[0][1] < RATE


async def test_a_gone_token_gets_410_and_a_newer_offer_takes_a_connecting_ones_place(
    serve: Any,
) -> None:
    """Only the token's holder has it: an offer naming a token an earlier offer is still
    connecting with is the client retrying, so the earlier peer is given up (the client
    need not wait for the server's connect timeout to give the token back)."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    served = await serve(scripted([], []), connect_timeout=10.0)
    async with aiohttp.ClientSession() as http:
        first = WebRTCClient(served.offer)
        await first.connect(http)
        ready = await first.wait_for(lambda m: isinstance(m, Ready), 5)
        assert isinstance(ready, Ready)
        first.mic.stall()
        await until(lambda: served.conns[0].detached, 5)
        await first.close()
        before = served.webrtc.peers  # (the first peer's task lasts as long as its session)

        async def offer(token: str) -> tuple[int, dict[str, Any], Any]:
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTransceiver("audio")
            pc.createDataChannel("rejoinder")
            with offering(["127.0.0.1"]):
                await pc.setLocalDescription(await pc.createOffer())
            body = {"sdp": pc.localDescription.sdp, "type": "offer"}
            async with http.post(f"{served.offer}?resume={token}", json=body) as resp:
                return resp.status, await resp.json(), pc

        gone = await offer("never-issued")
        held = await offer(str(ready.resume_token))  # answered, never connected
        assert served.webrtc.peers == before + 1
        newer = await offer(str(ready.resume_token))  # the client tries again
        await until(lambda: served.webrtc.peers == before + 1, 2)  # the earlier one given up
        began = asyncio.get_running_loop().time()
        second = WebRTCClient(f"{served.offer}?resume={ready.resume_token}")
        await second.connect(http)  # and again, this time connecting
        again = await second.wait_for(lambda m: isinstance(m, Ready), 5)
        took = asyncio.get_running_loop().time() - began
        await second.close()
        for _, _, pc in (gone, held, newer):
            await pc.close()
    assert gone[:2] == (410, gone[1]) and gone[1]["code"] == "resume_failed"
    assert held[0] == 200 and newer[0] == 200
    assert isinstance(again, Ready) and again.resumed and len(served.sessions) == 1
    assert took < 5  # not held up by the connect timeout of the offers given up


async def test_a_websocket_session_resumes_over_webrtc_and_back(serve: Any) -> None:
    served = await serve(scripted([["Hello there."], ["Again."]], ["Hi.", "Hi."]))
    async with aiohttp.ClientSession() as http:
        ws_client = VoiceClient(await http.ws_connect(served.ws), 16000)
        ready = await ws_client.start()
        assert ready.sample_rate == 24000 and ready.resume_token is not None
        ws_client.ws._response.connection.transport.abort()  # type: ignore[union-attr]
        await ws_client.close()
        await until(lambda: served.conns[0].detached, 5)

        rtc = WebRTCClient(f"{served.offer}?resume={ready.resume_token}", jitter=0.05)
        await rtc.connect(http)
        over_rtc = await rtc.wait_for(lambda m: isinstance(m, Ready), 5)
        assert isinstance(over_rtc, Ready) and over_rtc.resumed
        assert over_rtc.sample_rate == 24000  # the session's rate; the track resamples
        rtc.mic.say(tone(0.5))
        answer = await rtc.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
        )
        await rtc.until(lambda: rtc.states()[-1][1] == "listening", 5)
        rtc.mic.stall()
        await until(lambda: served.conns[0].detached, 5)
        await rtc.close()

        back = VoiceClient(await http.ws_connect(served.ws), 16000, jitter=0.05)
        await back.ws.send_str(
            json.dumps({"type": "start", "sample_rate": 16000, "resume": over_rtc.resume_token})
        )
        back._tasks.append(asyncio.create_task(back._read()))
        ready_back = await back.wait_for(lambda m: isinstance(m, Ready), 5)
        await back.close()
    assert isinstance(answer, TranscriptMessage) and answer.text == "Hello there."
    assert not answer.interrupted
    assert [s for _, s in rtc.states()][-3:] == ["thinking", "speaking", "listening"]
    assert isinstance(ready_back, Ready) and ready_back.resumed
    assert ready_back.session_id == ready.session_id and len(served.sessions) == 1


async def test_closing_the_peer_connection_is_a_goodbye(serve: Any) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.offer)
        await client.connect(http)
        ready = await client.wait_for(lambda m: isinstance(m, Ready), 5)
        await client.close()
        await until(lambda: bool(served.closed), 5)
        assert isinstance(ready, Ready)
        async with http.post(
            f"{served.offer}?resume={ready.resume_token}", json={"sdp": "v=0", "type": "offer"}
        ) as resp:
            status = resp.status
    assert served.closed == ["client left"] and not served.conns[0].detached
    assert status == 410  # its session is gone
