"""Scenarios D1–D9, B3 and B4 on GPT-Live, over a real loopback WebSocket.

Each test scripts the server event by event and asserts the whole agent-state timeline.
"Never listening" is checked by the timeline itself: it lists every change, so a 0 ms
pulse through ``listening`` would show up as an extra state.
"""

from __future__ import annotations

import asyncio

import pytest

import rejoinder as rj
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import GPTLiveServer, advance, now

from .realtime_rig import Rig, Weather, answer, live, start_rig, user_asks

pytestmark = pytest.mark.looptime(noop_cycles=2000)

# --------------------------------------------------------------------------- D1


@pytest.mark.parametrize("preamble", [False, True])
async def test_d1_backend_tool_round_trip(
    server: GPTLiveServer, rigs: list[Rig], preamble: bool
) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "What's the weather in Paris?")
    t_turn = now()
    await server.delegation("dlg_1")
    await server.response_created("dlg_1", "resp_1")
    await rig.settle()
    if preamble:
        # "Let me check." is audible while the backend runs, and the call lands inside it.
        await server.output_transcript("Let me check.")
        await server.speech(0.6, then_silence=1.0)
        await rig.settle(0.2)
        assert rig.session.agent_state == "speaking"
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await rig.settle(1.0)
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"  # the answer is owed, not audible yet
    t_answer = now()
    await answer(server, rig, "It's 18 degrees and sunny in Paris.")

    expected = ["listening", "thinking", *(["speaking", "thinking"] if preamble else [])]
    assert rig.timeline.agent_states(since=t_turn) == [*expected, "speaking", "listening"]
    rig.timeline.assert_never("listening", between=(t_turn + 0.01, t_answer))
    assert rig.owed == 0
    outputs = server.of_type("response.item.create")
    assert [o["item"]["call_id"] for o in outputs] == ["call_1"]
    assert len(server.of_type("response.create")) == 1
    assert ("user", "What's the weather in Paris?") in rig.messages()
    assert rig.messages()[-1] == ("assistant", "It's 18 degrees and sunny in Paris.")
    assert rig.errors == []


# --------------------------------------------------------------------------- D2


async def test_d2_two_calls_one_combined_answer(server: GPTLiveServer, rigs: list[Rig]) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "Compare Paris and Rome.")
    t0 = now()
    await server.response_created("dlg_2", "resp_3")
    await server.function_call("dlg_2", "call_2", "get_weather", {"city": "Paris"})
    await server.function_call("dlg_2", "call_3", "get_weather", {"city": "Rome"})
    await server.response_completed("dlg_2", "resp_3")
    await server.wait_for("response.create")
    await rig.settle(0.5)
    await server.response_created("dlg_2", "resp_4")
    await server.response_completed("dlg_2", "resp_4")
    await answer(server, rig, "Paris is 18 degrees, Rome is 24.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert len(server.of_type("response.item.create")) == 2
    assert len(server.of_type("response.create")) == 1  # one batch, one continuation
    assert rig.owed == 0
    assert rig.errors == []


# --------------------------------------------------------------------------- D3


@pytest.mark.parametrize("ending", ["failed", "incomplete", "error"])
async def test_d3_failed_continuation_returns_to_listening(
    server: GPTLiveServer, rigs: list[Rig], ending: str
) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await server.response_created("dlg_1", "resp_2")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    if ending == "failed":
        await server.response_failed("dlg_1", "resp_2", "backend exploded")
    elif ending == "incomplete":
        await server.response_incomplete("dlg_1", "resp_2", "max_output_tokens")
    else:
        await server.error("output token limit reached")  # no completion follows
    await rig.settle(0.5)

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.owed == 0
    await rig.settle(10)  # nothing reopens, nothing expires later
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]


# --------------------------------------------------------------------------- D4


async def test_d4_tool_finishing_after_its_response_failed_becomes_silent_context(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    gate = asyncio.Event()
    rig = await live(server, rigs, Weather(gate), user_away_timeout=2.0)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await rig.settle(0.5)
    await server.response_failed("dlg_1", "resp_1", "backend down")
    await rig.settle(5.0)
    # Nothing is owed any more, but the tool still works for the user: not away.
    assert rig.session.agent_state == "listening"
    assert rig.session.user_state == "listening"
    gate.set()
    await rig.settle(0.5)

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert server.of_type("response.item.create") == []
    assert server.of_type("response.create") == []
    thinking = server.of_type("session.thinking.append")
    assert any("18 C and sunny in Oslo" in t["content"] for t in thinking)
    assert rig.owed == 0
    await rig.settle(2.5)
    assert rig.session.user_state == "away"  # the timer runs again once the tool ended


# --------------------------------------------------------------------------- D5


async def test_d5_late_transcript_is_not_the_answer(server: GPTLiveServer, rigs: list[Rig]) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.output_transcript("Let me check.")
    await server.speech(0.5, then_silence=1.0)
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await rig.settle(1.0)
    t_owed = now()
    # The transcript of the preamble that already played arrives late.
    await server.output_transcript(" One moment.", start_ms=3100, end_ms=3800)
    await rig.settle(1.0)
    assert rig.session.agent_state == "thinking"
    await answer(server, rig, "It is sunny in Oslo.")

    assert rig.timeline.agent_states(since=t0) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    rig.timeline.assert_never("listening", between=(t0 + 0.01, t_owed + 1.0))
    assert rig.owed == 0


# --------------------------------------------------------------------------- D6


async def test_d6_reply_not_required_but_the_provider_answers_anyway(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    agent = Weather()
    agent.reply_required = False
    rig = await live(server, rigs, agent)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")  # GPT-Live always continues
    await rig.settle(1.0)
    assert rig.session.agent_state == "thinking"
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    await answer(server, rig, "Done.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0


# --------------------------------------------------------------------------- D7


async def test_d7_long_backend_reasoning_never_marks_the_user_away(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs, user_away_timeout=2.0)
    await user_asks(server, rig, "Plan my week.")
    await server.response_created("dlg_1", "resp_1")
    await rig.settle(8.0)  # four times the away timeout, no tool
    assert rig.session.user_state == "listening"
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Here is your plan.")
    assert "away" not in rig.timeline.user_states()
    await rig.settle(2.5)
    assert rig.session.user_state == "away"  # mutual silence now counts again


# --------------------------------------------------------------------------- D8


async def test_d8_completed_with_no_audio_returns_to_listening_after_a_bound(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs, answer_timeout=3.0)
    await user_asks(server, rig, "Hello?")
    await server.response_created("dlg_1", "resp_1")
    await server.response_completed("dlg_1", "resp_1")
    await rig.settle(0.1)
    t_completed = now()
    await rig.settle(2.8)
    assert rig.session.agent_state == "thinking"
    await rig.settle(0.3)
    assert rig.session.agent_state == "listening"
    change = rig.timeline.changes_of("agent")[-1]
    assert change.new == "listening"
    assert change.at == pytest.approx(t_completed + 3.0, abs=0.15)
    assert rig.owed == 0
    assert rig.errors == []  # expected, not an error


# --------------------------------------------------------------------------- D9


async def test_d9_disconnect_mid_response_reconnects_with_history(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.output_transcript("Let me check.")
    await server.speech(0.5, then_silence=1.0)
    await rig.settle(0.1)
    await server.drop()
    await server.wait_connected(2)
    await rig.settle(1.0)

    # What was said on the lost connection is owed no more; the preamble that already
    # arrived was still heard in full.
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0
    restart = server.received_on(2)[0]
    assert restart["type"] == "session.start"
    seeded = [
        (item["role"], item["content"][0]["text"]) for item in restart["session"].get("input", [])
    ]
    assert ("user", "Weather in Oslo?") in seeded
    # The preamble finished playing after the new connection started: it learns of it.
    assert rig.messages()[-1] == ("assistant", "Let me check.")
    told = [t["content"] for t in server.of_type("session.thinking.append")]
    assert any("Let me check." in t for t in told)
    # The new connection works.
    await server.response_created("dlg_9", "resp_9")
    await server.response_completed("dlg_9", "resp_9")
    await answer(server, rig, "It is sunny.")
    assert rig.session.agent_state == "listening"
    assert rig.messages()[-1] == ("assistant", "It is sunny.")


async def test_d9_fallback_to_another_model_replays_what_was_heard(rigs: list[Rig]) -> None:
    gate = asyncio.Event()
    async with GPTLiveServer() as primary, GPTLiveServer() as backup:
        model = rj.FallbackRealtime(
            [
                GPTLive(api_key="k", base_url=primary.base_url, max_reconnect_attempts=1),
                GPTLive(api_key="k", base_url=backup.base_url),
            ]
        )
        rig = await start_rig(model, Weather(gate), user_away_timeout=1.0)
        rigs.append(rig)
        await user_asks(primary, rig, "Weather in Oslo?")
        t0 = now()
        await primary.response_created("dlg_1", "resp_1")
        await primary.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
        await rig.settle(0.2)
        await primary.aclose()  # gone for good: reconnects fail, the backup takes over
        await backup.wait_connected(1, within=30)
        await rig.settle(1.0)

        assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
        start = backup.received_on(1)[0]["session"]
        assert start["instructions"] == "You are a phone assistant."
        assert [t["name"] for t in start["delegation"]["responses"]["tools"]] == ["get_weather"]
        seeded = [(i["role"], i["content"][0]["text"]) for i in start.get("input", [])]
        assert ("user", "Weather in Oslo?") in seeded
        assert rig.session.user_state == "listening"  # the tool still runs: not away
        # The call made on the lost connection can only become context on the new one.
        gate.set()
        await rig.settle(0.5)
        assert backup.of_type("response.item.create") == []
        told = [t["content"] for t in backup.of_type("session.thinking.append")]
        assert any("sunny in Oslo" in t for t in told)
        assert rig.owed == 0
        # And the backup answers the next question.
        await backup.response_created("dlg_2", "resp_2")
        await backup.response_completed("dlg_2", "resp_2")
        await answer(backup, rig, "Sunny.")
        assert rig.session.agent_state == "listening"
        assert rig.owed == 0
        await rig.aclose()
        rigs.remove(rig)


# ----------------------------------------------------------------------- B3, B4


async def test_b3_backend_work_starting_after_the_timer_was_armed_cancels_it(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs, user_away_timeout=1.0)
    await server.input_transcript("Are you there?", 1200, 2000)
    await rig.settle(0.85)  # the turn ends; the away timer is armed
    await rig.settle(0.05)
    await server.response_created("dlg_1", "resp_1")  # reasoning starts 50 ms later
    await rig.settle(5.0)
    assert rig.session.user_state == "listening"
    assert "away" not in rig.timeline.user_states()
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Yes, I am here.")
    await rig.settle(1.1)
    assert rig.session.user_state == "away"


async def test_b4_handoff_keeps_the_busy_session_and_the_user_not_away(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs, user_away_timeout=1.0)
    await user_asks(server, rig, "Book me a table.")
    await server.response_created("dlg_1", "resp_1")
    await rig.settle(0.1)
    await rig.session.update_agent(rj.Agent(instructions="You book tables."))
    await rig.settle(4.0)
    assert rig.session.user_state == "listening"
    assert rig.session.agent_state == "thinking"
    assert server.connections == 1  # the connection survived the handoff
    appended = server.of_type("session.instructions.append")
    assert appended[-1]["content"].endswith("You book tables.")
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Booked.")
    assert rig.session.agent_state == "listening"
    assert "away" not in rig.timeline.user_states()
    await rig.settle(1.1)
    assert rig.session.user_state == "away"


# --------------------------------------------------------------- bad provider


@pytest.mark.parametrize("garbage", ["malformed", "unknown", "binary", "error"])
async def test_garbage_mid_response_leaves_no_stuck_state(
    server: GPTLiveServer, rigs: list[Rig], garbage: str
) -> None:
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    await server.response_created("dlg_1", "resp_1")
    if garbage == "malformed":
        await server.send_raw('{"type": "response.event", "event": {')
    elif garbage == "unknown":
        await server.send({"type": "session.something_new", "x": 1})
    elif garbage == "binary":
        await server.send_binary(b"\x00\x01")
    else:
        await server.error("rate limited", code="rate_limit_exceeded", client_event_id="x_1")
    await rig.settle(0.2)
    assert rig.session.agent_state == "thinking"  # the response still runs
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Sunny.")
    assert rig.session.agent_state == "listening"
    assert rig.owed == 0
    assert rig.messages()[-1] == ("assistant", "Sunny.")
    if garbage in ("malformed", "error"):
        assert [e.source for e in rig.errors] == ["realtime"]
        assert all(e.recoverable for e in rig.errors)
    else:
        assert rig.errors == []


async def test_fatal_error_closes_the_session(server: GPTLiveServer, rigs: list[Rig]) -> None:
    rig = await live(server, rigs)
    closed: list[rj.CloseEvent] = []
    rig.session.on("close", closed.append)
    await server.response_created("dlg_1", "resp_1")
    await rig.settle(0.1)
    await server.error("bad key", code="invalid_api_key")
    await rig.settle(1.0)
    assert rig.session.agent_state == "listening"
    assert closed and closed[0].reason == "closed"
    assert any(not e.recoverable for e in rig.errors)


async def test_generate_reply_is_owed_until_audio_and_bounded(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    rig = await live(server, rigs, answer_timeout=2.0)
    t0 = now()
    handle = rig.session.generate_reply(instructions="Greet the caller.")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    commentary = server.of_type("session.commentary.append")
    assert commentary and "Greet the caller." in commentary[-1]["content"]
    await answer(server, rig, "Hello!")
    await handle
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    # Unanswered: done after the bound, not forever.
    second = rig.session.generate_reply(instructions="Say goodbye.")
    await advance(2.1)
    assert second.done()
    assert rig.session.agent_state == "listening"


async def test_duplex_model_handles_barge_in_itself(server: GPTLiveServer, rigs: list[Rig]) -> None:
    rig = await live(server, rigs)
    await server.output_transcript("Here is a long story.")
    await server.speech(2.0, then_silence=1.0)
    await rig.settle(0.5)
    await server.input_transcript("Stop.", 500, 900)  # the caller talks over it
    await rig.settle(0.1)
    assert rig.session.user_state == "speaking"
    assert rig.session.agent_state == "speaking"  # not cut by us: the model decides
    await rig.settle(2.0)
    assert rig.speaker.segments == [pytest.approx(2.0)]
    assert server.received_types().count("session.close") == 0
    assert rig.session.agent_state == "listening"
    assert rig.messages()[-2:] == [("assistant", "Here is a long story."), ("user", "Stop.")]
