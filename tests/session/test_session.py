"""AgentSession behaviour beyond the scenarios: say, interrupt, hooks, events, lifecycle."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import Delay, Gate, ToolCall, advance
from rejoinder.testing import ScriptedLLM as LLM

from ..conftest import MakeSession


def our_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


async def test_say_delivers_text_and_records_it(make_session: MakeSession) -> None:
    h = await make_session()
    handle = h.session.say("Hello!")
    assert h.session.agent_state == "thinking"  # owed from the moment it was created
    await handle
    assert handle.done() and not handle.interrupted
    assert h.output.segments == ["Hello!"]
    assert [(m.role, m.content) for m in h.session.history.messages()] == [("assistant", "Hello!")]
    assert handle.chat_items == h.session.history.items
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]


async def test_agent_context_has_instructions_and_turn_instructions(
    make_session: MakeSession,
) -> None:
    llm = LLM([["ok"]])
    h = await make_session(llm, rj.Agent(instructions="Be brief."))
    await h.session.generate_reply(user_input="hi", instructions="Answer in French.")
    items = llm.calls[0].chat_ctx.items
    assert [(m.role, m.content) for m in items if isinstance(m, rj.ChatMessage)] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("system", "Answer in French."),
    ]
    # Turn instructions are not kept in the agent's context.
    assert all(getattr(i, "content", "") != "Answer in French." for i in h.session.history.items)


async def test_interrupt_keeps_only_what_was_delivered(make_session: MakeSession) -> None:
    llm = LLM([["Once upon ", Delay(1.0), "a time ", Delay(1.0), "there was."]])
    h = await make_session(llm)
    handle = h.session.generate_reply(user_input="story")
    await advance(1.5)
    await h.session.interrupt()
    assert handle.done() and handle.interrupted
    last = h.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("Once upon a time ", True)
    assert h.session.agent_state == "listening"
    assert h.timeline.times_of("listening")[-1] == pytest.approx(1.5)


async def test_interrupt_cancels_inline_tools_and_drops_queued_speech(
    make_session: MakeSession,
) -> None:
    cancelled = asyncio.Event()

    @rj.function_tool
    async def slow() -> str:
        """Slow."""
        try:
            await advance(100)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    llm = LLM([["Working.", ToolCall("slow")]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[slow]))
    first = h.session.generate_reply(user_input="go")
    queued = h.session.say("queued")
    await advance(1.0)
    assert h.session.agent_state == "thinking"
    await h.session.interrupt()
    assert cancelled.is_set()
    assert first.interrupted
    # The queued say() was delivered while the tool ran: a reply waiting on its tools
    # does not hold the floor.
    assert queued.done() and not queued.interrupted
    assert h.session.agent_state == "listening"
    assert h.output.segments == ["Working.", "queued"]
    # The call stays paired with an output, so the next model request is valid.
    call, output = [i for i in h.session.history.items if i.type.startswith("function")]
    assert isinstance(call, rj.FunctionCall) and isinstance(output, rj.FunctionCallOutput)
    assert (output.call_id, output.is_error) == (call.call_id, True)
    assert output.output == "the tool call was interrupted"


async def test_interrupt_drops_speech_queued_behind_the_current_one(
    make_session: MakeSession,
) -> None:
    llm = LLM([["Long ", Delay(5.0), "story."]])
    h = await make_session(llm)
    first = h.session.generate_reply(user_input="story")
    queued = h.session.say("and another thing")
    await advance(1.0)
    await h.session.interrupt()
    assert first.interrupted and queued.interrupted and queued.done()
    assert h.output.segments == ["Long "]
    assert h.session.agent_state == "listening"


async def test_say_from_inside_a_tool_is_delivered_while_it_runs(make_session: MakeSession) -> None:
    @rj.function_tool
    async def slow(ctx: rj.RunContext[None]) -> str:
        """Slow."""
        await ctx.session.say("One moment please.")  # awaiting it must not deadlock
        await advance(2.0)
        return "done"

    llm = LLM([[ToolCall("slow")], ["Here it is."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[slow]))
    await asyncio.wait_for(h.session.run(user_input="go"), 30)
    assert h.output.segments == ["One moment please.", "Here it is."]
    assert h.timeline.agent_states() == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]


async def test_user_turn_answered_while_a_tool_runs(make_session: MakeSession) -> None:
    @rj.function_tool
    async def slow() -> str:
        """Slow."""
        await advance(5.0)
        return "slow result"

    llm = LLM([["Looking.", ToolCall("slow")], ["Still looking, hi!"], ["Result: slow."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[slow]))
    first = h.session.generate_reply(user_input="look it up")
    await advance(1.0)
    await h.session.run(user_input="hello?")
    await first
    assert h.output.segments == ["Looking.", "Still looking, hi!", "Result: slow."]
    # The tool stayed owed across the interleaved answer: never listening before t=5.
    h.timeline.assert_never("listening", between=(0.0, 5.0))
    assert h.timeline.times_of("listening")[-1] == pytest.approx(5.0)


async def test_uninterruptible_speech_is_not_interrupted(make_session: MakeSession) -> None:
    llm = LLM([["Important ", Delay(1.0), "notice."]])
    h = await make_session(llm)
    handle = h.session.generate_reply(user_input="x", allow_interruptions=False)
    await advance(0.5)
    with pytest.raises(RuntimeError, match="does not allow interruptions"):
        handle.interrupt()
    await h.session.interrupt()  # skips it, returns at once
    await handle
    assert not handle.interrupted
    assert h.output.segments == ["Important notice."]


async def test_disallow_interruptions_from_a_tool(make_session: MakeSession) -> None:
    @rj.function_tool
    async def commit(ctx: rj.RunContext[None]) -> str:
        """Commit."""
        ctx.disallow_interruptions()
        await advance(2.0)
        return "committed"

    llm = LLM([[ToolCall("commit")], ["Done."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[commit]))
    handle = h.session.generate_reply(user_input="commit")
    await advance(1.0)
    await h.session.interrupt()
    await handle
    assert not handle.interrupted
    assert h.output.segments == ["Done."]


async def test_wait_for_playout_inside_a_tool(make_session: MakeSession) -> None:
    order: list[str] = []

    @rj.function_tool
    async def after(ctx: rj.RunContext[None]) -> None:
        """After the reply."""
        await ctx.wait_for_playout()
        order.append(f"tool after playout at {asyncio.get_running_loop().time():.1f}")

    llm = LLM([["Speaking", ToolCall("after"), Delay(2.0), "..."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[after]))
    await h.session.run(user_input="x")
    assert order == ["tool after playout at 2.0"]


async def test_stop_response_suppresses_the_reply(make_session: MakeSession) -> None:
    class Quiet(rj.Agent):
        async def on_user_turn_completed(
            self, turn_ctx: rj.ChatContext, new_message: rj.ChatMessage
        ) -> None:
            if "shh" in new_message.content:
                raise rj.StopResponse()
            new_message.content = new_message.content.upper()

    llm = LLM([["Loud reply."]])
    h = await make_session(llm, Quiet(instructions="q"))
    await h.session.run(user_input="shh")
    assert llm.calls == [] and h.output.segments == []
    await h.session.run(user_input="hello")
    assert llm.calls[0].chat_ctx.items[-1].content == "HELLO"  # type: ignore[union-attr]
    assert h.timeline.agent_states()[-1] == "listening"


async def test_on_enter_can_greet(make_session: MakeSession) -> None:
    class Greeter(rj.Agent):
        async def on_enter(self) -> None:
            self.session.say("Welcome!")

    h = await make_session(None, Greeter(instructions="g"))
    await advance(0.1)
    assert h.output.segments == ["Welcome!"]


async def test_events_are_emitted(make_session: MakeSession) -> None:
    @rj.function_tool
    async def ping() -> str:
        """Ping."""
        return "pong"

    llm = LLM([[ToolCall("ping")], ["pong!"]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[ping]))
    seen: dict[str, list[Any]] = {}
    for name in (
        "user_input_transcribed",
        "speech_created",
        "function_tools_executed",
        "conversation_item_added",
        "metrics_collected",
    ):
        h.session.on(name, lambda ev, n=name: seen.setdefault(n, []).append(ev))  # type: ignore[misc]
    await h.session.run(user_input="ping")
    assert [(e.transcript, e.is_final) for e in seen["user_input_transcribed"]] == [("ping", True)]
    assert [(e.source, e.user_initiated) for e in seen["speech_created"]] == [
        ("generate_reply", True),
        ("tool_reply", False),
    ]
    executed = seen["function_tools_executed"][0]
    assert [c.name for c in executed.function_calls] == ["ping"]
    assert [o.output for o in executed.function_call_outputs] == ["pong"]
    assert [e.item.type for e in seen["conversation_item_added"]] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert all(m.metrics["type"] == "llm" for m in seen["metrics_collected"])


async def test_a_failing_callback_does_not_break_the_session(make_session: MakeSession) -> None:
    h = await make_session(LLM([["fine"]]))

    def boom(_: object) -> None:
        raise ValueError("callback bug")

    h.session.on("agent_state_changed", boom)
    result = await h.session.run(user_input="hi")
    assert result.final_output == "fine"


async def test_reentrant_callback_keeps_events_in_order(make_session: MakeSession) -> None:
    h = await make_session(LLM([["one"], ["two"]]))
    said = False

    def on_state(ev: rj.AgentStateChangedEvent) -> None:
        nonlocal said
        if ev.new_state == "listening" and not said:
            said = True
            h.session.say("re-entered")

    h.session.on("agent_state_changed", on_state)
    await h.session.run(user_input="hi")
    await advance(0.1)
    assert h.output.segments == ["one", "re-entered"]
    # StateTimeline raises if an event's old state is not the previous new state.
    assert h.timeline.agent_states()[-1] == "listening"


async def test_no_llm_is_a_clear_error(make_session: MakeSession) -> None:
    h = await make_session(None)
    await h.session.generate_reply(user_input="hi")
    assert "has no LLM" in str(h.errors[0].error)
    assert h.session.agent_state == "listening"


async def test_watchdog_closes_a_hung_reply(make_session: MakeSession) -> None:
    never = asyncio.Event()
    llm = LLM([[Gate(never)]])
    h = await make_session(llm, obligation_timeouts={"reply": 30.0})
    handle = h.session.generate_reply(user_input="hi")
    await advance(31.0)
    assert handle.done() and handle.interrupted
    assert h.session.agent_state == "listening"
    assert [e.source for e in h.errors] == ["watchdog"]
    assert isinstance(h.errors[0].error, rj.ObligationExpiredError)
    assert h.timeline.times_of("listening")[-1] == pytest.approx(30.0)


async def test_calls_before_start_and_after_close_fail_clearly() -> None:
    session: rj.AgentSession[None] = rj.AgentSession()
    with pytest.raises(RuntimeError, match="not running"):
        session.say("hi")
    await session.start(rj.Agent(instructions="x"))
    with pytest.raises(RuntimeError, match="already started"):
        await session.start(rj.Agent(instructions="x"))
    await session.aclose()
    with pytest.raises(RuntimeError, match=r"not running|closing"):
        session.say("hi")


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="user_away_timeout"):
        rj.AgentSession(user_away_timeout=0)
    with pytest.raises(ValueError, match="reply"):
        rj.AgentSession(obligation_timeouts={"reply": -1})
    with pytest.raises(ValueError, match="not a valid"):
        rj.AgentSession(obligation_timeouts={"nonsense": 1})
    with pytest.raises(ValueError, match="max_tool_steps"):
        rj.AgentSession(max_tool_steps=-1)


@pytest.mark.parametrize("phase", ["llm-streaming", "tool-running", "background-tool", "idle"])
async def test_aclose_in_every_phase_leaves_nothing_running(phase: str) -> None:
    @rj.function_tool
    async def stuck(ctx: rj.RunContext[None]) -> str:
        """Never returns."""
        if phase == "background-tool":
            await ctx.update("started")
        await asyncio.Event().wait()
        return "never"

    never = asyncio.Event()
    scripts = {
        "llm-streaming": [["Hel", Gate(never)]],
        "tool-running": [[ToolCall("stuck")]],
        "background-tool": [[ToolCall("stuck")], ["Started."]],
        "idle": [],
    }
    before = our_tasks()
    closed: list[rj.CloseEvent] = []
    session: rj.AgentSession[None] = rj.AgentSession(llm=LLM(scripts[phase]))
    session.on("close", closed.append)
    await session.start(rj.Agent(instructions="t", tools=[stuck]))
    if phase != "idle":
        session.generate_reply(user_input="go")
    await advance(1.0)
    t0 = asyncio.get_running_loop().time()
    await session.aclose()
    assert asyncio.get_running_loop().time() - t0 < 1.0
    assert our_tasks() <= before
    assert session.agent_state == "listening"
    assert len(closed) == 1
    if phase == "llm-streaming":
        last = session.history.items[-1]
        assert isinstance(last, rj.ChatMessage) and (last.content, last.interrupted) == (
            "Hel",
            True,
        )
    await session.aclose()  # idempotent
    assert len(closed) == 1


async def test_aclose_is_bounded_when_a_hook_hangs() -> None:
    class Stubborn(rj.Agent):
        async def on_exit(self) -> None:
            await asyncio.Event().wait()

    session: rj.AgentSession[None] = rj.AgentSession(close_timeout=2.0)
    await session.start(Stubborn(instructions="s"))
    t0 = asyncio.get_running_loop().time()
    await session.aclose()
    assert asyncio.get_running_loop().time() - t0 == pytest.approx(2.0)


async def test_drain_waits_for_owed_work_then_closes() -> None:
    @rj.function_tool
    async def later(ctx: rj.RunContext[None]) -> str:
        """Later."""
        await ctx.update("on it")
        await advance(5.0)
        return "finished"

    output = rj.MemoryTextOutput()
    llm = LLM([[ToolCall("later")], ["On it."], ["It finished."]])
    async with rj.AgentSession(llm=llm) as session:
        session.output.transcription = output
        await session.start(rj.Agent(instructions="t", tools=[later]))
        session.generate_reply(user_input="go")
        await session.drain()
        assert asyncio.get_running_loop().time() == pytest.approx(5.0)
    assert output.segments == ["On it.", "It finished."]


async def test_drain_is_bounded() -> None:
    never = asyncio.Event()
    session: rj.AgentSession[None] = rj.AgentSession(llm=LLM([[Gate(never)]]))
    await session.start(rj.Agent(instructions="t"))
    session.generate_reply(user_input="go")
    await session.drain(timeout=3.0)
    assert asyncio.get_running_loop().time() == pytest.approx(3.0)


async def test_tool_returning_an_agent_hands_over(make_session: MakeSession) -> None:
    entered: list[str] = []

    class Billing(rj.Agent):
        async def on_enter(self) -> None:
            entered.append(self.id)
            self.session.say("Billing here.")

    @rj.function_tool
    async def transfer() -> rj.Agent:
        """Transfer to billing."""
        return Billing(instructions="billing")

    llm = LLM([["Transferring.", ToolCall("transfer")]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[transfer], id="front"))
    await h.session.run(user_input="billing please")
    await advance(0.1)
    assert entered == ["Billing"]
    assert h.session.current_agent.id == "Billing"
    handoffs = [i for i in h.session.history.items if isinstance(i, rj.AgentHandoff)]
    assert [(x.old_agent_id, x.new_agent_id) for x in handoffs] == [("front", "Billing")]
    assert h.output.segments == ["Transferring.", "Billing here."]
    assert len(llm.calls) == 1  # no follow-up from the agent that handed over
    assert h.session.agent_state == "listening"


async def test_session_tools_survive_a_handoff(make_session: MakeSession) -> None:
    @rj.function_tool
    async def clock() -> str:
        """What time is it."""
        return "noon"

    @rj.function_tool
    async def transfer() -> rj.Agent:
        """Transfer."""
        return rj.Agent(instructions="second", id="second")

    llm = LLM([[ToolCall("transfer")], [ToolCall("clock")], ["It is noon."]])
    h = await make_session(
        llm, rj.Agent(instructions="first", tools=[transfer], id="first"), tools=[clock]
    )
    await h.session.run(user_input="transfer me")
    assert [t.name for t in llm.calls[0].tools] == ["clock", "transfer"]
    result = await h.session.run(user_input="time?")
    assert [t.name for t in llm.calls[1].tools] == ["clock"]  # agent tools stay behind
    assert result.final_output == "It is noon."
