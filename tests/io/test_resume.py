"""Resuming a session over a real WebSocket on 127.0.0.1, in real time, with the test kit's
scripted models: a client whose connection drops comes back with the token of its last
``ready`` and finds its session going on (``rejoinder.io.resume``, docs/protocol.md).

The drop is the cable cut (the client's TCP connection aborted, no close frame); the
server notices it at once (a reset), as it would a ping timeout later. Each test is
bounded to a few seconds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.app import RESUME
from rejoinder.io.protocol import (
    AgentStateMessage,
    CloseCode,
    ErrorMessage,
    Ready,
    ToolMessage,
    TranscriptMessage,
    UserStateMessage,
)
from rejoinder.io.resume import ResumeRegistry
from rejoinder.testing import Delay, ScriptedTTS, ToolCall, speech_frame

from ._client import VoiceClient, scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MIC = 16000
LONG = "This answer goes on and on for quite a while, so that it can be cut short."


def tone(seconds: float) -> bytes:
    return speech_frame(seconds, MIC).to_pcm()


@dataclass
class Served:
    url: str
    registry: ResumeRegistry | None
    sessions: list[rj.AgentSession[Any]] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    ended: list[Connection] = field(default_factory=list)
    """Connections whose entry point returned."""
    closed: list[str] = field(default_factory=list)
    """Close reasons of the sessions, as they closed."""

    @property
    def health(self) -> str:
        return self.url.replace("/ws", "/healthz")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(
        make_session: Callable[[], rj.AgentSession[Any]],
        agent: Callable[[], rj.Agent] = lambda: rj.Agent(instructions="test"),
        **app_options: Any,
    ) -> Served:
        async def entrypoint(conn: Connection) -> None:
            session = make_session()
            served.sessions.append(session)
            served.conns.append(conn)
            session.on("close", lambda ev: served.closed.append(ev.reason))
            await conn.serve(session, agent())
            served.ended.append(conn)

        app = create_app(entrypoint, **app_options)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        served = Served(str(server.make_url("/ws")), app[RESUME])
        return served

    yield start
    for server in servers:
        await server.close()


def scripted(replies: list[list[Any]], transcripts: list[str], **tts: Any) -> Any:
    return scripted_session(replies, transcripts, lambda: ScriptedTTS(**tts))


async def start(client: VoiceClient, *, resume: str | None = None) -> Ready:
    """``VoiceClient.start``, with ``resume`` in the start message."""
    message: dict[str, Any] = {"type": "start", "sample_rate": client.mic_rate}
    if resume is not None:
        message["resume"] = resume
    await client.ws.send_str(json.dumps(message))
    client._tasks.append(asyncio.create_task(client._read()))
    ready = await client.wait_for(lambda m: isinstance(m, Ready), 5)
    assert isinstance(ready, Ready)
    client.rate = ready.sample_rate
    client._last_tick = client.now
    client._tasks.append(asyncio.create_task(client._play()))
    client._mic_start()
    return ready


async def goodbye(client: VoiceClient) -> None:
    """Close with 1000 first (``VoiceClient.close`` cancels its microphone first, and a
    frame cut off half way can break the connection before the close frame goes)."""
    await client.ws.close()
    await client.close()


async def cut_the_cable(client: VoiceClient) -> None:
    """The connection breaks: no close frame, the socket is gone."""
    response = client.ws._response
    assert response is not None and response.connection is not None
    response.connection.transport.abort()
    await client.close()


async def refused(url: str, http: aiohttp.ClientSession, token: str) -> tuple[list[Any], int]:
    """A resume the server refuses: the messages it sent and its close code."""
    async with http.ws_connect(url) as ws:
        await ws.send_str(json.dumps({"type": "start", "sample_rate": MIC, "resume": token}))
        got: list[Any] = []
        async with asyncio.timeout(5):
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    got.append(json.loads(msg.data))
        assert ws.close_code is not None
        return got, ws.close_code


def agent_finals(client: VoiceClient) -> list[TranscriptMessage]:
    return [m for m in client.of_type(TranscriptMessage) if m.role == "agent" and m.final]


async def until(condition: Callable[[], bool], within: float) -> None:
    """Poll the server's side (its objects change without a message to wait on)."""
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_ready_names_the_session_and_gives_a_fresh_token(serve: Any) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http, http.ws_connect(served.url) as ws:
        client = VoiceClient(ws, MIC)
        ready = await start(client)
        await client.close()
    assert ready.session_id == served.sessions[0].id
    assert ready.resume_token and len(ready.resume_token) >= 32
    assert ready.resume_grace == 30.0 and ready.resumed is False


async def test_a_drop_mid_reply_keeps_the_session_and_the_rest_is_said_on_resume(
    serve: Any,
) -> None:
    served = await serve(scripted([[LONG]], ["Tell me."], seconds_per_char=0.02))
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        ready = await start(first)
        await first.speak(tone(0.5))
        await first.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await asyncio.sleep(0.6)  # hear some of it
        heard_samples = first.played
        await cut_the_cable(first)
        session, conn = served.sessions[0], served.conns[0]
        await until(lambda: conn.detached, 2)
        # nobody listens: not speaking, and the rest of the reply is owed
        await until(lambda: session.agent_state == "thinking", 2)
        heard = [m for m in session.history.messages() if m.role == "assistant"]
        assert len(heard) == 1 and heard[0].interrupted and LONG.startswith(heard[0].content)
        await asyncio.sleep(0.2)
        assert session.agent_state == "thinking" and not served.closed

        began = asyncio.get_running_loop().time()
        second = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        again = await start(second, resume=ready.resume_token)
        resumed_in = asyncio.get_running_loop().time() - began
        assert again.resumed is True and again.session_id == ready.session_id
        assert again.resume_token not in (None, ready.resume_token)
        rest = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and not m.interrupted, 10
        )
        await second.until(lambda: second.states()[-1][1] == "listening", 5)
        await second.close()

    assert resumed_in < 0.5
    assert isinstance(rest, TranscriptMessage) and not rest.interrupted
    said = heard[0].content.split() + rest.text.split()
    assert said == LONG.split()  # what was heard, then the words not heard
    # the client that dropped had interim text: its final comes first after the snapshot
    kinds = [type(m).__name__ for _, m in second.messages][:4]
    assert kinds == ["Ready", "AgentStateMessage", "UserStateMessage", "TranscriptMessage"]
    assert second.messages[3][1] == TranscriptMessage(
        role="agent", text=heard[0].content, final=True, interrupted=True
    )
    states = [s for _, s in second.states()]
    assert states == ["thinking", "speaking", "listening"]
    # the rest was heard from the new client's own zero: speaking followed its reports
    spoke_at = next(t for t, s in second.states() if s == "speaking")
    first_heard = next(r.at for r in second.reports if r.samples > 0)
    assert first_heard <= spoke_at
    history = [(m.role, m.interrupted) for m in served.sessions[0].history.messages()]
    assert history == [("user", False), ("assistant", True), ("assistant", False)]
    assert 0.3 < heard_samples / 24000 < 1.2


@rj.function_tool
async def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    await asyncio.sleep(1.0)
    return f"{city} is sunny"


async def test_a_reply_still_being_generated_stops_being_heard_at_the_drop(
    serve: Any,
) -> None:
    """The model pauses mid-reply (a slow stream) when the client drops: the reply stays
    owed, but from the drop on nobody hears it, so the agent is thinking, not speaking,
    for the rest of its generation (it used to stay speaking until the reply closed)."""
    reply = ["The first part of the answer is heard.", Delay(3.0), " The rest comes later."]
    served = await serve(scripted([reply], ["Tell me."], seconds_per_char=0.02))
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        await start(first)
        await first.speak(tone(0.5))
        await first.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
        )
        await asyncio.sleep(0.3)  # hear some of it; the model is in its 3 s pause
        session, conn = served.sessions[0], served.conns[0]
        assert session.agent_state == "speaking"
        dropped = asyncio.get_running_loop().time()
        await cut_the_cable(first)
        await until(lambda: conn.detached, 2)
        await until(lambda: session.agent_state == "thinking", 0.5)
        # well before the generation's pause ends
        assert asyncio.get_running_loop().time() - dropped < 1.0


async def test_a_drop_during_a_tool_call_the_answer_plays_after_resume(serve: Any) -> None:
    served = await serve(
        scripted(
            [["Let me look.", ToolCall("lookup", {"city": "Oslo"})], ["Oslo is sunny."]],
            [],
            seconds_per_char=0.02,
        ),
        agent=lambda: rj.Agent(instructions="test", tools=[lookup]),
    )
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        ready = await start(first)
        await first.wait_for(
            lambda m: isinstance(m, AgentStateMessage) and m.state == "listening", 5
        )
        await first.ws.send_str(json.dumps({"type": "text", "text": "Weather in Oslo?"}))
        await first.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and m.text == "Let me look.", 5
        )
        tool = first.of_type(ToolMessage)
        assert [(m.name, m.status) for m in tool] == [("lookup", "started")]
        await cut_the_cable(first)
        session = served.sessions[0]
        await until(lambda: served.conns[0].detached, 2)
        assert session.agent_state == "thinking"  # the tool still runs for the user
        # the tool returns and its answer is produced while nobody listens: held
        await until(
            lambda: any(isinstance(i, rj.FunctionCallOutput) for i in session.history.items), 3
        )
        await asyncio.sleep(0.6)  # longer than the answer would take to play
        assert session.agent_state == "thinking"
        assert [m.content for m in session.history.messages() if m.role == "assistant"] == [
            "Let me look."
        ]

        second = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        again = await start(second, resume=ready.resume_token)
        answer = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.final and m.role == "agent", 5
        )
        await second.until(lambda: second.states()[-1][1] == "listening", 5)
        await second.close()

    assert again.resumed and isinstance(answer, TranscriptMessage)
    assert answer.text == "Oslo is sunny." and not answer.interrupted
    assert [s for _, s in second.states()] == ["thinking", "speaking", "listening"]
    assert second.received > 0 and second.played >= second.received
    assert [m.content for m in served.sessions[0].history.messages()] == [
        "Weather in Oslo?",
        "Let me look.",
        "Oslo is sunny.",
    ]


async def test_a_client_that_does_not_come_back_is_refused_and_its_session_closed(
    serve: Any,
) -> None:
    served = await serve(scripted([], []), resume_grace=0.3)
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        assert ready.resume_grace == 0.3
        await cut_the_cable(first)
        await until(lambda: bool(served.closed), 3)
        assert served.closed == ["the client did not come back within 0.3 s"]
        await until(lambda: served.ended == served.conns, 3)
        assert ready.resume_token is not None
        got, code = await refused(served.url, http, ready.resume_token)
        async with http.get(served.health) as health:
            live = (await health.json())["sessions"]
    assert code == CloseCode.RESUME_FAILED == 4004
    assert [m["type"] for m in got] == ["error"] and got[0]["code"] == "resume_failed"
    assert live == 0


async def test_a_token_works_once_and_of_two_racing_resumes_one_wins(serve: Any) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        assert ready.resume_token is not None
        await cut_the_cable(first)
        await until(lambda: served.conns[0].detached, 2)

        async def resume() -> tuple[str, Any]:
            ws = await http.ws_connect(served.url)
            start_message = {"type": "start", "sample_rate": MIC, "resume": ready.resume_token}
            await ws.send_str(json.dumps(start_message))
            msg = await ws.receive(timeout=5)
            return json.loads(msg.data)["type"], ws

        results = await asyncio.gather(resume(), resume())
        kinds = sorted(kind for kind, _ in results)
        loser = next(ws for kind, ws in results if kind == "error")
        winner = next(ws for kind, ws in results if kind == "ready")
        await loser.receive(timeout=5)  # its close
        assert loser.close_code == CloseCode.RESUME_FAILED
        # used: a third try is refused, and the session goes on with the winner
        _, code = await refused(served.url, http, ready.resume_token)
        assert code == CloseCode.RESUME_FAILED
        assert not served.closed and served.conns[0].link is not None
        await winner.close()
    assert kinds == ["error", "ready"]
    await until(lambda: bool(served.closed), 2)
    assert served.closed == ["client left"]  # the winner's goodbye ended it


async def test_a_goodbye_ends_the_session_at_once(serve: Any) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(served.url) as ws:
            client = VoiceClient(ws, MIC)
            ready = await start(client)
            await goodbye(client)
        began = asyncio.get_running_loop().time()
        await until(lambda: bool(served.closed), 2)
        ended_in = asyncio.get_running_loop().time() - began
        assert ready.resume_token is not None
        _, code = await refused(served.url, http, ready.resume_token)
    assert served.closed == ["client left"] and ended_in < 0.5
    assert code == CloseCode.RESUME_FAILED
    assert served.registry is not None and served.registry.detached == 0


@pytest.mark.parametrize(
    ("token", "code", "error"),
    [
        ("", CloseCode.POLICY_VIOLATION, "invalid_message"),
        ("x" * 300, CloseCode.POLICY_VIOLATION, "invalid_message"),
        (12345, CloseCode.POLICY_VIOLATION, "invalid_message"),
        ("not-a-token-of-ours", CloseCode.RESUME_FAILED, "resume_failed"),
        ("../../etc/passwd\u0000", CloseCode.RESUME_FAILED, "resume_failed"),
    ],
)
async def test_garbage_tokens_are_refused(serve: Any, token: Any, code: int, error: str) -> None:
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http:
        got, closed_with = await refused(served.url, http, token)
    assert closed_with == code and got[-1]["code"] == error
    assert served.sessions == []


async def test_with_resuming_off_ready_has_no_token_and_a_resume_is_refused(serve: Any) -> None:
    served = await serve(scripted([], []), resume_grace=0)
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        await cut_the_cable(first)
        await until(lambda: bool(served.closed), 2)  # a drop ends it, as before
        got, code = await refused(served.url, http, "anything")
    assert served.registry is None
    assert ready.resume_token is None and ready.session_id is None and ready.resumed is None
    assert code == CloseCode.RESUME_FAILED and "does not resume" in got[0]["message"]


async def test_a_client_back_before_its_drop_was_seen_takes_the_session_over(
    serve: Any,
) -> None:
    served = await serve(scripted([["Hello again."]], ["Hi."], seconds_per_char=0.02))
    async with aiohttp.ClientSession() as http:
        old = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(old)
        new = VoiceClient(await http.ws_connect(served.url), MIC, jitter=0.05)
        again = await start(new, resume=ready.resume_token)
        await old.until(lambda: old.ws.closed, 2)
        await new.speak(tone(0.5))
        answer = await new.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        await goodbye(new)
        await old.close()
        await until(lambda: bool(served.closed), 2)
    assert again.resumed and old.close_code == CloseCode.RESUMED == 4005
    assert isinstance(answer, TranscriptMessage) and answer.text == "Hello again."
    assert not any(isinstance(m, TranscriptMessage) for m in old.of_type(TranscriptMessage))
    assert len(served.sessions) == 1 and served.closed == ["client left"]


async def test_a_resume_passes_a_full_server_when_its_url_names_the_token(serve: Any) -> None:
    served = await serve(scripted([], []), max_sessions=1)
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        await cut_the_cable(first)
        await until(lambda: served.conns[0].detached, 2)
        with pytest.raises(aiohttp.WSServerHandshakeError) as full:
            await http.ws_connect(served.url)  # its place is still taken
        url = f"{served.url}?resume={ready.resume_token}"
        second = VoiceClient(await http.ws_connect(url), MIC)
        again = await start(second, resume=ready.resume_token)
        await second.close()
    assert full.value.status == 503
    assert again.resumed and len(served.sessions) == 1


async def test_the_microphone_of_a_resumed_client_at_another_rate_is_heard(
    serve: Any,
) -> None:
    served = await serve(scripted([["Hello again."]], ["Hi."], seconds_per_char=0.02))
    async with aiohttp.ClientSession() as http:
        first = VoiceClient(await http.ws_connect(served.url), MIC)
        ready = await start(first)
        await cut_the_cable(first)
        await until(lambda: served.conns[0].detached, 2)
        second = VoiceClient(await http.ws_connect(served.url), 48000, jitter=0.05)
        await start(second, resume=ready.resume_token)
        await second.speak(speech_frame(0.5, 48000).to_pcm())
        user = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "user" and m.final, 5
        )
        answer = await second.wait_for(
            lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 5
        )
        await second.close()
    assert isinstance(user, TranscriptMessage) and user.text == "Hi."
    assert isinstance(answer, TranscriptMessage) and answer.text == "Hello again."
    assert served.conns[0].audio_input.sample_rate == MIC
    assert any(
        isinstance(m, UserStateMessage) and m.state == "speaking" for _, m in second.messages
    )
    assert not second.of_type(ErrorMessage)


@pytest.mark.parametrize(("code", "ends"), [(1000, True), (1001, False), (4000, False)])
async def test_only_the_clients_close_with_1000_ends_the_session(
    serve: Any, code: int, ends: bool
) -> None:
    """1001 is a page going away (a reload may resume); an application's code is no
    goodbye either. (A close frame without a code, a browser's ``close()``, is one: see
    test_resume_core.)"""
    served = await serve(scripted([], []))
    async with aiohttp.ClientSession() as http, http.ws_connect(served.url) as ws:
        client = VoiceClient(ws, MIC)
        await start(client)
        await ws.close(code=code)
        await client.close()
    conn = served.conns[0]
    await until(lambda: conn.left or conn.detached, 2)
    assert conn.left is ends and conn.detached is not ends
