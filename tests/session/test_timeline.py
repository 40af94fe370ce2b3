"""``session.timeline`` and ``session.owed()`` (issue 12 item 2): every obligation opened,
handed over and closed, every derived state, and what the session's hidden parts do —
in order, on loop time, with exact values on virtual time."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import rejoinder as rj
from rejoinder.session import (
    AwayTimerEvent,
    BackgroundToolFinishedEvent,
    SpeculationEvent,
    UserTurnDiscardedEvent,
)
from rejoinder.session.timeline import Timeline, read_timeline
from rejoinder.testing import Delay, ScriptedLLM, ToolCall, advance, now

from ..conftest import MakeSession
from ..scenarios.test_e_voice_turns import call


@rj.function_tool
async def lookup() -> str:
    """Look something up."""
    await asyncio.sleep(3.0)
    return "found"


def compact(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The floor's side of a timeline, in order: what opened/closed and the states."""
    out: list[tuple[Any, ...]] = []
    for e in entries:
        if e["kind"] in ("ob_opened", "ob_closed"):
            out.append((round(e["t"], 3), e["kind"], e["ob"], e["label"].split(" ")[0]))
        elif e["kind"] == "ob_handed_over":
            out.append((round(e["t"], 3), "handed_over"))
        elif e["kind"] == "agent_state":
            out.append((round(e["t"], 3), "agent", e["state"]))
    return out


async def test_a_tool_follow_up_turn_is_on_the_timeline_in_order(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([[Delay(0.5), ToolCall("lookup")], [Delay(0.2), "It was found."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    start = now()
    await h.session.run(user_input="look it up")
    entries = h.session.timeline.entries()
    assert entries[0]["kind"] == "session" and entries[0]["event"] == "started"
    floor = [(round(t - start, 3), *rest) for t, *rest in compact(entries)]
    assert floor == [
        # the turn is asked for right after start(): no listening before it
        (0.0, "ob_opened", "reply", "generate_reply"),
        (0.0, "agent", "thinking"),
        (0.5, "ob_opened", "tool", "lookup"),  # the call is on the floor...
        (0.5, "ob_closed", "reply", "generate_reply"),  # ...before its reply ends
        (3.5, "ob_opened", "reply", "tool_reply"),  # the follow-up takes the debt over
        (3.5, "handed_over"),
        (3.5, "ob_closed", "tool", "lookup"),  # in the same step the tool closes
        (3.7, "agent", "speaking"),
        (3.7, "ob_closed", "reply", "tool_reply"),
        (3.7, "agent", "listening"),
    ]
    tools = [(e["name"], e["status"]) for e in h.session.timeline.entries("tool")]
    assert tools == [("lookup", "started"), ("lookup", "finished")]
    transcripts = [(e["role"], e["text"]) for e in h.session.timeline.entries("transcript")]
    assert transcripts == [("user", "look it up"), ("agent", "It was found.")]


async def test_owed_says_why_it_is_thinking_and_is_empty_when_listening(
    make_session: MakeSession,
) -> None:
    llm = ScriptedLLM([[ToolCall("lookup")], ["Done."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    assert h.session.owed() == []
    h.session.generate_reply(user_input="go")
    await advance(1.25)
    assert h.session.agent_state == "thinking"
    owed = h.session.owed()
    tool = next(o for o in owed if o.kind == "tool")
    assert (tool.label, tool.committed, tool.audible) == ("lookup", True, False)
    assert abs(tool.age - 1.25) < 1e-6
    assert tool.deadline is not None and tool.deadline > now()
    await advance(3.0)
    assert h.session.agent_state == "listening" and h.session.owed() == []


async def test_the_timeline_is_written_as_json_lines(
    make_session: MakeSession, tmp_path: Path
) -> None:
    h = await make_session(ScriptedLLM([["Hello there."]]))
    path = tmp_path / "session.jsonl"
    h.session.timeline.write_to(path)  # the entries so far go first
    await h.session.run(user_input="hi")
    await h.session.aclose()  # closes the file
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == h.session.timeline.entries()
    entries = read_timeline([*lines, "", "junk", '{"no": "kind"}'])
    assert entries[-1]["kind"] == "session" and entries[-1]["reason"] == "closed"
    assert [e["state"] for e in entries if e["kind"] == "agent_state"] == [
        "thinking",
        "speaking",
        "listening",
    ]


def test_the_timeline_is_bounded_and_keeps_writing_all() -> None:
    out = io.StringIO()
    timeline = Timeline(max_entries=3)
    timeline.write_to(out)
    for i in range(5):
        timeline.add(float(i), "agent_state", state="thinking", old="listening")
    assert [e["t"] for e in timeline.entries()] == [2.0, 3.0, 4.0]
    assert timeline.dropped == 2
    assert len(out.getvalue().splitlines()) == 5


async def test_away_timer_and_background_tool_events(make_session: MakeSession) -> None:
    @rj.function_tool
    async def set_timer(ctx: rj.RunContext[None]) -> str:
        """Start a timer."""
        await ctx.update("Timer started.")
        await asyncio.sleep(2.0)
        return "Timer done."

    llm = ScriptedLLM([[ToolCall("set_timer")], ["Started."], ["Your timer is done."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[set_timer]))
    finished: list[BackgroundToolFinishedEvent] = []
    timers: list[AwayTimerEvent] = []
    h.session.on("background_tool_finished", finished.append)
    h.session.on("away_timer", timers.append)
    h.session.generate_reply(user_input="set a timer")
    await advance(3.0)
    assert [(e.name, e.is_error) for e in finished] == [("set_timer", False)]
    assert h.session.timeline.entries("background_tool")[0]["name"] == "set_timer"
    # user_away_timeout is off in this harness: the timer is never armed.
    assert timers == []


async def test_away_timer_is_armed_when_nothing_is_owed(make_session: MakeSession) -> None:
    h = await make_session(ScriptedLLM([["Hi."]]), user_away_timeout=5.0)
    h.session.generate_reply(user_input="hello")
    await advance(1.0)
    armed = h.session.timeline.entries("away_timer")
    assert armed and armed[-1]["armed"] is True
    assert armed[-1]["deadline"] == armed[-1]["t"] + 5.0
    await advance(5.0)
    assert h.session.user_state == "away"


async def test_speculation_and_discarded_turn_events() -> None:
    c = await call(
        [[Delay(0.4), "Prepared answer."]], ["What time is it?"], preemptive_generation=True
    )
    seen: list[SpeculationEvent] = []
    c.session.on("speculation", seen.append)
    await c.speak(1.0)
    await c.silence(2.5)
    assert [e.event for e in seen] == ["started", "used"]
    assert [e["event"] for e in c.session.timeline.entries("speculation")] == ["started", "used"]
    await c.session.aclose()

    c = await call([["Never."]], ["Can you hear me?"])
    discarded: list[UserTurnDiscardedEvent] = []
    c.session.on("user_turn_discarded", discarded.append)
    c.session.say("Please listen to this important notice carefully.", allow_interruptions=False)
    await advance(0.5)
    await c.speak(0.6)
    await c.silence(1.0)
    assert [e.text for e in discarded] == ["Can you hear me?"]
    assert c.session.timeline.entries("turn_discarded")[0]["text"] == "Can you hear me?"
    await c.session.aclose()


async def test_an_expired_watchdog_is_on_the_timeline(make_session: MakeSession) -> None:
    @rj.function_tool
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    llm = ScriptedLLM([[ToolCall("hang")], ["Sorry, that took too long."]])
    h = await make_session(
        llm, rj.Agent(instructions="t", tools=[hang]), obligation_timeouts={"tool": 10.0}
    )
    h.session.generate_reply(user_input="go")
    await advance(11.0)
    expired = h.session.timeline.entries("ob_expired")
    assert [(e["ob"], e["label"]) for e in expired] == [("tool", "hang")]
    closed = [e for e in h.session.timeline.entries("ob_closed") if e["id"] == expired[0]["id"]]
    assert closed[0]["reason"] == "expired"
