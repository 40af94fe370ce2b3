"""AgentTask: await a sub-agent from a tool; it becomes current, returns a value, and the
caller resumes (scenarios E4, B5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ToolCall, advance

from ..conftest import MakeSession


class GetName(rj.AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask for the user's name.", id="get_name")

    async def on_enter(self) -> None:
        self.session.say("What is your name?")

    @rj.function_tool
    async def record_name(self, name: str) -> None:
        """Record the user's name."""
        self.complete(name)


def script(ctx: rj.ChatContext) -> list[Any]:
    """One model for both agents, answering from the context it is given."""
    last = ctx.items[-1]
    system = ctx.items[0].content  # type: ignore[union-attr]
    if "Ask for the user's name" in system:
        assert isinstance(last, rj.ChatMessage)
        return [ToolCall("record_name", {"name": last.content})]
    if isinstance(last, rj.FunctionCallOutput):
        return [f"Nice to meet you, {last.output}."]
    return ["Let me ask.", ToolCall("ask_name")]


@rj.function_tool
async def ask_name() -> str:
    """Ask the user's name."""
    return await GetName()


async def test_e4_task_returns_its_result_to_the_caller(make_session: MakeSession) -> None:
    llm = ScriptedLLM(script)  # type: ignore[arg-type]
    h = await make_session(llm, rj.Agent(instructions="front", tools=[ask_name], id="front"))
    first = h.session.generate_reply(user_input="hi")
    await advance(1.0)
    assert h.session.current_agent.id == "get_name"
    assert h.output.segments == ["Let me ask.", "What is your name?"]
    await h.session.run(user_input="Ada")
    await first
    assert h.session.current_agent.id == "front"
    assert h.output.segments[-1] == "Nice to meet you, Ada."
    handoffs = [
        (i.old_agent_id, i.new_agent_id)
        for i in h.session.history.items
        if isinstance(i, rj.AgentHandoff)
    ]
    assert handoffs == [("front", "get_name"), ("get_name", "front")]
    # The task's conversation was merged into the caller's context.
    front_ctx = h.session.current_agent.chat_ctx.items
    assert any(
        isinstance(i, rj.ChatMessage) and i.content == "What is your name?" for i in front_ctx
    )
    # No listening between the caller's speech and the task's question...
    asked = h.timeline.times_of("speaking")[1]
    h.timeline.assert_never("listening", between=(0.0, asked))
    # ...and none between the user's answer and the caller's follow-up.
    assert h.timeline.agent_states()[-3:] == ["thinking", "speaking", "listening"]
    assert h.session.agent_state == "listening"


async def test_b5_paused_callers_tool_does_not_hold_the_away_timer(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM(script)  # type: ignore[arg-type]
    h = await make_session(
        llm, rj.Agent(instructions="front", tools=[ask_name], id="front"), user_away_timeout=5.0
    )
    h.session.generate_reply(user_input="hi")
    await advance(10.0)
    # The front agent's ask_name tool still runs, but it is paused: the task is waiting
    # for the user, so the user is marked away after 5 s of silence.
    assert h.session.user_state == "away"
    assert h.timeline.times_of("away", who="user") == [pytest.approx(5.0)]


async def test_cancelled_task_is_a_tool_error_for_the_caller(make_session: MakeSession) -> None:
    tasks: list[GetName] = []

    @rj.function_tool
    async def ask() -> str:
        """Ask."""
        task = GetName()
        tasks.append(task)
        return await task

    llm = ScriptedLLM([["Asking.", ToolCall("ask")], ["Never mind then."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[ask], id="front"))
    h.session.generate_reply(user_input="hi")
    await advance(1.0)
    tasks[0].cancel()
    await advance(1.0)
    output = next(i for i in h.session.history.items if isinstance(i, rj.FunctionCallOutput))
    assert output.is_error and "cancelled" in output.output
    assert h.session.current_agent.id == "front"
    assert h.output.segments[-1] == "Never mind then."


async def test_nested_tasks(make_session: MakeSession) -> None:
    class Outer(rj.AgentTask[str]):
        async def on_enter(self) -> None:
            inner = await Inner(instructions="inner", id="inner")
            self.complete(f"outer({inner})")

    class Inner(rj.AgentTask[str]):
        async def on_enter(self) -> None:
            assert self.session.current_agent is self
            self.complete("inner-result")

    results: list[str] = []

    @rj.function_tool
    async def run_outer() -> str:
        """Run."""
        result = await Outer(instructions="outer", id="outer")
        results.append(result)
        return result

    llm = ScriptedLLM([[ToolCall("run_outer")], ["Done."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[run_outer], id="front"))
    await h.session.run(user_input="go")
    assert results == ["outer(inner-result)"]
    assert h.session.current_agent.id == "front"


async def test_aclose_while_a_task_runs_leaves_nothing_running() -> None:
    before = {t for t in asyncio.all_tasks() if not t.done()}
    session: rj.AgentSession[None] = rj.AgentSession(llm=ScriptedLLM(script))  # type: ignore[arg-type]
    await session.start(rj.Agent(instructions="front", tools=[ask_name], id="front"))
    session.generate_reply(user_input="hi")
    await advance(1.0)
    assert session.current_agent.id == "get_name"
    await asyncio.wait_for(session.aclose(), 30)
    await advance(0)
    left = {t for t in asyncio.all_tasks() if not t.done()} - before - {asyncio.current_task()}
    assert left == set()


async def test_awaiting_a_task_outside_a_session_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="from a tool or hook"):
        await GetName()


async def test_deferred_reply_of_a_paused_agent_waits_for_it_to_resume(
    make_session: MakeSession,
) -> None:
    """A background result owed by the caller lands while a task is current: it is spoken
    by the caller after it resumes, not by (or over) the task."""

    class Quiz(rj.AgentTask[str]):
        async def on_enter(self) -> None:
            self.session.say("Quick question.")
            await advance(5.0)
            self.complete("done")

    @rj.function_tool
    async def timer(ctx: rj.RunContext[None]) -> str:
        """Start a timer."""
        await ctx.update("started")
        await advance(2.0)
        return "timer finished"

    @rj.function_tool
    async def quiz() -> str:
        """Run the quiz."""
        return await Quiz(instructions="quiz", id="quiz")

    def model(ctx: rj.ChatContext) -> list[Any]:
        last = ctx.items[-1]
        if isinstance(last, rj.ChatMessage) and last.content == "both":
            return [ToolCall("timer"), ToolCall("quiz")]
        if isinstance(last, rj.FunctionCallOutput) and last.output == "timer finished":
            return ["Your timer finished."]
        return ["Okay."]

    h = await make_session(
        ScriptedLLM(model),  # type: ignore[arg-type]
        rj.Agent(instructions="front", tools=[timer, quiz], id="front"),
    )
    h.session.generate_reply(user_input="both")
    await advance(3.0)  # the timer finished at t=2, while the quiz is current
    assert h.session.current_agent.id == "quiz"
    assert "Your timer finished." not in h.output.segments
    await advance(10.0)
    assert h.session.current_agent.id == "front"
    assert h.output.segments.index("Quick question.") < h.output.segments.index(
        "Your timer finished."
    )


async def test_agent_task_awaited_in_on_exit(make_session: MakeSession) -> None:
    class Survey(rj.AgentTask[str]):
        async def on_enter(self) -> None:
            self.complete("5 stars")

    ratings: list[str] = []

    class Leaving(rj.Agent):
        async def on_exit(self) -> None:
            ratings.append(await Survey(instructions="survey", id="survey"))

    h = await make_session(ScriptedLLM([]), Leaving(instructions="leaving", id="leaving"))
    await asyncio.wait_for(h.session.update_agent(rj.Agent(instructions="n", id="next")), 30)
    assert ratings == ["5 stars"]
    assert h.session.current_agent.id == "next"
