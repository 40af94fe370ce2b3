"""Resuming a session whose model speaks for itself (OpenAI Realtime, over its loopback
server), through the real WebSocket transport on 127.0.0.1, in real time: the reply a drop
cut is truncated at what the client reported playing, as for a barge-in, and the model is
asked to say the part the user missed; that answer is held while nobody listens and plays
to the client that resumes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.protocol import AgentStateMessage, TranscriptMessage
from rejoinder.providers.openai import Realtime
from rejoinder.testing import OpenAIRealtimeServer

from ._client import VoiceClient
from .test_resume import MIC, cut_the_cable, start, until

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

FIRST = "Once upon a time there was a shop that sold every kind of lamp you can think of."
REST = "every kind of lamp you can think of."


class Greeter(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You run a lamp shop.")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Tell the story of the shop.")


@pytest.fixture
async def oai() -> AsyncIterator[OpenAIRealtimeServer]:
    async with OpenAIRealtimeServer() as server:
        yield server


async def test_the_part_a_drop_cut_is_asked_of_the_model_and_heard_on_resume(
    oai: OpenAIRealtimeServer,
) -> None:
    sessions: list[rj.AgentSession[Any]] = []
    conns: list[Connection] = []

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=Realtime(api_key="sk-test", base_url=oai.base_url), user_away_timeout=None
        )
        sessions.append(session)
        conns.append(conn)
        await conn.serve(session, Greeter())

    server = TestServer(create_app(entrypoint, webrtc=False, page=False), host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("/ws"))
        async with aiohttp.ClientSession() as http:
            first = VoiceClient(await http.ws_connect(url), MIC, jitter=0.05)
            ready = await start(first)
            await oai.wait_for("response.create")
            await oai.response_created("resp_1")
            await oai.transcript("resp_1", "item_a", FIRST)
            await oai.audio("resp_1", "item_a", seconds=3.0)
            await oai.audio_done("resp_1", "item_a")
            await oai.response_done("resp_1")
            await first.wait_for(
                lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking", 5
            )
            await asyncio.sleep(0.6)  # hear some of it
            await cut_the_cable(first)
            session = sessions[0]
            await until(lambda: conns[0].detached, 2)

            truncate = await oai.wait_for("conversation.item.truncate")
            asked = await oai.wait_for("response.create", count=2)
            await until(lambda: session.agent_state == "thinking", 2)
            heard = [m for m in session.history.messages() if m.role == "assistant"]
            assert len(heard) == 1 and heard[0].interrupted
            missed = FIRST[len(heard[0].content) :].strip()

            # the model answers while nobody listens: held, never heard
            await oai.response_created("resp_2")
            await oai.transcript("resp_2", "item_b", REST)
            await oai.audio("resp_2", "item_b", seconds=1.0)
            await oai.audio_done("resp_2", "item_b")
            await oai.response_done("resp_2")
            await asyncio.sleep(0.3)
            assert session.agent_state == "thinking"

            second = VoiceClient(await http.ws_connect(url), MIC, jitter=0.05)
            again = await start(second, resume=ready.resume_token)
            rest = await second.wait_for(
                lambda m: (
                    isinstance(m, TranscriptMessage)
                    and m.role == "agent"
                    and m.final
                    and not m.interrupted
                ),
                10,
            )
            await second.until(lambda: second.states()[-1][1] == "listening", 5)
            await second.close()
    finally:
        await server.close()

    assert truncate["item_id"] == "item_a"
    assert 300 <= truncate["audio_end_ms"] <= 2000, truncate
    instructions = asked["response"]["instructions"]
    assert "did not hear" in instructions and instructions.endswith(missed), instructions
    assert missed and not FIRST.startswith(missed)
    assert again.resumed is True
    assert isinstance(rest, TranscriptMessage) and rest.text == REST
    assert [s for _, s in second.states()] == ["thinking", "speaking", "listening"]
    assert second.played >= 0.9 * 24000
    assert [(m.role, m.interrupted) for m in session.history.messages()] == [
        ("assistant", True),
        ("assistant", False),
    ]
