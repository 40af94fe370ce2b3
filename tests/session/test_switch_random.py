"""Randomized lifecycle test with agent switches.

Random sequences of user turns (plain, tools inline and in the background, failures,
handoffs returned by inline and by background tools, AgentTasks that speak and complete,
that ask and are completed by the user's next turn, nested ones), ``run()``, ``say()``
(awaited or not), ``interrupt()`` (also a few loop iterations into a turn that enters a
task), ``update_agent()`` (awaited or not), failing text outputs swapped in and out,
wrong-typed public calls, the user's voice (a noise, a long wordless noise, or words that
make a turn; said at once or over the agent's speech, where a noise is a tentative
interruption that pauses the reply and resumes it, and a longer one interrupts it), and
time passing, on a text-only or an audio session, on virtual time.

The oracle (``_lifecycle.Oracle``) watches the event stream for a false ``listening``
(one not followed by a new cause before the agent speaks or thinks again), 0 ms pulses,
``away`` while work of the current owner runs, ``listening`` while a paused reply is
still owed, and a paused reply resuming after ``listening``; after every step the
reported state must follow from the floor's facts. At the end, after generous time, the
agent is
``listening``, the session still answers, every call returned within its bound, every
speech resolved, nothing of ours still runs after the close, and the history pairs every
tool call with exactly one output.

``REJOINDER_STRESS_EXAMPLES`` sets the example count (``make stress`` runs 100,000);
``REJOINDER_STRESS_SEED`` explores other sequences than the fixed, derandomized ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, example, given
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

from ._lifecycle import (
    Oracle,
    check_floor,
    check_history,
    run_on_virtual_time,
    stress_settings,
)
from ._voice import LINE, Voice, WatchedSpeaker, utterances

DEFAULT_EXAMPLES = 800  # CI (the suite's 5-minute budget); make stress: 100,000
BOUND = 120.0  # virtual seconds any single awaited call may take
SETTLE = 700.0  # virtual seconds after the last step: past every watchdog


# ------------------------------------------------------------------ agents


def oracle_of(session: rj.AgentSession[Any]) -> Oracle:
    data: Oracle = session.userdata
    return data


def speak(agent: rj.Agent, text: str) -> rj.SpeechHandle:
    """``agent``'s hook says ``text`` (for that agent: a paused one's line waits for it)."""
    return agent.session.say(text)


async def sub_task(agent: rj.Agent, task: rj.AgentTask[str]) -> str:
    """``agent``'s hook runs ``task`` (a paused or replaced agent cannot: ToolError)."""
    oracle_of(agent.session).awaiting(agent, task)
    return await task


class NoticeTask(rj.AgentTask[str]):
    """Says a line (awaited) and completes: no listening before the caller goes on."""

    instructions = "notice"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "notice.on_enter"):
            await speak(self, "This call may be recorded.")
            self.complete("noted")


class AskTask(rj.AgentTask[str]):
    """Asks (not awaited) and waits: the user's next turn completes it through a tool."""

    instructions = "ask"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "ask.on_enter"):
            speak(self, "What is your email address?")

    @rj.function_tool
    async def answer(self) -> None:
        """Record the user's answer."""
        self.complete("ada@example.com")


class OuterTask(rj.AgentTask[str]):
    """A task whose on_enter runs a nested task."""

    instructions = "outer"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "outer.on_enter"):
            speak(self, "Two things first.")
            inner = await sub_task(self, NoticeTask(tools=tools()))
            self.complete(f"outer: {inner}")


class Greeter(rj.Agent):
    """Looks something up, then greets (F1)."""

    instructions = "greeter"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "greeter.on_enter"):
            await advance(0.2)
            speak(self, "Hello from the greeter.")


class OpensWithAsk(rj.Agent):
    """The first agent asks through a task from its on_enter (a consent question, an
    outbound call's voicemail): it has entered once the task took the floor."""

    instructions = "front"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "front.on_enter"):
            await sub_task(self, AskTask(tools=tools()))
            speak(self, "Thanks, on we go.")


class Quiet(rj.Agent):
    """Enters without saying anything: listening is then true."""

    instructions = "quiet"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "quiet.on_enter"):
            await advance(0.3)


class NoticeEnter(rj.Agent):
    """Runs a task from its own on_enter."""

    instructions = "notice_enter"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "notice_enter.on_enter"):
            await sub_task(self, NoticeTask(tools=tools()))


class AskEnter(rj.Agent):
    """Asks through a task from its own on_enter (the task waits for the user)."""

    instructions = "ask_enter"

    async def on_enter(self) -> None:
        with oracle_of(self.session).working(self, "ask_enter.on_enter"):
            await sub_task(self, AskTask(tools=tools()))


TARGETS = ["plain", "greeter", "quiet", "notice_enter", "ask_enter"]


def make_target(kind: str) -> rj.Agent:
    if kind == "plain":
        return rj.Agent(instructions="plain", id="plain", tools=tools())
    classes: dict[str, type[rj.Agent]] = {
        "greeter": Greeter,
        "quiet": Quiet,
        "notice_enter": NoticeEnter,
        "ask_enter": AskEnter,
    }
    return classes[kind](tools=tools())


# ------------------------------------------------------------------- tools


@contextmanager
def working(ctx: rj.RunContext[Oracle], what: str) -> Iterator[rj.Agent | None]:
    """The tool works for the user; yields the agent whose speech carried the call."""
    owner = ctx.userdata.owner_of(ctx.speech_handle)
    with ctx.userdata.working(owner, what):
        yield owner


@contextmanager
def in_background(ctx: rj.RunContext[Oracle], what: str) -> Iterator[rj.Agent | None]:
    """A tool released to the background: its result (or error) landing is a cause."""
    owner = ctx.userdata.owner_of(ctx.speech_handle)
    with ctx.userdata.in_background(owner, what):
        yield owner


async def tool_task(
    ctx: rj.RunContext[Oracle], owner: rj.Agent | None, task: rj.AgentTask[str]
) -> str:
    """A tool runs ``task`` (one of a paused or replaced agent cannot: ToolError)."""
    ctx.userdata.awaiting(owner, task)
    return await task


@rj.function_tool
async def quick(ctx: rj.RunContext[Oracle]) -> str:
    """Quick."""
    with working(ctx, "quick"):
        await advance(0.2)
    return "quick ok"


@rj.function_tool
async def slow(ctx: rj.RunContext[Oracle]) -> str:
    """Slow."""
    with working(ctx, "slow"):
        await advance(3.0)
    return "slow ok"


@rj.function_tool
async def background(ctx: rj.RunContext[Oracle]) -> str:
    """Background."""
    with in_background(ctx, "background"):
        await ctx.update("started")
        await advance(2.0)
        return "background done"


@rj.function_tool
async def handoff(ctx: rj.RunContext[Oracle], to: str) -> rj.Agent:
    """Hand over."""
    return make_target(to)


@rj.function_tool
async def bg_handoff(ctx: rj.RunContext[Oracle], to: str) -> rj.Agent:
    """Hand over, after checking in the background."""
    with in_background(ctx, "bg_handoff"):
        await ctx.update("checking who is free")
        await advance(1.0)
        return make_target(to)


@rj.function_tool
async def notice(ctx: rj.RunContext[Oracle]) -> str:
    """Tell the caller about recording."""
    with working(ctx, "notice") as owner:
        result = await tool_task(ctx, owner, NoticeTask(tools=tools()))
    return f"notice: {result}"


@rj.function_tool
async def ask(ctx: rj.RunContext[Oracle]) -> str:
    """Sign the user up."""
    with working(ctx, "ask") as owner:
        email = await tool_task(ctx, owner, AskTask(tools=tools()))
    return f"signed up {email}"


@rj.function_tool
async def outer(ctx: rj.RunContext[Oracle]) -> str:
    """Two things first."""
    with working(ctx, "outer") as owner:
        result = await tool_task(ctx, owner, OuterTask(tools=tools()))
    return result


@rj.function_tool
async def bg_notice(ctx: rj.RunContext[Oracle]) -> str:
    """Give the notice from the background."""
    with in_background(ctx, "bg_notice") as owner:
        await ctx.update("notice coming")
        await advance(0.5)
        ctx.userdata.cause("bg_notice starts a task")
        return f"notice: {await tool_task(ctx, owner, NoticeTask(tools=tools()))}"


def tools() -> list[rj.FunctionTool]:
    return [quick, slow, background, handoff, bg_handoff, notice, ask, outer, bg_notice]


# ------------------------------------------------------------------- model


def model(ctx: rj.ChatContext) -> list[Any]:
    role = getattr(ctx.items[0], "content", "") if ctx.items else ""
    last = ctx.items[-1] if ctx.items else None
    if isinstance(last, rj.ChatMessage) and last.role == "user":
        # Utterances said close together make one turn ("text quick"): its last one counts.
        return reply_to(role, last.content.split()[-1])
    return ["Done", Delay(0.2), "."]


def reply_to(role: str, kind: str) -> list[Any]:
    if role == "ask" and kind in ("text", "answer"):
        return ["Got it.", ToolCall("answer")]
    if kind == "text":
        return ["Hi", Delay(0.5), " there."]
    if kind == "fail":
        return ["Par", Fail("boom")]
    if kind == "slow":
        return ["Wait.", Delay(0.3), ToolCall("slow")]
    if kind == "ask_mid":  # the call comes while the caller is still talking
        return ["Let me", ToolCall("ask"), Delay(0.3), " sign you up."]
    name, _, to = kind.partition(":")
    if to:
        return [ToolCall(name, {"to": to})]
    return [ToolCall(kind)]


# ----------------------------------------------------------------- outputs


class FailingText(rj.TextOutput):
    """A text sink that breaks: in ``flush`` or in ``capture_text``."""

    def __init__(self, where: str, error: type[Exception]) -> None:
        self.where, self.error = where, error

    async def capture_text(self, text: str) -> None:
        if self.where == "capture":
            raise self.error("the sink is gone")

    def flush(self) -> None:
        if self.where == "flush":
            raise self.error("the sink is gone")


def make_output(spec: str) -> rj.TextOutput:
    if spec == "memory":
        return MemoryTextOutput()
    where, _, error = spec.partition(":")
    return FailingText(where, {"TypeError": TypeError, "BrokenPipeError": BrokenPipeError}[error])


# --------------------------------------------------------------- bad calls

BAD_CALLS: dict[str, Any] = {
    "say_int": lambda s: s.say(123),
    "say_none": lambda s: s.say(None),
    "say_flag": lambda s: s.say("ok", allow_interruptions="yes"),
    "reply_int": lambda s: s.generate_reply(user_input=123),
    "reply_instructions": lambda s: s.generate_reply(instructions=["x"]),
    "run_bytes": lambda s: s.run(user_input=b"bytes"),
    "update_str": lambda s: s.update_agent("x"),
}


def call_synchronously(call: Any, session: rj.AgentSession[Any]) -> None:
    """Make the call; a coroutine (``run``) is driven to its first suspension only: a
    wrong type must raise at the call site, before anything runs."""
    result = call(session)
    if asyncio.iscoroutine(result):
        try:
            result.send(None)
        finally:
            result.close()


async def bad_call(session: rj.AgentSession[Any], oracle: Oracle, which: str) -> None:
    """A wrong-typed public call raises TypeError at the call site and stores nothing."""
    before = list(session.history.items)
    speeches, items, state = len(oracle.speeches), oracle.items_added, session.agent_state
    with pytest.raises(TypeError):
        call_synchronously(BAD_CALLS[which], session)
    assert session.history.items == before, which
    assert (len(oracle.speeches), oracle.items_added) == (speeches, items), which
    assert session.agent_state == state, which


# --------------------------------------------------------------- the test

KINDS = [
    "text",
    "quick",
    "slow",
    "background",
    "fail",
    "notice",
    "ask",
    "ask_mid",
    "outer",
    "answer",
    "bg_notice",
    *(f"handoff:{t}" for t in TARGETS),
    *(f"bg_handoff:{t}" for t in TARGETS),
]
ENTERING = ["notice", "ask", "ask_mid", "outer", "handoff:greeter", "handoff:notice_enter"]
OUTPUTS = [
    "memory",
    "flush:TypeError",
    "flush:BrokenPipeError",
    "capture:TypeError",
    "capture:BrokenPipeError",
]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.sampled_from(KINDS)),
        st.tuples(st.just("run"), st.sampled_from(KINDS)),
        st.tuples(st.just("say"), st.booleans(), st.booleans()),
        st.tuples(st.just("interrupt"), st.booleans()),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.5, 5.0])),
        st.tuples(st.just("update"), st.sampled_from(TARGETS), st.booleans()),
        st.tuples(st.just("enter_interrupt"), st.sampled_from(ENTERING), st.integers(0, 24)),
        st.tuples(st.just("output"), st.sampled_from(OUTPUTS)),
        st.tuples(st.just("bad"), st.sampled_from(sorted(BAD_CALLS))),
        # Said at once, or over the agent's speech (whatever it is saying, or a line
        # said for the purpose): there a noise is a tentative interruption.
        st.tuples(st.just("voice"), utterances(KINDS), st.just("now")),
        st.tuples(st.just("voice"), utterances(KINDS), st.sampled_from(["speaking", "say"])),
    ),
    max_size=14,
)


@dataclass(frozen=True)
class Setup:
    audio: bool
    away: float
    close_with_drain: bool
    paced: bool = False
    """The audio output takes audio only in real time (as a phone line or a WebRTC track
    does), so capture waits while a reply plays."""
    opens_with_task: bool = False
    """The first agent awaits a task from its on_enter (``OpensWithAsk``)."""


setups = st.builds(
    Setup,
    audio=st.booleans(),
    away=st.sampled_from([1.0, 2.0, 4.0]),
    close_with_drain=st.booleans(),
    paced=st.booleans(),
    opens_with_task=st.booleans(),
)


async def step(
    session: rj.AgentSession[Any], oracle: Oracle, voice: Voice, op: tuple[Any, ...]
) -> None:
    name = op[0]
    if name == "voice":
        if op[2] == "say":
            oracle.cause("say")
            session.say(LINE)
        await voice.say(session, op[1], barge_in=op[2] != "now")
    elif name == "user":
        oracle.cause(f"user input {op[1]}")
        session.generate_reply(user_input=op[1])
    elif name == "run":
        await run_turn(session, oracle, op[1])
    elif name == "say":
        oracle.cause("say")
        speaker = session.current_agent
        handle = session.say("A notice.", allow_interruptions=op[1])
        if op[2]:
            await said(session, handle, speaker)
    elif name == "interrupt":
        stopped = session.interrupt()
        oracle.interrupts.append(stopped)
        if op[1]:
            await asyncio.wait_for(asyncio.shield(stopped), BOUND)
    elif name == "advance":
        await asyncio.sleep(op[1])
    elif name == "update":
        oracle.cause(f"update_agent {op[1]}")
        agent = make_target(op[1])
        switch = session.update_agent(agent)
        oracle.switches.append((switch, agent))
        if op[2]:
            await asyncio.wait_for(asyncio.shield(switch), BOUND)
    elif name == "enter_interrupt":
        oracle.cause(f"user input {op[1]}")
        session.generate_reply(user_input=op[1])
        for _ in range(op[2]):
            await asyncio.sleep(0)
        await asyncio.wait_for(session.interrupt(), BOUND)
    elif name == "output":
        session.output.transcription = make_output(op[1])
    else:
        await bad_call(session, oracle, op[1])


async def run_turn(session: rj.AgentSession[Any], oracle: Oracle, text: str) -> rj.RunResult:
    async def run() -> rj.RunResult:
        oracle.cause(f"run {text}")  # when the call is made, not when it is scheduled
        return await session.run(user_input=text)

    return await asyncio.wait_for(run(), BOUND)


async def said(session: rj.AgentSession[Any], handle: rj.SpeechHandle, speaker: rj.Agent) -> None:
    """An awaited say() resolves within the bound, unless its agent was paused by a task
    (a paused caller says nothing until it resumes)."""

    async def wait() -> None:
        await handle

    try:
        await asyncio.wait_for(wait(), BOUND)
    except TimeoutError:
        oracle = oracle_of(session)
        paused = speaker is not session.current_agent and oracle.in_stack(speaker)
        assert paused, f"say() on {speaker.id} did not resolve\n{oracle.describe()}"


def check_step(session: rj.AgentSession[Any], oracle: Oracle) -> None:
    oracle.check()
    check_floor(session)
    fatal = [e for e in oracle.errors if not e.recoverable]
    assert not fatal, (fatal, oracle.describe())
    # The test's own tools never crash, and its hooks fail only when a task they wait
    # for is ended under them (a ToolError): anything else is the session's doing.
    crashed = [e for e in oracle.errors if e.source == "tool" or hook_crashed(e)]
    assert not crashed, (crashed, oracle.describe())


def hook_crashed(error: rj.ErrorEvent) -> bool:
    return error.source == "on_enter" and not isinstance(error.error, rj.ToolError)


async def scenario(ops: list[tuple[Any, ...]], setup: Setup) -> None:
    before = {t for t in asyncio.all_tasks() if not t.done()}
    oracle = Oracle()
    voice = Voice()
    session: rj.AgentSession[Oracle] = rj.AgentSession(
        llm=ScriptedLLM(model),  # type: ignore[arg-type]
        tts=ScriptedTTS() if setup.audio else None,
        user_away_timeout=setup.away,
        userdata=oracle,
        **voice.session_options(),
    )
    voice.attach(session)
    if setup.audio:
        max_lead = 0.3 if setup.paced else None
        session.output.audio = WatchedSpeaker(oracle.pauses, max_lead=max_lead)
    session.output.transcription = MemoryTextOutput()
    StateTimeline(session)  # raises if an event's old state is not the previous new state
    oracle.attach(session)
    if setup.opens_with_task:
        front: rj.Agent = OpensWithAsk(id="front", tools=tools())
    else:
        front = rj.Agent(instructions="front", id="front", tools=tools())
    await asyncio.wait_for(session.start(front), BOUND)
    try:
        await play(session, oracle, voice, ops, setup)
    except BaseException:
        oracle.pauses.closing = True
        await asyncio.wait_for(session.aclose(), BOUND)  # a failure leaves nothing running
        raise
    oracle.check()
    assert session.agent_state == "listening"
    await advance(0)
    leaked = {t for t in asyncio.all_tasks() if not t.done()} - before - {asyncio.current_task()}
    assert not leaked, leaked
    assert all(h.done() for h in oracle.speeches), oracle.describe()
    check_history(session.history)
    report(session, oracle, voice)


def report(session: rj.AgentSession[Oracle], oracle: Oracle, voice: Voice) -> None:
    """What the example exercised (``--hypothesis-show-statistics``)."""
    switches = [i.new_agent_id for i in session.history.items if isinstance(i, rj.AgentHandoff)]
    event(f"switches: {min(len(switches), 6)}{'+' if len(switches) >= 6 else ''}")
    tasks = sum(1 for agent in switches if agent.endswith("Task"))
    event(f"tasks entered: {min(tasks, 3)}{'+' if tasks >= 3 else ''}")
    event("user went away" if any("-> away" in line for line in oracle.log) else "never away")
    for cause in sorted({c.split(" ")[0] for c in oracle.excused_pulses}):
        event(f"a 0 ms speaking -> listening pulse, then {cause} at that instant")
    for source in sorted({e.source for e in oracle.errors}):
        event(f"error event from {source}")
    for what in sorted(oracle.pauses.counts):
        event(f"speaker {what}")
    for what in sorted(voice.counts):
        event(f"user {what}")


async def play(
    session: rj.AgentSession[Oracle],
    oracle: Oracle,
    voice: Voice,
    ops: list[tuple[Any, ...]],
    setup: Setup,
) -> None:
    """Every step, then time, then one more turn, then the close."""
    for op in ops:
        oracle._note(f"--- {op}")
        await step(session, oracle, voice, op)
        check_step(session, oracle)
    oracle._note("--- settle")
    await asyncio.sleep(SETTLE)
    check_step(session, oracle)
    assert session.agent_state == "listening", oracle.describe()
    assert all(switch.done() for switch, _ in oracle.switches), oracle.describe()
    assert all(stopped.done() for stopped in oracle.interrupts), oracle.describe()
    # The session still answers.
    session.output.transcription = MemoryTextOutput()
    result = await run_turn(session, oracle, "text")
    assert result.final_output, (result, oracle.describe())
    check_step(session, oracle)
    oracle._note("--- close")
    oracle.pauses.closing = True
    if setup.close_with_drain:
        await asyncio.wait_for(session.drain(timeout=60.0), BOUND)
    else:
        await asyncio.wait_for(session.aclose(), BOUND)


@stress_settings(default_examples=DEFAULT_EXAMPLES)
@given(ops=operations, setup=setups)
# Found by make stress: the user began speaking as their turn's tool started a task, and
# the barge-in, due 0.8 s later, stopped the paused caller's reply instead of nothing (the
# task was listening): its tool was cancelled, the task abandoned, and the caller spoke
# after a false listening.
@example(
    ops=[("voice", "ask", "now"), ("update", "greeter", False), ("voice", "wordless", "now")],
    setup=Setup(audio=False, away=1.0, close_with_drain=False),
)
def test_random_switches_keep_every_promise(ops: list[tuple[Any, ...]], setup: Setup) -> None:
    run_on_virtual_time(lambda: scenario(ops, setup))
