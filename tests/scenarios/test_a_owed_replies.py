"""Scenarios A: owed replies in a text-mode pipeline. Each test asserts the whole
agent (and where relevant user) state timeline on virtual time."""

from __future__ import annotations

import asyncio
import itertools

import pytest

import rejoinder as rj
from rejoinder.testing import Delay, Fail, ToolCall, advance
from rejoinder.testing import ScriptedLLM as LLM

from ..conftest import MakeSession

FULL_TOOL_TURN = [
    "initializing",  # the turn is asked for right after start(): no listening before it
    "thinking",
    "speaking",
    "thinking",
    "speaking",
    "listening",
]


def agent_with(*tools: rj.FunctionTool) -> rj.Agent:
    return rj.Agent(instructions="test", tools=list(tools))


def sleeping_tool(seconds: float, result: object = "sunny") -> rj.FunctionTool:
    @rj.function_tool
    async def lookup(city: str = "Paris") -> object:
        """Look up the weather."""
        await asyncio.sleep(seconds)
        return result

    return lookup


# --------------------------------------------------------------------------- A1


@pytest.mark.parametrize("tool_seconds", [0.2, 3.0], ids=["tool-before-playout", "tool-after"])
@pytest.mark.parametrize("awaited", [True, False], ids=["run-awaited", "not-awaited"])
async def test_a1_tool_during_reply_never_listening_before_follow_up(
    make_session: MakeSession, tool_seconds: float, awaited: bool
) -> None:
    llm = LLM([["Let me check. ", ToolCall("lookup"), Delay(1.0), "One moment."], ["Sunny."]])
    h = await make_session(llm, agent_with(sleeping_tool(tool_seconds)))

    if awaited:
        result = await h.session.run(user_input="weather?")
        assert result.final_output == "Sunny."
        assert [type(i).__name__ for i in result.items] == [
            "ChatMessage",
            "FunctionCall",
            "FunctionCallOutput",
            "ChatMessage",
        ]
    else:
        h.session.generate_reply(user_input="weather?")
        await advance(10)

    assert h.timeline.agent_states() == FULL_TOOL_TURN
    first_reply_end = h.timeline.times_of("thinking")[1]
    follow_up_audible = h.timeline.times_of("speaking")[1]
    assert first_reply_end == pytest.approx(1.0)
    assert follow_up_audible == pytest.approx(max(1.0, tool_seconds))
    h.timeline.assert_never("listening", between=(0.0, follow_up_audible))
    assert h.output.segments == ["Let me check. One moment.", "Sunny."]
    assert h.session.agent_state == "listening"


async def test_a1_tool_only_reply(make_session: MakeSession) -> None:
    """A reply that carries only a tool call is never audible; the follow-up is."""
    llm = LLM([[ToolCall("lookup")], ["Sunny."]])
    h = await make_session(llm, agent_with(sleeping_tool(2.0)))
    await h.session.run(user_input="weather?")
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]
    assert h.timeline.times_of("speaking") == [pytest.approx(2.0)]


# --------------------------------------------------------------------------- A2


def timer_tool(seconds: float) -> rj.FunctionTool:
    @rj.function_tool
    async def set_timer(ctx: rj.RunContext[None]) -> str:
        """Start a timer."""
        await ctx.update("Timer started.")
        await asyncio.sleep(seconds)
        return "Timer done."

    return set_timer


async def test_a2_background_result_during_answer_goes_through_thinking(
    make_session: MakeSession,
) -> None:
    llm = LLM(
        [
            [ToolCall("set_timer")],  # t=0: released at once
            ["Timer is running."],  # follow-up to the interim result
            ["Let me think", Delay(4.0), " about that."],  # t=3..7: answer to turn 2
            ["Your timer is done."],  # the deferred reply
        ]
    )
    h = await make_session(llm, agent_with(timer_tool(5.0)))

    first = await h.session.run(user_input="set a timer")
    assert first.final_output == "Timer is running."
    # Releasing the tool does not end the debt: its interim result is owed a reply.
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]
    assert [o.output for o in first.function_call_outputs] == ["Timer started."]
    await advance(3.0)
    t_second = 3.0
    second = await h.session.run(user_input="what's new?")
    # run() returns when the agent listens again: the deferred reply that followed the
    # answer with no listening in between belongs to the same turn.
    assert [m.content for m in second.messages] == [
        "Let me think about that.",
        "Your timer is done.",
    ]
    await advance(5.0)

    assert h.timeline.agent_states(since=t_second) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",  # the answer ended at t=7; the timer's result (t=5) is owed
        "speaking",
        "listening",
    ]
    h.timeline.assert_never("listening", between=(t_second + 0.001, 7.0))
    # The deferred reply was generated with the final result in its context.
    final_outputs = [
        item.output
        for item in llm.calls[3].chat_ctx.items
        if isinstance(item, rj.FunctionCallOutput)
    ]
    assert final_outputs == ["Timer started.", "Timer done."]
    assert h.output.segments[-1] == "Your timer is done."
    assert len(llm.calls) == 4


async def test_a2_release_during_audible_reply_never_listening(make_session: MakeSession) -> None:
    """The tool goes to the background while the reply carrying it is still audible: the
    reply's end hands over to the follow-up for the interim result, never to listening."""
    llm = LLM(
        [["Starting a timer", ToolCall("set_timer"), Delay(1.0), "."], ["It runs."], ["Done."]]
    )
    h = await make_session(llm, agent_with(timer_tool(5.0)))
    await h.session.run(user_input="timer")
    assert h.timeline.agent_states() == FULL_TOOL_TURN
    assert h.timeline.times_of("listening")[-1] == pytest.approx(1.0)
    await advance(5.0)
    assert h.output.segments == ["Starting a timer.", "It runs.", "Done."]


async def test_a2_running_background_tool_keeps_user_present(make_session: MakeSession) -> None:
    llm = LLM([[ToolCall("set_timer")], ["Started."], ["Done now."]])
    h = await make_session(llm, agent_with(timer_tool(60.0)), user_away_timeout=5.0)

    await h.session.run(user_input="set a timer")
    # Listening between turns is the truth while the tool merely runs...
    assert h.session.agent_state == "listening"
    await advance(59.0)
    # ...but the user is not marked away while the agent works for them.
    h.timeline.assert_never("away", who="user", between=(0.0, 60.0))
    await advance(2.0)
    assert h.output.segments == ["Started.", "Done now."]
    assert h.session.user_state == "listening"
    await advance(5.0)
    assert h.timeline.times_of("away", who="user") == [pytest.approx(65.0)]


async def test_a2_results_landing_together_are_one_reply(make_session: MakeSession) -> None:
    llm = LLM([[ToolCall("set_timer"), ToolCall("set_timer")], ["Two timers."], ["Both done."]])
    h = await make_session(llm, agent_with(timer_tool(5.0)))
    await h.session.run(user_input="two timers")
    await advance(10.0)
    assert h.output.segments == ["Two timers.", "Both done."]
    assert len(llm.calls) == 3


# --------------------------------------------------------------------------- A3


@pytest.mark.parametrize("delays", list(itertools.permutations([0.0, 1.0, 2.5])))
async def test_a3_parallel_tools_one_follow_up(
    make_session: MakeSession, delays: tuple[float, ...]
) -> None:
    started: list[str] = []

    @rj.function_tool
    async def work(name: str, seconds: float) -> str:
        """Do some work."""
        started.append(name)
        await asyncio.sleep(seconds)
        return f"{name} done"

    calls = [ToolCall("work", {"name": f"w{i}", "seconds": d}) for i, d in enumerate(delays)]
    llm = LLM([["Working on it.", *calls], ["All done."]])
    h = await make_session(llm, agent_with(work))
    result = await h.session.run(user_input="go")

    assert started == ["w0", "w1", "w2"]  # dispatched together, in order
    assert [o.output for o in result.function_call_outputs] == ["w0 done", "w1 done", "w2 done"]
    assert len(llm.calls) == 2
    assert h.timeline.agent_states() == FULL_TOOL_TURN
    assert h.timeline.times_of("speaking")[1] == pytest.approx(max(delays))
    h.timeline.assert_never("listening", between=(0.0, max(delays)))


# --------------------------------------------------------------------------- A4


@pytest.mark.parametrize(
    "result", [None, rj.ToolResult("logged", reply_required=False)], ids=["none", "no-reply"]
)
@pytest.mark.parametrize("tool_seconds", [0.5, 3.0], ids=["tool-first", "reply-first"])
async def test_a4_no_follow_up(
    make_session: MakeSession, result: object, tool_seconds: float
) -> None:
    llm = LLM([["Noted.", ToolCall("lookup"), Delay(1.0)]])
    h = await make_session(llm, agent_with(sleeping_tool(tool_seconds, result)))
    await h.session.run(user_input="log it")

    assert len(llm.calls) == 1
    listening_at = max(1.0, tool_seconds)
    expected = ["initializing", "thinking", "speaking"]
    expected += ["thinking", "listening"] if tool_seconds > 1.0 else ["listening"]
    assert h.timeline.agent_states() == expected
    assert h.timeline.times_of("listening")[-1] == pytest.approx(listening_at)


# --------------------------------------------------------------------------- A5


async def test_a5_tool_error_is_told_to_the_model(make_session: MakeSession) -> None:
    @rj.function_tool
    async def book() -> str:
        """Book a flight."""
        raise rj.ToolError("the booking service is down")

    llm = LLM([["Booking.", ToolCall("book")], ["Sorry, booking failed."]])
    h = await make_session(llm, agent_with(book))
    result = await h.session.run(user_input="book")

    output = result.function_call_outputs[0]
    assert output.is_error
    assert output.output == "the booking service is down"
    assert output in llm.calls[1].chat_ctx.items
    assert result.final_output == "Sorry, booking failed."
    assert h.timeline.agent_states() == FULL_TOOL_TURN
    assert h.errors == []  # a ToolError is the tool talking to the model, not a fault


async def test_a5_tool_crash_is_reported_and_the_turn_goes_on(make_session: MakeSession) -> None:
    @rj.function_tool
    async def book() -> str:
        """Book a flight."""
        raise KeyError("secret internal detail")

    llm = LLM([[ToolCall("book")], ["Something went wrong."]])
    h = await make_session(llm, agent_with(book))
    result = await h.session.run(user_input="book")

    output = result.function_call_outputs[0]
    assert output.is_error and "internal error" in output.output
    assert "secret" not in output.output  # internals are not shown to the model
    assert [(e.source, type(e.error)) for e in h.errors] == [("tool", KeyError)]
    assert result.final_output == "Something went wrong."
    assert h.session.agent_state == "listening"


# --------------------------------------------------------------------------- A6


@pytest.mark.parametrize("max_steps", [0, 1, 3])
async def test_a6_max_tool_steps_bounds_rounds_exactly(
    make_session: MakeSession, max_steps: int
) -> None:
    tool_runs = 0

    @rj.function_tool
    async def again() -> str:
        """Call me again."""
        nonlocal tool_runs
        tool_runs += 1
        return "more"

    def script(ctx: rj.ChatContext) -> list[object]:
        return ["step.", ToolCall("again")]  # a model that always wants another round

    llm = LLM(script)  # type: ignore[arg-type]
    h = await make_session(llm, agent_with(again), max_tool_steps=max_steps)
    result = await h.session.run(user_input="loop")

    assert tool_runs == max_steps
    assert len(llm.calls) == max_steps + 1
    assert all(call.tools for call in llm.calls[:max_steps])
    last = llm.calls[-1]
    assert last.tools == [] and last.tool_choice == "none"
    # The tool call the model made anyway is answered with an error; the turn ends.
    assert result.function_call_outputs[-1].is_error
    assert h.session.agent_state == "listening"
    h.timeline.assert_never(
        "listening", between=(0.001, h.timeline.times_of("listening")[-1] - 1e-9)
    )


# --------------------------------------------------------------------------- A7


async def test_a7_queued_reply_does_not_interrupt_speaking(make_session: MakeSession) -> None:
    llm = LLM([["First part", Delay(2.0), " and the rest."], ["Second reply."]])
    h = await make_session(llm)
    first = h.session.generate_reply(user_input="one")
    await advance(0.5)
    second = h.session.generate_reply(user_input="two")  # queued while the first is audible
    await first
    await second

    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    # No thinking while the first reply was still being delivered (t in [0, 2]).
    h.timeline.assert_never("thinking", between=(0.001, 2.0 - 1e-9))
    assert h.timeline.times_of("thinking")[1] == pytest.approx(2.0)
    assert h.output.segments == ["First part and the rest.", "Second reply."]


async def test_llm_failure_ends_the_turn_with_an_error(make_session: MakeSession) -> None:
    llm = LLM([["Partial", Fail("provider exploded")]])
    h = await make_session(llm)
    await h.session.run(user_input="hi")
    assert [(e.source, str(e.error)) for e in h.errors] == [("llm", "provider exploded")]
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]
    assert h.session.history.items[-1].content == "Partial"  # type: ignore[union-attr]
