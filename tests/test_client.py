"""rejoinder.client against a real server on 127.0.0.1 (scripted models, real time), against
fake servers that send junk or close in every way, and its speaker on its own (hypothesis)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

import rejoinder as rj
import rejoinder.client
from rejoinder.client import ConnectionClosed, ReadyTimeout, Speaker, Turn, UpgradeRefused
from rejoinder.io import Connection, create_app
from rejoinder.io.protocol import (
    Clear,
    CloseCode,
    ErrorCode,
    MetricsMessage,
    ServerMessage,
    TranscriptMessage,
    UserStateMessage,
)
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import ScriptedTTS, speech_frame

from .io._client import scripted_session

MIC = 16000
LONG = "A long answer that goes on and on, long enough to be stopped by a button."

Served = tuple[str, list[rj.AgentSession[Any]]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """A rejoinder app on 127.0.0.1 whose sessions run the test kit's scripted models."""
    servers: list[TestServer] = []

    async def start(
        replies: list[list[Any]], transcripts: list[str], seconds_per_char: float = 0.03
    ) -> Served:
        sessions: list[rj.AgentSession[Any]] = []
        make = scripted_session(
            replies, transcripts, lambda: ScriptedTTS(seconds_per_char=seconds_per_char)
        )

        async def entrypoint(conn: Connection) -> None:
            session = make()
            sessions.append(session)
            await conn.serve(session, rj.Agent(instructions="test"))

        server = TestServer(create_app(entrypoint), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/ws")), sessions

    yield start
    for server in servers:
        await server.close()


def final_agent(message: ServerMessage) -> bool:
    return isinstance(message, TranscriptMessage) and message.role == "agent" and message.final


def tone(seconds: float) -> bytes:
    return speech_frame(seconds, MIC).to_pcm()


# ------------------------------------------------------- a real server


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_text_turn(serve: Any) -> None:
    url, sessions = await serve([["Hello there."]], [], seconds_per_char=0.01)
    async with rejoinder.client.connect(url, sample_rate=MIC, keep_audio=True) as conn:
        assert conn.ready is not None and conn.ready.protocol == 1
        assert conn.output_rate == 24000
        await conn.wait_for_state("listening", within=5)
        mark = len(conn.log)
        await conn.send_text("Hi.")
        await conn.wait_for_state("speaking", within=5, since=mark)
        await conn.wait_for(final_agent, within=5)
        await conn.wait_for_state("listening", within=5, since=mark)
    typed = [m async for m in conn.events()]  # all of them: the client closed normally
    assert conn.transcripts == [
        Turn("user", "Hi.", final=True),
        Turn("agent", "Hello there.", final=True, interrupted=False),
    ]
    assert [s for _, s in conn.agent_states] == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    assert typed == conn.messages and all(isinstance(m, ServerMessage) for m in typed)
    assert [m.type for m in typed][:3] == ["ready", "agent_state", "user_state"]
    speaker = conn.speaker
    assert speaker.received == round(len("Hello there.") * 0.01 * 50) * 480
    assert speaker.played == speaker.received and speaker.dropped == 0
    assert speaker.heard() == np.full(speaker.played, 300, "<i2").tobytes()
    assert conn.closed is not None and conn.closed.normal
    assert sessions[0].history.messages()[0].content == "Hi."


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_spoken_turn_is_heard_through_the_jitter_buffer(serve: Any) -> None:
    url, sessions = await serve([["Hello there."]], ["Hi."])
    async with rejoinder.client.connect(url, sample_rate=MIC, jitter=0.25) as conn:
        await conn.wait_for_state("listening", within=5)
        mark = len(conn.log)
        await conn.send_audio(tone(0.5))  # in real time, then the microphone goes quiet
        user = await conn.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "user" and m.final,
            within=5,
            since=mark,
        )
        final = await conn.wait_for(final_agent, within=10)
        await conn.wait_for_state("listening", within=5, since=len(conn.log) - 1)
    assert isinstance(user, TranscriptMessage) and user.text == "Hi."
    assert isinstance(final, TranscriptMessage) and final.text == "Hello there."
    times = dict((s, t) for t, s in reversed(conn.agent_states))  # first time of each
    reports = conn.speaker.reports
    first_heard = next(r.at for r in reports if r.samples > 0)
    all_heard = next(r.at for r in reports if r.samples >= conn.speaker.received)
    done = conn.agent_states[-1][0]
    # speaking follows what the speaker played, not what the server sent: the audio sat
    # in the jitter buffer first, and the states changed only after the reports.
    assert first_heard - times["thinking"] >= 0.25
    assert first_heard < times["speaking"]
    assert all_heard < done
    assert [s for _, s in conn.agent_states][-3:] == ["thinking", "speaking", "listening"]
    assert not any(r.cleared for r in reports)
    assert [m.role for m in sessions[0].history.messages()] == ["user", "assistant"]


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_interrupt_clears_the_speaker_and_the_reply_ends_where_it_was_heard(
    serve: Any,
) -> None:
    url, sessions = await serve([[LONG]], [])
    async with rejoinder.client.connect(url, sample_rate=MIC, jitter=0.05) as conn:
        await conn.wait_for_state("listening", within=5)
        await conn.send_text("Tell me everything.")
        await conn.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and len(m.text) > 12,
            within=5,
        )
        await conn.interrupt()
        await conn.wait_for(lambda m: isinstance(m, Clear), within=3)
        final = await conn.wait_for(final_agent, within=5)
        await conn.wait_for_state("listening", within=5)
    assert isinstance(final, TranscriptMessage) and final.interrupted
    assert final.text and LONG.startswith(final.text.rstrip("."))
    speaker = conn.speaker
    cleared = [r for r in speaker.reports if r.cleared]
    assert len(cleared) == 1 and speaker.dropped > 0
    assert speaker.played + speaker.dropped == speaker.received
    assert cleared[0].samples == speaker.played  # nothing played after the stop
    assert conn.transcripts[-1] == Turn("agent", final.text, final=True, interrupted=True)
    assistant = [m for m in sessions[0].history.messages() if m.role == "assistant"]
    assert assistant[0].interrupted and assistant[0].content != LONG


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_muted_user_is_not_heard_until_unmuted(serve: Any) -> None:
    url, sessions = await serve([["Hi."]], ["Hello."])
    async with rejoinder.client.connect(url, sample_rate=MIC) as conn:
        await conn.wait_for_state("listening", within=5)
        await conn.mute(True)
        mark = len(conn.log)
        await conn.send_audio(tone(0.4))
        await conn.send_audio(bytes(round(0.3 * MIC) * 2))
        assert sessions[0].input_muted and conn.muted
        heard_while_muted = [m for m in conn.messages[mark:] if isinstance(m, UserStateMessage)]
        assert heard_while_muted == []
        conn.mute(False)  # not awaited: queued before the audio below
        await conn.send_audio(tone(0.4))
        await conn.wait_for(
            lambda m: isinstance(m, UserStateMessage) and m.state == "speaking",
            within=3,
            since=mark,
        )
        await conn.wait_for(final_agent, within=5)
    assert not conn.muted and not sessions[0].input_muted
    assert [t.text for t in conn.transcripts] == ["Hello.", "Hi."]


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_another_protocol_version_is_refused_with_4003(serve: Any) -> None:
    url, sessions = await serve([], [])
    with pytest.raises(ConnectionClosed) as refused:
        await rejoinder.client.connect(url, sample_rate=MIC, protocol=2)
    error = refused.value
    assert error.code == CloseCode.PROTOCOL_MISMATCH == 4003
    assert error.error_code == ErrorCode.PROTOCOL_MISMATCH
    assert error.server_message == "this server speaks protocol 1, not 2"
    assert not error.normal
    assert str(error) == (
        "the connection closed with code 4003 (protocol mismatch): "
        "protocol_mismatch: this server speaks protocol 1, not 2"
    )
    assert sessions == []


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_bad_input_is_refused_before_anything_is_sent(serve: Any) -> None:
    url, _ = await serve([], [])
    with pytest.raises(ValueError, match="sample_rate"):
        rejoinder.client.connect(url, sample_rate=100)
    async with rejoinder.client.connect(url, sample_rate=MIC, pace_audio=False) as conn:
        with pytest.raises(ValueError, match="invalid text input"):
            await conn.send_text("")
        with pytest.raises(ValueError, match="even number of bytes"):
            await conn.send_audio(b"\0\0\0")
        with pytest.raises(ValueError, match="at 16000 Hz, not 1 channel"):
            await conn.send_audio(AudioFrame.silence(0.02, 8000))
        with pytest.raises(TypeError):
            await conn.send_audio("loud")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not an agent state"):
            await conn.wait_for_state("sleeping")
        await conn.send_audio(AudioFrame.silence(0.02, MIC))  # unpaced: sent at once
        assert conn.errors == []
    with pytest.raises(ConnectionClosed):
        await conn.send_text("too late")
    with pytest.raises(ConnectionClosed):
        conn.interrupt()


# ------------------------------------------------------ fake servers

Script = Callable[[web.Request, web.WebSocketResponse], Awaitable[None]]


@pytest.fixture
async def fake() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    """A server that answers ``start`` with what a script sends (junk included)."""
    servers: list[TestServer] = []

    async def start(script: Script) -> str:
        async def handler(request: web.Request) -> web.StreamResponse:
            if request.query.get("full"):
                return web.json_response({"error": "full"}, status=503)
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            start = await ws.receive_json()
            assert start["type"] == "start"
            await script(request, ws)
            return ws

        app = web.Application()
        app.router.add_get("/ws", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/ws"))

    yield start
    for server in servers:
        await server.close()


def text(**message: Any) -> str:
    return json.dumps(message)


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_junk_from_a_server_is_set_aside_and_its_close_explained(fake: Any) -> None:
    async def script(request: web.Request, ws: web.WebSocketResponse) -> None:
        await ws.send_bytes(b"\1\0" * 100)  # audio before ready: no rate to play it at
        await ws.send_str("not json {")
        await ws.send_str(text(type="wave", hello=1))  # a newer server's type
        await ws.send_str(text(type="agent_state", state="dozing"))
        await ws.send_str(text(type="ready", sample_rate=-8000))
        await ws.send_str(text(type="ready", sample_rate=8000, protocol=1, extra="x"))
        await ws.send_str(text(type="ready", sample_rate=16000))
        await ws.send_str(text(type="agent_state", state="listening"))
        await ws.send_str(text(type="clear"))  # nothing queued: still answered
        await ws.send_bytes(b"\1\0\1")  # an odd byte: carried to the next frame
        await ws.send_bytes(b"\0" + b"\1\0" * 799)
        await ws.send_str("[1, 2]")
        await ws.send_str(text(type="metrics", metrics={"type": "llm", "new": [1]}))
        got = await ws.receive_json()
        assert got == {"type": "played", "samples": 0, "cleared": True}
        await ws.send_str(text(type="error", code="slow", message="read faster"))
        await ws.close(code=CloseCode.SLOW_CLIENT, message=b"slow")

    url = await fake(script)
    async with rejoinder.client.connect(url, sample_rate=MIC, jitter=0, pace_audio=False) as conn:
        closed = await conn.wait_closed(within=5)
        with pytest.raises(ConnectionClosed) as waiting:
            await conn.wait_for_state("speaking", within=1)
        with pytest.raises(ConnectionClosed):
            _ = [m async for m in conn.events()]
    assert conn.ready is not None and conn.output_rate == 8000
    assert conn.agent_state == "listening"
    assert [i.code for i in conn.ignored] == [
        ErrorCode.NOT_READY,
        ErrorCode.INVALID_JSON,
        ErrorCode.UNKNOWN_TYPE,
        ErrorCode.INVALID_MESSAGE,
        ErrorCode.INVALID_MESSAGE,  # a ready without a rate
        ErrorCode.INVALID_MESSAGE,  # the second ready
        ErrorCode.INVALID_MESSAGE,  # [1, 2]
    ]
    assert conn.speaker.received == 801 and conn.speaker.dropped == 0
    assert isinstance(conn.messages[-2], MetricsMessage)
    for error in (closed, waiting.value):
        assert error.code == CloseCode.SLOW_CLIENT and error.reason == "slow"
        assert error.error_code == "slow" and error.server_message == "read faster"
    assert "4002 (slow client): slow: read faster" in str(closed)


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_normal_end_ends_the_events_without_an_error(fake: Any) -> None:
    async def script(request: web.Request, ws: web.WebSocketResponse) -> None:
        await ws.send_str(text(type="ready", sample_rate=16000))
        await ws.send_str(text(type="agent_state", state="listening"))
        await ws.close(code=CloseCode.NORMAL, message=b"session ended")

    url = await fake(script)
    async with rejoinder.client.connect(url, sample_rate=MIC) as conn:
        events = [m async for m in conn.events()]
    assert [m.type for m in events] == ["ready", "agent_state"]
    assert conn.closed is not None and conn.closed.normal and conn.closed.reason == "session ended"


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_dropped_connection_fails_the_waiters(fake: Any) -> None:
    async def script(request: web.Request, ws: web.WebSocketResponse) -> None:
        await ws.send_str(text(type="ready", sample_rate=16000))
        await asyncio.sleep(0.1)
        assert request.transport is not None
        request.transport.abort()  # the cable is cut: no closing handshake

    url = await fake(script)
    async with rejoinder.client.connect(url, sample_rate=MIC) as conn:
        with pytest.raises(ConnectionClosed) as dropped:
            await conn.wait_for_state("listening", within=5)
        with pytest.raises(ConnectionClosed):
            await conn.send_audio(tone(0.1))
    assert dropped.value.code in (None, 1006) and not dropped.value.normal


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_no_ready_and_a_refused_upgrade_are_errors_of_their_own(fake: Any) -> None:
    async def silent(request: web.Request, ws: web.WebSocketResponse) -> None:
        await ws.receive()  # the client's close, after its timeout

    url = await fake(silent)
    with pytest.raises(ReadyTimeout, match="no ready"):
        await rejoinder.client.connect(url, sample_rate=MIC, ready_timeout=0.2)
    with pytest.raises(UpgradeRefused) as refused:
        await rejoinder.client.connect(url + "?full=1", sample_rate=MIC)
    assert refused.value.status == 503


# ------------------------------------------------------ the speaker alone

steps = st.lists(
    st.tuples(
        st.sampled_from(["receive", "advance", "clear", "report"]),
        st.floats(0, 0.2),
        st.integers(0, 3000),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.sampled_from([0.0, 0.05, 0.2]))
def test_the_speaker_never_plays_faster_than_real_time_nor_loses_a_sample(
    program: list[tuple[str, float, int]], jitter: float
) -> None:
    rate = 8000
    speaker = Speaker(jitter=jitter, keep_audio=True)
    speaker.start(rate, 0.0)
    now, sent, first_audio = 0.0, bytearray(), None
    for index, (action, dt, size) in enumerate(program):
        now += dt
        before = speaker.played
        if action == "receive":
            pcm = np.full(size, index, "<i2").tobytes()  # each frame's samples: its index
            speaker.receive(pcm, now)
            sent += pcm
            first_audio = now if first_audio is None and size else first_audio
        elif action == "advance":
            speaker.advance(now)
        elif action == "clear":
            speaker.clear(now)
        else:
            speaker.report(now)
        assert speaker.played >= before
        assert speaker.played + speaker.queued + speaker.dropped == speaker.received
        if first_audio is not None:  # nothing is heard before the jitter buffer filled
            assert speaker.played <= max(0.0, now - first_audio - jitter) * rate + 1
    heard = speaker.heard()
    assert len(heard) == speaker.played * 2
    if speaker.dropped == 0:
        assert heard == bytes(sent[: len(heard)])
    else:  # in order, nothing twice: what a clear dropped is a gap, never a repeat
        values = np.frombuffer(heard, "<i2")
        assert (np.diff(values) >= 0).all()
    assert [r.samples for r in speaker.reports] == sorted(r.samples for r in speaker.reports)
