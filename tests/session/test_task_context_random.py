"""Randomized: nested tasks ending in any order leave every caller's context in speaking
order, and no caller's model is handed a task's last word as a new request.

Random sequences of user turns (one that starts a task, one that nests a task inside the
current one, one that completes it from its own tool, one answered in words), tasks
completed or cancelled from outside at any depth (an outer one ends the inner ones with
it), ``update_agent()`` while tasks run, time passing, and the session closing at the
end with whatever is still running. On virtual time, one fresh loop per sequence.

After the close, for every task and the agent that awaited it: the caller's context
holds everything said in the task, nothing said sits between a call and its output, and
what was said is in the history's order; and no model request of an agent that awaits
tasks ended with a message said in a task (a model takes the user's last word as a
request: that is how a tool got called twice).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ToolCall, advance

from ._lifecycle import run_on_virtual_time, stress_settings
from ._speaking_order import assert_speaking_order, read

BOUND = 120.0  # virtual seconds any awaited call may take


@dataclass
class Record:
    awaited: list[tuple[rj.Agent, Step]] = field(default_factory=list)
    """Each task with the agent that awaited it, in the order they began."""


def record_of(agent: rj.Agent) -> Record:
    data: Record = agent.session.userdata
    return data


class Step(rj.AgentTask[str]):
    def __init__(self, level: int) -> None:
        super().__init__(instructions=f"step {level}", id=f"step{level}", llm=own_model())
        self.level = level

    async def on_enter(self) -> None:
        self.session.say(f"Question {self.level}?")

    @rj.function_tool
    async def deeper(self) -> str:
        """Ask something more."""
        inner = Step(self.level + 1)
        record_of(self).awaited.append((self, inner))
        return await inner

    @rj.function_tool
    async def finish(self) -> None:
        """The answer is complete."""
        self.complete(f"answer {self.level}")


class Front(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="front", id="front", llm=own_model())

    @rj.function_tool
    async def ask(self) -> str:
        """Ask the user."""
        step = Step(1)
        record_of(self).awaited.append((self, step))
        return await step


def own_model() -> ScriptedLLM:
    """Each agent its own model, so its requests can be told apart."""
    return ScriptedLLM(model)  # type: ignore[arg-type]


def model(ctx: rj.ChatContext) -> list[Any]:
    """Naive: a tool's output last is answered in words; the user's word last is a
    request (the front agent asks, a step goes deeper or completes when told to)."""
    system, last = ctx.items[0], ctx.items[-1]
    assert isinstance(system, rj.ChatMessage)
    if not isinstance(last, rj.ChatMessage) or last.role != "user":
        return [f"{system.content} got it."]
    if system.content == "front":
        return [ToolCall("ask")]
    if last.content in ("deeper", "done"):
        return [ToolCall("deeper" if last.content == "deeper" else "finish")]
    return [f"{system.content} heard {last.content}."]


USER = st.sampled_from(["hi", "deeper", "deeper", "done", "hm"])  # nesting is the point
OPS = st.one_of(
    st.tuples(st.just("say"), USER),
    st.tuples(st.sampled_from(["complete", "cancel"]), st.integers(1, 3)),
    st.tuples(st.just("replace"), st.just(0)),
    st.tuples(st.just("wait"), st.sampled_from([0, 1, 30])),
)


def running(record: Record, level: int) -> Step | None:
    """The latest task of ``level`` that has not ended."""
    tasks = [task for _, task in record.awaited if task.level == level and not task.done]
    return tasks[-1] if tasks else None


async def play(ops: list[tuple[str, Any]]) -> None:
    record = Record()
    session: rj.AgentSession[Record] = rj.AgentSession(userdata=record, user_away_timeout=None)
    session.output.transcription = rj.MemoryTextOutput()
    await session.start(Front())
    for op, value in ops:
        if op == "say":
            await asyncio.wait_for(session.run(user_input=value), BOUND)
        elif op in ("complete", "cancel"):
            task = running(record, value)
            if task is not None:
                task.complete(f"from outside {value}") if op == "complete" else task.cancel()
        elif op == "replace":
            await asyncio.wait_for(session.update_agent(Front()), BOUND)
        await advance(value if op == "wait" else 0.5)
    history = session.history
    still = sum(1 for _, task in record.awaited if not task.done)
    await asyncio.wait_for(session.aclose(), BOUND)
    deepest = max((task.level for _, task in record.awaited), default=0)
    event(f"deepest task: {deepest}; running at the close: {min(still, 2)}")

    for caller, task in record.awaited:
        mine = {id(item) for item in caller.chat_ctx.items}
        said = [i for i in task.chat_ctx.items if isinstance(i, rj.ChatMessage)]
        missing = [i for i in said if i.role != "system" and id(i) not in mine]
        assert missing == [], f"{task.id} said {read(missing)}, not in {caller.id}'s context"
        assert_speaking_order(caller.chat_ctx.items, history)
    for caller in {id(caller): caller for caller, _ in record.awaited}.values():
        # What the user said in a task is never the last word of a request of its
        # caller: the caller's model would take it as a new request.
        theirs = {
            id(item)
            for awaiting, task in record.awaited
            if awaiting is caller
            for item in task.chat_ctx.items
        }
        assert isinstance(caller.llm, ScriptedLLM)
        for call in caller.llm.calls:
            last = call.chat_ctx.items[-1]
            assert id(last) not in theirs, (
                f"{caller.id} was asked with a task's last word: {read(call.chat_ctx.items)}"
            )


@stress_settings(default_examples=60)  # make stress runs more
@given(st.lists(OPS, min_size=1, max_size=12))
def test_nested_tasks_ending_in_any_order_keep_callers_in_speaking_order(
    ops: list[tuple[str, Any]],
) -> None:
    run_on_virtual_time(lambda: play(ops))
