"""The client's controls over a real WebSocket on 127.0.0.1 (real time, scripted models):
the protocol version checked at ``start``, ``mute`` and ``interrupt``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.protocol import (
    Clear,
    CloseCode,
    ErrorMessage,
    Pong,
    TranscriptMessage,
    parse_server_message,
)
from rejoinder.testing import ScriptedTTS

from ._client import VoiceClient, scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MIC = 16000
LONG = "A long answer that goes on and on, long enough to be stopped by a button."

Served = tuple[str, list[rj.AgentSession[Any]]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(replies: list[list[Any]], transcripts: list[str]) -> Served:
        sessions: list[rj.AgentSession[Any]] = []
        make = scripted_session(replies, transcripts, lambda: ScriptedTTS(seconds_per_char=0.03))

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


async def barrier(ws: aiohttp.ClientWebSocketResponse, client: VoiceClient) -> None:
    """Wait until the server handled what was sent before: a control sends nothing back,
    but messages are handled in order, and a bad one is answered with an error."""

    def answers() -> int:
        return sum("invalid played" in e.message for e in client.of_type(ErrorMessage))

    seen = answers()
    await ws.send_str(json.dumps({"type": "played", "samples": -1}))
    await client.until(lambda: answers() > seen, 2)  # its own answer, not an earlier one


@pytest.mark.parametrize("version", [1, None])
async def test_the_servers_protocol_version_is_accepted(serve: Any, version: int | None) -> None:
    url, _ = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        start: dict[str, Any] = {"type": "start", "sample_rate": MIC}
        if version is not None:
            start["protocol"] = version
        await ws.send_str(json.dumps(start))
        ready = parse_server_message((await ws.receive(timeout=5)).data)
        assert ready.type == "ready" and ready.protocol == 1


async def test_another_protocol_version_is_refused_with_its_own_close_code(serve: Any) -> None:
    url, sessions = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC, "protocol": 2}))
        error = parse_server_message((await ws.receive(timeout=5)).data)
        assert isinstance(error, ErrorMessage) and error.code == "protocol_mismatch"
        assert "speaks protocol 1, not 2" in error.message
        closing = await ws.receive(timeout=5)
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert ws.close_code == CloseCode.PROTOCOL_MISMATCH == 4003
    assert sessions == []  # no session was begun


async def test_mute_makes_the_session_hear_silence_and_unmute_undoes_it(serve: Any) -> None:
    url, sessions = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await client.start()
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await ws.send_str(json.dumps({"type": "mute", "muted": True}))
        await barrier(ws, client)
        assert sessions[0].input_muted
        await ws.send_str(json.dumps({"type": "mute", "muted": False}))
        await barrier(ws, client)
        assert not sessions[0].input_muted
        await ws.send_str(json.dumps({"type": "mute"}))  # junk: an error, nothing else
        await barrier(ws, client)
        errors = client.of_type(ErrorMessage)
        assert errors[-2].code == "invalid_message" and "muted" in errors[-2].message
        assert not sessions[0].input_muted
        await client.close()


async def test_interrupt_stops_the_reply_and_clears_the_client(serve: Any) -> None:
    url, sessions = await serve([[LONG]], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await client.start()
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await ws.send_str(json.dumps({"type": "text", "text": "Tell me everything."}))
        await client.wait_for(  # a few words heard first
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and len(m.text) > 12,
            5,
        )
        await ws.send_str(json.dumps({"type": "interrupt"}))
        await client.wait_for(lambda m: isinstance(m, Clear), 3)
        final = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        assert isinstance(final, TranscriptMessage) and final.interrupted
        assert final.text and LONG.startswith(final.text.rstrip("."))
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.close()
    assistant = [m for m in sessions[0].history.messages() if m.role == "assistant"]
    assert assistant[0].interrupted and assistant[0].content != LONG


async def test_a_reply_cut_in_its_first_word_still_gets_its_final_transcript(
    serve: Any,
) -> None:
    """Interim text was shown; the history kept nothing (too little was heard): the client
    is still told the reply is over, so no interim is left open."""
    url, _ = await serve([[LONG]], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await client.start()
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await ws.send_str(json.dumps({"type": "text", "text": "Tell me everything."}))
        await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and not m.final, 5
        )
        await ws.send_str(json.dumps({"type": "interrupt"}))
        final = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        assert isinstance(final, TranscriptMessage) and final.interrupted
        assert LONG.startswith(final.text.rstrip("."))
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        finals = [m for m in client.of_type(TranscriptMessage) if m.role == "agent" and m.final]
        assert len(finals) == 1
        await client.close()


async def test_a_mute_sent_with_start_is_applied_once_the_agent_is_ready(serve: Any) -> None:
    """A client that mutes at once (or re-sends its mute at each ready, as the SDK does
    after a resume) is not refused: the control waits for the agent's first moment."""
    url, sessions = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC}))
        await ws.send_str(json.dumps({"type": "mute", "muted": True}))
        client._tasks.append(asyncio.create_task(client._read()))  # read, nothing sent
        await client.until(
            lambda: bool(client.states()) and client.states()[-1][1] == "listening", 5
        )
        await barrier(ws, client)
        assert sessions[0].input_muted
        assert not [e for e in client.of_type(ErrorMessage) if e.code == "not_ready"]
        await client.close()


async def test_text_sent_with_start_waits_for_the_agent_and_is_answered(serve: Any) -> None:
    """``ready`` comes while the agent is still starting: typed text sent at once (as a
    client does that types before the first state) waits for it, as controls do."""
    url, sessions = await serve([["Hello there."]], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC}))
        await ws.send_str(json.dumps({"type": "text", "text": "Hi there"}))
        client._tasks.append(asyncio.create_task(client._read()))
        answer = await client.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        await client.close()
    assert isinstance(answer, TranscriptMessage) and answer.text == "Hello there."
    assert not [e for e in client.of_type(ErrorMessage) if e.code == "not_ready"]
    assert [m.content for m in sessions[0].history.messages()] == ["Hi there", "Hello there."]
    user = [m for m in client.of_type(TranscriptMessage) if m.role == "user"]
    assert [(m.text, m.final) for m in user] == [("Hi there", True)]


async def test_a_ping_is_answered_on_its_connection_and_never_reaches_the_session(
    serve: Any,
) -> None:
    url, sessions = await serve([], [])
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        client = VoiceClient(ws, MIC)
        await client.start()
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await ws.send_str(json.dumps({"type": "ping", "id": 7}))
        await ws.send_str(json.dumps({"type": "ping"}))
        await client.until(lambda: len(client.of_type(Pong)) == 2, 2)
        assert [p.id for p in client.of_type(Pong)] == [7, None]
        await ws.send_str(json.dumps({"type": "ping", "id": -1}))  # junk: an error
        await barrier(ws, client)
        assert any(
            e.code == "invalid_message" and "id" in e.message for e in client.of_type(ErrorMessage)
        )
        assert len(client.of_type(Pong)) == 2
        assert sessions[0].history.items == []  # nothing reached the conversation
        await client.close()
