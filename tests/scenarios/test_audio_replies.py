"""Replies through TTS and an audio output: `speaking` is what the user hears.

Audio-output variants of scenarios A1, A2 and A7, plus interruption bookkeeping.
ScriptedTTS speaks 0.05 s per character; MemoryAudioOutput plays on loop time.
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
    ScriptedStreamingTTS,
    ScriptedTTS,
    StateTimeline,
    ToolCall,
    advance,
)
from rejoinder.testing import ScriptedLLM as LLM


class Voice:
    def __init__(self, session: rj.AgentSession[Any], tts: ScriptedTTS, audio: MemoryAudioOutput):
        self.session, self.tts, self.audio = session, tts, audio
        self.timeline = StateTimeline(session)
        self.text = MemoryTextOutput()
        session.output.transcription = self.text
        self.errors: list[rj.ErrorEvent] = []
        session.on("error", self.errors.append)


async def voice_session(
    llm: ScriptedLLM, *tools: rj.FunctionTool, tts: ScriptedTTS | None = None, rate: int = 24000
) -> Voice:
    tts = tts or ScriptedTTS(sample_rate=24000)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, tts=tts, user_away_timeout=None)
    audio = MemoryAudioOutput(rate)
    session.output.audio = audio
    voice = Voice(session, tts, audio)
    await session.start(rj.Agent(instructions="t", tools=list(tools)))
    return voice


@rj.function_tool
async def lookup() -> str:
    """Look something up."""
    await advance(3.0)
    return "found"


async def test_speaking_starts_when_audio_is_audible_not_when_text_exists() -> None:
    tts = ScriptedTTS(latency=0.4)
    v = await voice_session(LLM([["Hello there, friend."]]), tts=tts)
    await v.session.run(user_input="hi")
    assert v.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]
    duration = tts.duration_of("Hello there, friend.")
    assert v.timeline.times_of("speaking") == [pytest.approx(0.4)]
    assert v.timeline.times_of("listening")[-1] == pytest.approx(0.4 + duration)
    assert v.audio.played_seconds == pytest.approx(duration)
    await v.session.aclose()


async def test_a1_audio_tool_follow_up_never_listening() -> None:
    v = await voice_session(
        LLM([["Let me check that.", ToolCall("lookup")], ["Found it."]]), lookup
    )
    await v.session.run(user_input="check")
    first = v.tts.duration_of("Let me check that.")  # 0.9 s of audio, tool takes 3 s
    assert v.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    assert v.timeline.times_of("thinking")[1] == pytest.approx(first)
    assert v.timeline.times_of("speaking")[1] == pytest.approx(3.0)
    v.timeline.assert_never("listening", between=(0.0, 3.0 + v.tts.duration_of("Found it.")))
    await v.session.aclose()


async def test_a7_queued_reply_keeps_speaking_while_audio_plays() -> None:
    v = await voice_session(LLM([["This is a fairly long first answer."], ["Second answer."]]))
    first = v.session.generate_reply(user_input="one")
    await advance(0.5)
    second = v.session.generate_reply(user_input="two")
    await first
    await second
    end_first = v.tts.duration_of("This is a fairly long first answer.")
    v.timeline.assert_never("thinking", between=(0.001, end_first - 0.001))
    assert v.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    await v.session.aclose()


async def test_interrupted_audio_records_only_what_was_heard() -> None:
    text = "One two three four. Five six seven eight."
    v = await voice_session(LLM([[text]]))
    handle = v.session.generate_reply(user_input="count")
    first = v.tts.duration_of("One two three four.")
    await advance(first + 0.3)
    await v.session.interrupt()
    assert handle.interrupted
    last = v.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("One two three four. Five", True)
    assert v.audio.segments == [pytest.approx(first + 0.3)]
    assert v.session.agent_state == "listening"
    await v.session.aclose()


async def test_tts_resampled_to_the_output_rate() -> None:
    tts = ScriptedTTS(sample_rate=16000)
    v = await voice_session(LLM([["Resample me please."]]), tts=tts, rate=48000)
    await v.session.run(user_input="x")
    assert {f.sample_rate for f in v.audio.frames} == {48000}
    assert v.audio.played_seconds == pytest.approx(tts.duration_of("Resample me please."), abs=0.01)
    await v.session.aclose()


async def test_tts_failure_ends_the_turn_with_an_error() -> None:
    tts = ScriptedTTS(fail_on="boom")
    v = await voice_session(LLM([["This works fine. Then boom."], ["Recovered now."]]), tts=tts)
    await v.session.run(user_input="x")
    assert [e.source for e in v.errors] == ["tts"]
    assert v.session.agent_state == "listening"
    result = await v.session.run(user_input="again")
    assert result.final_output == "Recovered now."
    await v.session.aclose()


async def test_aclose_while_tts_hangs_is_bounded() -> None:
    tts = ScriptedTTS(hang_on="forever")
    v = await voice_session(LLM([["Say this forever."]]), tts=tts)
    v.session.generate_reply(user_input="x")
    await advance(1.0)
    assert v.session.agent_state == "thinking"
    await v.session.aclose()
    assert v.session.agent_state == "listening"


@rj.function_tool
async def set_timer(ctx: rj.RunContext[None]) -> str:
    """Start a timer."""
    await ctx.update("Timer started.")
    await advance(2.0)
    return "Timer done."


async def test_a2_audio_background_result_during_answer_goes_through_thinking() -> None:
    llm = LLM(
        [
            [ToolCall("set_timer")],
            ["Timer is running."],
            ["Here is a fairly long answer to your second question."],
            ["Your timer is done."],
        ]
    )
    v = await voice_session(llm, set_timer)
    await v.session.run(user_input="set a timer")
    t_second = 1.0
    await advance(t_second - float(asyncio.get_running_loop().time()))
    await v.session.run(user_input="and another thing?")  # audible well past t=2 (timer)
    await advance(5.0)
    assert v.timeline.agent_states(since=t_second) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    answer_end = v.timeline.times_of("thinking")[-1]
    assert answer_end > 2.0  # the result landed while the answer was audible
    v.timeline.assert_never("listening", between=(t_second + 0.001, answer_end + 0.5))
    assert v.text.segments[-1] == "Your timer is done."
    await v.session.aclose()


# ------------------------------------------------- word timings and streaming TTS


async def test_interrupted_reply_keeps_exactly_the_words_heard_with_timings() -> None:
    text = "Alpha beta gamma delta epsilon zeta eta theta."
    tts = ScriptedTTS(word_timings=True)
    v = await voice_session(LLM([[text]]), tts=tts)
    v.session.generate_reply(user_input="letters")
    # "Alpha beta gamma" ends at 0.80 s; "delta" spans 0.85-1.10 (midpoint 0.975).
    await advance(0.95)
    await v.session.interrupt()
    last = v.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("Alpha beta gamma", True)
    await v.session.aclose()


async def test_streaming_tts_speaks_before_the_sentence_is_complete() -> None:
    tts = ScriptedStreamingTTS()
    llm = LLM([["Hello there ", Delay(1.0), "my friend."]])
    v = await voice_session(llm, tts=tts)  # type: ignore[arg-type]
    await v.session.run(user_input="hi")
    # The first words were voiced at once, not after the sentence ended at t=1.
    assert v.timeline.times_of("speaking") == [pytest.approx(0.0)]
    assert [s.text for s in tts.streams] == ["Hello there my friend."]
    assert v.text.segments == ["Hello there my friend."]
    assert v.session.history.items[-1].content == "Hello there my friend."  # type: ignore[union-attr]
    await v.session.aclose()


async def test_streaming_tts_interruption_uses_its_word_timings() -> None:
    tts = ScriptedStreamingTTS()
    v = await voice_session(LLM([["one two three four five six seven"]]), tts=tts)  # type: ignore[arg-type]
    v.session.generate_reply(user_input="count")
    await advance(0.6)  # "one " 0-0.2, "two " 0.2-0.4, "three " 0.4-0.7 (midpoint 0.525)
    await v.session.interrupt()
    last = v.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("one two three", True)
    await v.session.aclose()


class StuckOutput(rj.AudioOutput):
    """Accepts audio, reports playback started, and never reports it finished."""

    def __init__(self) -> None:
        super().__init__(sample_rate=24000, can_pause=False)
        self.started = False

    async def capture_frame(self, frame: rj.AudioFrame) -> None:
        if not self.started:
            self.started = True
            self._report_started()

    def flush(self) -> None:
        pass

    def clear_buffer(self) -> None:
        pass


async def test_c2_lifecycle_calls_are_bounded_when_the_audio_output_hangs() -> None:
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=LLM([["This will never finish playing."], ["Nor this."]]),
        tts=ScriptedTTS(),
        user_away_timeout=None,
        obligation_timeouts={"reply": 60.0},
    )
    session.output.audio = StuckOutput()
    await session.start(rj.Agent(instructions="t"))
    first = session.generate_reply(user_input="x")
    await advance(5.0)
    assert session.agent_state == "speaking"
    await asyncio.wait_for(session.interrupt(), 1.0)  # returns although nothing confirms
    assert first.interrupted
    session.generate_reply(user_input="y")
    await advance(5.0)
    t0 = asyncio.get_running_loop().time()
    await asyncio.wait_for(session.drain(timeout=10.0), 30)  # bounded by its timeout
    assert asyncio.get_running_loop().time() - t0 == pytest.approx(10.0)
    assert session.agent_state == "listening"


class PacedOutput(MemoryAudioOutput):
    """Takes audio only in real time, 0.5 s ahead (a phone line, a WebRTC track): a long
    sentence's audio is not all captured when it is interrupted. ``leave`` is the
    listener hanging up."""

    def __init__(self) -> None:
        super().__init__(24000, max_lead=0.5)
        self.gone = False

    async def capture_frame(self, frame: rj.AudioFrame) -> None:
        if not self.gone:
            await super().capture_frame(frame)

    def leave(self) -> None:
        """Playback ends where it is, interrupted; nothing more can be heard."""
        self.gone = True
        self._finish(interrupted=True)


LONG_SENTENCE = "one two three four five six seven eight nine ten eleven twelve thirteen."


async def test_an_interruption_on_a_paced_output_keeps_the_words_heard() -> None:
    # The whole sentence is one TTS segment; the output holds only 0.5 s of it at a time.
    # Where the interruption falls in the text must come from the synthesis's length, not
    # from the share of it captured so far (which would keep far more than was heard).
    tts = ScriptedTTS(sample_rate=24000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=LLM([[LONG_SENTENCE]]), tts=tts, user_away_timeout=None
    )
    session.output.audio = PacedOutput()
    await session.start(rj.Agent(instructions="t"))
    session.generate_reply(user_input="count")
    await advance(1.55)  # 31 characters of the 72: "one two three four five six"
    await session.interrupt()
    last = session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("one two three four five six", True)
    await session.aclose()


async def test_a_listener_who_leaves_mid_reply_is_recorded_as_interrupted() -> None:
    output = PacedOutput()
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=LLM([[LONG_SENTENCE]]), tts=ScriptedTTS(sample_rate=24000), user_away_timeout=None
    )
    session.output.audio = output
    await session.start(rj.Agent(instructions="t"))
    handle = session.generate_reply(user_input="count")
    await advance(1.0)
    output.leave()
    await advance(0.1)
    last = session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert last.interrupted and LONG_SENTENCE.startswith(last.content)
    assert len(last.content) <= 20
    assert handle.done() and session.agent_state == "listening"
    await session.aclose()
