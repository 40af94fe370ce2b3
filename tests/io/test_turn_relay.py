"""WebRTC through a real TURN relay: coturn on 127.0.0.1, a relay-only client, our server.

The server's ICE configuration (``WebRTCOptions.ice``) names coturn with a static user or
with its TURN REST secret; the client does what the SDK does: it asks ``GET /api/ice``
for the servers and the policy, creates its peer connection with them (aiortc, policy
``relay``: its only candidates are coturn's relay addresses), posts its offer, speaks,
and must hear the agent answer, with coturn's own log counting the packets it relayed
both ways. Credentials coturn refuses (a secret that is not its own, an expired
username) leave the client without a candidate, and the offer is refused saying so.

Real time on loopback; skipped without ``turnserver`` (tests/io/_turn_server.py).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")

from aiortc import (
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.rtcconfiguration import RTCIceTransportPolicy

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.protocol import Ready, TranscriptMessage
from rejoinder.io.webrtc import IceConfig, WebRTCOptions, add_webrtc_routes
from rejoinder.testing import ScriptedTTS

from ._client import scripted_session
from ._turn_server import coturn, needs_coturn
from ._webrtc_client import RATE, MicTrack, WebRTCClient

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30), needs_coturn]

SECRET = "north-wind-and-sun"
ANSWER = "Through the relay."


def tone(seconds: float, rate: int = RATE, hz: float = 220.0) -> np.ndarray[Any, Any]:
    t = np.arange(round(seconds * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * 6000).astype(np.int16)


def tone_tts() -> ScriptedTTS:
    """ScriptedTTS speaking a 400 Hz tone (its default DC level would not survive Opus)."""
    tts = ScriptedTTS(seconds_per_char=0.02)
    tts._frame = (tone(0.02, tts.sample_rate, 400.0), tts.sample_rate)
    return tts


class RelayClient(WebRTCClient):
    """The test's WebRTC client, configured as the SDK is: from ``GET /api/ice``."""

    ice: dict[str, Any]
    offer_sdp: str = ""

    async def connect(self, http: aiohttp.ClientSession, *, analyse: bool = True) -> None:
        async with http.get(self.url.replace("/api/offer", "/api/ice")) as resp:
            assert resp.headers["Cache-Control"] == "no-store"
            self.ice = await resp.json()
        await self.connect_with(http, self.ice["ice_servers"], self.ice["ice_transport_policy"])

    async def connect_with(
        self, http: aiohttp.ClientSession, servers: list[dict[str, Any]], policy: str
    ) -> None:
        self._analyse = True
        config = RTCConfiguration(
            iceServers=[RTCIceServer(**server) for server in servers],
            iceTransportPolicy=RTCIceTransportPolicy(policy),
        )
        self.pc = RTCPeerConnection(config)
        self.mic = MicTrack()
        self.pc.addTrack(self.mic)
        self.channel = self.pc.createDataChannel("rejoinder")
        self.channel.on("message", self._message)
        self.pc.on("track", self._track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        self.offer_sdp = self.pc.localDescription.sdp
        async with http.post(self.url, json={"sdp": self.offer_sdp, "type": "offer"}) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise OfferRefused(resp.status, body.get("error", ""))
        await self.pc.setRemoteDescription(RTCSessionDescription(body["sdp"], body["type"]))
        self._tasks.append(asyncio.create_task(self._report_loop()))


class OfferRefused(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(f"HTTP {status}: {error}")
        self.status = status
        self.error = error


def candidate_types(sdp: str) -> set[str]:
    return {line.split(" typ ")[1].split()[0] for line in sdp.splitlines() if " typ " in line}


Serve = Callable[[IceConfig], Awaitable[str]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``serve(ice)``: an app answering offers with a scripted agent; its offer URL."""
    servers: list[TestServer] = []

    async def start(ice: IceConfig) -> str:
        make = scripted_session([[ANSWER], [ANSWER]], ["hello", "hello"], tone_tts)

        async def entrypoint(conn: Connection) -> None:
            await conn.serve(make(), rj.Agent(instructions="test"))

        app = web.Application()
        # The server's own candidates: 127.0.0.1, where coturn's relay reaches it.
        add_webrtc_routes(app, entrypoint, WebRTCOptions(host_addresses=["127.0.0.1"], ice=ice))
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/api/offer"))

    yield start
    for server in servers:
        await server.close()


async def talk(client: RelayClient) -> Ready:
    """Say something; return the ``ready`` once the agent's answer was heard."""
    ready = await client.wait_for(lambda m: isinstance(m, Ready), 5)
    assert isinstance(ready, Ready)
    client.mic.say(tone(0.6))
    final = await client.wait_for(
        lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
    )
    assert isinstance(final, TranscriptMessage) and final.text == ANSWER
    assert client.audible_frames, "the agent's voice came through the relay"
    return ready


async def closed_and_counted(client: RelayClient, turn: Any, username: str) -> tuple[int, int]:
    """Close the client; the packets coturn relayed for ``username`` both ways (its log's
    count when the allocations closed)."""
    await client.close()
    return (await turn.until_relayed(30, 5))[username]


async def test_a_static_turn_user_relays_a_whole_turn(serve: Serve, tmp_path: Path) -> None:
    async with coturn(tmp_path, user=("alice", "wonderland")) as turn:
        ice = IceConfig(
            urls=(turn.url("udp"),),
            username="alice",
            password="wonderland",
            transport_policy="relay",
        )
        url = await serve(ice)
        async with aiohttp.ClientSession() as http:
            client = RelayClient(url, jitter=0.05)
            await client.connect(http)
            assert client.ice == {
                "ice_servers": [
                    {"urls": [turn.url("udp")], "username": "alice", "credential": "wonderland"}
                ],
                "ice_transport_policy": "relay",
            }
            assert candidate_types(client.offer_sdp) == {"relay"}
            ready = await talk(client)
            # the data channel's ready says the same, for the next connection
            assert ready.ice_transport_policy == "relay"
            assert ready.ice_servers is not None
            assert [(s.urls, s.username) for s in ready.ice_servers] == [
                ([turn.url("udp")], "alice")
            ]
            # ~1 s of microphone and the answer's audio, 50 packets a second each way
            got, sent = await closed_and_counted(client, turn, "alice")
    assert got > 30 and sent > 30, (got, sent)


async def test_a_turn_rest_secret_mints_credentials_coturn_accepts(
    serve: Serve, tmp_path: Path
) -> None:
    async with coturn(tmp_path, secret=SECRET) as turn:
        ice = IceConfig(urls=(turn.url("tcp"),), secret=SECRET, ttl=600, transport_policy="relay")
        url = await serve(ice)
        async with aiohttp.ClientSession() as http:
            client = RelayClient(url, jitter=0.05)
            before = time.time()
            await client.connect(http)
            [server] = client.ice["ice_servers"]
            expires, _, user = server["username"].partition(":")
            assert before + 600 - 2 <= int(expires) <= time.time() + 600
            assert user.startswith("client_") and client.ice["ttl"] == 600
            ready = await talk(client)
            assert candidate_types(client.offer_sdp) == {"relay"}
            got, sent = await closed_and_counted(client, turn, server["username"])
            assert got > 30 and sent > 30, (got, sent)

            # The ready's credentials are the session's own, and work for a reconnect.
            assert ready.ice_servers is not None
            [minted] = ready.ice_servers
            assert minted.username is not None
            assert minted.username.split(":")[1].startswith("session_")
            again = RelayClient(url, jitter=0.05)
            await again.connect_with(http, [minted.model_dump(exclude_none=True)], "relay")
            await talk(again)
            await again.close()


@pytest.mark.parametrize("what", ["another secret", "an expired username"])
async def test_credentials_coturn_refuses_leave_no_candidate_and_the_offer_is_refused(
    serve: Serve, tmp_path: Path, what: str
) -> None:
    async with coturn(tmp_path, secret=SECRET) as turn:
        if what == "another secret":
            ice = IceConfig(urls=(turn.url(),), secret="a guess", transport_policy="relay")
            servers = ice.for_client("someone").servers
        else:
            ice = IceConfig(urls=(turn.url(),), secret=SECRET, ttl=60, transport_policy="relay")
            servers = ice.for_client("someone", now=time.time() - 120).servers
        url = await serve(ice)
        entries = [
            {"urls": list(s.urls), "username": s.username, "credential": s.credential}
            for s in servers
        ]
        async with aiohttp.ClientSession() as http:
            client = RelayClient(url)
            with pytest.raises(OfferRefused) as refused:
                await client.connect_with(http, entries, "relay")
            await client.pc.close()
        assert refused.value.status == 400
        assert "no ICE candidate" in refused.value.error
        # coturn refused the very username we minted (not only the first, unauthenticated
        # request, which every client's gets a 401 for)
        username = re.escape(str(entries[0]["username"]))
        await turn.wait_for(rf"user <{username}>: .* error 401", 2)
