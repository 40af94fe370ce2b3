"""The words so far of speech over the agent, on virtual time: an onset the detector took
for feedback ("hold on" and "sorry" start like "uh-huh") stops the agent when its first
words are heard, while the user still speaks, not when the utterance ends or after
``max_undecided_seconds``. Seen on the conversation benchmark: interruptions the onset
model judged feedback stopped the agent 1.0-1.1 s after their onset."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedInterruptionDetector,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    now,
    speech_frame,
)

from ._batch_stt import BatchSTT

REPLY = "This is a long answer that goes on and on for quite a while, and then some more."
UNDECIDED = rj.Interruption.UNDECIDED
REPLY_FROM = 1.5  # the reply is audible from here (see talking_agent)


class Talk:
    def __init__(self, session: rj.AgentSession[Any], mic: MemoryAudioInput) -> None:
        self.session, self.mic = session, mic
        self.speaker = MemoryAudioOutput(24000)
        session.output.audio = self.speaker
        self.timeline = StateTimeline(session)

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.02)):
            await self.mic.push(speech_frame(0.02))

    def users(self) -> list[str]:
        return [m.content for m in self.session.history.messages() if m.role == "user"]


async def talking_agent(
    stt: rj.STT, detector: rj.InterruptionDetector
) -> tuple[Talk, rj.SpeechHandle, float]:
    """The agent answers "Hello?" with a long reply; 1.5 s into it the user speaks."""
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([[REPLY], ["Sure."]]),
        stt=stt,
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        user_away_timeout=None,
        min_endpointing_delay=0.5,
        interruption_detection=detector,
    )
    session.input.audio = mic
    talk = Talk(session, mic)
    await session.start(rj.Agent(instructions="voice"))
    await talk.speak(1.0)
    await mic.push_silence(1.0)
    handle = session.current_speech
    assert handle is not None
    await mic.push_silence(1.0)
    return talk, handle, now()


def heard_until(talk: Talk) -> float:
    """When the listener stopped hearing the reply (loop time)."""
    return REPLY_FROM + talk.speaker.segments[0]


async def test_sure_words_so_far_stop_the_agent_while_the_user_still_speaks() -> None:
    stt = BatchSTT(["Hello?", "Hold on a second."], latency=0.1)
    detector = ScriptedInterruptionDetector([UNDECIDED], interim_from=0.3)
    talk, handle, t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert handle.interrupted  # before the user has finished
    # the pass over the words so far started 0.3 s after the onset and took 0.1 s
    when, audio = stt.calls[1]
    assert when == pytest.approx(t_user + 0.3)
    assert 0.3 < audio <= 0.3 + 0.5  # all of it so far, with the pre-roll
    assert heard_until(talk) == pytest.approx(t_user + 0.4)
    assert detector.interims == ["Hold on a second."]
    await talk.mic.push_silence(3.0)
    assert talk.users() == ["Hello?", "Hold on a second."]  # the whole utterance's words
    states = talk.timeline.agent_states(since=t_user)
    assert states == ["speaking", "listening", "thinking", "speaking", "listening"]
    await talk.session.aclose()


async def test_a_backchannel_so_far_waits_for_the_words_that_follow() -> None:
    stt = BatchSTT(["Hello?", "Yeah", "Yeah, but wait"], latency=0.1)
    detector = ScriptedInterruptionDetector([UNDECIDED], interim_from=0.3)
    talk, handle, t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert handle.interrupted
    # the second pass began as the first ended (at most every interim_every, 0.1 s)
    assert [t for t, _ in stt.calls[1:3]] == [
        pytest.approx(t_user + 0.3),
        pytest.approx(t_user + 0.4),
    ]
    assert heard_until(talk) == pytest.approx(t_user + 0.5)
    assert detector.interims == ["Yeah", "Yeah, but wait"]
    await talk.session.aclose()


async def test_a_backchannel_spoken_on_changes_nothing() -> None:
    stt = BatchSTT(["Hello?", "Uh-huh, yeah."], latency=0.05)
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], interim_from=0.3, max_undecided_seconds=2.0
    )
    talk, handle, t_user = await talking_agent(stt, detector)
    await talk.speak(0.9)
    await talk.mic.push_silence(8.0)
    await handle
    assert not handle.interrupted
    assert talk.speaker.segments == [pytest.approx(ScriptedTTS().duration_of(REPLY))]
    assert talk.timeline.agent_states(since=t_user) == ["speaking", "listening"]
    assert talk.users() == ["Hello?"]
    # passes every 0.1 s while the user spoke (and the VAD's 0.3 s of silence), then none
    passes = [t for t, _ in stt.calls[1:-1]]
    assert len(passes) >= 8 and passes[0] == pytest.approx(t_user + 0.3)
    assert passes[-1] <= t_user + 0.9 + 0.3 + 1e-6  # the VAD ended the utterance
    # one at a time, at most every interim_every (until the pause: then the early pass)
    firsts = passes[:6]
    assert all(b - a == pytest.approx(0.1) for a, b in itertools.pairwise(firsts))
    await talk.session.aclose()


@pytest.mark.parametrize("confidence", [0.3, 0.49])
async def test_words_so_far_the_recognizer_is_unsure_of_wait_for_the_whole_utterance(
    confidence: float,
) -> None:
    # Whisper on the first few hundred ms of an "mm-hmm" wrote "And I'm." at 0.43
    words = rj.Transcript("And I'm.", confidence=confidence)
    stt = BatchSTT(["Hello?", words], latency=0.05)
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], interim_from=0.3, max_undecided_seconds=2.0
    )
    talk, handle, t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert not handle.interrupted
    await talk.mic.push_silence(3.0)
    # the whole utterance's words (not unsure throughout: over UNSURE_WORDS) decide
    assert handle.interrupted
    # when the VAD ended the utterance (its words were in: recognized at the pause)
    assert heard_until(talk) == pytest.approx(t_user + 0.8 + 0.3)
    await talk.session.aclose()


async def test_a_failing_pass_leaves_the_decision_to_the_whole_utterance() -> None:
    stt = BatchSTT(["Hello?", "Hold on a second."], latency=0.05, fail_on=frozenset({1}))
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], interim_from=0.3, max_undecided_seconds=2.0
    )
    talk, handle, _t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert not handle.interrupted
    assert len(stt.calls) == 2  # no pass after the one that failed
    await talk.mic.push_silence(3.0)
    assert handle.interrupted
    assert talk.users() == ["Hello?", "Hold on a second."]
    await talk.session.aclose()


async def test_a_streaming_recognizers_interim_words_stop_the_agent_at_interim_from() -> None:
    stt = ScriptedSTT(["Hello?", "Wait, stop."], interim_every=0.1)
    detector = ScriptedInterruptionDetector([UNDECIDED], interim_from=0.3)
    talk, handle, t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert handle.interrupted
    # its interims came before interim_from; the latest is judged then
    assert heard_until(talk) == pytest.approx(t_user + 0.3, abs=0.021)
    assert detector.interims[0].startswith("Wait")
    await talk.mic.push_silence(3.0)
    assert talk.users() == ["Hello?", "Wait, stop."]
    await talk.session.aclose()


async def test_without_interim_from_only_the_whole_utterance_decides() -> None:
    stt = BatchSTT(["Hello?", "Hold on a second."], latency=0.05)
    detector = ScriptedInterruptionDetector([UNDECIDED], max_undecided_seconds=2.0)
    talk, handle, _t_user = await talking_agent(stt, detector)
    await talk.speak(0.8)
    assert not handle.interrupted and len(stt.calls) == 1
    await talk.mic.push_silence(3.0)
    assert handle.interrupted and detector.interims == []
    await talk.session.aclose()


async def test_the_session_closing_during_a_pass_leaves_nothing_owed() -> None:
    stt = BatchSTT(["Hello?", "Hold on a second."], latency=0.5)
    detector = ScriptedInterruptionDetector(
        [UNDECIDED], interim_from=0.3, max_undecided_seconds=2.0
    )
    talk, _, _ = await talking_agent(stt, detector)
    await talk.speak(0.4)  # the pass is running
    await talk.session.aclose()
    assert talk.session._turn_state.owed() == []  # type: ignore[union-attr]
