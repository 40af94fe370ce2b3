"""The TTS hears text cleaned for speech; the transcript and the history keep the model's.

ScriptedTTS speaks 0.05 s per character; MemoryAudioOutput plays on loop time.
"""

from __future__ import annotations

from typing import Any

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedStreamingTTS,
    ScriptedTTS,
    advance,
)

WRITTEN = "**Sure!** 😀 It's 3.14 p.m. in Paris. See [the docs](http://x.y)."


async def start(llm: ScriptedLLM, tts: rj.TTS) -> tuple[rj.AgentSession[Any], MemoryTextOutput]:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, tts=tts, user_away_timeout=None)
    session.output.audio = MemoryAudioOutput(24000)
    text = MemoryTextOutput()
    session.output.transcription = text
    await session.start(rj.Agent(instructions="t"))
    return session, text


def last_message(session: rj.AgentSession[Any]) -> rj.ChatMessage:
    last = session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    return last


async def test_tts_gets_cleaned_sentences_history_keeps_the_original() -> None:
    tts = ScriptedTTS()
    session, text = await start(
        ScriptedLLM(
            [["**Sure!** 😀 It's 3.1", "4 p.m. in Paris. See [the ", "docs](http://x.y)."]]
        ),
        tts,
    )
    await session.run(user_input="time?")
    assert tts.texts == ["Sure! It's 3.14 p.m. in Paris.", "See the docs."]
    assert last_message(session).content == WRITTEN
    assert "".join(text.segments) == WRITTEN
    await session.aclose()


async def test_text_filter_none_speaks_the_text_as_written() -> None:
    tts = ScriptedTTS()
    tts.text_filter = None
    session, _ = await start(ScriptedLLM([[WRITTEN]]), tts)
    await session.run(user_input="time?")
    assert tts.texts == ["**Sure!** 😀 It's 3.14 p.m. in Paris.", "See [the docs](http://x.y)."]
    assert last_message(session).content == WRITTEN
    await session.aclose()


async def test_nothing_to_say_is_not_synthesized() -> None:
    tts = ScriptedTTS()
    written = (
        "Here is the code:\n```python\nx = 1\n```\n😀😀😀😀😀😀😀😀😀😀😀😀\nThat is all for now."
    )
    session, _ = await start(ScriptedLLM([[written]]), tts)
    await session.run(user_input="code")
    assert tts.texts == ["Here is the code:", "code omitted.", "That is all for now."]
    assert last_message(session).content == written
    await session.aclose()


async def test_interrupted_history_keeps_the_written_sentences_heard() -> None:
    tts = ScriptedTTS()
    session, _ = await start(ScriptedLLM([[WRITTEN]]), tts)
    session.generate_reply(user_input="time?")
    await advance(tts.duration_of("Sure! It's 3.14 p.m. in Paris.") + 0.1)
    await session.interrupt()
    last = last_message(session)
    assert last.interrupted
    assert last.content is not None
    assert last.content.startswith("**Sure!** 😀 It's 3.14 p.m. in Paris.")
    await session.aclose()


async def test_streaming_tts_gets_cleaned_deltas() -> None:
    tts = ScriptedStreamingTTS()
    session, _ = await start(
        ScriptedLLM(
            [["**Sure!** 😀 It's 3.1", "4 p.m. in Paris. See [the ", "docs](http://x.y)."]]
        ),
        tts,
    )
    await session.run(user_input="time?")
    assert [s.text.split() for s in tts.streams] == [
        ["Sure!", "It's", "3.14", "p.m.", "in", "Paris.", "See", "the", "docs."]
    ]
    assert last_message(session).content == WRITTEN
    await session.aclose()


async def test_interrupted_history_keeps_a_silent_sentence_already_passed() -> None:
    tts = ScriptedTTS()
    written = (
        "First sentence here.\n😀😀😀😀😀😀😀😀😀😀😀😀\nSecond sentence here. Third one never."
    )
    session, _ = await start(ScriptedLLM([[written]]), tts)
    session.generate_reply(user_input="go")
    await advance(tts.duration_of("First sentence here.Second sentence here.") + 0.05)
    await session.interrupt()
    last = last_message(session)
    assert tts.texts[:2] == ["First sentence here.", "Second sentence here."]
    assert (last.content, last.interrupted) == (
        "First sentence here. 😀😀😀😀😀😀😀😀😀😀😀😀 Second sentence here.",
        True,
    )
    await session.aclose()
