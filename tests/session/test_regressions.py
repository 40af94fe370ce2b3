"""Regressions from a review of the runtime: each test pins a bug that was fixed (the
expected behaviour, and what happened before the fix, in its docstring).
Hangs are turned into failures with ``asyncio.wait_for`` on virtual time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import rejoinder as rj
from rejoinder.testing import Delay, Fail, Gate, ScriptedLLM, ToolCall, advance

from ..conftest import MakeSession


def our_tasks() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()}


# ----------------------------------------------------------------- aclose from a tool


async def test_aclose_from_inside_a_tool_closes_the_session() -> None:
    """An "end the call" tool awaits ``ctx.session.aclose()``.

    Expected: the session closes: one ``close`` event, no session task left running.
    Before the fix: aclose() stops the activity, whose TaskGroup cancels the tool task that is
    running aclose() itself; aclose() dies half-way (``_closing`` is resolved in its
    finally), the root task is never cancelled and ``close`` is never emitted. Every later
    aclose() sees ``_closing`` set and returns at once, so the session leaks forever.
    """

    @rj.function_tool
    async def end_call(ctx: rj.RunContext[None]) -> None:
        """Hang up."""
        await ctx.session.aclose()

    before = our_tasks()
    closed: list[rj.CloseEvent] = []
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=ScriptedLLM([["Bye.", ToolCall("end_call")]]), user_away_timeout=None
    )
    session.on("close", closed.append)
    await session.start(rj.Agent(instructions="t", tools=[end_call]))
    session.generate_reply(user_input="bye")
    await advance(10.0)
    await session.aclose()  # what an application does at the end anyway
    leaked = our_tasks() - before
    try:
        assert len(closed) == 1, f"close events: {closed}"
        assert not leaked, f"tasks left running after aclose(): {leaked}"
    finally:
        if session._root is not None:  # clean up the leak so the test does not hang
            session._root.cancel()
            await asyncio.wait((session._root,))


# ------------------------------------------------------------- concurrent handoffs


async def test_two_quick_update_agent_calls_leave_one_activity(make_session: MakeSession) -> None:
    """Two ``update_agent`` calls in a row (e.g. from two tools, or a tool and on_enter).

    Expected: the old agent exits once; in the end exactly one activity runs (the last
    agent's), and every agent that entered also exited.
    Before the fix: each call spawns an unserialised ``switch()`` task. Both run
    ``_stop_activity`` on the same old activity (its ``on_exit`` runs twice), then both
    start their agent: the first new activity is never stopped and keeps running (its
    task lives on, its ``on_exit`` is never called) next to the second one.
    """
    log: list[str] = []

    class Logged(rj.Agent):
        async def on_enter(self) -> None:
            log.append(f"enter {self.id}")

        async def on_exit(self) -> None:
            log.append(f"exit {self.id}")

    h = await make_session(None, Logged(instructions="a", id="A"))
    await advance(0.1)
    h.session.update_agent(Logged(instructions="b", id="B"))
    h.session.update_agent(Logged(instructions="c", id="C"))
    await advance(1.0)
    assert h.session.current_agent.id == "C"
    assert log.count("exit A") == 1, log
    entered = {e.split()[1] for e in log if e.startswith("enter")}
    exited = {e.split()[1] for e in log if e.startswith("exit")}
    # Every agent that entered, other than the current one, must have exited.
    assert entered - {"C"} <= exited, log
    activities = [
        t for t in asyncio.all_tasks() if not t.done() and t.get_name() == "AgentActivity.run"
    ]
    assert len(activities) == 1, activities


# ----------------------------------------------------------- say() during a handoff


async def test_say_during_handoff_resolves(make_session: MakeSession) -> None:
    """An application reacts to the recorded ``AgentHandoff`` item by announcing it.

    Expected: ``await session.say(...)`` resolves (spoken by the new agent, or at least
    finished/interrupted); it never hangs.
    Before the fix: the handoff item is recorded after the old activity has stopped (its queue
    already dropped) but while ``session._activity`` still points at it, so ``say()``
    queues the speech on a dead activity: nobody runs or drops it, and the handle never
    resolves.
    """
    handles: list[rj.SpeechHandle] = []

    def on_item(ev: rj.ConversationItemAddedEvent) -> None:
        if isinstance(ev.item, rj.AgentHandoff):
            handles.append(h.session.say("You are now talking to billing."))

    h = await make_session(None, rj.Agent(instructions="a", id="front"))
    h.session.on("conversation_item_added", on_item)
    h.session.update_agent(rj.Agent(instructions="b", id="billing"))
    await advance(0.5)
    assert len(handles) == 1
    await asyncio.wait_for(handles[0], 10.0)


# -------------------------------------------------------------- run() and handoff


async def test_run_result_includes_the_handoff_of_the_turn(make_session: MakeSession) -> None:
    """``session.run()`` on a turn whose tool hands over to another agent.

    Expected (RunResult docstring: "Messages, tool calls, tool outputs and handoffs of the
    turn"): ``result.handoffs`` holds the AgentHandoff.
    Before the fix: the handle resolves as soon as the tool returned; the handoff item is recorded
    later by the ``switch()`` task, after run() unsubscribed, so ``result.handoffs == []``.
    """

    @rj.function_tool
    async def transfer() -> rj.Agent:
        """Transfer."""
        return rj.Agent(instructions="billing", id="billing")

    llm = ScriptedLLM([["Transferring.", ToolCall("transfer")]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[transfer], id="front"))
    result = await h.session.run(user_input="billing please")
    assert [(x.old_agent_id, x.new_agent_id) for x in result.handoffs] == [("front", "billing")]


# ------------------------------------------------------------ delivered vs recorded


class SlowTextOutput(rj.TextOutput):
    """Each delta takes 1 s to show (as a typing display or a TTS-backed sink would)."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.segments: list[str] = []

    async def capture_text(self, text: str) -> None:
        await advance(1.0)
        self.shown.append(text)

    def flush(self) -> None:
        if self.shown:
            self.segments.append("".join(self.shown))
            self.shown = []


async def test_interrupted_message_holds_only_delivered_text(make_session: MakeSession) -> None:
    """Interrupt while the first delta is still being delivered (``capture_text`` has not
    returned; TextOutput: "Returning means the user can now see it").

    Expected: nothing was delivered, so no assistant message is recorded (or an empty
    one), and the agent never reported ``speaking`` before the first delta was shown.
    Before the fix: ``_deliver`` appends the delta to ``heard`` and sets the reply audible
    *before* awaiting ``capture_text``; the history gets ``"Hello there"`` marked
    interrupted although the user saw nothing, and ``speaking`` is reported at t=0.
    """
    llm = ScriptedLLM([["Hello there", " and more."]])
    h = await make_session(llm)
    slow = SlowTextOutput()
    h.session.output.transcription = slow
    handle = h.session.generate_reply(user_input="hi")
    await advance(0.5)
    await h.session.interrupt()
    assert handle.interrupted
    assert slow.shown == [] and slow.segments == []  # the user saw nothing
    assistant = [m for m in h.session.history.messages() if m.role == "assistant"]
    assert [m.content for m in assistant if m.content] == [], assistant
    assert "speaking" not in h.timeline.agent_states()


async def test_watchdog_expired_reply_keeps_what_was_heard(make_session: MakeSession) -> None:
    """A reply streams "Hel" and then the model hangs; the reply watchdog expires it.

    Expected: like any interruption, the history holds the assistant message "Hel"
    (interrupted) and the transcription segment is flushed — the history holds
    everything that was heard.
    Before the fix: the watchdog closes the ``reply`` obligation first and then cancels the task;
    ``_abandon`` only records what was heard ``if reply.is_open``, so "Hel" is lost from
    the history and the output segment is never flushed.
    """
    never = asyncio.Event()
    llm = ScriptedLLM([["Hel", Gate(never)]])
    h = await make_session(llm, obligation_timeouts={"reply": 30.0})
    handle = h.session.generate_reply(user_input="hi")
    await advance(31.0)
    assert handle.done() and handle.interrupted
    last = h.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.role, last.content, last.interrupted) == ("assistant", "Hel", True)
    assert h.output.segments == ["Hel"]


# ------------------------------------------------------------------ history order


async def test_background_result_recorded_after_its_call(make_session: MakeSession) -> None:
    """A tool releases itself (``ctx.update``) and finishes while the reply that carries
    it is still streaming.

    Expected: history order is call → interim output → (later) final call/output, i.e. the
    final result never precedes the call it belongs to.
    Before the fix: ``_background_tool_finished`` records ``call_X_final`` and its output at once,
    but the call itself and its interim output are recorded only in ``_settle_tools``
    after playout, so the final result comes *before* the original call in history.
    """

    @rj.function_tool
    async def quick(ctx: rj.RunContext[None]) -> str:
        """Quick background job."""
        await ctx.update("started")
        await advance(0.5)
        return "finished"

    llm = ScriptedLLM(
        [["Starting.", ToolCall("quick", call_id="c1"), Delay(2.0), " Done talking."], ["ok"]]
    )
    h = await make_session(llm, rj.Agent(instructions="t", tools=[quick]))
    h.session.generate_reply(user_input="go")
    await advance(10.0)
    ids = [
        (type(i).__name__, i.call_id)
        for i in h.session.history.items
        if isinstance(i, rj.FunctionCall | rj.FunctionCallOutput)
    ]
    assert ids.index(("FunctionCall", "c1")) < ids.index(("FunctionCall", "c1_final")), ids
    assert ids.index(("FunctionCallOutput", "c1")) < ids.index(
        ("FunctionCallOutput", "c1_final")
    ), ids


# ------------------------------------------------- a speech cancelled before it started


async def test_interrupt_right_after_a_speech_was_scheduled_resolves_it(
    make_session: MakeSession,
) -> None:
    """``interrupt()`` one loop tick after the scheduler picked a speech up (a barge-in
    can land at any tick).

    Expected: the speech is interrupted, ``await handle`` resolves and the agent is
    ``listening`` at once.
    Before the fix: the speech task was created but has not run its first step; cancelling it
    means ``_run_speech`` never enters its try/finally, so its ``reply`` obligation is
    never closed (the agent stays ``thinking`` until the 300 s watchdog) and
    ``_mark_done`` is never called: the handle never resolves, not even after the
    watchdog (whose ``_interrupt`` sees a finished task and does nothing).
    """
    problems: list[str] = []
    for ticks in range(6):
        h = await make_session(ScriptedLLM([]))  # a fresh session per timing
        handle = h.session.say(f"Hello {ticks}")
        for _ in range(ticks):
            await advance(0)  # one loop iteration, no time
        await h.session.interrupt()
        try:
            await asyncio.wait_for(handle, 1.0)
        except TimeoutError:
            problems.append(f"ticks={ticks}: handle never resolved")
        if h.session.agent_state != "listening":
            problems.append(f"ticks={ticks}: agent stuck {h.session.agent_state!r}")
        await advance(400.0)  # past the reply watchdog: the handle still never resolves
        if not handle.done():
            problems.append(f"ticks={ticks}: handle still pending after the watchdog")
    assert problems == [], problems


# ------------------------------------------------------------- handoff obligations


class _Greeter(rj.Agent):
    async def on_enter(self) -> None:
        self.session.say("Billing here.")


@rj.function_tool
async def _transfer() -> rj.Agent:
    """Transfer to billing."""
    return _Greeter(instructions="billing", id="billing")


async def test_no_listening_pulse_during_a_tool_handoff(make_session: MakeSession) -> None:
    """A tool hands over to an agent whose ``on_enter`` greets the user.

    Expected: no ``listening`` between the old agent's "Transferring." and the new agent's
    greeting — the handoff is work in progress for the user, and a client that closes
    the turn on ``listening`` would cut in.
    Before the fix: the tool's obligation closes as soon as it returns the Agent
    (``reply_required=False``) and nothing covers the switch (on_exit, start, on_enter),
    so the timeline goes ``speaking → thinking → listening → thinking → speaking``.
    """
    llm = ScriptedLLM([["Transferring.", ToolCall("_transfer")]])
    h = await make_session(llm, rj.Agent(instructions="front", tools=[_transfer], id="front"))
    await h.session.run(user_input="billing please")
    await advance(1.0)
    assert h.output.segments == ["Transferring.", "Billing here."]
    assert h.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ], h.timeline.describe()


async def test_drain_waits_for_a_handoff_in_progress() -> None:
    """``drain()`` right after a turn whose tool hands over to a greeting agent.

    Expected (API: drain lets everything owed finish): the new agent's greeting is
    delivered before the session closes.
    Before the fix: the floor is empty the moment the tool returns, so ``drain()`` closes the
    session mid-handoff and the greeting is never said.
    """
    output = rj.MemoryTextOutput()
    llm = ScriptedLLM([["Transferring.", ToolCall("_transfer")]])
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm)
    session.output.transcription = output
    await session.start(rj.Agent(instructions="front", tools=[_transfer], id="front"))
    session.generate_reply(user_input="billing please")
    await session.drain()
    assert output.segments == ["Transferring.", "Billing here."]


async def test_background_tool_returning_an_agent_hands_over(make_session: MakeSession) -> None:
    """A tool releases itself with ``ctx.update`` and later returns an ``Agent``.

    Expected: a handoff to that agent (API: a tool may return an Agent), or at least an
    error — never a history that says "transferred" while nothing happened.
    Before the fix: ``_background_tool_finished`` ignores ``outcome.handoff``: it records
    "transferred to billing" and closes the obligation; the current agent stays "front".
    """

    @rj.function_tool
    async def transfer(ctx: rj.RunContext[None]) -> rj.Agent:
        """Find an agent and transfer."""
        await ctx.update("looking for an agent")
        await advance(2.0)
        return rj.Agent(instructions="b", id="billing")

    llm = ScriptedLLM([[ToolCall("transfer")], ["Looking."], ["x"]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[transfer], id="front"))
    await h.session.run(user_input="go")
    await advance(5.0)
    outputs = [i.output for i in h.session.history.items if isinstance(i, rj.FunctionCallOutput)]
    assert "transferred to billing" in outputs
    assert h.session.current_agent.id == "billing"


# -------------------------------------------------------- LLM error after a tool ran


async def test_tool_that_ran_is_recorded_when_the_llm_fails_afterwards(
    make_session: MakeSession,
) -> None:
    """The model calls a tool mid-stream, the tool completes (a side effect happened),
    then the model stream fails.

    Expected: the history holds the FunctionCall paired with the tool's real output, so
    the next model request knows the booking was made (and does not book twice).
    Before the fix: calls are recorded only in ``_settle_tools``; on the failure path
    ``_abandon`` only pairs calls already ``recorded``, so neither the call nor its
    output reaches the history although the tool ran.
    """
    ran: list[str] = []

    @rj.function_tool
    async def book() -> str:
        """Book."""
        ran.append("booked")
        return "booked #42"

    llm = ScriptedLLM([["Booking", ToolCall("book"), Delay(1.0), Fail("boom")]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[book]))
    await h.session.run(user_input="book it")
    assert ran == ["booked"]
    outputs = [i.output for i in h.session.history.items if isinstance(i, rj.FunctionCallOutput)]
    calls = [i.name for i in h.session.history.items if isinstance(i, rj.FunctionCall)]
    assert calls == ["book"] and outputs == ["booked #42"], h.session.history.items


# ------------------------------------------------------------ aclose during handoff


async def test_aclose_during_a_handoff_runs_on_exit_once(make_session: MakeSession) -> None:
    """``aclose()`` while a handoff is waiting on the old agent's ``on_exit``.

    Expected: the old agent's on_exit runs once.
    Before the fix: ``_stop_activity`` is not guarded against concurrent callers: the handoff's
    ``switch()`` and ``aclose()`` both call ``on_exit`` on the same activity.
    """
    exits: list[str] = []

    class Slow(rj.Agent):
        async def on_exit(self) -> None:
            exits.append(self.id)
            await advance(1.0)

    h = await make_session(None, Slow(instructions="a", id="A"))
    h.session.update_agent(rj.Agent(instructions="b", id="B"))
    await advance(0.1)
    await h.session.aclose()
    assert exits == ["A"]
