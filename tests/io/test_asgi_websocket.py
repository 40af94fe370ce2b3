"""The client protocol (``GET /ws``, protocol v1) on the ASGI host and on aiohttp, over real
sockets on 127.0.0.1 in real time with the test kit's scripted models: a spoken turn
(start, audio in, agent audio out, played reports, states), close codes and reasons, junk
and oversize frames, the start timeout and a client that reads nothing. Every test runs
on both hosts and expects exactly the same from each."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.io.protocol import (
    CloseCode,
    ErrorMessage,
    TranscriptMessage,
)
from rejoinder.io.websocket import WebSocketOptions
from rejoinder.testing import ScriptedTTS, speech_frame

from ._client import VoiceClient, scripted_session
from .test_asgi_server import Start, host

__all__ = ["host"]

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MIC = 16000
REPLY = "Hello there."


def tone(seconds: float) -> bytes:
    return speech_frame(seconds, MIC).to_pcm()


def serving(
    sessions: list[rj.AgentSession[Any]], replies: list[list[Any]], heard: list[str]
) -> Any:
    make = scripted_session(replies, heard, lambda: ScriptedTTS(seconds_per_char=0.03))

    async def entrypoint(conn: Connection) -> None:
        session = make()
        sessions.append(session)
        await conn.serve(session, rj.Agent(instructions="test"))

    return entrypoint


def final_agent(m: Any) -> bool:
    return isinstance(m, TranscriptMessage) and m.role == "agent" and m.final


async def test_a_spoken_turn_end_to_end(host: Start) -> None:
    sessions: list[rj.AgentSession[Any]] = []
    served = await host(serving(sessions, [[REPLY]], ["Hi."]))
    async with aiohttp.ClientSession() as http, http.ws_connect(served.ws + "/ws") as ws:
        client = VoiceClient(ws, MIC, jitter=0.25)
        ready = await client.start()
        assert ready.protocol == 1 and ready.sample_rate == 24000
        await client.silence(0.2)
        await client.speak(tone(0.6))
        await client.silence(0.5)
        final = await client.wait_for(final_agent, 10)
        assert isinstance(final, TranscriptMessage)
        assert final.text == REPLY and not final.interrupted
        await client.until(lambda: client.states()[-1][1] == "listening", 5)
        await client.close()

    states = [s for _, s in client.states()]
    assert states == ["initializing", "listening", "thinking", "speaking", "listening"]
    # all the agent's audio arrived as binary frames, and speaking followed the client's
    # played reports, not the sending
    assert client.received == round(len(REPLY) * 0.03 * 50) * 480
    spoke_at = next(t for t, s in client.states() if s == "speaking")
    first_heard = next(r.at for r in client.reports if r.samples > 0)
    assert client.audio_arrivals[0][0] < first_heard < spoke_at
    last_heard = next(r.at for r in client.reports if r.samples >= client.received)
    assert last_heard < client.states()[-1][0]
    user = [m.text for m in client.of_type(TranscriptMessage) if m.role == "user" and m.final]
    assert user == ["Hi."]
    history = [(m.role, m.content) for m in sessions[0].history.messages()]
    assert history == [("user", "Hi."), ("assistant", REPLY)]


async def frames_and_close(
    url: str, *frames: str | bytes, within: float = 5.0
) -> tuple[list[dict[str, Any]], int | None, str]:
    """Send ``frames``, then read until the server closes: the JSON messages, the close
    code and the close reason."""
    got: list[dict[str, Any]] = []
    reason = ""
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        for frame in frames:
            if isinstance(frame, str):
                await ws.send_str(frame)
            else:
                await ws.send_bytes(frame)
        async with asyncio.timeout(within):
            while True:
                msg = await ws.receive()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    got.append(json.loads(msg.data))
                elif msg.type == aiohttp.WSMsgType.CLOSE:
                    reason = str(msg.extra or "")
                    break
                elif msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                    break
        return got, ws.close_code, reason


START = '{"type": "start", "sample_rate": 16000}'


@pytest.mark.parametrize(
    ("frames", "code", "reason", "error"),
    [
        (["not json {"], CloseCode.INVALID_JSON, None, "invalid_json"),
        (
            [b"\x00\x01" * 10],
            CloseCode.UNSUPPORTED_DATA,
            "binary audio before start (send start with the sample rate first)",
            "not_started",
        ),
        (['{"type": "start", "sample_rate": "fast"}'], CloseCode.POLICY_VIOLATION, None, None),
        ([START, b"\0" * 5000], CloseCode.MESSAGE_TOO_BIG, "", None),  # binary, over the cap
        ([" " * 5000], CloseCode.MESSAGE_TOO_BIG, "", None),  # text, over the cap
        (["é" * 2100], CloseCode.MESSAGE_TOO_BIG, "", None),  # 4200 UTF-8 bytes
    ],
    ids=["not-json", "audio-before-start", "bad-start", "big-binary", "big-text", "big-utf8"],
)
async def test_junk_gets_the_same_error_close_code_and_reason(
    host: Start, frames: list[str | bytes], code: int, reason: str | None, error: str | None
) -> None:
    served = await host(
        serving([], [[REPLY]], ["Hi."]), websocket=WebSocketOptions(max_frame_bytes=4096)
    )
    got, closed_with, said = await frames_and_close(served.ws + "/ws", *frames)
    assert closed_with == code
    if reason is not None:
        assert said == reason
    if error is not None:
        assert got[-1]["type"] == "error" and got[-1]["code"] == error
    if code == CloseCode.POLICY_VIOLATION:
        assert got[-1]["code"] == "invalid_message"
    if code != CloseCode.MESSAGE_TOO_BIG:  # the close says what the error event said
        assert said == got[-1]["message"][:120] and said
    else:
        assert all(m["type"] != "error" for m in got)  # closed by the host, as aiohttp does


async def test_recoverable_mistakes_get_an_error_each_and_the_socket_stays(host: Start) -> None:
    served = await host(serving([], [[REPLY]], ["Hi."]))
    async with aiohttp.ClientSession() as http, http.ws_connect(served.ws + "/ws") as ws:
        await ws.send_str('{"type": "played", "samples": 1}')
        await ws.send_str("[1, 2]")
        await ws.send_str(START)
        await ws.send_str('{"type": "wave"}')
        kinds: list[tuple[str, str | None]] = []
        async with asyncio.timeout(5):
            while not {("error", "unknown_type"), ("ready", None)} <= set(kinds):
                message = json.loads(await ws.receive_str())
                kinds.append((message["type"], message.get("code")))
        assert kinds[:2] == [("error", "not_started"), ("error", "invalid_message")]
        assert ("ready", None) in kinds
        assert not ws.closed


async def test_a_start_that_never_comes_times_out(host: Start) -> None:
    served = await host(serving([], [], []), websocket=WebSocketOptions(start_timeout=0.3))
    began = asyncio.get_running_loop().time()
    got, code, reason = await frames_and_close(served.ws + "/ws")
    assert code == CloseCode.START_TIMEOUT and reason == "no start message"
    assert got == [{"type": "error", "code": "start_timeout", "message": "no start message"}]
    assert 0.25 < asyncio.get_running_loop().time() - began < 3.0


async def test_the_close_says_how_the_session_ended(host: Start) -> None:
    async def entrypoint(conn: Connection) -> None:
        if conn.query.get("fail"):
            raise RuntimeError("boom")

    served = await host(entrypoint)
    got, code, reason = await frames_and_close(served.ws + "/ws?x=1&x=2", START)
    assert (code, reason, got) == (CloseCode.NORMAL, "session ended", [])
    got, code, reason = await frames_and_close(served.ws + "/ws?fail=1", START)
    assert code == CloseCode.INTERNAL_ERROR
    assert reason == "the agent failed: RuntimeError('boom')"
    assert got == [{"type": "error", "code": "internal_error", "message": reason}]


async def test_the_query_and_remote_reach_the_connection(host: Start) -> None:
    seen: list[Connection] = []

    async def entrypoint(conn: Connection) -> None:
        seen.append(conn)

    served = await host(entrypoint)
    await frames_and_close(served.ws + "/ws?room=a&room=b&x=", START)
    (conn,) = seen
    assert conn.transport == "websocket" and conn.remote == "127.0.0.1"
    assert conn.query == {"room": "a", "x": ""}  # the first of each, blanks kept


async def test_a_client_that_reads_nothing_is_dropped_when_its_outbox_is_full(
    host: Start,
) -> None:
    async def entrypoint(conn: Connection) -> None:
        for i in range(200):  # faster than any socket: the bounded outbox overflows
            conn.send(ErrorMessage(code="test", message=f"{i}"))
        await conn.wait_left()

    served = await host(entrypoint, websocket=WebSocketOptions(max_queued_messages=50))
    got, code, reason = await frames_and_close(served.ws + "/ws", START)
    assert code == CloseCode.SLOW_CLIENT and reason == "the client does not read its messages"
    assert len(got) == 50 and got[0]["message"] == "0"
