"""A session on the OpenAI Realtime API client over a real loopback WebSocket: the same
obligation rules as GPT-Live, plus the client-side barge-in a realtime (not duplex)
model needs (stop playback, truncate what was not heard)."""

from __future__ import annotations

import json

import pytest

from rejoinder.testing import OpenAIRealtimeServer, now

from .realtime_rig import Rig, Shop, realtime, spoken, user_says

pytestmark = pytest.mark.looptime(noop_cycles=2000)


async def test_spoken_response(oai: OpenAIRealtimeServer, rigs: list[Rig]) -> None:
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Hello?")
    t0 = now()
    await spoken(oai, rig, "resp_1", "Hi, how can I help?")
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.timeline.user_states() == ["listening", "speaking", "listening"]
    assert rig.messages() == [("user", "Hello?"), ("assistant", "Hi, how can I help?")]
    assert rig.owed == 0


async def test_tool_round_trip_one_continuation(oai: OpenAIRealtimeServer, rigs: list[Rig]) -> None:
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Any apples?")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.function_call("resp_1", "call_1", "stock", json.dumps({"item": "apple"}))
    await oai.response_done("resp_1")
    await oai.wait_for("response.create")
    await rig.settle(0.3)
    assert rig.session.agent_state == "thinking"
    await spoken(oai, rig, "resp_2", "We have three apples.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    outputs = [
        e
        for e in oai.of_type("conversation.item.create")
        if e["item"]["type"] == "function_call_output"
    ]
    assert [o["item"]["output"] for o in outputs] == ["3 apples"]
    assert len(oai.of_type("response.create")) == 1
    assert rig.owed == 0


async def test_reply_not_required_means_no_continuation(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(oai, rigs, Shop(reply_required=False))
    await user_says(oai, rig, "Note that I want apples.")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.function_call("resp_1", "call_1", "stock", json.dumps({"item": "apple"}))
    await oai.response_done("resp_1")
    await rig.settle(0.5)
    # The client will not ask for a continuation, so nothing is owed.
    assert oai.of_type("response.create") == []
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.owed == 0


async def test_barge_in_cuts_playback_and_truncates_what_was_not_heard(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Tell me a story.")
    await oai.response_created("resp_1")
    await oai.transcript("resp_1", "item_resp_1", "Once upon a time there was a shop.")
    await oai.audio("resp_1", "item_resp_1", seconds=2.0)
    await rig.settle(0.6)
    assert rig.session.agent_state == "speaking"
    await oai.speech_started(audio_start_ms=3000)
    await rig.settle(0.1)

    assert rig.session.agent_state == "listening"
    assert rig.session.user_state == "speaking"
    truncate = await oai.wait_for("conversation.item.truncate")
    assert truncate["item_id"] == "item_resp_1"
    assert truncate["audio_end_ms"] == pytest.approx(600, abs=30)  # heard for 0.6 s
    assert rig.speaker.played_seconds < 1.0
    assistant = [m for m in rig.session.history.messages() if m.role == "assistant"]
    assert assistant[-1].interrupted
    assert assistant[-1].content and len(assistant[-1].content) < len(
        "Once upon a time there was a shop."
    )
    await oai.response_done("resp_1", status="cancelled")
    await oai.speech_stopped(4000)
    await oai.committed("item_user_2")
    await oai.input_transcription("item_user_2", "Never mind.")
    await rig.settle(0.5)
    assert rig.session.agent_state == "listening"
    assert rig.owed == 0


async def test_dropped_connection_mid_response(oai: OpenAIRealtimeServer, rigs: list[Rig]) -> None:
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Any pears?")
    t0 = now()
    await oai.response_created("resp_1")
    await rig.settle(0.2)
    await oai.drop()
    await oai.wait_connected(2)
    await rig.settle(1.0)
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.owed == 0
    seeded = [
        e["item"]
        for e in oai.of_type("conversation.item.create")
        if e["item"].get("type") == "message"
    ]
    assert any(item["content"][0]["text"] == "Any pears?" for item in seeded)
    await spoken(oai, rig, "resp_2", "No pears, sorry.")
    assert rig.session.agent_state == "listening"
    assert rig.messages()[-1] == ("assistant", "No pears, sorry.")


async def test_a_toolset_that_changes_reaches_the_model_before_its_next_answer(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """A toolset (an MCP server, say) whose tools change while the connection stays: the
    new list is sent when the user starts a turn, before the model answers, and only
    when it changed."""
    import rejoinder as rj

    class Catalogue(rj.Toolset):
        def __init__(self) -> None:
            self.names = ["price"]

        @property
        def tools(self) -> list[rj.Tool]:
            return [self._tool(name) for name in self.names]

        @staticmethod
        def _tool(name: str) -> rj.Tool:
            async def look_up(item: str) -> str:
                return f"{name} of {item}"

            look_up.__name__ = name
            look_up.__doc__ = f"The {name} of an item."
            return rj.function_tool(look_up)

    catalogue = Catalogue()
    rig = await realtime(oai, rigs, rj.Agent(instructions="Shop.", tools=[catalogue]))

    def sent_tools() -> list[list[str]]:
        return [
            [tool["name"] for tool in event["session"]["tools"]]
            for event in oai.of_type("session.update")
            if "tools" in event["session"]
        ]

    assert sent_tools() == [["price"]]
    await user_says(oai, rig, "Hello?")
    assert sent_tools() == [["price"]]  # unchanged: not sent again
    catalogue.names = ["price", "stock"]
    await user_says(oai, rig, "Any apples?")
    assert sent_tools() == [["price"], ["price", "stock"]]
    catalogue.names = ["stock"]
    rig.session.generate_reply(user_input="And pears?")
    await rig.settle()
    assert sent_tools()[-1] == ["stock"]
