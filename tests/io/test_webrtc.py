"""The WebRTC transport over real peer connections on 127.0.0.1, in real time.

A Python aiortc client posts its offer to ``/api/offer``, sends a microphone track (a
tone the energy VAD hears as speech), plays the agent's track through a simulated jitter
buffer and reports ``played`` over the data channel. The agent side is the test kit's
scripted models. Host candidates are narrowed to 127.0.0.1 on both sides
(``WebRTCOptions.host_addresses`` on the server, the same helper in the client), so
nothing but loopback is used and no network namespace is needed.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("aiortc", reason="the webrtc extra is not installed")

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.protocol import (
    AgentStateMessage,
    Clear,
    ErrorMessage,
    Pong,
    Ready,
    TranscriptMessage,
    UserStateMessage,
)
from rejoinder.io.webrtc import WebRTCOptions, WebRTCServer, add_webrtc_routes
from rejoinder.io.webrtc._ice import offering
from rejoinder.testing import ScriptedTTS

from ._client import scripted_session
from ._webrtc_client import RATE, WebRTCClient

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

LOOPBACK = WebRTCOptions(host_addresses=["127.0.0.1"])


def tone(seconds: float, rate: int = RATE, hz: float = 220.0) -> np.ndarray[Any, Any]:
    t = np.arange(round(seconds * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * 6000).astype(np.int16)


def tone_tts(**options: Any) -> ScriptedTTS:
    """ScriptedTTS speaking a 400 Hz tone (its default DC level would not survive Opus)."""
    tts = ScriptedTTS(**options)
    rate = tts.sample_rate
    tts._frame = (tone(0.02, rate, 400.0), rate)
    return tts


@dataclass
class Served:
    url: str
    webrtc: WebRTCServer
    sessions: list[rj.AgentSession[Any]] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    ended: list[Connection] = field(default_factory=list)
    """Connections whose entry point returned."""


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(
        make_session: Callable[[], rj.AgentSession[Any]], options: WebRTCOptions = LOOPBACK
    ) -> Served:
        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            served.sessions.append(session)
            served.conns.append(conn)
            await conn.serve(session, rj.Agent(instructions="test"))
            served.ended.append(conn)

        app = web.Application()
        webrtc = add_webrtc_routes(app, entrypoint, options)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        served = Served(str(server.make_url("/api/offer")), webrtc)
        return served

    yield start
    for server in servers:
        await server.close()


def scripted(replies: list[list[Any]], transcripts: list[str], **tts: Any) -> Any:
    return scripted_session(replies, transcripts, lambda: tone_tts(**tts))


async def test_a_spoken_turn_is_answered_and_speaking_follows_the_played_reports(
    serve: Any,
) -> None:
    served = await serve(scripted([["Hello there."]], ["hi"], seconds_per_char=0.03))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url, jitter=0.2)
        await client.connect(http)
        ready = await client.wait_for(lambda m: isinstance(m, Ready), 5)
        assert isinstance(ready, Ready) and ready.sample_rate == 48000 and ready.protocol == 1
        await asyncio.sleep(0.2)
        client.mic.say(tone(0.6))
        await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "user" and m.final, 5
        )
        final = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
        )
        assert isinstance(final, TranscriptMessage)
        assert final.text == "Hello there." and not final.interrupted
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.close()

    assert served.conns[0].transport == "webrtc"
    # the user's speech reached the VAD promptly (the receive buffer holds one packet, not
    # aiortc's four): 60 ms of speech to detect, 20 ms of buffer, soxr, the network
    assert client.mic.first_speech_at is not None
    user_at = next(
        t for t, m in client.messages if isinstance(m, UserStateMessage) and m.state == "speaking"
    )
    assert user_at - client.mic.first_speech_at < 0.4
    states = [s for _, s in client.states()]
    assert states == ["initializing", "listening", "thinking", "speaking", "listening"]
    thinking_at, speaking_at, done_at = (t for t, _ in client.states()[2:])
    first_audio_at, first_position = client.audible_frames[0]
    last_audio_at, last_position = client.audible_frames[-1]
    # Opus and the resampler smear the edges by a few ms; the reply is 0.36 s of tone.
    audible = (last_position - first_position) / RATE
    assert 0.3 < audible < 0.45
    first_heard_at = next(r.at for r in client.reports if r.samples > first_position)
    last_heard_at = next(r.at for r in client.reports if r.samples > last_position)
    # speaking follows what the client reported played, not what it received: the audio
    # arrived a jitter buffer (0.2 s) before it was reported, and the state came after.
    assert thinking_at < first_audio_at < first_heard_at < speaking_at
    assert first_heard_at - first_audio_at >= 0.15
    assert last_audio_at < last_heard_at < done_at
    history = [(m.role, m.content, m.interrupted) for m in served.sessions[0].history.messages()]
    assert history == [("user", "hi", False), ("assistant", "Hello there.", False)]


async def test_barge_in_stops_the_track_and_the_history_keeps_what_was_heard(
    serve: Any,
) -> None:
    long = "This is a long answer that goes on and on for quite a while. " * 3
    served = await serve(
        scripted([[long], ["Okay."]], ["Tell me a story.", "Stop."], seconds_per_char=0.03)
    )
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url, jitter=0.05)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        client.mic.say(tone(0.5))
        await client.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await asyncio.sleep(1.0)  # hear about a second of it
        client.mic.say(tone(0.8))  # then talk over it
        await client.wait_for(lambda m: isinstance(m, Clear), 5)
        cleared_at = client.now
        first = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        assert isinstance(first, TranscriptMessage) and first.interrupted
        await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and m.text == "Okay.", 10
        )
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.close()

    # The long answer's audio stopped at the clear (only what was in flight still came),
    # then the second answer played, and its reports (after the re-base) finished it.
    times = [t for t, _ in client.audible_frames]
    gaps = [(a, b) for a, b in itertools.pairwise(times) if b - a > 0.3]
    # (A loaded machine may stall the track a moment elsewhere: the gap at the clear counts.)
    at_clear = [(a, b) for a, b in gaps if cleared_at - 0.2 < a < cleared_at + 0.3]
    assert len(at_clear) == 1, (cleared_at, gaps)
    _stopped_at, resumed_at = at_clear[0]
    spoke_again = [t for t, s in client.states() if s == "speaking"][-1]
    assert resumed_at < spoke_again
    assert [s for _, s in client.states()][-2:] == ["speaking", "listening"]
    messages = served.sessions[0].history.messages()
    cut = next(m for m in messages if m.role == "assistant" and m.interrupted)
    assert cut.content and long.startswith(cut.content)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[-1].content == "Okay." and not messages[-1].interrupted
    # what the history keeps is what was played, give or take a report and a word
    heard = sum(1 for t, _ in client.audible_frames if t <= cleared_at) * 0.02
    assert abs(len(cut.content) * 0.03 - heard) < 0.5


async def test_the_client_closing_tears_the_peer_down_and_leaves_no_task(serve: Any) -> None:
    before = asyncio.all_tasks()
    served = await serve(scripted([["Hello there."]], ["hi"]))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        assert served.webrtc.peers == 1
        await client.close()
    async with asyncio.timeout(5):
        await served.webrtc.wait_idle()
    assert served.conns[0].left and served.ended == served.conns
    # aiortc's own tasks (ICE, DTLS, SCTP, RTP) end with the connection, on both sides.
    left = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
    if left:
        await asyncio.wait(left, timeout=5)
    assert [t.get_coro() for t in left if not t.done()] == []


async def test_closing_the_data_channel_ends_the_session(serve: Any) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        client.channel.close()
        async with asyncio.timeout(5):
            await served.webrtc.wait_idle()
        assert served.ended == served.conns and served.conns[0].left
        await client.close()


async def test_a_peer_that_goes_silent_is_dropped_after_the_media_timeout(serve: Any) -> None:
    options = WebRTCOptions(host_addresses=["127.0.0.1"], media_idle_timeout=0.5)
    served = await serve(scripted([], []), options)
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        client.mic.stall()  # as if the peer vanished: no more RTP from it
        async with asyncio.timeout(5):
            await served.webrtc.wait_idle()
        assert served.ended == served.conns and served.conns[0].left
        await client.close()


async def test_an_answer_never_used_is_given_up_after_the_connect_timeout(serve: Any) -> None:
    from aiortc import RTCConfiguration, RTCPeerConnection

    options = WebRTCOptions(host_addresses=["127.0.0.1"], connect_timeout=0.5)
    served = await serve(scripted([], []), options)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio")
    pc.createDataChannel("rejoinder")
    with offering(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
    async with aiohttp.ClientSession() as http, http.post(served.url, json=offer) as resp:
        assert resp.status == 200
    assert served.webrtc.peers == 1
    async with asyncio.timeout(3):
        await served.webrtc.wait_idle()
    assert served.conns == []  # the entry point never ran
    await pc.close()


async def test_the_microphone_is_decoded_one_packet_behind(serve: Any) -> None:
    """aiortc holds four audio packets (80 ms) back before decoding one; the transport
    shortens that to one for the microphone (the session reads it as it comes)."""
    from rejoinder.io.webrtc.media import MIC_PREFETCH

    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        (peer,) = served.webrtc._peers
        (receiver,) = [r for r in peer.pc.getReceivers() if r.track is not None]
        assert receiver._RTCRtpReceiver__jitter_buffer._prefetch == MIC_PREFETCH == 1
        await client.close()


async def test_junk_on_the_data_channel_gets_error_events_and_the_session_goes_on(
    serve: Any,
) -> None:
    served = await serve(scripted([["Hello there."]], ["hi"]))
    async with aiohttp.ClientSession() as http:
        client = WebRTCClient(served.url)
        await client.connect(http)
        await client.wait_for(lambda m: isinstance(m, Ready), 5)
        client.channel.send("not json")
        client.channel.send('{"type": "dance"}')
        client.channel.send('{"type": "played", "samples": -4}')
        client.channel.send(b"\x00\x01")
        await client.until(lambda: len(client.of_type(ErrorMessage)) == 4, 5)
        codes = [m.code for m in client.of_type(ErrorMessage)]
        assert codes == ["invalid_json", "unknown_type", "invalid_message", "invalid_message"]
        assert served.webrtc.peers == 1 and not served.conns[0].left
        client.channel.send('{"type": "ping", "id": 3}')  # and a ping is answered there
        pong = await client.wait_for(lambda m: isinstance(m, Pong), 5)
        assert isinstance(pong, Pong) and pong.id == 3
        await client.close()


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"hello", 400, "must be JSON"),
        (b'{"type": "answer", "sdp": "v=0"}', 400, '"type" must be "offer"'),
        (b'{"type": "offer"}', 400, '"sdp"'),
        (b'{"type": "offer", "sdp": "v=0\\r\\nnot sdp"}', 400, "no ICE candidate"),
        (b'{"type": "offer", "sdp": "v=0' + b"x" * 70_000 + b'"}', 413, "at most 65536 bytes"),
    ],
)
async def test_a_bad_offer_is_refused_with_the_reason(
    serve: Any, body: bytes, status: int, says: str
) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http, http.post(served.url, data=body) as resp:
        assert resp.status == status
        assert says in (await resp.json())["error"]
    assert served.webrtc.peers == 0


async def test_an_offer_without_a_data_channel_or_audio_is_refused(serve: Any) -> None:
    from aiortc import RTCConfiguration, RTCPeerConnection

    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        for make in ("audio only", "data only"):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            if make == "audio only":
                pc.addTransceiver("audio", direction="recvonly")
            else:
                pc.createDataChannel("rejoinder")
            with offering(["127.0.0.1"]):
                await pc.setLocalDescription(await pc.createOffer())
            offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
            async with http.post(served.url, json=offer) as resp:
                assert resp.status == 400
                error = (await resp.json())["error"]
            await pc.close()
            assert ("data channel" if make == "audio only" else "audio") in error
    assert served.webrtc.peers == 0


@pytest.mark.parametrize("accept_video", [True, False])
async def test_one_camera_is_received_extra_sections_are_answered_inactive(
    serve: Any, accept_video: bool
) -> None:
    from aiortc import RTCConfiguration, RTCPeerConnection

    options = WebRTCOptions(host_addresses=["127.0.0.1"], accept_video=accept_video)
    served = await serve(scripted([], []), options)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    for kind in ("audio", "video", "audio", "video"):
        pc.addTransceiver(kind)
    pc.createDataChannel("rejoinder")
    with offering(["127.0.0.1"]):
        await pc.setLocalDescription(await pc.createOffer())
    offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
    async with aiohttp.ClientSession() as http, http.post(served.url, json=offer) as resp:
        assert resp.status == 200
        answer = (await resp.json())["sdp"]
    sections = answer.split("m=")[1:]
    directions = [
        (
            section.split()[0],
            next(a for a in ("sendrecv", "recvonly", "inactive") if f"a={a}" in section),
        )
        for section in sections
        if not section.startswith("application")
    ]
    camera = "recvonly" if accept_video else "inactive"
    assert directions == [
        ("audio", "sendrecv"),
        ("video", camera),
        ("audio", "inactive"),
        ("video", "inactive"),
    ]
    await pc.close()
    await served.webrtc.aclose()


_OFFER: list[str] = []


async def _valid_offer_lines() -> list[str]:
    if not _OFFER:
        from aiortc import RTCConfiguration, RTCPeerConnection

        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("audio")
        pc.createDataChannel("rejoinder")
        with offering(["127.0.0.1"]):
            await pc.setLocalDescription(await pc.createOffer())
        _OFFER.extend(pc.localDescription.sdp.splitlines())
        await pc.close()
    return list(_OFFER)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=200),
            st.sampled_from(["drop", "repeat", "garble", "cut"]),
            st.text(max_size=12),
        ),
        min_size=1,
        max_size=4,
    )
)
async def test_junk_offers_get_a_400_never_a_crash(edits: list[tuple[int, str, str]]) -> None:
    """A valid offer with lines dropped, repeated, garbled or cut: answered, or refused with
    an ``OfferError`` (HTTP 400); never another exception."""
    from rejoinder.io.webrtc.peer import OfferError, WebRTCPeer

    lines = await _valid_offer_lines()
    for index, edit, junk in edits:
        at = index % len(lines)
        if edit == "drop":
            del lines[at]
        elif edit == "repeat":
            lines.insert(at, lines[at])
        elif edit == "garble":
            lines[at] = lines[at][:2] + junk
        else:
            lines[at] = lines[at][: len(junk)]
        if not lines:
            lines = ["v=0"]
    peer = WebRTCPeer(WebRTCOptions(host_addresses=["127.0.0.1"], gather_timeout=2.0))
    try:
        await peer.answer("\r\n".join(lines) + "\r\n")
    except OfferError:
        pass
    finally:
        await peer.close()


async def test_played_reports_count_the_packets_the_client_reported_lost() -> None:
    """A lost packet is 20 ms of the track the client never played (it does not count
    concealment) though the track's clock passed it: the server adds it back."""
    from rejoinder.io.protocol import ClientMessage, Played
    from rejoinder.io.webrtc.media import CODEC_DELAY, FRAME_SAMPLES
    from rejoinder.io.webrtc.peer import WebRTCPeer

    got: list[ClientMessage] = []

    class Conn:
        def receive(self, message: ClientMessage) -> None:
            got.append(message)

        def client_left(self) -> None:
            pass

    peer = WebRTCPeer(WebRTCOptions())
    peer.connection = Conn()  # type: ignore[assignment]
    peer.track.push(rj.AudioFrame(np.ones(4 * FRAME_SAMPLES, np.int16), 48000))
    for _ in range(4):
        peer.track.next_frame()
    played = 2 * FRAME_SAMPLES + CODEC_DELAY
    peer._received(Played(samples=played))
    peer._lost_packets = 1
    peer._received(Played(samples=played))
    assert got == [Played(samples=2 * FRAME_SAMPLES), Played(samples=3 * FRAME_SAMPLES)]
    await peer.close()


async def test_no_ice_server_is_used_unless_configured() -> None:
    from rejoinder.io.webrtc.options import IceServer
    from rejoinder.io.webrtc.peer import WebRTCPeer

    peer = WebRTCPeer(WebRTCOptions())
    configured = WebRTCPeer(WebRTCOptions(ice_servers=[IceServer("stun:stun.invalid:3478")]))
    try:
        for p, expected in ((peer, []), (configured, ["stun:stun.invalid:3478"])):
            config = p.pc._RTCPeerConnection__configuration  # type: ignore[attr-defined]
            assert [s.urls for s in config.iceServers] == expected
    finally:
        await peer.close()
        await configured.close()
