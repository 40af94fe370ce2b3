"""``LeaveVoicemail`` on a placed call, on virtual time: the message is said only after
the beep (or, with no beep by ``beep_timeout``, once the line went quiet; at the latest
``give_up`` later), may not be interrupted by what the line still plays, and the call is
hung up once the message was heard (the speaker's report, not its sending). While it
waits nobody is owed anything: the agent is ``listening`` from the moment the task took
the floor (the first agent awaits it from its ``on_enter``, and that counts as entered:
no ``initializing`` until a bound, no warning), and the greeting's words get no reply."""

from __future__ import annotations

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.session.hearing.answering import LeaveVoicemail
from rejoinder.testing import advance

from ._answering_audio import TUNED, assemble, machine, silence, speech, tone
from ._placed_call import MESSAGE, Outbound, PlacedCall

MESSAGE_SECONDS = len(MESSAGE) * 0.05  # ScriptedTTS: 50 ms a character


async def outbound(agent: Outbound, **options: object) -> PlacedCall:
    call = PlacedCall(transcripts=["you have reached the voicemail of"] * 5, **options)  # type: ignore[arg-type]
    await call.start(agent)
    return call


def greeting_with_beep(seed: int) -> tuple[np.ndarray, float, float]:
    """A greeting of 6 s then a 1 kHz beep: (audio, greeting end, beep end)."""
    rng = np.random.default_rng(seed)
    words = speech(rng, 6.0, 8000, 160.0)
    pieces = [(silence(0.3, 8000), 0.0), (words, -24.0), (silence(0.5, 8000), 0.0)]
    pieces += [(tone(1000.0, 0.5, 8000), -20.0), (silence(20.0, 8000), 0.0)]
    greeting_end = 0.3 + words.shape[0] / 8000
    return assemble(pieces, 8000, -55.0, rng, phone=True), greeting_end, greeting_end + 1.0


async def test_speaks_only_after_the_beep_and_hangs_up_once_it_was_heard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = Outbound()
    call = await outbound(agent)
    audio, greeting_end, beep_end = greeting_with_beep(1)
    try:
        call.play(audio)
        await advance(beep_end + MESSAGE_SECONDS + 2.0)
        assert agent.answered is not None and agent.answered[0] == "machine"
        assert call.said() == [MESSAGE]
        ((start, end),) = call.played
        assert beep_end <= start <= beep_end + 0.1  # at the beep, not before
        assert end - start == pytest.approx(MESSAGE_SECONDS, abs=0.05)  # heard in full
        assert agent.voicemail is not None and agent.voicemail.outcome == "after beep"
        assert agent.voicemail.left
        # Hung up after the message was heard, with the reason.
        assert [reason for reason, _ in call.closed] == ["voicemail left"]
        assert call.closed[0][1] >= end
        # Waiting for the beep, nothing was owed: never thinking or speaking before the
        # message, and listening as soon as LeaveVoicemail took the floor from the
        # first agent's on_enter (it counts as entered: no bound, no warning).
        before = [c.new for c in call.timeline.changes_of("agent") if c.at < start]
        assert before == ["listening"], call.timeline.describe()
        (listening,) = [c.at for c in call.timeline.changes_of("agent") if c.at < start]
        assert listening == pytest.approx(agent.answered[1], abs=0.05)
        assert not [r for r in caplog.records if "on_enter" in r.getMessage()]
        assert call.timeline.state_at(greeting_end) == "listening"
        assert call.timeline.state_at(start - 0.05) == "listening"
        assert call.llm.calls == []
        assert call.errors == []
    finally:
        await call.aclose()


async def test_without_a_beep_it_speaks_once_the_line_went_quiet_after_the_bound() -> None:
    agent = Outbound(beep_timeout=3.0)
    call = await outbound(agent)
    greeting = machine(2, TUNED, beep=False)
    quiet_from = 0.6 + greeting.spoke_for  # at most: the lead-in, then the greeting
    try:
        call.play(greeting.audio)
        await advance(quiet_from + 1.5 + MESSAGE_SECONDS + 1.0)
        assert agent.voicemail is not None and agent.voicemail.outcome == "after quiet"
        ((start, _),) = call.played
        decided = agent.answered[1] if agent.answered else 0.0
        assert start >= decided + 3.0  # not before the bound
        assert start <= max(decided + 3.0, quiet_from + 1.0) + 0.15  # then at the quiet
        assert [reason for reason, _ in call.closed] == ["voicemail left"]
    finally:
        await call.aclose()


async def test_a_line_that_never_goes_quiet_gets_the_message_at_the_last_bound() -> None:
    agent = Outbound(beep_timeout=2.0, give_up=3.0)
    call = await outbound(agent)
    rng = np.random.default_rng(5)
    audio = assemble([(speech(rng, 30.0, 8000, 140.0), -24.0)], 8000, -55.0, rng, phone=True)
    try:
        call.play(audio)
        await advance(15.0)
        assert agent.answered is not None and agent.answered[0] == "machine"
        assert agent.voicemail is not None and agent.voicemail.outcome == "after bound"
        ((start, end),) = call.played
        assert start == pytest.approx(agent.answered[1] + 5.0, abs=0.15)
        # The line talks all through the message: it is not interrupted by it.
        assert end - start == pytest.approx(MESSAGE_SECONDS, abs=0.05)
    finally:
        await call.aclose()


async def test_screening_before_the_beep_leaves_nothing() -> None:
    agent = Outbound()
    call = await outbound(agent)
    audio, _, _ = greeting_with_beep(3)
    try:
        call.play(audio)
        await advance(3.5)
        assert agent.answered is not None and agent.answered[0] == "machine"
        call.session.push_answered_by("screening", source="provider")
        await advance(1.0)
        assert agent.voicemail is not None and agent.voicemail.outcome == "screening"
        assert not agent.voicemail.left
        assert MESSAGE not in call.said()
        assert call.closed == []
    finally:
        await call.aclose()


async def test_a_providers_beep_is_enough_without_our_detector() -> None:
    agent = Outbound(timeout=1.0)
    call = await outbound(agent, detect=False)
    try:
        call.play(silence(30.0, 8000).astype(np.int16))
        await advance(0.5)
        call.session.push_answered_by("machine", source="provider")
        await advance(3.0)
        assert agent.answered is not None and agent.answered[0] == "machine"
        assert call.said() == []
        call.session.push_answered_by("machine", source="provider", beep=True, detail="end_beep")
        await advance(MESSAGE_SECONDS + 1.0)
        assert agent.voicemail is not None and agent.voicemail.outcome == "after beep"
        assert call.said() == [MESSAGE]
    finally:
        await call.aclose()


async def test_a_beep_heard_before_the_task_began_counts() -> None:
    """The provider sends the greeting's end with its verdict: speak at once."""
    agent = Outbound()
    call = await outbound(agent)
    try:
        call.play(silence(30.0, 8000).astype(np.int16))
        await advance(0.2)
        call.session.push_answered_by("machine", source="provider", beep=True)
        await advance(0.2)
        assert call.said() == [MESSAGE]
        assert call.played and call.played[0][0] <= 0.45
    finally:
        await call.aclose()


async def test_without_hang_up_the_caller_resumes_after_the_message() -> None:
    agent = Outbound(hang_up=False)
    call = await outbound(agent)
    audio, _, beep_end = greeting_with_beep(4)
    try:
        call.play(audio)
        await advance(beep_end + MESSAGE_SECONDS + 1.0)
        assert agent.voicemail is not None and agent.voicemail.outcome == "after beep"
        assert call.closed == []
        assert call.session.current_agent is agent
    finally:
        await call.aclose()


async def test_a_message_cut_by_the_session_closing_is_not_left() -> None:
    agent = Outbound()
    call = await outbound(agent)
    audio, _, beep_end = greeting_with_beep(6)
    try:
        call.play(audio)
        await advance(beep_end + 0.5)
        assert call.said() == [MESSAGE]
        await call.session.aclose(reason="call ended")
        assert agent.voicemail is None or agent.voicemail.outcome == "cut off"
        assert [reason for reason, _ in call.closed] == ["call ended"]
    finally:
        await call.aclose()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="message"):
        LeaveVoicemail("  ")
    with pytest.raises(ValueError, match="beep_timeout"):
        LeaveVoicemail("hi", beep_timeout=-1)


async def test_without_our_detector_the_quiet_is_the_sessions_vad() -> None:
    """The provider said machine and never reports the beep: past ``beep_timeout`` the
    message starts once the session's VAD has heard a second of quiet. (The reminder
    comes in by a handoff here: the session's VAD hears nothing until its first agent
    has entered, and a first agent waiting in on_enter keeps it deaf up to 5 s.)"""
    agent = Outbound(beep_timeout=2.0)
    call = await outbound(rj.Agent(instructions="dialing"), detect=False)
    await advance(0.02)  # the first agent has entered (it has no on_enter)
    call.session.update_agent(agent)
    rng = np.random.default_rng(8)
    words = speech(rng, 4.0, 8000, 150.0)
    audio = assemble([(words, -24.0), (silence(20.0, 8000), 0.0)], 8000, -55.0, rng, phone=True)
    greeting_end = words.shape[0] / 8000
    try:
        call.play(audio)
        await advance(0.5)
        call.session.push_answered_by("machine", source="provider")
        await advance(greeting_end + 2.0 + MESSAGE_SECONDS)
        assert agent.voicemail is not None and agent.voicemail.outcome == "after quiet"
        ((start, _),) = call.played
        # ScriptedVAD ends speech 0.3 s into the quiet; then a second of quiet.
        assert greeting_end + 1.0 <= start <= greeting_end + 0.3 + 1.0 + 0.15
    finally:
        await call.aclose()
