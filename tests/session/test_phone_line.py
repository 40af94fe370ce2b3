"""The session's phone-line surface: ``session.send_dtmf`` presses keys through the
transport's keypad, ``push_answered_by`` emits ``answered_by`` events, and a transfer is
a committed obligation while it runs (``thinking``, the caller never marked away). On
virtual time; the transports' own keypads and transfers are tested with them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.io.telephony import TransferFailed
from rejoinder.testing import ScriptedLLM, advance, now

from ..conftest import MakeSession


class RecordingKeypad:
    """A line that takes 0.1 s a key, as tones would."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []

    async def send_dtmf(self, digits: str) -> None:
        await asyncio.sleep(0.1 * len(digits))
        self.sent.append((now(), digits))


async def session(make_session: MakeSession) -> Any:
    return await make_session(ScriptedLLM(lambda ctx: ["Hi."]), rj.Agent(instructions="x"))


async def test_send_dtmf_goes_through_the_keypad_and_returns_once_sent(
    make_session: MakeSession,
) -> None:
    h = await session(make_session)
    keypad = RecordingKeypad()
    h.session.output.keypad = keypad
    start = now()
    await h.session.send_dtmf("1w2#")
    assert keypad.sent == [(pytest.approx(start + 0.4), "1w2#")]


@pytest.mark.parametrize("digits", ["", "12x", "1 2", "é"])
async def test_send_dtmf_refuses_what_is_not_a_key(make_session: MakeSession, digits: str) -> None:
    h = await session(make_session)
    keypad = RecordingKeypad()
    h.session.output.keypad = keypad
    with pytest.raises(ValueError, match="DTMF digits"):
        await h.session.send_dtmf(digits)
    assert keypad.sent == []


async def test_send_dtmf_without_a_phone_line_says_so(make_session: MakeSession) -> None:
    h = await session(make_session)
    with pytest.raises(RuntimeError, match="not a phone call"):
        await h.session.send_dtmf("1")


async def test_answered_by_events_carry_kind_source_and_beep(make_session: MakeSession) -> None:
    h = await session(make_session)
    seen: list[rj.AnsweredByEvent] = []
    h.session.on("answered_by", seen.append)
    h.session.push_answered_by("unknown", source="audio")
    await advance(1.0)
    h.session.push_answered_by("machine", source="provider", beep=True, detail="machine_end_beep")
    assert [(e.answered_by, e.source, e.beep) for e in seen] == [
        ("unknown", "audio", False),
        ("machine", "provider", True),
    ]
    assert seen[1].created_at == pytest.approx(seen[0].created_at + 1.0)
    with pytest.raises(ValueError, match="answered_by is one of"):
        h.session.push_answered_by("robot", source="audio")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="source is"):
        h.session.push_answered_by("human", source="guess")  # type: ignore[arg-type]


async def test_a_transfer_reports_thinking_while_it_runs_and_closes_with_its_outcome(
    make_session: MakeSession,
) -> None:
    h = await session(make_session)
    await advance(1.0)
    assert h.session.agent_state == "listening"
    began = now()
    with h.session.transferring("+15550001111") as outcome:
        await advance(0.5)
        assert h.session.agent_state == "thinking"
        outcome.value = "taken back"
    await advance(0.1)
    assert h.session.agent_state == "listening"
    assert h.timeline.state_at(began + 0.25) == "thinking"
    assert h.session.owed() == []


async def test_a_transfer_that_raises_closes_failed_and_the_error_goes_on(
    make_session: MakeSession,
) -> None:
    h = await session(make_session)

    async def transfer() -> None:
        with h.session.transferring("+1555"):
            await advance(0.2)
            raise TransferFailed("busy")

    with pytest.raises(TransferFailed):
        await transfer()
    await advance(0.1)
    assert h.session.agent_state == "listening"
    assert h.session.owed() == []


async def test_a_completed_transfer_ends_the_session_without_a_listening_between(
    make_session: MakeSession,
) -> None:
    h = await session(make_session)
    closed: list[str] = []
    h.session.on("close", lambda e: closed.append(e.reason))
    states: list[tuple[str, bool]] = []
    h.session.on(
        "agent_state_changed",
        lambda e: states.append((e.new_state, h.session._is_closing())),
    )
    await advance(1.0)
    began = now()
    with h.session.transferring("+15550001111") as outcome:
        await advance(0.3)
        outcome.value = "transferred"
    await advance(0.5)
    assert closed == ["transferred"]
    # listening before; thinking while the caller was handed over; then only the close's
    # own end: never a listening that claims the agent waits for a caller who has left
    assert h.timeline.agent_states(since=began) == ["listening", "thinking", "listening"]
    assert states[-2:] == [("thinking", False), ("listening", True)]  # the end is the close
