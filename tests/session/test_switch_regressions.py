"""Minimal reproductions of failures found by the randomized switch test
(``test_switch_random``), shrunk by hypothesis and rewritten as plain tests.

A break not fixed yet is marked ``xfail(strict=True)`` (the suite stays green; once the
fix lands it turns into a failure, XPASS, and the marker goes); the random test steers
around it meanwhile, with a guard naming the test, so the search goes on. All of these
were fixed after they were found and stay as regression tests.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from typing import Any

import rejoinder as rj
from rejoinder.testing import Delay, ScriptedLLM, ToolCall, advance

from ..conftest import MakeSession

BOUND = 30.0


class AskTask(rj.AgentTask[str]):
    instructions = "ask"

    async def on_enter(self) -> None:
        self.session.say("What is your email address?")

    @rj.function_tool
    async def answer(self) -> None:
        """Record the answer."""
        self.complete("ada@example.com")


@rj.function_tool
async def ask() -> str:
    """Sign the user up."""
    return f"signed up {await AskTask()}"


def unretrieved(problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    gc.collect()  # such a future is reported when it is collected
    return [p for p in problems if p.get("message") == "Future exception was never retrieved"]


async def test_abandoned_task_leaves_no_unretrieved_exception(make_session: MakeSession) -> None:
    problems: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: problems.append(context))
    llm = ScriptedLLM([[ToolCall("ask")], ["Done."]])
    h = await make_session(
        llm,
        rj.Agent(instructions="front", id="front", tools=[ask]),
        obligation_timeouts={"tool": 10.0},
    )
    h.session.generate_reply(user_input="sign me up")
    await advance(1.0)
    assert h.session.current_agent.id == "AskTask"
    await advance(20.0)  # the caller's tool expires: the waiting task is abandoned
    assert h.session.current_agent.id == "front"
    assert unretrieved(problems) == [], problems


class Notice(rj.AgentTask[bool]):
    instructions = "notice"

    async def on_enter(self) -> None:
        await self.session.say("This call may be recorded.")
        self.complete(True)


@rj.function_tool
async def consent() -> str:
    """Tell the caller about recording."""
    return f"notice given: {await Notice()}"


async def test_interrupt_during_task_entry_leaves_no_false_listening(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([[ToolCall("consent")], ["After."], ["Again."]])
    h = await make_session(llm, rj.Agent(instructions="front", id="front", tools=[consent]))
    h.session.generate_reply(user_input="hi")
    for _ in range(2):  # the tool has entered the task; its on_enter has not run yet
        await asyncio.sleep(0)
    await asyncio.wait_for(h.session.interrupt(), BOUND)
    await advance(10.0)
    states = h.timeline.agent_states()
    # thinking for the turn, then listening once it was interrupted, and nothing after
    assert states == ["initializing", "thinking", "listening"], h.timeline.describe()
    assert "This call may be recorded." not in h.output.segments, h.output.segments


async def test_outgoing_agents_tool_does_not_start_a_task_on_the_new_agent(
    make_session: MakeSession,
) -> None:
    def model(ctx: rj.ChatContext) -> list[Any]:
        last = ctx.items[-1]
        if getattr(ctx.items[0], "content", "") == "front" and isinstance(last, rj.ChatMessage):
            return ["Let me", Delay(0.5), ToolCall("ask"), Delay(0.5), " check."]
        return ["Done."]

    llm = ScriptedLLM(model)  # type: ignore[arg-type]
    h = await make_session(llm, rj.Agent(instructions="front", id="front", tools=[ask]))
    h.session.generate_reply(user_input="hi")
    await advance(0.2)  # "Let me" is audible: it may finish after the switch
    h.session.update_agent(rj.Agent(instructions="next", id="next", tools=[ask]))
    await advance(5.0)
    handoffs = [i.new_agent_id for i in h.session.history.items if isinstance(i, rj.AgentHandoff)]
    assert handoffs == ["next"], handoffs
    # What the user was hearing played out; the replaced agent said and called nothing more.
    assert h.output.segments == ["Let me"], h.output.segments


async def test_paused_agents_on_enter_does_not_speak_through_the_task(
    make_session: MakeSession,
) -> None:
    class Greeter(rj.Agent):
        async def on_enter(self) -> None:
            await advance(0.5)  # looks something up
            self.session.say("Hello from the greeter.")

    def model(ctx: rj.ChatContext) -> list[Any]:
        if isinstance(ctx.items[-1], rj.ChatMessage) and ctx.items[-1].role == "user":
            return [ToolCall("ask")]
        return ["Done."]

    llm = ScriptedLLM(model)  # type: ignore[arg-type]
    h = await make_session(llm, rj.Agent(instructions="front", id="front"))
    h.session.update_agent(Greeter(instructions="greeter", id="greeter", tools=[ask]))
    await advance(0.1)  # the greeter is current, its on_enter is looking up
    h.session.generate_reply(user_input="sign me up")  # its reply starts a task
    await advance(0.2)
    assert h.session.current_agent.id == "AskTask"
    assert h.session.agent_state == "listening"  # the task asked, and waits for the user
    asked = h.timeline.times_of("listening")[-1]
    await advance(5.0)
    # Nothing new happened: the agent says nothing more until the user answers.
    assert h.timeline.agent_states(since=asked + 0.01) == ["listening"], h.timeline.describe()
    assert h.output.segments == ["What is your email address?"], h.output.segments


@rj.function_tool
async def consent_later(ctx: rj.RunContext[None]) -> str:
    """Tell the caller about recording, once the line is free."""
    await ctx.update("the notice comes in a moment")
    await advance(0.5)
    return f"notice given: {await Notice()}"


async def test_reply_queued_to_a_completing_task_is_not_spoken_after_listening(
    make_session: MakeSession,
) -> None:
    def model(ctx: rj.ChatContext) -> list[Any]:
        last = ctx.items[-1]
        if getattr(ctx.items[0], "content", "") == "notice":
            return ["Hi", Delay(0.5), " there."]  # the task answers the user's question
        if isinstance(last, rj.ChatMessage) and last.content == "hi":
            return [ToolCall("consent_later")]
        return ["After."]

    llm = ScriptedLLM(model)  # type: ignore[arg-type]
    front = rj.Agent(instructions="front", id="front", tools=[consent_later])
    h = await make_session(llm, front)
    await asyncio.wait_for(h.session.run(user_input="hi"), BOUND)  # "After." was said
    await advance(0.5)  # the tool starts the task
    assert h.session.current_agent.id == "Notice"
    for _ in range(3):  # its on_enter has queued its line
        await asyncio.sleep(0)
    # The user asks something meanwhile: queued to the task, behind its line.
    h.session.generate_reply(user_input="a question")
    await advance(5.0)
    states = h.timeline.agent_states()
    # Speech that starts from listening was owed while the agent said nothing was.
    pairs = list(itertools.pairwise(states))
    assert ("listening", "speaking") not in pairs, h.timeline.describe()


async def test_update_agent_racing_task_entry_leaves_the_tasks_on_enter_alone(
    make_session: MakeSession,
) -> None:
    failed: dict[int, list[rj.ErrorEvent]] = {}
    for steps in range(8):  # land the switch on each step of the task's entry
        llm = ScriptedLLM([[ToolCall("consent")], ["After."], ["Again."]])
        h = await make_session(llm, rj.Agent(instructions="front", id="front", tools=[consent]))
        h.session.generate_reply(user_input="hi")
        for _ in range(steps):
            await asyncio.sleep(0)
        await asyncio.wait_for(
            h.session.update_agent(rj.Agent(instructions="next", id="next")), BOUND
        )
        await advance(10.0)
        assert h.session.current_agent.id == "next"
        errors = [e for e in h.errors if e.source == "on_enter"]
        if errors:
            failed[steps] = errors
    assert failed == {}, failed
