"""Keypad input (scenario H3): ``session.push_dtmf`` emits ``dtmf`` events, and
``rj.CollectDigits`` collects a PIN from a tool with a terminator, a digit count and a
timeout, reporting ``listening`` while it waits for the caller. Also ``session.shutdown``
(an agent hanging up) and the close reason. All on virtual time."""

from __future__ import annotations

from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ToolCall, advance, now

from ..conftest import MakeSession

PROMPT = "Please enter your PIN, then press pound."


def pin_agent(**collect: Any) -> rj.Agent:
    results: list[rj.Digits] = []

    @rj.function_tool
    async def check_pin() -> str:
        """Ask the caller for their PIN."""
        digits = await rj.CollectDigits(PROMPT, **collect)
        results.append(digits)
        return f"{digits.reason}:{digits.digits}"

    agent = rj.Agent(instructions="front", tools=[check_pin], id="front")
    agent.results = results  # type: ignore[attr-defined]
    return agent


def script(ctx: rj.ChatContext) -> list[Any]:
    last = ctx.items[-1]
    if isinstance(last, rj.FunctionCallOutput):
        return [f"Got {last.output}."]
    return ["Sure.", ToolCall("check_pin")]


async def start(make_session: MakeSession, **collect: Any) -> tuple[Any, rj.Agent]:
    agent = pin_agent(**collect)
    h = await make_session(ScriptedLLM(script), agent, user_away_timeout=15.0)  # type: ignore[arg-type]
    h.session.generate_reply(user_input="I want to check my account")
    await advance(0.5)
    assert h.session.current_agent.id != "front"  # the task is current
    assert h.output.segments[-1] == PROMPT
    return h, agent


async def test_pin_ends_at_the_terminator_and_the_caller_resumes(
    make_session: MakeSession,
) -> None:
    h, agent = await start(make_session, max_digits=8)
    asked = now()
    h.session.push_dtmf("12")
    await advance(1.0)
    h.session.push_dtmf("34#")
    await advance(1.0)
    assert agent.results == [rj.Digits("1234", "terminator")]  # type: ignore[attr-defined]
    assert h.output.segments[-1] == "Got terminator:1234."
    assert h.session.current_agent.id == "front"
    # Waiting for keys is the caller's turn: listening, and the caller is never away.
    assert h.timeline.state_at(asked + 0.5) == "listening"
    assert "away" not in h.timeline.user_states()
    # The digits stay out of what the LLM reads (the tool result carries them on purpose).
    messages = [i for i in h.session.history.items if isinstance(i, rj.ChatMessage)]
    assert not any("1234" in m.content for m in messages if m.role == "user")


async def test_pin_ends_at_max_digits_and_later_keys_go_nowhere(
    make_session: MakeSession,
) -> None:
    h, agent = await start(make_session, max_digits=4)
    h.session.push_dtmf("123456#")
    await advance(1.0)
    assert agent.results == [rj.Digits("1234", "max_digits")]  # type: ignore[attr-defined]
    assert h.session.agent_state == "listening"
    assert h.errors == []


async def test_pin_times_out_with_what_was_entered(make_session: MakeSession) -> None:
    h, agent = await start(make_session, timeout=5.0, inter_digit_timeout=2.0)
    await advance(3.0)
    h.session.push_dtmf("9")
    await advance(1.9)
    assert agent.results == []  # type: ignore[attr-defined]
    await advance(0.2)  # 2 s after the last key
    assert agent.results == [rj.Digits("9", "timeout")]  # type: ignore[attr-defined]
    assert agent.results[0].timed_out  # type: ignore[attr-defined]


async def test_pin_times_out_with_no_key(make_session: MakeSession) -> None:
    h, agent = await start(make_session, timeout=4.0)  # the prompt ended 0.5 s ago
    await advance(3.4)
    assert agent.results == []  # type: ignore[attr-defined]
    await advance(0.2)
    assert agent.results == [rj.Digits("", "timeout")]  # type: ignore[attr-defined]
    assert h.output.segments[-1] == "Got timeout:."


async def test_dtmf_events_one_per_key_and_bad_keys_refused(make_session: MakeSession) -> None:
    h = await make_session()
    seen: list[rj.DTMFEvent] = []
    h.session.on("dtmf", seen.append)
    h.session.push_dtmf("1*#a")
    assert [e.digit for e in seen] == ["1", "*", "#", "A"]
    assert all(e.created_at == now() for e in seen)
    for bad in ("", "12x", " 1", "١"):
        with pytest.raises(ValueError, match="DTMF"):
            h.session.push_dtmf(bad)
    with pytest.raises(TypeError, match="digits must be str"):
        h.session.push_dtmf(5)  # type: ignore[arg-type]
    assert len(seen) == 4


def test_collect_digits_refuses_settings_that_never_end() -> None:
    with pytest.raises(ValueError, match="never ends"):
        rj.CollectDigits(terminator=None)
    with pytest.raises(ValueError, match="max_digits"):
        rj.CollectDigits(max_digits=0)
    with pytest.raises(ValueError, match="terminator"):
        rj.CollectDigits(terminator="5")
    with pytest.raises(ValueError, match="timeout"):
        rj.CollectDigits(timeout=0)


async def test_shutdown_from_a_tool_lets_the_goodbye_finish(make_session: MakeSession) -> None:
    closed: list[rj.CloseEvent] = []

    @rj.function_tool
    async def hang_up(context: rj.RunContext) -> str:
        """End the call."""
        context.session.shutdown(reason="agent hung up")
        return "ended"

    def bye(ctx: rj.ChatContext) -> list[Any]:
        if isinstance(ctx.items[-1], rj.FunctionCallOutput):
            return ["Goodbye!"]
        return ["One moment.", ToolCall("hang_up")]

    agent = rj.Agent(instructions="front", tools=[hang_up])
    h = await make_session(ScriptedLLM(bye), agent)  # type: ignore[arg-type]
    h.session.on("close", closed.append)
    h.session.generate_reply(user_input="that's all")
    await advance(2.0)
    assert h.output.segments == ["One moment.", "Goodbye!"]
    assert [c.reason for c in closed] == ["agent hung up"]
    with pytest.raises(RuntimeError, match="not running"):
        h.session.say("anyone there?")


async def test_shutdown_without_drain_and_first_reason_wins(make_session: MakeSession) -> None:
    h = await make_session()
    closed: list[rj.CloseEvent] = []
    h.session.on("close", closed.append)
    h.session.shutdown(drain=False, reason="caller hung up")
    h.session.shutdown(reason="ignored")
    await h.session.aclose(reason="also ignored")
    assert [c.reason for c in closed] == ["caller hung up"]
