"""Scenarios B1-B2: the user-away timer counts only mutual silence with nothing owed."""

from __future__ import annotations

import asyncio

import pytest

import rejoinder as rj
from rejoinder.testing import Delay, ToolCall, advance
from rejoinder.testing import ScriptedLLM as LLM

from ..conftest import MakeSession


async def test_b1_fires_after_mutual_silence(make_session: MakeSession) -> None:
    llm = LLM([["Hello there."]])
    h = await make_session(llm, user_away_timeout=15.0)

    await advance(10.0)
    await h.session.run(user_input="hi")  # user activity at t=10 restarts the count
    await advance(14.9)
    assert h.session.user_state == "listening"
    await advance(0.2)
    assert h.session.user_state == "away"
    assert h.timeline.user_states() == ["listening", "away"]
    assert h.timeline.times_of("away", who="user") == [pytest.approx(25.0)]


async def test_b1_user_input_brings_the_user_back(make_session: MakeSession) -> None:
    llm = LLM([["Welcome back."]])
    h = await make_session(llm, user_away_timeout=5.0)
    await advance(6.0)
    assert h.session.user_state == "away"
    await h.session.run(user_input="I'm here")
    assert h.timeline.user_states() == ["listening", "away", "listening"]
    assert h.timeline.times_of("listening", who="user") == [pytest.approx(6.0)]
    await advance(5.0)
    assert h.timeline.times_of("away", who="user") == [pytest.approx(5.0), pytest.approx(11.0)]


async def test_b1_disabled_when_timeout_is_none(make_session: MakeSession) -> None:
    h = await make_session(LLM([]), user_away_timeout=None)
    await advance(3600.0)
    assert h.timeline.user_states() == ["listening"]


@pytest.mark.parametrize("released", [False, True], ids=["inline", "background"])
async def test_b2_never_fires_while_a_tool_runs(make_session: MakeSession, released: bool) -> None:
    @rj.function_tool
    async def crunch(ctx: rj.RunContext[None]) -> str:
        """Long work."""
        if released:
            await ctx.update("working on it")
        await advance(60.0)
        return "crunched"

    replies = [[ToolCall("crunch")], ["Crunched."]]
    if released:
        replies.insert(1, ["Started."])
    agent = rj.Agent(instructions="t", tools=[crunch])
    h = await make_session(LLM(replies), agent, user_away_timeout=15.0)
    await h.session.run(user_input="crunch")
    await asyncio.sleep(80.0 - asyncio.get_running_loop().time())
    # Away only once the last work ended (t=60) plus the full timeout.
    assert h.timeline.times_of("away", who="user") == [pytest.approx(75.0)]
    assert h.output.segments[-1] == "Crunched."


async def test_b2_never_fires_while_a_reply_is_owed(make_session: MakeSession) -> None:
    llm = LLM([[Delay(40.0), "Finally."]])  # a slow model: the reply is owed for 40 s
    h = await make_session(llm, user_away_timeout=15.0)
    await h.session.run(user_input="hello?")
    h.timeline.assert_never("away", who="user", between=(0.0, 40.0))
    await advance(20.0)
    assert h.timeline.times_of("away", who="user") == [pytest.approx(55.0)]


async def test_b2_session_work_holds_the_timer(make_session: MakeSession) -> None:
    h = await make_session(LLM([]), user_away_timeout=15.0)
    await advance(0)  # the first agent has entered: listening
    with h.session.hold("syncing calendar"):
        assert h.session.agent_state == "listening"  # a hold owes no reply
        await advance(30.0)
    assert h.session.user_state == "listening"
    await advance(15.0)
    assert h.timeline.times_of("away", who="user") == [pytest.approx(45.0)]


async def test_b2_work_starting_after_arming_cancels_the_timer(make_session: MakeSession) -> None:
    llm = LLM([["Done thinking."]])
    h = await make_session(llm, user_away_timeout=15.0)
    await advance(10.0)  # armed since t=0
    with h.session.hold():
        await advance(10.0)  # would have fired at t=15
    assert h.timeline.user_states() == ["listening"]
    await advance(15.0)
    assert h.timeline.times_of("away", who="user") == [pytest.approx(35.0)]
