"""The WebSocket transport over a real socket on 127.0.0.1, in real time, with the test
kit's scripted models (energy VAD, scripted STT/LLM/TTS): fast and deterministic enough to
check playback truth, barge-in and junk handling exactly."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.protocol import (
    TIMELINE_KINDS,
    AgentStateMessage,
    Clear,
    CloseCode,
    ErrorMessage,
    MetricsMessage,
    TimelineMessage,
    ToolMessage,
    TranscriptMessage,
)
from rejoinder.io.websocket import WebSocketOptions
from rejoinder.testing import (
    ScriptedTTS,
    ToolCall,
    speech_frame,
)

from ._client import VoiceClient, scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MIC = 16000


def tone(seconds: float) -> bytes:
    return speech_frame(seconds, MIC).to_pcm()


Served = tuple[str, list[rj.AgentSession[Any]], list[Connection]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(
        make_session: Callable[[], rj.AgentSession[Any]],
        agent: Callable[[], rj.Agent] = lambda: rj.Agent(instructions="test"),
        resume_grace: float = 30.0,
        **options: Any,
    ) -> Served:
        sessions: list[rj.AgentSession[Any]] = []
        conns: list[Connection] = []

        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            sessions.append(session)
            conns.append(conn)
            await conn.serve(session, agent())

        app = create_app(
            entrypoint, websocket=WebSocketOptions(**options), resume_grace=resume_grace
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/ws")), sessions, conns

    yield start
    for server in servers:
        await server.close()


def scripted(replies: list[list[Any]], transcripts: list[str], **tts: Any) -> Any:
    return scripted_session(replies, transcripts, lambda: ScriptedTTS(**tts))


async def test_a_spoken_turn_is_answered_and_speaking_follows_the_clients_playback(
    serve: Any,
) -> None:
    url, sessions, _ = await serve(scripted([["Hello there."]], ["Hi."], seconds_per_char=0.03))
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC, jitter=0.25)
        ready = await client.start()
        assert ready.protocol == 1 and ready.sample_rate == 24000
        await client.silence(0.2)
        await client.speak(tone(0.6))
        await client.silence(0.5)
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

    states = [s for _, s in client.states()]
    assert states == ["initializing", "listening", "thinking", "speaking", "listening"]
    times = dict((s, t) for t, s in reversed(client.states()))  # first time of each
    spoke_at = next(t for t, s in client.states() if s == "speaking")
    done_at = [t for t, s in client.states() if s == "listening"][-1]
    first_audio = client.audio_arrivals[0][0]
    first_heard = next(r.at for r in client.reports if r.samples > 0)
    last_heard = next(r.at for r in client.reports if r.samples >= client.received)
    assert client.received == round(len("Hello there.") * 0.03 * 50) * 480
    # speaking follows the reports, not the sending: audio arrived a jitter buffer
    # earlier than it was heard, and the state changed only after the first report.
    assert first_audio < first_heard < spoke_at
    assert first_heard - first_audio >= 0.2
    assert last_heard < done_at
    assert times["thinking"] < first_audio
    history = [(m.role, m.content, m.interrupted) for m in sessions[0].history.messages()]
    assert history == [("user", "Hi.", False), ("assistant", "Hello there.", False)]


async def test_barge_in_clears_the_client_and_the_history_keeps_what_was_heard(
    serve: Any,
) -> None:
    long = "This is a long answer that goes on and on for quite a while. " * 3
    url, sessions, _ = await serve(
        scripted([[long], ["Okay."]], ["Tell me a story.", "Stop."], seconds_per_char=0.03)
    )
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC, jitter=0.05)
        await client.start()
        await client.speak(tone(0.5))
        await client.silence(0.4)
        await client.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await client.silence(1.0)  # hear about a second of it
        await client.speak(tone(0.8))  # then talk over it
        clear = await client.wait_for(lambda m: isinstance(m, Clear), 5)
        assert clear is not None
        await client.silence(0.4)
        first = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        assert isinstance(first, TranscriptMessage) and first.interrupted
        await client.wait_for(
            lambda m: (
                isinstance(m, TranscriptMessage)
                and m.role == "agent"
                and m.final
                and m.text == "Okay."
            ),
            10,
        )
        await client.close()

    cleared = [r for r in client.reports if r.cleared]
    assert len(cleared) == 1 and client.dropped > 0
    heard_seconds = cleared[0].samples / client.rate
    assert 0.8 < heard_seconds < 3.0
    messages = sessions[0].history.messages()
    cut = next(m for m in messages if m.role == "assistant" and m.interrupted)
    assert cut.content and long.startswith(cut.content)
    # paced by the scripted TTS's rate: what was heard, give or take a report and a word
    assert abs(len(cut.content) * 0.03 - heard_seconds) < 0.5
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    # the agent's text ran with its voice, word by word, up to about where it was cut
    shown = [
        m.text
        for m in client.of_type(TranscriptMessage)
        if m.role == "agent" and not m.final and long.startswith(m.text)
    ]
    assert len(shown) >= 5
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(shown))
    assert abs(len(shown[-1]) - len(cut.content)) <= 12


@rj.function_tool
async def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    await asyncio.sleep(0.2)
    return f"{city} is sunny"


async def test_typed_text_tools_and_agent_text_shown_from_when_it_is_heard(serve: Any) -> None:
    url, sessions, _ = await serve(
        scripted(
            [["Let me look.", ToolCall("lookup", {"city": "Oslo"})], ["Oslo is sunny."]],
            [],
            seconds_per_char=0.02,
        ),
        agent=lambda: rj.Agent(instructions="test", tools=[lookup]),
    )
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC, jitter=0.3)
        await client.start()
        await client.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "listening", 5
        )
        await ws.send_str(json.dumps({"type": "text", "text": "Weather in Oslo?"}))
        await client.wait_for(final_agent_text("Oslo is sunny."), 10)
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.close()

    kinds = [m for _, m in client.messages if not isinstance(m, MetricsMessage)]
    user = [m for m in kinds if isinstance(m, TranscriptMessage) and m.role == "user"]
    assert [(m.text, m.final) for m in user] == [("Weather in Oslo?", True)]
    tools = [(m.name, m.status, m.error) for m in kinds if isinstance(m, ToolMessage)]
    assert tools == [("lookup", "started", None), ("lookup", "finished", False)]
    # agent text never shows before its audio is heard
    speaking = False
    for m in kinds:
        if isinstance(m, AgentStateMessage):
            speaking = m.state == "speaking"
        elif isinstance(m, TranscriptMessage) and m.role == "agent" and not m.final:
            assert speaking, m
    finals = [
        m.text for m in kinds if isinstance(m, TranscriptMessage) and m.role == "agent" and m.final
    ]
    assert finals == ["Let me look.", "Oslo is sunny."]
    states = [s for _, s in client.states()]
    assert states == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    assert sessions[0].history.messages()[0].content == "Weather in Oslo?"


def final_agent_text(text: str) -> Callable[[Any], bool]:
    return lambda m: (
        isinstance(m, TranscriptMessage) and m.role == "agent" and m.final and m.text == text
    )


async def _junk(url: str, *frames: str | bytes) -> tuple[list[dict[str, Any]], int | None]:
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        for frame in frames:
            if isinstance(frame, str):
                await ws.send_str(frame)
            else:
                await ws.send_bytes(frame)
        got: list[dict[str, Any]] = []
        async with asyncio.timeout(5):
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    got.append(json.loads(msg.data))
                    if got[-1]["type"] == "ready":
                        await ws.send_str('{"type": "wave"}')
                    if got[-1]["type"] == "error" and got[-1]["code"] == "unknown_type":
                        await ws.close()
        return got, ws.close_code


async def test_junk_gets_an_error_or_a_close_code_and_leaves_other_sessions_alone(
    serve: Any,
) -> None:
    url, _, _ = await serve(
        scripted([["Hello there."]], ["Hi."], seconds_per_char=0.03), max_frame_bytes=4096
    )
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        good = VoiceClient(ws, MIC)
        await good.start()

        got, code = await _junk(url, "not json {")
        assert code == CloseCode.INVALID_JSON and got[-1]["code"] == "invalid_json"
        got, code = await _junk(url, b"\x00\x01" * 10)
        assert code == CloseCode.UNSUPPORTED_DATA and got[-1]["code"] == "not_started"
        got, code = await _junk(url, '{"type": "start", "sample_rate": "fast"}')
        assert code == CloseCode.POLICY_VIOLATION and got[-1]["code"] == "invalid_message"
        got, code = await _junk(url, '{"type": "start", "sample_rate": 16000}', b"\0" * 5000)
        assert code == CloseCode.MESSAGE_TOO_BIG
        # recoverable: an error event each, and the socket stays open
        got, code = await _junk(
            url,
            '{"type": "played", "samples": 1}',
            "[1, 2]",
            '{"type": "start", "sample_rate": 16000}',
        )
        kinds = [(m["type"], m.get("code")) for m in got]
        assert kinds[:2] == [("error", "not_started"), ("error", "invalid_message")]
        assert ("error", "unknown_type") in kinds and code == 1000

        # the first client was never disturbed: it still talks to its agent
        await good.speak(tone(0.6))
        await good.silence(0.5)
        final = await good.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
        )
        assert isinstance(final, TranscriptMessage) and final.text == "Hello there."
        assert not any(isinstance(m, ErrorMessage) for m in good.of_type(ErrorMessage))
        await good.close()


async def test_a_start_that_never_comes_times_out(serve: Any) -> None:
    url, _, _ = await serve(scripted([], []), start_timeout=0.3)
    got, code = await _junk(url)
    assert code == CloseCode.START_TIMEOUT and got[-1]["code"] == "start_timeout"


def test_silence_helper() -> None:
    assert np.frombuffer(tone(0.02), "<i2").size == 320


async def test_a_client_that_vanishes_mid_answer_closes_its_session(serve: Any) -> None:
    """With resuming off (``resume_grace=0``): tests/io/test_resume.py has it on."""
    long = "This is a long answer that goes on and on for quite a while. " * 3
    url, sessions, conns = await serve(scripted([[long]], ["Tell me a story."]), resume_grace=0)
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(url)
        client = VoiceClient(ws, MIC)
        await client.start()
        await client.speak(tone(0.5))
        await client.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        assert ws._response is not None and ws._response.connection is not None
        ws._response.connection.transport.abort()  # no close handshake: the cable is cut
        await client.close()
        session = sessions[0]
        closed = asyncio.Event()
        session.on("close", lambda _: closed.set())
        if not conns[0].left or session.agent_state != "listening":
            await asyncio.wait_for(closed.wait(), 5)
        assert conns[0].left and session.agent_state == "listening"
        async with http.get(url.replace("/ws", "/healthz")) as health:
            assert (await health.json())["sessions"] == 0


async def test_a_client_that_asks_for_the_timeline_gets_the_floors_entries(serve: Any) -> None:
    url, _, conns = await serve(scripted([["Hi."], ["Hi."]], ["Hello.", "Hello."]))
    clients: list[VoiceClient] = []
    async with aiohttp.ClientSession() as http:
        for asks in (True, False):
            async with http.ws_connect(url) as ws:
                client = VoiceClient(ws, MIC)
                await client.start(timeline=asks)
                await client.silence(0.2)
                await client.speak(tone(0.5))
                await client.wait_for(
                    lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final,
                    10,
                )

                def idle(c: VoiceClient = client) -> bool:
                    return c.states()[-1][1] == "listening"

                await client.until(idle, 5)
                await client.silence(0.3)
                await client.close()
                clients.append(client)
    asked, other = clients
    assert [c.wants_timeline for c in conns] == [True, False]
    assert other.of_type(TimelineMessage) == []
    entries = [m.entry for m in asked.of_type(TimelineMessage)]
    kinds = {e["kind"] for e in entries}
    assert kinds <= TIMELINE_KINDS and "transcript" not in kinds and "metrics" not in kinds
    times = [e["t"] for e in entries]
    assert times == sorted(times) and 0 <= times[0] < 5
    opened = next(
        i for i, e in enumerate(entries) if e["kind"] == "ob_opened" and e["ob"] == "reply"
    )
    states = [(i, e["state"]) for i, e in enumerate(entries) if e["kind"] == "agent_state"]
    thinking = next(i for i, s in states if s == "thinking" and i > opened)
    speaking = next(i for i, s in states if s == "speaking" and i > thinking)
    assert states[-1][1] == "listening" and states[-1][0] > speaking
    reply = entries[opened]["id"]
    assert any(e["kind"] == "ob_closed" and e["id"] == reply for e in entries[opened:])
