"""rj.BackgroundAudio through the transports: a real WebSocket client, a fake phone call
(Twilio media streams), a real WebRTC peer, all on 127.0.0.1 in real time; and SIP's
``RtpPlayback`` on virtual time. Each carries the ambient in the gaps and under the voice,
the thinking sound while the agent thinks, and keeps the agent's speaking, its played
accounting and its marks about the voice alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.background_audio import BackgroundAudio
from rejoinder.io.protocol import AgentStateMessage, Clear, TranscriptMessage
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.models.audio import AudioFrame, PlaybackFinished
from rejoinder.testing import Delay, FakePhoneCall, ScriptedTTS, speech_frame

from ._background_rig import (
    AMBIENT,
    AMBIENT_AMPLITUDE,
    AMBIENT_HZ,
    HEARD,
    THINKING,
    THINKING_HZ,
    StandInSession,
    level,
)
from ._client import VoiceClient, scripted_session

REPLY = "Hello there."
SECONDS_PER_CHAR = 0.03
THINK = 0.6
"""Seconds the model takes before it answers: the thinking sound starts after 0.2."""


def background_session(**tts: Any) -> Callable[[], rj.AgentSession[Any]]:
    make = scripted_session(
        [[Delay(THINK), REPLY]],
        ["Hi."],
        lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR, **tts),
    )

    def with_background() -> rj.AgentSession[Any]:
        session = make()
        BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.2).attach(session)
        return session

    return with_background


Served = tuple[str, list[rj.AgentSession[Any]], list[Connection]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[TestServer] = []

    async def start(
        make_session: Callable[[], rj.AgentSession[Any]], path: str, **app_options: Any
    ) -> Served:
        sessions: list[rj.AgentSession[Any]] = []
        conns: list[Connection] = []

        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            sessions.append(session)
            conns.append(conn)
            await conn.serve(session, rj.Agent(instructions="test"))

        server = TestServer(create_app(entrypoint, **app_options), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url(path)), sessions, conns

    yield start
    for server in servers:
        await server.close()


class Tap:
    """A client WebSocket that keeps the agent audio it receives, with the time."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.audio: list[tuple[float, np.ndarray[Any, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ws, name)

    async def __aiter__(self) -> AsyncIterator[aiohttp.WSMessage]:
        loop = asyncio.get_running_loop()
        async for message in self.ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                self.audio.append((loop.time(), np.frombuffer(message.data, "<i2")))
            yield message


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_websocket_the_client_gets_the_mix_and_reports_it_but_only_voice_is_speaking(
    serve: Any,
) -> None:
    url, sessions, conns = await serve(background_session(), "/ws")
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        tap = Tap(ws)
        client = VoiceClient(tap, 16000, jitter=0.1)  # type: ignore[arg-type]
        ready = await client.start()
        await client.silence(0.1)
        await client.speak(speech_frame(0.3, 16000).to_pcm())
        final = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
        )
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.silence(0.2)
        await client.close()

    assert isinstance(final, TranscriptMessage) and final.text == REPLY and not final.interrupted
    states = [s for _, s in client.states()]
    assert states == ["initializing", "listening", "thinking", "speaking", "listening"]
    thinking_at, speaking_at, done_at = (t for t, _ in client.states()[2:])
    # What was sent: the ambient in every frame, the voice (a constant 300) in the reply's,
    # the thinking sound only in frames without voice.
    frames = [(t, pcm) for t, pcm in tap.audio if pcm.size >= 240]
    assert all(abs(level(pcm, AMBIENT_HZ, ready.sample_rate) - 600) < 40 for _, pcm in frames)
    voiced = [(t, pcm) for t, pcm in frames if abs(float(np.mean(pcm)) - 300) < 30]
    voice = round(len(REPLY) * SECONDS_PER_CHAR * 50) * 480
    assert sum(pcm.size for _, pcm in voiced) == voice
    assert not any(level(p, THINKING_HZ, ready.sample_rate) > HEARD for _, p in voiced)
    thinking = [t for t, p in frames if level(p, THINKING_HZ, ready.sample_rate) > HEARD]
    assert thinking and thinking_at + 0.2 <= thinking[0] and thinking[-1] < speaking_at
    # The client played (and reported) the ambient too, and answered the clear that took
    # back what was queued of it when the reply came ...
    assert client.received > voice and client.played > voice
    assert client.of_type(Clear) and any(r.cleared for r in client.reports)
    # ... yet the server counted only the voice: sent, heard, and as long as it is.
    playback = conns[0].audio_output
    assert playback.total_sent == voice
    assert done_at - speaking_at == pytest.approx(voice / ready.sample_rate, abs=0.12)
    history = [(m.role, m.content, m.interrupted) for m in sessions[0].history.messages()]
    assert history == [("user", "Hi.", False), ("assistant", REPLY, False)]


@pytest.mark.looptime(False)
@pytest.mark.timeout(60)
async def test_phone_call_the_caller_hears_the_mix_and_the_marks_follow_the_voice_alone(
    serve: Any,
) -> None:
    url, sessions, _ = await serve(
        background_session(),
        "/twilio",
        telephony=["twilio"],
        telephony_options=TelephonyOptions(mark_interval=0.16),
        webrtc=False,
        page=False,
    )
    states: list[tuple[float, str]] = []
    async with FakePhoneCall.connect(url) as call:
        await call.until(lambda: bool(sessions), 5)
        sessions[0].on("agent_state_changed", lambda e: states.append((e.created_at, e.new_state)))
        await call.silence(0.1)
        await call.say(speech_frame(0.3, 8000).data, 8000)
        await call.until(lambda: bool(states) and states[-1][1] == "speaking", 10)
        await call.until(lambda: states[-1][1] == "listening", 10)
        await call.silence(0.2)

    assert [s for _, s in states][-3:] == ["thinking", "speaking", "listening"]
    thinking_at, speaking_at, done_at = (t for t, _ in states[-3:])
    heard = [(h.at, h.pcm) for h in call.heard if h.pcm.size == 160]
    # The caller heard the ambient all along (μ-law keeps it to a few percent) ...
    assert len(heard) > 50
    assert all(abs(level(p, AMBIENT_HZ, 8000) - AMBIENT_AMPLITUDE) < 60 for _, p in heard)
    # ... the thinking sound while the agent thought, never over its voice.
    voiced = [(t, p) for t, p in heard if abs(float(np.mean(p)) - 300) < 40]
    assert len(voiced) == round(len(REPLY) * SECONDS_PER_CHAR * 50)
    assert not any(level(p, THINKING_HZ, 8000) > HEARD for _, p in voiced)
    thinking = [t for t, p in heard if level(p, THINKING_HZ, 8000) > HEARD]
    assert thinking and thinking_at + 0.2 <= thinking[0] < thinking[-1] < voiced[0][0]
    # The marks are the voice's alone: the reply's epoch (begun by the clear that took the
    # ambient back) holds its first chunk, one every 0.16 s and its end.
    voice = round(len(REPLY) * SECONDS_PER_CHAR * 8000)
    names = [n for _, n in call.marks_received if n.startswith("rj-")]
    epoch = max(int(n.split("-")[1]) for n in names)
    positions = [int(n.split("-")[2]) for n in names if n.startswith(f"rj-{epoch}-")]
    assert positions == [160, *range(160 + 1280, voice, 1280), voice]
    assert call.clears  # the ambient queued at the caller was taken back for the reply
    assert speaking_at < done_at
    history = [(m.role, m.content, m.interrupted) for m in sessions[0].history.messages()]
    assert history == [("user", "Hi.", False), ("assistant", REPLY, False)]


@pytest.mark.looptime(False)
@pytest.mark.timeout(60)
async def test_webrtc_the_track_carries_the_ambient_between_replies() -> None:
    pytest.importorskip("aiortc", reason="the webrtc extra is not installed")
    from rejoinder.io.webrtc import WebRTCOptions, add_webrtc_routes

    from ._webrtc_client import WebRTCClient

    sessions: list[rj.AgentSession[Any]] = []
    make = background_session()

    async def entrypoint(conn: Connection) -> None:
        session = make()
        sessions.append(session)
        await conn.serve(session, rj.Agent(instructions="test"))

    app = web.Application()
    add_webrtc_routes(app, entrypoint, WebRTCOptions(host_addresses=["127.0.0.1"]))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            client = WebRTCClient(str(server.make_url("/api/offer")), jitter=0.1, loud=150.0)
            await client.connect(http)
            await client.until(lambda: bool(client.states()), 5)
            await asyncio.sleep(0.1)
            client.mic.say(speech_frame(0.3, 48000).data)
            await client.until(lambda: client.states()[-1][1] == "speaking", 10)
            await client.until(lambda: client.states()[-1][1] == "listening", 10)
            await asyncio.sleep(0.2)
            await client.close()
    finally:
        await server.close()
    states = [s for _, s in client.states()]
    assert states[-3:] == ["thinking", "speaking", "listening"]
    # The ambient (RMS ~420) is in every frame from its first: no run of silence anywhere.
    positions = [p for _, p in client.audible_frames]
    assert len(positions) > 50
    assert max(np.diff(positions)) <= 960 * 3  # Opus may take a frame or two to settle
    history = [(m.role, m.content, m.interrupted) for m in sessions[0].history.messages()]
    assert history == [("user", "Hi.", False), ("assistant", REPLY, False)]


@pytest.mark.looptime
async def test_sip_rtp_carries_the_ambient_and_reports_only_the_voice() -> None:
    from rejoinder.io.sip.rtp_playback import SEND_AHEAD, RtpPlayback

    async def run(
        with_background: bool,
    ) -> tuple[list[Any], list[tuple[float, np.ndarray[Any, Any]]]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        packets: list[tuple[float, np.ndarray[Any, Any]]] = []
        events: list[Any] = []
        out = RtpPlayback(
            8000,
            send_packet=lambda f, ts, marker: packets.append((loop.time() - t0, f.data.copy())),
            timestamp_at=lambda t: round((t - t0) * 8000),
        )
        out.set_listener(
            lambda: events.append(("started", round(loop.time() - t0, 4))),
            lambda ev: events.append((ev, round(loop.time() - t0, 4))),
        )
        session = StandInSession(out)
        if with_background:
            BackgroundAudio(AMBIENT).attach(session)  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        await out.capture_frame(AudioFrame(np.full(4000, 300, np.int16), 8000))
        out.flush()
        await asyncio.sleep(1.5)
        session.close()
        out.close()
        return events, packets

    plain, _ = await run(False)
    mixed, packets = await run(True)
    assert (
        [e for e, _ in mixed] == [e for e, _ in plain] == ["started", PlaybackFinished(0.5, False)]
    )
    # What was already sent of the ambient is not taken back on RTP: the reply follows it,
    # at most the send-ahead lead later.
    for (_, at_plain), (_, at_mixed) in zip(plain, mixed, strict=True):
        assert 0 <= at_mixed - at_plain <= SEND_AHEAD + 0.02 + 1e-9
    # A packet every 20 ms throughout (no silence suppression between replies), each with
    # the ambient in it, the voice's under the ambient too.
    times = [t for t, _ in packets]
    assert len(packets) >= 90 and max(np.diff(times)) <= 0.02 + 1e-6
    full = [p for _, p in packets if p.size == 160]
    assert all(abs(level(p, AMBIENT_HZ, 8000) - AMBIENT_AMPLITUDE) < 40 for p in full[1:-1])
    assert sum(1 for p in full if abs(float(np.mean(p)) - 300) < 30) == 25


LONG = "This answer goes on and on for quite a while, so that it can be cut short."


async def test_websocket_drop_and_resume_the_rest_is_said_and_the_ambient_comes_back() -> None:
    """Virtual time, the real peer and socket loop over an in-memory socket: the client
    drops mid-reply and a new one resumes; the words heard and the words said after are
    the whole reply, the agent is never speaking while nobody listens, and the ambient
    plays to the new client once the held reply has gone to it."""
    from rejoinder.io.resume import ResumeRegistry

    from ._memory_client import MemoryClient

    registry = ResumeRegistry(5.0)
    sessions: list[rj.AgentSession[Any]] = []
    conns: list[Connection] = []
    detached_speaking: list[float] = []
    make = scripted_session(
        [[LONG]], ["Tell me."], lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR)
    )

    async def entrypoint(conn: Connection) -> None:
        session = make()
        BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.2).attach(session)
        sessions.append(session)
        conns.append(conn)

        def speaking(ev: Any) -> None:
            if ev.new_state == "speaking" and conn.detached:
                detached_speaking.append(ev.created_at)

        session.on("agent_state_changed", speaking)
        await conn.serve(session, rj.Agent(instructions="test"))

    first = MemoryClient(entrypoint, resume=registry)
    ready = await first.start()
    await first.speak(0.4)
    await first.wait_for(lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5)
    await asyncio.sleep(0.5)
    await first.drop()
    await asyncio.sleep(0.5)
    session, conn = sessions[0], conns[0]
    assert conn.detached and session.agent_state == "thinking"
    heard = [m for m in session.history.messages() if m.role == "assistant"]
    assert len(heard) == 1 and heard[0].interrupted

    second = MemoryClient(entrypoint, resume=registry)
    again = await second.start(resume=getattr(ready, "resume_token", None))
    assert getattr(again, "resumed", False)
    await second.wait_for(
        lambda m: isinstance(m, TranscriptMessage) and m.final and not m.interrupted, 10
    )
    await second.wait_for(lambda m: isinstance(m, AgentStateMessage) and m.state == "listening", 5)
    before = second.received
    await asyncio.sleep(1.0)
    ambient = second.received - before
    await second.goodbye()
    await second.ended(5)

    rest = [m for m in session.history.messages() if m.role == "assistant"][-1]
    assert heard[0].content.split() + rest.content.split() == LONG.split()
    assert not detached_speaking
    # a second of ambient at 24 kHz reached the new client once the reply was done
    assert abs(ambient - 24000) <= 0.12 * 24000


CONSOLE_AGENT = """
import rejoinder as rj
from rejoinder.io.background_audio import BackgroundAudio
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedTTS, ScriptedVAD


async def entrypoint(conn):
    session = rj.AgentSession(
        llm=ScriptedLLM([["Hello to you."]]),
        vad=ScriptedVAD(),
        stt=ScriptedSTT(["Hi."]),
        tts=ScriptedTTS(seconds_per_char=0.01),
        user_away_timeout=None,
    )
    BackgroundAudio(ambient="room_tone").attach(session)
    await conn.serve(session, rj.Agent(instructions="test"))
"""


class SoundCard:
    """``rejoinder console --audio``'s sound card, stood in: a microphone that hears a
    tone from 0.3 s for 0.6 s, and a speaker that takes 20 ms every 20 ms."""

    name = "test card"
    mic_rate = 16000
    speaker_rate = 24000

    def __init__(self) -> None:
        self.heard: list[np.ndarray[Any, Any]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(on_mic, fill))

    async def _run(self, on_mic: Callable[[bytes], None], fill: Callable[[Any], None]) -> None:
        clock = 0.0
        while True:
            await asyncio.sleep(0.02)
            talking = 0.3 <= clock < 0.9
            on_mic(speech_frame(0.02, 16000).data.tobytes() if talking else bytes(640))
            out = bytearray(480 * 2)
            fill(memoryview(out))
            self.heard.append(np.frombuffer(bytes(out), np.int16))
            clock += 0.02

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def test_console_audio_the_sound_card_plays_the_room_tone_between_replies(
    tmp_path: Any,
) -> None:
    import io

    from rejoinder.cli import build_parser
    from rejoinder.console_agent import run_agent_console

    path = tmp_path / "agent.py"
    path.write_text(CONSOLE_AGENT, encoding="utf-8")

    async def nothing_typed() -> AsyncIterator[str]:
        await asyncio.sleep(3.0)
        return
        yield

    card = SoundCard()
    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(["console", str(path), "--audio"])
    code = await run_agent_console(args, out, stderr=err, lines=nothing_typed(), devices=card)
    assert (code, err.getvalue()) == (0, "")
    lines = [x for x in out.getvalue().splitlines() if x.startswith(("you> ", "agent> "))]
    assert lines == ["you> Hi.", "agent> Hello to you."]
    # From the first blocks on, every 20 ms the card took held sound: the room tone.
    rms = [float(np.sqrt(np.mean(b.astype(np.float64) ** 2))) for b in card.heard]
    assert len(rms) > 100
    assert all(r > 100 for r in rms[3:-3])
