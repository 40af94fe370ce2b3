"""Scenarios E1-E3, E5 (endpointing) and the voice loop: microphone → VAD → STT →
model → TTS → speaker, on virtual time with the test kit's audio fakes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import (
    Delay,
    Gate,
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    now,
    speech_frame,
)

MIN_SILENCE = 0.3  # ScriptedVAD: quiet needed to end an utterance
MIN_SPEECH = 0.06  # ScriptedVAD: speech needed to start one


class Call:
    """A voice session wired to a test microphone and speaker."""

    def __init__(
        self,
        session: rj.AgentSession[Any],
        mic: MemoryAudioInput,
        llm: ScriptedLLM,
        stt: ScriptedSTT,
        tts: ScriptedTTS,
    ) -> None:
        self.session, self.mic, self.llm, self.stt, self.tts = session, mic, llm, stt, tts
        self.timeline = StateTimeline(session)
        self.speaker = MemoryAudioOutput(24000)
        self.text = MemoryTextOutput()
        session.output.audio = self.speaker
        session.output.transcription = self.text
        self.transcripts: list[tuple[str, bool]] = []
        session.on(
            "user_input_transcribed",
            lambda ev: self.transcripts.append((ev.transcript, ev.is_final)),
        )

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.02)):
            await self.mic.push(speech_frame(0.02))

    async def silence(self, seconds: float) -> None:
        await self.mic.push_silence(seconds)


async def call(
    llm_script: list[list[Any]], transcripts: list[str | rj.Transcript], **options: Any
) -> Call:
    llm = ScriptedLLM(llm_script)
    stt = ScriptedSTT(transcripts)
    tts = ScriptedTTS()
    mic = MemoryAudioInput(16000)
    options.setdefault("user_away_timeout", None)
    # The timings below are written for a 0.5 s delay (the default is 0.4 s).
    options.setdefault("min_endpointing_delay", 0.5)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm, stt=stt, tts=tts, vad=ScriptedVAD(), **options
    )
    session.input.audio = mic
    c = Call(session, mic, llm, stt, tts)
    await session.start(rj.Agent(instructions="voice"))
    return c


async def test_voice_loop_user_speaks_agent_answers() -> None:
    c = await call([["It is sunny today."]], ["What's the weather?"])
    await c.speak(1.0)
    await c.silence(3.0)
    assert [t for t, final in c.transcripts if final] == ["What's the weather?"]
    assert any(not final for _, final in c.transcripts)  # interims while speaking
    assert c.text.segments == ["It is sunny today."]
    # End of turn: min_endpointing_delay (0.5 s) after the speech ended at t=1.0.
    assert c.timeline.times_of("thinking") == [pytest.approx(1.5)]
    assert c.timeline.agent_states() == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    assert c.timeline.user_states() == ["listening", "speaking", "listening"]
    assert c.timeline.times_of("speaking", who="user") == [pytest.approx(MIN_SPEECH)]
    assert c.speaker.played_seconds == pytest.approx(c.tts.duration_of("It is sunny today."))
    await c.session.aclose()


async def test_e5_unfinished_sentence_waits_for_max_endpointing_delay() -> None:
    c = await call([["Go on."]], ["I would like to"], max_endpointing_delay=3.0)
    await c.speak(1.0)
    await c.silence(5.0)
    assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + 3.0)]
    await c.session.aclose()


async def test_e5_user_resuming_before_the_delay_continues_the_turn() -> None:
    c = await call([["Both parts heard."]], ["I would like to", "book a table."])
    await c.speak(1.0)
    await c.silence(1.5)  # within max_endpointing_delay of an unfinished sentence
    await c.speak(1.0)
    await c.silence(2.0)
    assert len(c.llm.calls) == 1
    user = [m.content for m in c.session.history.messages() if m.role == "user"]
    assert user == ["I would like to book a table."]
    assert c.timeline.times_of("thinking") == [pytest.approx(3.5 + 0.5)]
    await c.session.aclose()


async def test_e5_manual_turn_control() -> None:
    c = await call([["Committed."]], ["Hello there."], turn_detection="manual")
    await c.speak(1.0)
    await c.silence(3.0)
    assert c.llm.calls == []  # no automatic end of turn
    c.session.commit_user_turn()
    await advance(2.0)
    assert c.text.segments == ["Committed."]
    await c.speak(1.0)
    await c.silence(1.0)
    c.session.clear_user_turn()
    c.session.commit_user_turn()
    await advance(2.0)
    assert len(c.llm.calls) == 1
    await c.session.aclose()


async def test_e1_barge_in_keeps_only_what_was_heard() -> None:
    reply = "This is a long answer that goes on and on for quite a while."
    c = await call([[reply], ["Sure, stopping."]], ["Hello?", "Stop please."])
    await c.speak(1.0)
    await c.silence(1.0)  # turn committed at 1.5, reply audible from 1.5
    handle = c.session.current_speech
    assert handle is not None
    await c.silence(1.0)  # t = 3.0
    t_user = now()
    await c.speak(1.0)
    assert handle.interrupted
    stored = next(m for m in c.session.history.messages() if m.role == "assistant")
    assert stored.interrupted
    heard_seconds = t_user + MIN_SPEECH - 1.5  # paused when the VAD confirmed speech
    assert c.speaker.segments[0] == pytest.approx(heard_seconds)
    assert reply.startswith(stored.content)
    assert 0 < len(stored.content) <= heard_seconds / c.tts.seconds_per_char
    # Paused, the reply was still owed (thinking); listening came only once the barge-in
    # was confirmed and the reply interrupted, then the agent answered.
    await c.silence(3.0)
    assert c.text.segments[-1] == "Sure, stopping."
    states = c.timeline.agent_states(since=t_user)
    assert states == ["speaking", "thinking", "listening", "thinking", "speaking", "listening"]
    await c.session.aclose()


async def test_e2_false_interruption_resumes_the_reply() -> None:
    reply = "Here is the whole answer, which is long enough to be talked over."
    c = await call([[reply]], ["Hi.", ""], false_interruption_timeout=1.0)
    await c.speak(1.0)
    await c.silence(1.0)  # reply audible from 1.5
    handle = c.session.current_speech
    assert handle is not None
    t_noise = now()
    await c.speak(0.2)  # a cough: shorter than min_interruption_duration
    await c.silence(8.0)
    await handle
    assert not handle.interrupted
    assert c.text.segments == [reply]
    assert c.speaker.segments == [pytest.approx(c.tts.duration_of(reply))]
    states = c.timeline.agent_states(since=t_noise)
    assert states == ["speaking", "thinking", "speaking", "listening"]  # paused: still owed
    paused_at = c.timeline.times_of("thinking")[-1]
    resumed_at = c.timeline.times_of("speaking")[-1]
    # Resumed false_interruption_timeout after the noise's end was confirmed.
    assert resumed_at - paused_at == pytest.approx(0.2 - MIN_SPEECH + MIN_SILENCE + 1.0)
    assert len(c.llm.calls) == 1  # the noise was no turn
    await c.session.aclose()


async def test_e3_turn_during_uninterruptible_speech_is_discarded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = await call([["Should not be called."]], ["Can you hear me?"])
    announcement = c.session.say(
        "Please listen to this important notice carefully.", allow_interruptions=False
    )
    await advance(0.5)
    with caplog.at_level(logging.INFO, logger="rejoinder"):
        await c.speak(0.6)
        await c.silence(1.0)
    assert not announcement.done()
    await announcement
    assert not announcement.interrupted
    assert any("discarded" in r.getMessage() for r in caplog.records)
    await advance(5.0)
    assert c.llm.calls == []  # nothing parked, nothing answered later
    assert c.session.agent_state == "listening"
    floor = c.session._turn_state.floor
    assert floor.open_obligations() == []
    await c.session.aclose()


async def test_min_interruption_words_needs_words_to_interrupt() -> None:
    reply = "A reply long enough to be spoken over by the user for a while."
    c = await call([[reply], ["Okay."]], ["Hi.", "wait wait wait"], min_interruption_words=2)
    await c.speak(1.0)
    await c.silence(1.0)
    handle = c.session.current_speech
    assert handle is not None
    await c.speak(0.3)  # long enough, but ScriptedSTT's interims have < 2 words by 0.3 s
    assert not handle.interrupted
    await c.speak(0.7)  # now the interims have enough words
    assert handle.interrupted
    await c.session.aclose()


def test_audio_input_needs_vad_and_stt() -> None:
    async def scenario() -> None:
        session: rj.AgentSession[None] = rj.AgentSession(llm=ScriptedLLM([]))
        session.input.audio = MemoryAudioInput()
        with pytest.raises(RuntimeError, match="needs both a vad= and an stt="):
            await session.start(rj.Agent(instructions="x"))
        await session.aclose()

    asyncio.run(scenario())


# ----------------------------------------------------------- E5: preemptive generation


async def test_e5_preemptive_reply_is_used_when_nothing_changed() -> None:
    c = await call(
        [[Delay(0.4), "Prepared answer."]], ["What time is it?"], preemptive_generation=True
    )
    await c.speak(1.0)
    await c.silence(0.35)  # the final transcript is in (t=1.3): speculation starts
    assert len(c.llm.calls) == 1
    assert c.session.agent_state == "listening"  # speculation owes nothing yet
    await c.silence(2.0)
    assert len(c.llm.calls) == 1  # used, not generated again
    assert c.text.segments == ["Prepared answer."]
    # The model started when the utterance was recognized (t=1.3), not at the end of the
    # turn (t=1.5): its 0.4 s overlap the endpointing delay (1.7 instead of 1.9).
    assert c.timeline.times_of("thinking") == [pytest.approx(1.5)]
    assert c.timeline.times_of("speaking") == [pytest.approx(1.3 + 0.4)]
    assert c.session._turn_state.floor.open_obligations() == []
    await c.session.aclose()


async def test_e5_preemptive_reply_is_discarded_when_the_user_goes_on() -> None:
    c = await call(
        [["Stale answer."], ["Fresh answer."]],
        ["I would like to", "book a table."],
        preemptive_generation=True,
    )
    await c.speak(1.0)
    await c.silence(1.0)  # speculation on "I would like to"
    await c.speak(1.0)  # the user goes on: speculation discarded
    await c.silence(0.32)  # a new speculation on the whole turn starts here
    await c.silence(2.0)
    assert [call.chat_ctx.items[-1].content for call in c.llm.calls] == [  # type: ignore[union-attr]
        "I would like to",
        "I would like to book a table.",
    ]
    assert c.text.segments == ["Fresh answer."]
    await c.session.aclose()


async def test_e5_preemptive_reply_not_used_when_the_hook_changes_the_turn() -> None:
    class Rewriter(rj.Agent):
        async def on_user_turn_completed(
            self, turn_ctx: rj.ChatContext, new_message: rj.ChatMessage
        ) -> None:
            new_message.content += " (rewritten)"

    llm = ScriptedLLM([["Speculative."], ["Regenerated."]])
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
    c = Call(session, mic, llm, session.stt, session.tts)  # type: ignore[arg-type]
    await session.start(Rewriter(instructions="r"))
    await c.speak(1.0)
    await c.silence(3.0)
    assert c.text.segments == ["Regenerated."]
    assert len(llm.calls) == 2
    await session.aclose()


@pytest.mark.parametrize("path", ["discarded-turn", "interrupt", "close", "drain"])
async def test_c1_speculation_is_never_left_parked(path: str) -> None:
    """Every path that abandons a speculative reply cancels it (scenarios C1, E3)."""
    never = asyncio.Event()
    c = await call([[Gate(never), "never"]], ["Are you there?"], preemptive_generation=True)
    if path == "discarded-turn":
        c.session.say(
            "An important uninterruptible notice that takes a while.", allow_interruptions=False
        )
    await c.speak(0.6)
    await c.silence(0.35)  # speculation started
    floor = c.session._turn_state.floor
    assert [ob.kind.value for ob in floor.open_obligations()].count("preemptive") == 1
    if path == "discarded-turn":
        await c.silence(1.0)  # the turn ends during the notice: discarded
    elif path == "interrupt":
        await c.session.interrupt()
    elif path == "drain":
        await asyncio.wait_for(c.session.drain(timeout=30), 5)
    else:
        await c.session.aclose()
    assert all(ob.kind.value != "preemptive" for ob in floor.open_obligations())
    prepared_tasks = [t for t in asyncio.all_tasks() if "collect" in repr(t.get_coro())]
    await advance(0.1)
    assert all(t.done() for t in prepared_tasks)
    await c.session.aclose()


async def test_long_noise_without_words_resumes_when_words_are_required() -> None:
    """min_interruption_words: long enough but wordless speech (a cough) must not leave
    the reply paused: it resumes after the false-interruption timeout."""
    reply = "A reply long enough to be coughed over by the user for a while."
    c = await call([[reply]], ["Hi.", ""], min_interruption_words=2, false_interruption_timeout=1.0)
    await c.speak(1.0)
    await c.silence(1.0)
    handle = c.session.current_speech
    assert handle is not None
    await c.speak(1.0)  # a long cough: no words (the recognizer returns "")
    await c.silence(10.0)
    assert handle.done() and not handle.interrupted
    assert c.text.segments == [reply]
    assert c.session.agent_state == "listening"
    await c.session.aclose()
