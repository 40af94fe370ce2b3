"""Interruptions judged by an ``InterruptionDetector``, on virtual time: a backchannel,
a cough or laughter over the agent changes nothing (no pause, no state change, nothing
in the conversation); a real interruption stops the agent at the onset verdict, a few
hundred milliseconds in, not after ``min_interruption_duration``."""

from __future__ import annotations

from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedInterruptionDetector, now

from .test_e_voice_turns import Call, call

REPLY = "This is a long answer that goes on and on for quite a while, and then some more."
UNDECIDED = rj.Interruption.UNDECIDED
INTERRUPT = rj.Interruption.INTERRUPT


async def talking_agent(
    detector: ScriptedInterruptionDetector, user_says: str, **options: Any
) -> tuple[Call, rj.SpeechHandle, float]:
    """The agent answers "Hello?" with a long reply; 1.5 s into it the user speaks."""
    c = await call(
        [[REPLY], ["Sure."]], ["Hello?", user_says], interruption_detection=detector, **options
    )
    await c.speak(1.0)
    await c.silence(1.0)  # turn committed at 1.5, reply audible from 1.5
    handle = c.session.current_speech
    assert handle is not None
    await c.silence(1.0)
    return c, handle, now()


def user_messages(c: Call) -> list[str]:
    return [m.content for m in c.session.history.messages() if m.role == "user"]


@pytest.mark.parametrize("said", ["Uh-huh.", "Yeah.", "Mm-hmm.", "Okay, I see.", "", "(coughs)"])
async def test_a_backchannel_or_a_cough_over_the_agent_changes_nothing(said: str) -> None:
    detector = ScriptedInterruptionDetector([UNDECIDED])
    c, handle, t_user = await talking_agent(detector, said)
    await c.speak(0.4)
    await c.silence(8.0)
    await handle
    assert not handle.interrupted
    # never paused: the whole reply played in one piece, and the agent only ever spoke
    assert c.speaker.segments == [pytest.approx(c.tts.duration_of(REPLY))]
    assert c.timeline.agent_states(since=t_user) == ["speaking", "listening"]
    assert user_messages(c) == ["Hello?"]
    assert len(c.llm.calls) == 1  # it was no turn
    assert len(detector.onsets) == 1
    await c.session.aclose()


async def test_an_interruption_the_onset_took_for_feedback_stops_at_the_second_look() -> None:
    # "Stop, stop." in a voice the onset model never heard sounds like "uh-huh" for
    # 0.3 s; the second look, on 0.5 s, hears it go on: the agent stops then, not after
    # max_undecided_seconds (1 s) or when the words are in.
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], second_look=[INTERRUPT], second_look_seconds=0.4
    )
    c, handle, t_user = await talking_agent(detector, "Stop, stop.")
    await c.speak(1.2)
    assert handle.interrupted
    [onset], [second] = detector.onsets, detector.second_looks
    assert onset.at == pytest.approx(t_user + 0.2)
    assert second.at == pytest.approx(t_user + 0.4)
    # given the audio from lead_seconds before the onset to the second look
    assert second.audio_seconds == pytest.approx(0.4 + detector.lead_seconds, abs=0.021)
    assert c.speaker.segments[0] == pytest.approx(t_user + 0.4 - 1.5)
    await c.silence(3.0)
    assert user_messages(c) == ["Hello?", "Stop, stop."]
    states = c.timeline.agent_states(since=t_user)
    assert states == ["speaking", "listening", "thinking", "speaking", "listening"]
    await c.session.aclose()


@pytest.mark.parametrize("onset_verdict", [INTERRUPT, UNDECIDED])
async def test_a_second_look_is_asked_only_while_nothing_is_decided(
    onset_verdict: rj.Interruption,
) -> None:
    # An onset that interrupted needs no second look; a backchannel the second look also
    # takes for feedback changes nothing, and its words drop it as before.
    detector = ScriptedInterruptionDetector(
        [onset_verdict], second_look=[UNDECIDED], second_look_seconds=0.4
    )
    said = "Wait." if onset_verdict is INTERRUPT else "Uh-huh."
    c, handle, t_user = await talking_agent(detector, said)
    await c.speak(0.5)
    await c.silence(8.0)
    await handle
    assert len(detector.second_looks) == (0 if onset_verdict is INTERRUPT else 1)
    assert handle.interrupted is (onset_verdict is INTERRUPT)
    if onset_verdict is UNDECIDED:
        assert c.speaker.segments == [pytest.approx(c.tts.duration_of(REPLY))]
        assert c.timeline.agent_states(since=t_user) == ["speaking", "listening"]
        assert user_messages(c) == ["Hello?"]
    await c.session.aclose()


async def test_a_second_look_that_fails_leaves_the_words_to_decide() -> None:
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], second_look=[RuntimeError("second look broke")], second_look_seconds=0.4
    )
    c, handle, _ = await talking_agent(detector, "Uh-huh.")
    errors: list[rj.ErrorEvent] = []
    c.session.on("error", errors.append)
    await c.speak(0.5)
    await c.silence(8.0)
    await handle
    assert not handle.interrupted
    assert [e.source for e in errors] == ["interruption_detection"]
    assert user_messages(c) == ["Hello?"]
    await c.session.aclose()


async def test_a_real_interruption_stops_the_agent_at_the_onset_verdict() -> None:
    detector = ScriptedInterruptionDetector([INTERRUPT], delay=0.01)
    c, handle, t_user = await talking_agent(detector, "Wait, stop.")
    await c.speak(1.0)
    assert handle.interrupted
    # judged 0.2 s after the onset (the VAD placed it at t_user), decided 0.01 s later:
    # the agent was heard until then, not for min_interruption_duration (0.5 s)
    [onset] = detector.onsets
    assert onset.at == pytest.approx(t_user + 0.2)
    assert c.speaker.segments[0] == pytest.approx(t_user + 0.21 - 1.5)
    stored = next(m for m in c.session.history.messages() if m.role == "assistant")
    assert stored.interrupted and REPLY.startswith(stored.content)
    await c.silence(3.0)
    assert user_messages(c) == ["Hello?", "Wait, stop."]
    assert c.text.segments[-1] == "Sure."
    # the reply ended when the interruption was decided; then the user's turn
    states = c.timeline.agent_states(since=t_user)
    assert states == ["speaking", "listening", "thinking", "speaking", "listening"]
    stopped = min(t for t in c.timeline.times_of("listening") if t > t_user)
    assert stopped == pytest.approx(t_user + 0.21)
    await c.session.aclose()


async def test_undecided_words_that_are_no_backchannel_interrupt_when_heard() -> None:
    detector = ScriptedInterruptionDetector([UNDECIDED])
    c, handle, _ = await talking_agent(detector, "No, Wednesday.")
    await c.speak(0.5)
    await c.silence(0.2)
    assert not handle.interrupted  # the agent talks on while the words are awaited
    await c.silence(3.0)
    assert handle.interrupted
    assert detector.transcripts == ["No, Wednesday."]
    assert user_messages(c) == ["Hello?", "No, Wednesday."]
    assert c.text.segments[-1] == "Sure."
    await c.session.aclose()


async def test_speech_that_goes_on_over_the_agent_interrupts_undecided() -> None:
    detector = ScriptedInterruptionDetector([UNDECIDED], max_undecided_seconds=1.0)
    c, handle, t_user = await talking_agent(detector, "yeah yeah so what I wanted to say")
    await c.speak(1.5)
    assert handle.interrupted
    # 1 s of speech (the VAD counts it frame by frame: within one 20 ms frame)
    assert c.speaker.segments[0] == pytest.approx(t_user + 1.0 - 1.5, abs=0.021)
    await c.silence(3.0)
    assert user_messages(c)[-1] == "yeah yeah so what I wanted to say"
    await c.session.aclose()


async def test_a_failing_detector_is_reported_and_the_words_decide() -> None:
    detector = ScriptedInterruptionDetector([RuntimeError("model broke")])
    c, handle, _ = await talking_agent(detector, "Uh-huh.")
    errors: list[rj.ErrorEvent] = []
    c.session.on("error", errors.append)
    await c.speak(0.4)
    await c.silence(8.0)
    assert not handle.interrupted
    assert [(e.source, str(e.error)) for e in errors] == [("interruption_detection", "model broke")]
    assert user_messages(c) == ["Hello?"]
    await c.session.aclose()


def test_interruption_detection_must_be_a_detector() -> None:
    with pytest.raises(TypeError, match="interruption_detection"):
        rj.AgentSession(interruption_detection="smart")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("words", "backchannel"),
    [
        ("Uh-huh.", True),
        ("Yeah, yeah.", True),
        ("Oh, I see.", True),
        ("Mm-hmm", True),
        ("Ha ha.", True),
        ("[laughter]", True),
        ("", True),
        ("Okay.", True),
        ("Right, got it.", True),
        ("Mm-ma.", True),
        ("Mmhmm.", True),
        ("Me!", False),
        ("No.", False),
        ("Wait, stop.", False),
        ("Yeah, but wait", False),
        ("Actually I meant Tuesday", False),
        ("okay okay okay okay okay", False),
        # What Whisper made of laughs, coughs and cut-off sounds on the benchmark's voices
        ("Chah ha ha.", True),
        ("Heh, heh", True),
        ("Thank you.", True),
        ("C-", True),
        ("the", True),
        ("C C C C", True),
        ("H H H H H", True),
        ("B", False),  # a choice, said over the agent's list
        ("A", False),
        ("the weather", False),
        ("Hold on.", False),
    ],
)
def test_which_words_are_a_backchannel(words: str, backchannel: bool) -> None:
    assert rj.is_backchannel(words) is backchannel


@pytest.mark.parametrize(
    ("confidence", "interrupted"), [(0.05, False), (0.09, False), (0.22, True), (None, True)]
)
async def test_words_the_recognizer_made_of_a_sound_change_nothing(
    confidence: float | None, interrupted: bool
) -> None:
    # Seen on the conversation benchmark: Whisper wrote "Is that right?" for a laugh over
    # the agent, and the agent stopped for it. Its words averaged a low probability.
    detector = ScriptedInterruptionDetector([UNDECIDED])
    c = await call(
        [[REPLY], ["Sure."]],
        ["Hello?", rj.Transcript("Is that right?", confidence=confidence)],
        interruption_detection=detector,
    )
    await c.speak(1.0)
    await c.silence(1.0)
    handle = c.session.current_speech
    assert handle is not None
    await c.silence(1.0)
    t_user = now()
    await c.speak(0.4)
    await c.silence(8.0)
    await handle
    assert handle.interrupted is interrupted
    if not interrupted:
        assert c.timeline.agent_states(since=t_user) == ["speaking", "listening"]
        assert user_messages(c) == ["Hello?"]
    else:
        assert user_messages(c) == ["Hello?", "Is that right?"]
    await c.session.aclose()
