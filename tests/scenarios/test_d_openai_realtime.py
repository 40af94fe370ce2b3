"""A session on the OpenAI Realtime API client over a real loopback WebSocket: the same
obligation rules as GPT-Live, plus the client-side barge-in a realtime (not duplex)
model needs (stop playback, truncate what was not heard)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

import rejoinder as rj
from rejoinder.providers.openai import Realtime
from rejoinder.testing import OpenAIRealtimeServer, now

from .realtime_rig import Rig, start_rig

pytestmark = pytest.mark.looptime(noop_cycles=2000)


class Shop(rj.Agent):
    def __init__(self, *, reply_required: bool = True) -> None:
        super().__init__(instructions="You run a shop.")
        self.reply_required = reply_required

    @rj.function_tool
    async def stock(self, item: str) -> rj.ToolResult:
        """How many of an item are in stock.

        Args:
            item: the item name
        """
        return rj.ToolResult(f"3 {item}s", reply_required=self.reply_required)


@pytest.fixture
async def server() -> AsyncIterator[OpenAIRealtimeServer]:
    async with OpenAIRealtimeServer() as srv:
        yield srv


@pytest.fixture
async def rigs() -> AsyncIterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for rig in made:
        await rig.aclose()


async def realtime(
    server: OpenAIRealtimeServer, rigs: list[Rig], agent: rj.Agent | None = None
) -> Rig:
    rig = await start_rig(Realtime(api_key="sk-test", base_url=server.base_url), agent or Shop())
    rigs.append(rig)
    return rig


async def user_says(server: OpenAIRealtimeServer, rig: Rig, text: str) -> None:
    await server.speech_started()
    await rig.settle(0.5)
    await server.speech_stopped(500)
    await server.committed()
    await server.input_transcription("item_user", text)
    await rig.settle()


async def spoken(
    server: OpenAIRealtimeServer, rig: Rig, resp: str, text: str, seconds: float = 0.5
) -> None:
    await server.response_created(resp)
    await server.transcript(resp, f"item_{resp}", text)
    await server.audio(resp, f"item_{resp}", seconds=seconds)
    await server.audio_done(resp, f"item_{resp}")
    await server.response_done(resp)
    await rig.settle(seconds + 0.1)


async def test_spoken_response(server: OpenAIRealtimeServer, rigs: list[Rig]) -> None:
    rig = await realtime(server, rigs)
    await user_says(server, rig, "Hello?")
    t0 = now()
    await spoken(server, rig, "resp_1", "Hi, how can I help?")
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.timeline.user_states() == ["listening", "speaking", "listening"]
    assert rig.messages() == [("user", "Hello?"), ("assistant", "Hi, how can I help?")]
    assert rig.owed == 0


async def test_tool_round_trip_one_continuation(
    server: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(server, rigs)
    await user_says(server, rig, "Any apples?")
    t0 = now()
    await server.response_created("resp_1")
    await server.function_call("resp_1", "call_1", "stock", json.dumps({"item": "apple"}))
    await server.response_done("resp_1")
    await server.wait_for("response.create")
    await rig.settle(0.3)
    assert rig.session.agent_state == "thinking"
    await spoken(server, rig, "resp_2", "We have three apples.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    outputs = [
        e
        for e in server.of_type("conversation.item.create")
        if e["item"]["type"] == "function_call_output"
    ]
    assert [o["item"]["output"] for o in outputs] == ["3 apples"]
    assert len(server.of_type("response.create")) == 1
    assert rig.owed == 0


async def test_reply_not_required_means_no_continuation(
    server: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(server, rigs, Shop(reply_required=False))
    await user_says(server, rig, "Note that I want apples.")
    t0 = now()
    await server.response_created("resp_1")
    await server.function_call("resp_1", "call_1", "stock", json.dumps({"item": "apple"}))
    await server.response_done("resp_1")
    await rig.settle(0.5)
    # The client will not ask for a continuation, so nothing is owed.
    assert server.of_type("response.create") == []
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.owed == 0


async def test_barge_in_cuts_playback_and_truncates_what_was_not_heard(
    server: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(server, rigs)
    await user_says(server, rig, "Tell me a story.")
    await server.response_created("resp_1")
    await server.transcript("resp_1", "item_resp_1", "Once upon a time there was a shop.")
    await server.audio("resp_1", "item_resp_1", seconds=2.0)
    await rig.settle(0.6)
    assert rig.session.agent_state == "speaking"
    await server.speech_started(audio_start_ms=3000)
    await rig.settle(0.1)

    assert rig.session.agent_state == "listening"
    assert rig.session.user_state == "speaking"
    truncate = await server.wait_for("conversation.item.truncate")
    assert truncate["item_id"] == "item_resp_1"
    assert truncate["audio_end_ms"] == pytest.approx(600, abs=30)  # heard for 0.6 s
    assert rig.speaker.played_seconds < 1.0
    assistant = [m for m in rig.session.history.messages() if m.role == "assistant"]
    assert assistant[-1].interrupted
    assert assistant[-1].content and len(assistant[-1].content) < len(
        "Once upon a time there was a shop."
    )
    await server.response_done("resp_1", status="cancelled")
    await server.speech_stopped(4000)
    await server.committed("item_user_2")
    await server.input_transcription("item_user_2", "Never mind.")
    await rig.settle(0.5)
    assert rig.session.agent_state == "listening"
    assert rig.owed == 0


async def test_dropped_connection_mid_response(
    server: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(server, rigs)
    await user_says(server, rig, "Any pears?")
    t0 = now()
    await server.response_created("resp_1")
    await rig.settle(0.2)
    await server.drop()
    await server.wait_connected(2)
    await rig.settle(1.0)
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.owed == 0
    seeded = [
        e["item"]
        for e in server.of_type("conversation.item.create")
        if e["item"].get("type") == "message"
    ]
    assert any(item["content"][0]["text"] == "Any pears?" for item in seeded)
    await spoken(server, rig, "resp_2", "No pears, sorry.")
    assert rig.session.agent_state == "listening"
    assert rig.messages()[-1] == ("assistant", "No pears, sorry.")
