"""A finished sentence is spoken while the model pauses after it.

The sentence splitter holds a sentence's end until the next visible character shows it
is one ("e.g. the" is not a sentence end). A model that stops writing right after a
sentence (reasoning, streaming a tool call's arguments, a slow backend) used to leave that
sentence unspoken, the agent ``thinking`` in silence, until the text went on. Now the
held sentence is spoken after ``QUIET_RELEASE`` seconds without text.

ScriptedTTS speaks 0.05 s per character with no latency; MemoryAudioOutput plays on loop
time, so ``speaking`` starts the moment a sentence reaches the TTS.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.sentences import SentenceSplitter, split_sentences
from rejoinder.session.speech.audio_delivery import QUIET_RELEASE, AudioDelivery
from rejoinder.testing import (
    Delay,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedTTS,
    StateTimeline,
    ToolCall,
    advance,
    now,
)

from .._virtual_time import virtual_loop

NOTICE = "Please hold on while I read you an important notice."
REST = "The office is closed on Monday."


class Voice:
    def __init__(self, session: rj.AgentSession[Any], tts: ScriptedTTS) -> None:
        self.session, self.tts = session, tts
        self.timeline = StateTimeline(session)


async def voice_session(llm: ScriptedLLM, *tools: rj.FunctionTool) -> Voice:
    tts = ScriptedTTS(sample_rate=24000)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, tts=tts, user_away_timeout=None)
    session.output.audio = MemoryAudioOutput(24000)
    voice = Voice(session, tts)
    await session.start(rj.Agent(instructions="t", tools=list(tools)))
    return voice


def pending_quiet_timers() -> list[asyncio.TimerHandle]:
    """Quiet timers still armed on the running loop. asyncio has no public list of its
    timers, so this reads the loop's heap (``_scheduled``); a cancelled handle stays in it
    until its time, so only the live ones count."""
    loop = asyncio.get_running_loop()
    scheduled: list[asyncio.TimerHandle] = getattr(loop, "_scheduled")  # noqa: B009 - untyped
    return [
        handle
        for handle in scheduled
        if not handle.cancelled()
        and getattr(getattr(handle, "_callback", None), "__func__", None)
        is AudioDelivery.text_paused
    ]


def test_the_quiet_is_short() -> None:
    assert 0 < QUIET_RELEASE <= 0.15


@pytest.mark.parametrize("quiet", [-0.1, float("nan")])
async def test_a_negative_or_nan_quiet_is_refused(quiet: float) -> None:
    unused: Any = None  # refused before any of the speech's parts is looked at
    with pytest.raises(ValueError, match="quiet_release must be >= 0"):
        AudioDelivery(
            unused,
            None,
            print,
            tts=ScriptedTTS(),
            audio_output=MemoryAudioOutput(24000),
            spawn=unused,
            quiet_release=quiet,
        )


@pytest.mark.parametrize(
    "first",
    [
        [f"{NOTICE} "],  # the space after the period came, the next word did not
        [NOTICE[:-1], "."],  # the period is the last character before the pause
    ],
    ids=["space-after", "period-last"],
)
async def test_sentence_spoken_while_model_pauses(first: list[str]) -> None:
    v = await voice_session(ScriptedLLM([[*first, Delay(1.0), f" {REST}"]]))
    await v.session.run(user_input="hi")
    # Speaking starts one quiet after the sentence's last character, long before the
    # model goes on at 1.0 s.
    assert v.timeline.times_of("speaking") == [pytest.approx(QUIET_RELEASE)]
    assert v.timeline.agent_states() == [
        "initializing",
        "thinking",
        "speaking",
        "listening",
    ]
    assert v.tts.texts == [NOTICE, REST]
    last = v.session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert last.content == "".join(first) + f" {REST}"
    assert not pending_quiet_timers()
    await v.session.aclose()


@rj.function_tool
async def lookup() -> str:
    """Look something up."""
    await advance(2.0)
    return "found"


async def test_sentence_spoken_while_the_model_streams_a_tool_call() -> None:
    # The tool call's arguments take the model a second to write after the sentence.
    llm = ScriptedLLM([[NOTICE, ToolCall("lookup"), Delay(1.0)], ["Found it."]])
    v = await voice_session(llm, lookup)
    await v.session.run(user_input="check")
    speaking = v.timeline.times_of("speaking")
    # released by the tool-call chunk itself, not by the quiet after it
    assert speaking[0] < 0.05
    assert v.tts.texts == [NOTICE, "Found it."]
    v.timeline.assert_never("listening", between=(0.0, speaking[-1]))
    await v.session.aclose()


async def test_flowing_text_is_not_cut_at_an_abbreviation() -> None:
    # Deltas 50 ms apart (quicker than the quiet): the splitter's rules alone decide, so
    # "5 p.m." before "tomorrow" stays one sentence.
    llm = ScriptedLLM([["Meet me at 5 p.m.", Delay(0.05), " tomorrow, by the door."]])
    v = await voice_session(llm)
    await v.session.run(user_input="when")
    assert v.tts.texts == ["Meet me at 5 p.m. tomorrow, by the door."]
    await v.session.aclose()


async def test_a_reply_interrupted_during_the_quiet_says_nothing_more() -> None:
    v = await voice_session(ScriptedLLM([[NOTICE, Delay(1.0), f" {REST}"]]))
    handle = v.session.generate_reply(user_input="hi")
    await advance(QUIET_RELEASE / 2)
    assert pending_quiet_timers()  # the sentence is held, the quiet is running
    await v.session.interrupt()
    assert handle.interrupted
    assert not pending_quiet_timers()
    await advance(2.0)
    assert v.tts.texts == []
    assert v.timeline.times_of("speaking") == []
    assert v.session.agent_state == "listening"
    await v.session.aclose()


async def test_a_quiet_timer_never_outlives_its_reply() -> None:
    # The stream ends right after a held sentence: the end of the text releases it at
    # once and the quiet timer is cancelled, not left to fire into a finished speech.
    v = await voice_session(ScriptedLLM([[NOTICE]]))
    await v.session.run(user_input="hi")
    assert v.timeline.times_of("speaking") == [pytest.approx(0.0)]
    assert not pending_quiet_timers()
    await v.session.aclose()


# -------------------------------------------- random chunkings with random stalls

TEXT = (
    "Please hold on. Dr. Smith will see you at 5 p.m. today, e.g. in room 3.14 "
    "upstairs. It costs $4.99! Are you ready? See www.example.com for more. Thanks."
)
STALLS = [0.0, 0.01, 0.05, 0.11, 0.13, 0.3, 1.0]


@st.composite
def chunked_with_stalls(draw: st.DrawFn) -> list[str | Delay]:
    cuts = sorted(set(draw(st.lists(st.integers(1, len(TEXT) - 1), max_size=20))))
    script: list[str | Delay] = []
    for start, end in zip([0, *cuts], [*cuts, len(TEXT)], strict=True):
        script.append(TEXT[start:end])
        if stall := draw(st.sampled_from(STALLS)):
            script.append(Delay(stall))
    return script


def first_speech_at(script: list[str | Delay]) -> float:
    """When the first sentence should start (seconds after the reply began): when the
    text completes one, or one quiet into a stall that follows a held sentence end, or
    at the end of the stream."""
    splitter = SentenceSplitter()
    t = 0.0
    for step in script:
        if isinstance(step, str):
            if splitter.push(step):
                return t
        elif step.seconds >= QUIET_RELEASE and splitter.holding and splitter.release():
            return t + QUIET_RELEASE
        else:
            t += step.seconds
    return t


async def speak(script: list[str | Delay]) -> tuple[list[str], str, float]:
    v = await voice_session(ScriptedLLM([script]))
    try:
        began = now()
        await v.session.run(user_input="go")
        last = v.session.history.items[-1]
        assert isinstance(last, rj.ChatMessage)
        assert not pending_quiet_timers()
        return list(v.tts.texts), str(last.content), v.timeline.times_of("speaking")[0] - began
    finally:
        await v.session.aclose()


def run_on_virtual_time(script: list[str | Delay]) -> tuple[list[str], str, float]:
    loop = virtual_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(speak(script), 3600))
    finally:
        loop.close()


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@example(script=[TEXT[:16], Delay(1.0), TEXT[16:]])  # a stall right after "hold on. "
@example(script=[TEXT[:49], Delay(1.0), TEXT[49:]])  # a stall after "5 p.m.": split there
@given(script=chunked_with_stalls())
def test_random_chunks_and_stalls_speak_all_once_and_in_time(script: list[str | Delay]) -> None:
    spoken, recorded, speaking = run_on_virtual_time(script)
    assert speaking == pytest.approx(first_speech_at(script), abs=1e-6)
    assert recorded == TEXT
    # Nothing lost, nothing said twice, in order (the TTS hears whitespace collapsed).
    assert "".join("".join(spoken).split()) == "".join(TEXT.split())
    # With no stall as long as the quiet, the rules alone cut the text.
    if all(step.seconds < QUIET_RELEASE for step in script if isinstance(step, Delay)):
        assert spoken == split_sentences(TEXT)
