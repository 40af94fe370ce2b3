"""The WebSocket transport without a socket (``WebSocketPeer``, ``Outbox``) on virtual
time: what each kind of frame leads to, backpressure, clears and slow clients."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.io.connection import PushAudioInput
from rejoinder.io.protocol import CloseCode
from rejoinder.io.websocket import CloseRequest, Outbox, WebSocketOptions, WebSocketPeer
from rejoinder.testing import ScriptedLLM, ScriptedTTS, advance

from ._client import written


def codes(items: list[Any]) -> list[Any]:
    return [i["code"] if isinstance(i, dict) else i for i in items]


async def test_start_builds_the_connection_and_audio_reaches_the_microphone() -> None:
    peer = WebSocketPeer(remote="127.0.0.1", query={"room": "a"})
    conn = peer.receive_text('{"type": "start", "sample_rate": 16000}')
    assert conn is not None and peer.connection is conn
    assert conn.transport == "websocket" and conn.remote == "127.0.0.1"
    assert conn.query == {"room": "a"}
    assert conn.audio_input.sample_rate == 16000
    peer.receive_bytes(b"\x01\x00\x02")  # an odd byte waits for the next frame
    peer.receive_bytes(b"\x00")
    conn.audio_input.close()
    frames = [f async for f in conn.audio_input]
    assert [list(f.data) for f in frames] == [[1], [2]]
    assert await written(peer.outbox) == []


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        (["{nope"], ["invalid_json", CloseRequest(CloseCode.INVALID_JSON, "")]),
        ([b"\0\0"], ["not_started", CloseRequest(CloseCode.UNSUPPORTED_DATA, "")]),
        (
            ['{"type":"start","sample_rate":5}'],
            ["invalid_message", CloseRequest(CloseCode.POLICY_VIOLATION, "")],
        ),
        (
            ['{"type":"start","sample_rate":16000}', " " * 70000],
            ["too_large", CloseRequest(CloseCode.MESSAGE_TOO_BIG, "")],
        ),
        (['{"type":"played","samples":3}'], ["not_started"]),
        (['{"type":"text","text":"hi"}'], ["not_started"]),
        (['{"type":"hello"}'], ["unknown_type"]),
        (["[]", "{}", '{"type": 3}'], ["invalid_message"] * 3),
        (
            ['{"type":"start","sample_rate":16000}', '{"type":"start","sample_rate":16000}'],
            ["already_started"],
        ),
        (
            ['{"type":"start","sample_rate":16000}', '{"type":"played","samples":"x"}'],
            ["invalid_message"],
        ),
    ],
)
async def test_each_kind_of_junk(frames: list[str | bytes], expected: list[Any]) -> None:
    peer = WebSocketPeer()
    for frame in frames:
        if isinstance(frame, str):
            peer.receive_text(frame)
        else:
            peer.receive_bytes(frame)
    got = codes(await written(peer.outbox))
    got = [CloseRequest(g.code, "") if isinstance(g, CloseRequest) else g for g in got]
    assert got == expected


async def test_after_a_fatal_frame_nothing_more_is_read() -> None:
    peer = WebSocketPeer()
    peer.receive_text("{nope")
    peer.receive_text('{"type":"start","sample_rate":16000}')
    peer.receive_bytes(b"\0\0")
    assert peer.connection is None
    assert len(await written(peer.outbox)) == 2  # the error and the close


async def test_a_microphone_overrun_is_reported_once() -> None:
    peer = WebSocketPeer(WebSocketOptions(max_mic_seconds=0.01))
    peer.receive_text('{"type":"start","sample_rate":16000}')
    for _ in range(5):
        peer.receive_bytes(bytes(320))  # 10 ms each, nobody reads
    assert codes(await written(peer.outbox)) == ["audio_overrun"]
    assert peer.connection is not None
    assert peer.connection.audio_input.dropped_samples == 4 * 160


async def test_a_session_that_cannot_listen_drops_the_microphone_quietly() -> None:
    mic = PushAudioInput(16000, max_seconds=0.01)
    mic.discard()
    assert all(mic.push_pcm(bytes(320)) for _ in range(10))


async def test_a_client_that_reads_nothing_is_dropped() -> None:
    outbox = Outbox(max_messages=3)
    for i in range(5):
        outbox.put_text(json.dumps(i))
    assert outbox.close_request == CloseRequest(CloseCode.SLOW_CLIENT, outbox.close_request.reason)
    assert [await outbox.get() for _ in range(4)][-1] == outbox.close_request


async def test_audio_waits_for_room_and_a_clear_drops_it() -> None:
    outbox = Outbox(max_audio_bytes=4)
    await outbox.put_audio(b"1234")
    waiting = asyncio.create_task(outbox.put_audio(b"5678"))
    await advance(1)
    assert not waiting.done()  # backpressure: the socket has not taken the first yet
    outbox.put_text('{"type":"clear"}')
    outbox.clear_audio()  # a barge-in: neither the queued nor the waiting audio goes out
    await asyncio.wait_for(waiting, 1)
    assert await written(outbox) == [{"type": "clear"}]


async def test_audio_in_order_with_messages_and_the_close_last() -> None:
    outbox = Outbox()
    await outbox.put_audio(b"ab")
    outbox.put_text('{"type":"clear"}')
    await outbox.put_audio(b"cd")
    outbox.close(CloseCode.NORMAL, "bye")
    outbox.put_text('{"type":"late"}')  # after the close: dropped
    items = await written(outbox)
    assert items == [b"ab", {"type": "clear"}, b"cd", CloseRequest(CloseCode.NORMAL, "bye")]


async def test_serve_sends_ready_at_the_tts_rate_and_a_state_snapshot() -> None:
    peer = WebSocketPeer()
    conn = peer.receive_text('{"type":"start","sample_rate":16000}')
    assert conn is not None

    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Hi."]]), tts=ScriptedTTS(sample_rate=16000), user_away_timeout=None
    )
    serving = asyncio.create_task(conn.serve(session, rj.Agent(instructions="t")))
    await advance(0.1)
    conn.client_left()
    await asyncio.wait_for(serving, 10)
    items = await written(peer.outbox)
    assert items[:4] == [
        {"type": "ready", "sample_rate": 16000, "protocol": 1},
        {"type": "agent_state", "state": "initializing"},
        {"type": "user_state", "state": "listening"},
        {"type": "agent_state", "state": "listening"},
    ]
    assert session.input.audio is None  # no VAD/STT: it does not listen
