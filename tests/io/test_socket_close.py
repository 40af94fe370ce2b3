"""A socket the server closes is closed with a handshake, on a real socket on 127.0.0.1:
the server sends its close frame and waits for the client's before it drops the TCP
connection, even while the client is still streaming its microphone.

Closing the connection at once (what aiohttp does when its close races a waiting read)
leaves the client's next frames to hit a closed socket. The kernel answers them with a
reset, and a browser that was still sending reports 1006, a drop, instead of the 1000
ahead of it: the SDK then tries to resume a session that has ended. Here a client that
keeps streaming and answers the close frame late must see no reset, and its close must
complete with the server's code: on /ws (both hosts) and on a phone media stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.asgi import create_asgi_app
from rejoinder.io.protocol import CloseCode
from rejoinder.io.socket_loop import CLOSE_HANDSHAKE_TIMEOUT
from rejoinder.testing import ScriptedLLM, ScriptedSTT, ScriptedVAD

from .test_asgi_server import uvicorn_serving

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(20)]

MIC_RATE = 16000
PCM_FRAME = bytes(2 * MIC_RATE // 100)  # 10 ms of silence
STREAM_SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
MULAW_FRAME = json.dumps(
    {
        "event": "media",
        "streamSid": STREAM_SID,
        "media": {"track": "inbound", "payload": base64.b64encode(b"\xff" * 160).decode()},
    }
)
TWILIO_START = [
    json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}),
    json.dumps(
        {
            "event": "start",
            "sequenceNumber": "1",
            "streamSid": STREAM_SID,
            "start": {
                "accountSid": "AC" + "0" * 32,
                "streamSid": STREAM_SID,
                "callSid": "CA" + "1" * 32,
                "tracks": ["inbound"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                "customParameters": {},
            },
        }
    ),
]


def hanging_up(goodbye: asyncio.Event) -> Callable[[Connection], Awaitable[None]]:
    """An entry point whose agent ends its session once ``goodbye`` is set."""

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[None] = rj.AgentSession(
            llm=ScriptedLLM([]), vad=ScriptedVAD(), stt=ScriptedSTT([]), user_away_timeout=None
        )
        serving = asyncio.ensure_future(conn.serve(session, rj.Agent(instructions="Bye.")))
        await goodbye.wait()
        await session.aclose(reason="the agent said goodbye")
        await serving

    return entrypoint


@contextlib.asynccontextmanager
async def served(host: str, goodbye: asyncio.Event) -> AsyncIterator[str]:
    """The app on ``host``; yields the base ws:// URL."""
    if host == "asgi":
        async with uvicorn_serving(create_asgi_app(hanging_up(goodbye), page=False)) as port:
            yield f"ws://127.0.0.1:{port}"
        return
    app = create_app(hanging_up(goodbye), webrtc=False, page=False, telephony=("twilio",))
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"ws://127.0.0.1:{server.port}"
    finally:
        await server.close()


async def stream(send: Callable[[], Awaitable[None]], failures: list[BaseException]) -> None:
    """A busy microphone: a frame every 5 ms, until a send fails."""
    while True:
        try:
            await send()
        except (ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
            failures.append(exc)
            return
        await asyncio.sleep(0.005)


@pytest.mark.parametrize(
    ("host", "endpoint"), [("aiohttp", "/ws"), ("asgi", "/ws"), ("aiohttp", "/twilio")]
)
async def test_the_server_waits_for_the_clients_close_frame_while_it_still_streams(
    host: str, endpoint: str
) -> None:
    goodbye = asyncio.Event()
    async with (
        served(host, goodbye) as base,
        aiohttp.ClientSession() as http,
        http.ws_connect(base + endpoint, autoclose=False) as ws,
    ):
        send: Callable[[], Awaitable[Any]]
        if endpoint == "/ws":
            await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC_RATE}))
            ready = json.loads((await ws.receive(timeout=10)).data)
            assert ready["type"] == "ready"
            send = lambda: ws.send_bytes(PCM_FRAME)  # noqa: E731
        else:
            for message in TWILIO_START:
                await ws.send_str(message)
            send = lambda: ws.send_str(MULAW_FRAME)  # noqa: E731
        failures: list[BaseException] = []
        streaming = asyncio.create_task(stream(send, failures))
        await asyncio.sleep(0.1)
        goodbye.set()
        while (message := await ws.receive(timeout=5)).type != aiohttp.WSMsgType.CLOSE:
            assert message.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY)
        assert message.data == CloseCode.NORMAL, message
        await asyncio.sleep(0.3)  # a slow client: it streams on before it answers
        streaming.cancel()
        assert failures == []  # no reset: the server still reads
        await ws.close()
    assert ws.close_code == CloseCode.NORMAL


async def test_a_client_that_never_answers_the_close_frame_is_dropped_after_the_bound() -> None:
    goodbye = asyncio.Event()
    async with (
        served("aiohttp", goodbye) as base,
        aiohttp.ClientSession() as http,
        http.ws_connect(base + "/ws", autoclose=False) as ws,
    ):
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC_RATE}))
        assert json.loads((await ws.receive(timeout=10)).data)["type"] == "ready"
        failures: list[BaseException] = []
        streaming = asyncio.create_task(stream(lambda: ws.send_bytes(PCM_FRAME), failures))
        goodbye.set()
        while (await ws.receive(timeout=5)).type != aiohttp.WSMsgType.CLOSE:
            pass
        closed_at = asyncio.get_running_loop().time()
        await asyncio.wait_for(streaming, CLOSE_HANDSHAKE_TIMEOUT + 2)
        waited = asyncio.get_running_loop().time() - closed_at
        assert failures, "the connection was never dropped"
        assert CLOSE_HANDSHAKE_TIMEOUT - 0.2 < waited < CLOSE_HANDSHAKE_TIMEOUT + 1.5
