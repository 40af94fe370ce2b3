"""Scenarios F: agent switches are one transaction (docs/architecture.md §4).

Each test is a reproduction of a reported break, named after the scenario it pins. They
use the public API only and assert the whole state timeline: "never listening" means not
one change to ``listening`` in the window, not even for 0 ms.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import (
    Delay,
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedTTS,
    StateTimeline,
    ToolCall,
    advance,
    now,
)

from ..conftest import MakeSession

BOUND = 30.0  # virtual seconds: a hang becomes a failure, not a stuck test


class Greeter(rj.Agent):
    """A new agent whose on_enter looks something up (a CRM) before it speaks."""

    def __init__(self, lookup: float = 0.2) -> None:
        super().__init__(instructions="greet", id="greeter")
        self.lookup = lookup

    async def on_enter(self) -> None:
        await advance(self.lookup)
        self.session.say("Hello from the greeter.")


def never_between(timeline: StateTimeline, state: str, t0: float, t1: float) -> None:
    """Not in ``state`` at any moment from t0 to t1: not just after t0, and not one change
    to it before t1 (for the agent; for ``away``, the user)."""
    who: Any = "user" if state == "away" else "agent"
    assert timeline.state_at(t0, who) != state, timeline.describe(who)
    bad = [c for c in timeline.changes_of(who) if c.new == state and t0 <= c.at < t1]
    assert not bad, timeline.describe(who)


# --------------------------------------------------------------------- F1 / F2


async def test_f1_update_agent_while_a_reply_is_owed_stays_thinking(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([[Delay(2.0), "Too late."], ["unused"]])
    h = await make_session(llm, rj.Agent(instructions="front", id="front"), user_away_timeout=0.1)
    h.session.generate_reply(user_input="hi")
    await advance(0.5)
    switched_at = now()
    entered = h.session.update_agent(Greeter())
    await asyncio.wait_for(entered, BOUND)
    await advance(5.0)
    spoke = [c.at for c in h.timeline.changes_of("agent") if c.new == "speaking"]
    assert spoke, h.timeline.describe()
    never_between(h.timeline, "listening", switched_at, spoke[0])
    assert h.timeline.times_of("away", who="user") == [] or (
        h.timeline.times_of("away", who="user")[0] > spoke[0]
    ), h.timeline.describe("user")
    assert h.output.segments == ["Hello from the greeter."]
    assert h.session.agent_state == "listening"


async def test_f1_on_enter_that_queues_nothing_ends_in_listening(
    make_session: MakeSession,
) -> None:
    class Quiet(rj.Agent):
        async def on_enter(self) -> None:
            await advance(0.3)

    h = await make_session(ScriptedLLM([]), rj.Agent(instructions="front", id="front"))
    await advance(1.0)
    t0 = now()
    await asyncio.wait_for(h.session.update_agent(Quiet(instructions="q", id="q")), BOUND)
    # thinking while on_enter ran, listening once it returned with nothing queued
    assert h.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert h.timeline.times_of("listening")[-1] == pytest.approx(t0 + 0.3)


async def test_f1_user_is_not_marked_away_while_on_enter_runs(make_session: MakeSession) -> None:
    h = await make_session(
        ScriptedLLM([]), rj.Agent(instructions="front", id="front"), user_away_timeout=1.0
    )
    await advance(0.5)
    h.session.update_agent(Greeter(lookup=3.0))
    await advance(2.0)  # the away timer would have fired at t=1.0
    assert h.session.user_state == "listening"
    assert h.session.agent_state == "thinking"
    await advance(10.0)
    assert h.output.segments == ["Hello from the greeter."]


async def test_f2_handoff_from_a_background_tool_stays_thinking(
    make_session: MakeSession,
) -> None:
    @rj.function_tool
    async def transfer(ctx: rj.RunContext[None]) -> rj.Agent:
        """Transfer, after checking availability."""
        await ctx.update("checking who is free")
        await advance(1.0)
        return Greeter()

    llm = ScriptedLLM([[ToolCall("transfer")], ["One moment."]])
    h = await make_session(
        llm, rj.Agent(instructions="front", tools=[transfer], id="front"), user_away_timeout=0.1
    )
    h.session.generate_reply(user_input="transfer me")
    await advance(0.9)  # "One moment." was delivered; the tool runs in the background
    returned_at = now() + 0.1
    await advance(5.0)
    assert h.session.current_agent.id == "greeter"
    greeted = h.timeline.times_of("speaking")[-1]
    never_between(h.timeline, "listening", returned_at, greeted)
    never_between(h.timeline, "away", returned_at, greeted)
    assert h.output.segments == ["One moment.", "Hello from the greeter."]


# --------------------------------------------------------------------- F3 / F4


class RecordingNotice(rj.AgentTask[bool]):
    def __init__(self) -> None:
        super().__init__(instructions="notice", id="notice")

    async def on_enter(self) -> None:
        await self.session.say("This call may be recorded.")
        self.complete(True)


@rj.function_tool
async def consent() -> str:
    """Tell the caller about recording."""
    agreed = await RecordingNotice()
    return f"notice given: {agreed}"


async def test_f3_task_that_speaks_then_completes_hands_over_without_listening(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([[ToolCall("consent")], ["Thanks, go ahead."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[consent], id="front"))
    handle = h.session.generate_reply(user_input="hi")
    await asyncio.wait_for(handle, BOUND)
    assert h.output.segments == ["This call may be recorded.", "Thanks, go ahead."]
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ], h.timeline.describe()
    assert h.session.current_agent.id == "front"


class GetEmail(rj.AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask for the user's email address.", id="get_email")

    async def on_enter(self) -> None:
        self.session.say("What is your email address?")

    @rj.function_tool
    async def record(self, email: str) -> None:
        """Record the address."""
        self.complete(email)


class SignUp(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="sign people up", id="front")

    @rj.function_tool
    async def sign_up(self, ctx: rj.RunContext[None]) -> str:
        """Sign the user up."""
        email = await GetEmail()
        return f"signed up {email}"


def sign_up_model(ctx: rj.ChatContext, *, call_mid_stream: bool = False) -> list[Any]:
    system = ctx.items[0].content  # type: ignore[union-attr]
    last = ctx.items[-1]
    if "email address" in system:
        assert isinstance(last, rj.ChatMessage)
        return ["Got it.", ToolCall("record", {"email": last.content})]
    if isinstance(last, rj.FunctionCallOutput):
        return [f"Done: {last.output}."]
    if call_mid_stream:  # the model calls the tool before it has finished talking
        return [
            "Let me sign you up.",
            " Hold on.",
            Delay(0.3),
            ToolCall("sign_up"),
            Delay(0.2),
            " More.",
        ]
    return ["Let me", Delay(0.1), " sign you up.", ToolCall("sign_up")]


def sign_up_mid_stream(ctx: rj.ChatContext) -> list[Any]:
    return sign_up_model(ctx, call_mid_stream=True)


async def voice(
    model: Any = sign_up_model, **options: Any
) -> tuple[rj.AgentSession[Any], StateTimeline, MemoryTextOutput]:
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM(model),
        tts=ScriptedTTS(),
        user_away_timeout=None,
        **options,
    )
    session.output.audio = MemoryAudioOutput()
    text = MemoryTextOutput()
    session.output.transcription = text
    timeline = StateTimeline(session)
    await session.start(SignUp())
    return session, timeline, text


async def test_f4_sign_up_task_with_tts_and_audio_output_completes() -> None:
    session, timeline, _ = await voice()
    try:
        handle = session.generate_reply(user_input="sign me up")
        await advance(5.0)
        assert session.current_agent.id == "get_email"
        assert session.agent_state == "listening", timeline.describe()
        answer = session.generate_reply(user_input="ada@example.com")
        await asyncio.wait_for(answer, BOUND)
        await asyncio.wait_for(handle, BOUND)
        assert session.current_agent.id == "front"
        await advance(10.0)
        assert session.agent_state == "listening", timeline.describe()
        said = [m.content for m in session.history.items if isinstance(m, rj.ChatMessage)]
        assert "Done: signed up ada@example.com." in said
    finally:
        await asyncio.wait_for(session.aclose(), BOUND)


async def test_f5_paused_caller_delivers_nothing_while_the_task_is_current() -> None:
    session, timeline, text = await voice(sign_up_mid_stream)
    audio = session.output.audio
    try:
        session.generate_reply(user_input="sign me up")
        await advance(5.0)
        assert session.current_agent.id == "get_email"
        assert session.agent_state == "listening", timeline.describe()
        # The caller's audio was cut when the task started: one segment each, the
        # caller's shorter than its text, and the task's question after it.
        assert len(audio.segments) == 2, audio.segments
        assert audio.segments[0] == pytest.approx(0.3)
        assert text.segments[-1] == "What is your email address?", text.segments
        assert not any("More." in segment for segment in text.segments), text.segments
        caller_said = [
            m
            for m in session.history.items
            if isinstance(m, rj.ChatMessage)
            and m.role == "assistant"
            and m.content.startswith("Let")
        ]
        assert len(caller_said) == 1 and caller_said[0].interrupted, caller_said
        assert caller_said[0].content == "Let", caller_said  # 0.3 s of 1.4 s of speech
    finally:
        await asyncio.wait_for(session.aclose(), BOUND)


async def test_f5_text_only_paused_caller_is_cut(make_session: MakeSession) -> None:
    llm = ScriptedLLM(sign_up_mid_stream)  # type: ignore[arg-type]
    h = await make_session(llm, SignUp())
    h.session.generate_reply(user_input="sign me up")
    await advance(2.0)
    assert h.session.current_agent.id == "get_email"
    assert h.output.segments == ["Let me sign you up. Hold on.", "What is your email address?"]
    await advance(2.0)
    assert not any("More." in s for s in h.output.segments), h.output.segments
    cut = [
        m
        for m in h.session.history.items
        if isinstance(m, rj.ChatMessage)
        and m.role == "assistant"
        and m.content == "Let me sign you up. Hold on."
    ]
    assert len(cut) == 1 and cut[0].interrupted


# ------------------------------------------------------------------------- F6


async def test_f6_outgoing_agents_queued_say_is_dropped_on_handoff(
    make_session: MakeSession,
) -> None:
    exits: list[str] = []

    class Leaving(rj.Agent):
        async def on_exit(self) -> None:
            exits.append("exit")
            await advance(1.0)

    h = await make_session(ScriptedLLM([]), Leaving(instructions="l", id="leaving"))
    first = h.session.say("First notice.")
    second = h.session.say("Second notice, never heard.")
    await advance(0.0)
    h.session.update_agent(Greeter(lookup=0.0))
    await asyncio.wait_for(first, BOUND)
    await asyncio.wait_for(second, BOUND)
    await advance(5.0)
    assert second.interrupted
    assert "Second notice, never heard." not in h.output.segments
    assert h.output.segments[-1] == "Hello from the greeter."
    states = h.timeline.agent_states()
    # one speaking span for what was audible, then the greeter's: no listening between
    assert states[-4:] == ["speaking", "thinking", "speaking", "listening"], states


async def test_f6_reply_dropped_unheard_reports_interrupted(make_session: MakeSession) -> None:
    llm = ScriptedLLM([[Delay(3.0), "Never heard."]])
    h = await make_session(llm, rj.Agent(instructions="front", id="front"))
    handle = h.session.generate_reply(user_input="hi")
    await advance(0.5)
    await asyncio.wait_for(h.session.update_agent(Greeter(lookup=0.0)), BOUND)
    await asyncio.wait_for(handle, BOUND)
    assert handle.interrupted


# ------------------------------------------------------------------------- F7


async def test_f7_update_agent_while_a_task_is_current_resolves_the_stranded_caller(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM(sign_up_model)  # type: ignore[arg-type]
    h = await make_session(llm, SignUp(), close_timeout=2.0)
    handle = h.session.generate_reply(user_input="sign me up")
    await advance(2.0)
    assert h.session.current_agent.id == "get_email"
    t0 = now()
    await asyncio.wait_for(h.session.update_agent(Greeter(lookup=0.0)), BOUND)
    await asyncio.wait_for(handle, 3 * 2.0)
    assert now() - t0 <= 3 * 2.0
    assert h.session.current_agent.id == "greeter"
    outputs = [i for i in h.session.history.items if isinstance(i, rj.FunctionCallOutput)]
    assert outputs and outputs[-1].name == "sign_up" and outputs[-1].is_error
    await advance(5.0)
    assert h.session.agent_state == "listening"
    # the session goes on with the new agent
    h.session.say("Still here.")
    await advance(2.0)
    assert h.output.segments[-1] == "Still here."


# ------------------------------------------------------------------------- F8


async def test_f8_interrupt_racing_a_tool_that_enters_a_task_keeps_the_session_alive(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([["Let me check.", ToolCall("consent")], ["After."], ["Again."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[consent], id="front"))
    h.session.generate_reply(user_input="hi")
    for _ in range(40):  # land the interrupt on every step of the task's entry
        await asyncio.sleep(0)
        h.session.interrupt()
    await advance(10.0)
    assert h.session.agent_state == "listening", h.timeline.describe()
    result = await asyncio.wait_for(h.session.run(user_input="still there?"), BOUND)
    assert result.final_output
    assert not [e for e in h.errors if not e.recoverable]


@pytest.mark.parametrize("steps", range(0, 12))
async def test_f8_interrupt_at_each_step_of_task_entry(
    make_session: MakeSession, steps: int
) -> None:
    llm = ScriptedLLM([[ToolCall("consent")], ["After."], ["Again."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[consent], id="front"))
    h.session.generate_reply(user_input="hi")
    for _ in range(steps):
        await asyncio.sleep(0)
    await asyncio.wait_for(h.session.interrupt(), BOUND)
    await advance(10.0)
    assert h.session.agent_state == "listening", h.timeline.describe()
    result = await asyncio.wait_for(h.session.run(user_input="still there?"), BOUND)
    assert result.final_output


# ------------------------------------------------------------------------- F9


class FailingFlush(rj.TextOutput):
    def __init__(self, error: type[Exception]) -> None:
        self.error = error
        self.texts: list[str] = []

    async def capture_text(self, text: str) -> None:
        self.texts.append(text)

    def flush(self) -> None:
        raise self.error("the sink is gone")


@pytest.mark.parametrize("error", [TypeError, BrokenPipeError, RuntimeError])
async def test_f9_output_whose_flush_raises_is_an_error_event_and_the_session_goes_on(
    make_session: MakeSession, error: type[Exception]
) -> None:
    h = await make_session(ScriptedLLM([["One."], ["Two."]]))
    h.session.output.transcription = FailingFlush(error)
    await asyncio.wait_for(h.session.run(user_input="a"), BOUND)
    assert any(e.source == "output" for e in h.errors), h.errors
    result = await asyncio.wait_for(h.session.run(user_input="b"), BOUND)
    assert result.final_output == "Two."
    assert h.session.agent_state == "listening"


async def test_f9_output_whose_capture_raises_is_an_error_event(make_session: MakeSession) -> None:
    class Broken(MemoryTextOutput):
        async def capture_text(self, text: str) -> None:
            raise BrokenPipeError("closed")

    h = await make_session(ScriptedLLM([["One."], ["Two."]]))
    h.session.output.transcription = Broken()
    await asyncio.wait_for(h.session.run(user_input="a"), BOUND)
    assert any(e.source == "output" for e in h.errors), h.errors
    h.session.output.transcription = MemoryTextOutput()
    result = await asyncio.wait_for(h.session.run(user_input="b"), BOUND)
    assert result.final_output == "Two."


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.say(123),
        lambda s: s.say(None),
        lambda s: s.say("ok", allow_interruptions="yes"),
        lambda s: s.generate_reply(user_input=123),
        lambda s: s.generate_reply(instructions=["x"]),
        lambda s: s.run(user_input=b"bytes"),
        lambda s: s.update_agent("not an agent"),
    ],
)
async def test_f9_wrong_typed_public_call_is_a_type_error_and_stores_nothing(
    make_session: MakeSession, call: Any
) -> None:
    h = await make_session(ScriptedLLM([["Fine."]]))
    before = list(h.session.history.items)

    async def attempt() -> None:
        result = call(h.session)
        if asyncio.iscoroutine(result):
            await result

    with pytest.raises(TypeError):
        await attempt()
    assert h.session.history.items == before
    reply = await asyncio.wait_for(h.session.run(user_input="still ok?"), BOUND)
    assert reply.final_output == "Fine."


# ------------------------------------------------------------- observed item 7


async def test_background_none_result_during_its_carrying_reply_keeps_thinking(
    make_session: MakeSession,
) -> None:
    @rj.function_tool
    async def notify(ctx: rj.RunContext[None]) -> None:
        """Send a notification in the background."""
        await ctx.update("sending")
        await advance(0.1)  # lands while "Sending it now." is still being delivered

    llm = ScriptedLLM([["Sending", ToolCall("notify"), Delay(0.5), " it now."], ["Sent."]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[notify], id="front"))
    await asyncio.wait_for(h.session.run(user_input="notify"), BOUND)
    assert h.timeline.agent_states() == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ], h.timeline.describe()


# ------------------------------------------------------------- observed item 8


async def test_e5_preemptive_reply_not_reused_after_hook_changed_instructions() -> None:
    from rejoinder.testing import MemoryAudioInput, ScriptedSTT, ScriptedVAD, speech_frame

    class Moody(rj.Agent):
        async def on_user_turn_completed(
            self, turn_ctx: rj.ChatContext, new_message: rj.ChatMessage
        ) -> None:
            self.instructions = "be terse now"

    def answer(ctx: rj.ChatContext) -> list[Any]:
        return [f"[{ctx.items[0].content}]"]  # type: ignore[union-attr]

    llm = ScriptedLLM(answer)  # type: ignore[arg-type]
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm,
        stt=ScriptedSTT(["Hello."]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        preemptive_generation=True,
        user_away_timeout=None,
    )
    session.input.audio = mic
    session.output.audio = MemoryAudioOutput()
    text = MemoryTextOutput()
    session.output.transcription = text
    await session.start(Moody(instructions="be chatty", id="moody"))
    try:
        for _ in range(50):
            await mic.push(speech_frame(0.02))
        await mic.push_silence(3.0)
        assert text.segments == ["[be terse now]"], text.segments
        assert len(llm.calls) == 2
    finally:
        await session.aclose()


# ----------------------------------------------------------- session.run and tasks


async def test_run_returns_when_a_task_waits_for_the_user(make_session: MakeSession) -> None:
    llm = ScriptedLLM(sign_up_model)  # type: ignore[arg-type]
    h = await make_session(llm, SignUp())
    first = await asyncio.wait_for(h.session.run(user_input="sign me up"), BOUND)
    assert h.session.current_agent.id == "get_email"
    assert first.expect  # the items so far: the call and the handoff to the task
    assert any(i.new_agent_id == "get_email" for i in first.handoffs)
    second = await asyncio.wait_for(h.session.run(user_input="ada@example.com"), BOUND)
    assert second.final_output == "Done: signed up ada@example.com."
    assert h.session.current_agent.id == "front"


# ------------------------------------------------------- the record keeps turn order


async def test_a_message_sent_while_a_reply_plays_is_recorded_after_it(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([["Important ", Delay(1.0), "notice."], ["Sure."]])
    h = await make_session(llm)
    h.session.generate_reply(user_input="hi", allow_interruptions=False)
    await advance(0.5)
    h.session.generate_reply(user_input="stop")
    await advance(5.0)
    seen = [(i.role, i.content) for i in llm.calls[1].chat_ctx.items[1:]]  # type: ignore[union-attr]
    assert seen == [("user", "hi"), ("assistant", "Important notice."), ("user", "stop")]
    history = [(i.role, i.content) for i in h.session.history.items]  # type: ignore[union-attr]
    assert history == [*seen, ("assistant", "Sure.")]


async def test_interrupt_then_reply_records_the_cut_reply_first_and_never_listens(
    make_session: MakeSession,
) -> None:
    @rj.function_tool
    async def lookup() -> str:
        """Look up."""
        await advance(2.0)
        return "found"

    llm = ScriptedLLM([["Let me", ToolCall("lookup"), Delay(1.0), " look."], ["Stopped."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    h.session.generate_reply(user_input="find it")
    await advance(0.5)
    t0 = now()
    h.session.interrupt()
    h.session.generate_reply(user_input="stop")
    await advance(5.0)
    states = h.timeline.agent_states(since=t0)
    assert states == ["speaking", "thinking", "speaking", "listening"], h.timeline.describe()
    kinds = [
        (type(i).__name__, getattr(i, "role", None), getattr(i, "interrupted", None))
        for i in llm.calls[1].chat_ctx.items[1:]
    ]
    # The cut reply where it began; the interrupted call, paired with its output, after.
    assert kinds == [
        ("ChatMessage", "user", False),
        ("ChatMessage", "assistant", True),
        ("ChatMessage", "user", False),
        ("FunctionCall", None, None),
        ("FunctionCallOutput", None, None),
    ], kinds


async def test_f9_a_component_failing_inside_a_task_does_not_kill_the_session() -> None:
    """A VAD that raises on a frame (a bug in a plug-in): the microphone side stops with
    an error event; the session, and typed input, go on."""
    from rejoinder.testing import MemoryAudioInput, ScriptedSTT, ScriptedVAD, speech_frame

    class BrokenVAD(ScriptedVAD):
        def stream(self) -> Any:
            class Broken:
                speaking = False
                speech_seconds = 0.0

                def push(self, frame: Any) -> Any:
                    raise ZeroDivisionError("vad bug")

            return Broken()

    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Typed answer."]]),
        vad=BrokenVAD(),
        stt=ScriptedSTT(["x"]),
        user_away_timeout=None,
    )
    session.input.audio = mic
    errors: list[rj.ErrorEvent] = []
    session.on("error", errors.append)
    await session.start(rj.Agent(instructions="t"))
    try:
        await mic.push(speech_frame(0.02))
        await advance(0.1)
        assert [(e.source, type(e.error).__name__) for e in errors] == [
            ("internal", "ZeroDivisionError")
        ]
        result = await asyncio.wait_for(session.run(user_input="hello"), BOUND)
        assert result.final_output == "Typed answer."
    finally:
        await session.aclose()
