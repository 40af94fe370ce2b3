"""Randomized lifecycle test: random sequences of user turns (plain, tools inline and in
the background, failures, handoffs, AgentTasks), say(), interrupts, the user's voice (a
noise, a long wordless noise, or a turn's words, at once or over the agent's speech: a
tentative interruption that resumes or becomes a real one) and time passing, then a close,
on virtual time, with a text-only or an audio output. After every step the reported state
must follow from the floor's facts; a reply paused over the user's speech is never
reported ``listening`` while it is still owed, nor resumes after a ``listening``
(``_voice.PauseWatch``); every operation must finish within its bound; after the close
nothing of ours may still run and the history must pair every tool call with exactly one
output.

``REJOINDER_STRESS_EXAMPLES`` raises the example count (``make stress`` runs 100,000).
Agent switches in every combination are the subject of ``test_switch_random``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.testing import (
    Delay,
    Fail,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedTTS,
    StateTimeline,
    ToolCall,
    advance,
)

from ._lifecycle import check_floor, check_history, run_on_virtual_time, stress_settings
from ._voice import LINE, PauseWatch, Voice, WatchedSpeaker, utterances

TURN_KINDS = ["text", "quick", "slow", "background", "handoff", "task", "fail"]
BOUND = 120.0  # virtual seconds any single operation may take


class SubTask(rj.AgentTask[str]):
    async def on_enter(self) -> None:
        self.session.say("One question first.")
        await advance(1.0)
        self.complete("answered")


@rj.function_tool
async def quick() -> str:
    """Quick."""
    await advance(0.2)
    return "quick ok"


@rj.function_tool
async def slow() -> str:
    """Slow."""
    await advance(3.0)
    return "slow ok"


@rj.function_tool
async def background(ctx: rj.RunContext[None]) -> str:
    """Background."""
    await ctx.update("started")
    await advance(2.0)
    return "background done"


@rj.function_tool
async def handoff() -> rj.Agent:
    """Hand over."""
    return make_agent("other")


@rj.function_tool
async def task() -> str:
    """Run a sub-task."""
    return await SubTask(instructions="sub", id="sub")


def make_agent(name: str) -> rj.Agent:
    return rj.Agent(instructions=name, id=name, tools=[quick, slow, background, handoff, task])


ENTRIES = ["silent", "greets", "greets_late", "after_start"]
"""How the first agent starts: says nothing, greets from on_enter, greets from an on_enter
that first takes a second (loading something), or the caller greets right after start()."""


class FirstAgent(rj.Agent):
    def __init__(self, entry: str) -> None:
        super().__init__(instructions="front", id="front", tools=make_agent("front").tools)
        self.entry = entry

    async def on_enter(self) -> None:
        if self.entry == "greets_late":
            await advance(1.0)
        if self.entry in ("greets", "greets_late"):
            self.session.say("Welcome.")


def check_opening(states: list[str], entry: str, ops: list[tuple[Any, ...]]) -> None:
    """The first state after ``initializing`` is the truth once the first agent entered:
    never a ``listening`` before a greeting that was on its way."""
    assert states[0] == "initializing"
    if len(states) < 2:
        return
    if entry != "silent":
        assert states[1] in ("thinking", "speaking"), states
    elif ops and (ops[0][0] in ("user", "run", "say") or ops[0][-1:] == ("say",)):
        assert states[1] in ("thinking", "speaking", "listening"), states
    else:
        assert states[1] == "listening", states


def model(ctx: rj.ChatContext) -> list[Any]:
    last = ctx.items[-1] if ctx.items else None
    if isinstance(last, rj.ChatMessage) and last.role == "user":
        # Utterances said close together make one turn ("text quick"): its last one counts.
        kind = last.content.split()[-1]
        if kind == "text":
            return ["Hi", Delay(0.5), " there."]
        if kind == "fail":
            return ["Par", Fail("boom")]
        if kind in ("quick", "background", "handoff", "task"):
            return [ToolCall(kind)]
        if kind == "slow":
            return ["Wait.", Delay(0.3), ToolCall("slow")]
    return ["Done", Delay(0.2), "."]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.sampled_from(TURN_KINDS)),
        st.tuples(st.just("run"), st.sampled_from(TURN_KINDS)),
        st.tuples(st.just("say"), st.booleans()),
        st.tuples(st.just("interrupt")),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.5, 5.0])),
        st.tuples(
            st.just("voice"),
            # half of them a noise, too short to interrupt: over speech, a tentative one
            utterances(TURN_KINDS),
            # at once, over whatever the agent says, or over a line said for it
            st.sampled_from(["now", "speaking", "say"]),
        ),
    ),
    max_size=12,
)


async def scenario(
    ops: list[tuple[Any, ...]], close_with_drain: bool, audio: bool, entry: str = "silent"
) -> None:
    before = {t for t in asyncio.all_tasks() if not t.done()}
    voice, pauses = Voice(), PauseWatch()
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=ScriptedLLM(model),  # type: ignore[arg-type]
        tts=ScriptedTTS() if audio else None,
        user_away_timeout=4.0,
        **voice.session_options(),
    )
    voice.attach(session)
    if audio:
        session.output.audio = WatchedSpeaker(pauses)
    session.output.transcription = MemoryTextOutput()
    timeline = StateTimeline(session)  # raises if an event's old state is not the last one
    pauses.attach(session)
    await session.start(FirstAgent(entry))
    handles: list[rj.SpeechHandle] = []
    if entry == "after_start":
        handles.append(session.say("Welcome."))
    for op in ops:
        name = op[0]
        if name == "user":
            handles.append(session.generate_reply(user_input=op[1]))
        elif name == "run":
            await asyncio.wait_for(session.run(user_input=op[1]), BOUND)
        elif name == "say":
            handles.append(session.say("A notice.", allow_interruptions=op[1]))
        elif name == "interrupt":
            await asyncio.wait_for(session.interrupt(), BOUND)
        elif name == "voice":
            if op[2] == "say":
                handles.append(session.say(LINE))
            await voice.say(session, op[1], barge_in=op[2] != "now")
        else:
            await asyncio.sleep(op[1])
        check_floor(session)
        pauses.check()
    pauses.closing = True
    if close_with_drain:
        await asyncio.wait_for(session.drain(timeout=60.0), BOUND)
    else:
        await asyncio.wait_for(session.aclose(), BOUND)
    assert session.agent_state == "listening"
    check_opening(timeline.agent_states(), entry, ops)
    await advance(0)
    leaked = {t for t in asyncio.all_tasks() if not t.done()} - before - {asyncio.current_task()}
    assert not leaked, leaked
    assert all(h.done() for h in handles)
    pauses.check()
    check_history(session.history)
    for what in sorted(pauses.counts):  # what the example exercised
        event(f"speaker {what}")


@stress_settings(default_examples=500)  # CI runs the same 500 sequences every time
@given(
    ops=operations,
    close_with_drain=st.booleans(),
    audio=st.booleans(),
    entry=st.sampled_from(ENTRIES),
)
def test_random_lifecycles_keep_every_promise(
    ops: list[tuple[Any, ...]], close_with_drain: bool, audio: bool, entry: str
) -> None:
    run_on_virtual_time(lambda: scenario(ops, close_with_drain, audio, entry))
