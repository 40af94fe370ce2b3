"""However a task ends, its caller's context reads in speaking order: what was said in the
task (nested tasks included) comes before the caller's waiting call and that call's
output, so the caller's model reads the output last. On virtual time, with a model that
answers from the raw context."""

from __future__ import annotations

from typing import Any

import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ToolCall, advance

from ..conftest import Harness, MakeSession
from ._speaking_order import assert_speaking_order, read


class Step(rj.AgentTask[str]):
    """Asks its question on entering; a user saying "deeper" starts the next step from
    a tool, "done" completes it (its tool ``finish``: a tool named ``done`` would hide
    ``AgentTask.done``), anything else is answered in words."""

    def __init__(self, level: int) -> None:
        super().__init__(instructions=f"step {level}", id=f"step{level}")
        self.level = level
        self.inner: Step | None = None

    async def on_enter(self) -> None:
        self.session.say(f"Question {self.level}?")

    @rj.function_tool
    async def deeper(self) -> str:
        """Ask something more."""
        self.inner = Step(self.level + 1)
        return await self.inner

    @rj.function_tool
    async def finish(self) -> None:
        """The answer is complete."""
        self.complete(f"answer {self.level}")


class Front(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="front", id="front")
        self.step: Step | None = None

    @rj.function_tool
    async def ask(self) -> str:
        """Ask the user."""
        self.step = Step(1)
        return await self.step


def model(ctx: rj.ChatContext) -> list[Any]:
    """Answers from a tool's output when it is the last item; calls a tool when the user
    asks for one; otherwise answers in words."""
    system = ctx.items[0]
    assert isinstance(system, rj.ChatMessage)
    who, last = system.content, ctx.items[-1]
    if isinstance(last, rj.FunctionCallOutput):
        return [f"{who} got {last.output or 'nothing'}."]
    assert isinstance(last, rj.ChatMessage) and last.role == "user", read(ctx.items)
    if who == "front":
        return ["Let me ask.", ToolCall("ask")]
    if last.content in ("deeper", "done"):
        return [ToolCall("deeper" if last.content == "deeper" else "finish")]
    return [f"{who} heard {last.content}."]


async def begin(make_session: MakeSession, **options: Any) -> tuple[Harness, Front]:
    front = Front()
    h = await make_session(ScriptedLLM(model), front, **options)  # type: ignore[arg-type]
    await h.session.run(user_input="hi")
    assert h.session.current_agent.id == "step1"
    return h, front


def calls_of(h: Harness, name: str) -> int:
    return sum(
        1 for i in h.session.history.items if isinstance(i, rj.FunctionCall) and i.name == name
    )


async def test_completed_task_is_read_before_the_call_and_its_output(
    make_session: MakeSession,
) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="my answer")
    await h.session.run(user_input="done")
    assert h.session.current_agent is front
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "my answer"),
        ("assistant", "step 1 heard my answer."),
        ("user", "done"),
        ("call", "ask"),
        ("output", "answer 1"),
        ("assistant", "front got answer 1."),
    ]
    assert calls_of(h, "ask") == 1
    assert_speaking_order(front.chat_ctx.items, h.session.history)


async def test_cancelled_task(make_session: MakeSession) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="wait")
    assert front.step is not None
    front.step.cancel()
    await advance(1.0)
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "wait"),
        ("assistant", "step 1 heard wait."),
        ("call", "ask"),
        ("output", "the task step1 was cancelled"),
        ("assistant", "front got the task step1 was cancelled."),
    ]
    assert_speaking_order(front.chat_ctx.items, h.session.history)


async def test_task_whose_on_enter_fails(make_session: MakeSession) -> None:
    class Broken(rj.AgentTask[str]):
        async def on_enter(self) -> None:
            await self.session.say("One moment.")
            raise RuntimeError("no line")

    @rj.function_tool
    async def ask() -> str:
        """Ask the user."""
        return await Broken(instructions="broken", id="broken")

    front = rj.Agent(instructions="front", tools=[ask], id="front")
    h = await make_session(ScriptedLLM(model), front)  # type: ignore[arg-type]
    await h.session.run(user_input="hi")
    await advance(1.0)
    items = read(front.chat_ctx.items)
    assert items[:4] == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "One moment."),
        ("call", "ask"),
    ]
    assert items[4][0] == "output" and "failed: no line" in items[4][1]
    assert items[5:] == [("assistant", f"front got {items[4][1]}.")]
    assert_speaking_order(front.chat_ctx.items, h.session.history)


async def test_task_abandoned_by_its_expired_tool(make_session: MakeSession) -> None:
    # The waiting tool's watchdog cancels it: its output is on record before the task
    # has left, and the task's conversation still goes before the call.
    h, front = await begin(make_session, obligation_timeouts={"tool": 30.0})
    await h.session.run(user_input="thinking about it")
    await advance(40.0)
    assert h.session.current_agent is front
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "thinking about it"),
        ("assistant", "step 1 heard thinking about it."),
        ("call", "ask"),
        ("output", "the tool call was cancelled"),
    ]
    assert_speaking_order(front.chat_ctx.items, h.session.history)


async def test_nested_tasks_complete_innermost_first(make_session: MakeSession) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="deeper")
    assert h.session.current_agent.id == "step2"
    await h.session.run(user_input="done")
    assert h.session.current_agent.id == "step1"
    await h.session.run(user_input="done")
    assert h.session.current_agent is front
    step1 = front.step
    assert step1 is not None
    assert read(step1.chat_ctx.items) == [
        ("assistant", "Question 1?"),
        ("user", "deeper"),
        ("assistant", "Question 2?"),
        ("user", "done"),
        ("call", "deeper"),
        ("output", "answer 2"),
        ("assistant", "step 1 got answer 2."),
        ("user", "done"),
        ("call", "finish"),
        ("output", ""),
    ]
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "deeper"),
        ("assistant", "Question 2?"),
        ("user", "done"),
        ("assistant", "step 1 got answer 2."),
        ("user", "done"),
        ("call", "ask"),
        ("output", "answer 1"),
        ("assistant", "front got answer 1."),
    ]
    assert (calls_of(h, "ask"), calls_of(h, "deeper")) == (1, 1)
    for agent in (front, step1):
        assert_speaking_order(agent.chat_ctx.items, h.session.history)


async def test_outer_task_completing_brings_the_inner_conversation_along(
    make_session: MakeSession,
) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="deeper")
    await h.session.run(user_input="still thinking")
    assert front.step is not None
    front.step.complete("early")  # ends step 2 with it
    await advance(1.0)
    assert h.session.current_agent is front
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "deeper"),
        ("assistant", "Question 2?"),
        ("user", "still thinking"),
        ("assistant", "step 2 heard still thinking."),
        ("call", "ask"),
        ("output", "early"),
        ("assistant", "front got early."),
    ]
    assert_speaking_order(front.chat_ctx.items, h.session.history)


async def test_update_agent_while_tasks_run_leaves_each_caller_in_order(
    make_session: MakeSession,
) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="deeper")
    await h.session.update_agent(rj.Agent(instructions="next", id="next"))
    step1 = front.step
    assert step1 is not None
    said = [
        ("assistant", "Question 1?"),
        ("user", "deeper"),
        ("assistant", "Question 2?"),
    ]
    front_items, step1_items = read(front.chat_ctx.items), read(step1.chat_ctx.items)
    assert front_items[:3] == [("user", "hi"), ("assistant", "Let me ask."), said[0]]
    assert front_items[3:] == [
        *said[1:],
        ("call", "ask"),
        ("output", "the task step1 ended: the agent was replaced"),
    ]
    assert step1_items == [
        *said,
        ("call", "deeper"),
        ("output", "the task step2 ended: the agent was replaced"),
    ]
    for agent in (front, step1):
        assert_speaking_order(agent.chat_ctx.items, h.session.history)


async def test_session_closing_while_a_task_runs(make_session: MakeSession) -> None:
    h, front = await begin(make_session)
    await h.session.run(user_input="almost")
    await h.session.aclose()
    assert read(front.chat_ctx.items) == [
        ("user", "hi"),
        ("assistant", "Let me ask."),
        ("assistant", "Question 1?"),
        ("user", "almost"),
        ("assistant", "step 1 heard almost."),
        ("call", "ask"),
        ("output", "the session closed"),
    ]
    assert_speaking_order(front.chat_ctx.items, h.session.history)
