"""The cloud samples in examples/ run offline, each against its providers' loopback
servers, in their own process as a user would run them, and print what happened: these
tests check what they print (the conversation, the tool round trip, the states)."""

from __future__ import annotations

import re

import pytest

from ._samples import run_example

HELP_TEXT = "I'm a rule-based demo, not a language model, so I only understand a few things."


@pytest.fixture(autouse=True)
def no_speech_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_example`` drops the chat providers' keys; these samples also read these."""
    for key in ("DEEPGRAM_API_KEY", "ELEVENLABS_API_KEY"):
        monkeypatch.delenv(key, raising=False)


def lines_after(out: str, first: str) -> list[str]:
    lines = out.splitlines()
    return lines[lines.index(first) :]


def test_openai_voice_answers_a_spoken_question_with_a_tool() -> None:
    out = run_example("openai_voice.py")
    assert out.startswith("on loopback servers\n"), out
    assert "heard: What's the weather in Paris?\n" in out
    assert "tools: ['get_weather']\n" in out
    assert "agent: initializing → listening → thinking → speaking → listening\n" in out
    assert lines_after(out, "user: What's the weather in Paris?")[:4] == [
        "user: What's the weather in Paris?",
        'tool call: get_weather({"city": "Paris"})',
        "tool result: 22 degrees and sunny in Paris",
        "assistant: It's 22 degrees and sunny in Paris.",
    ]
    assert "played 1.0 s of the answer\n" in out  # the whole scripted answer
    # The question was voiced for the microphone, then the answer; the tool's result
    # went back to the chat model in the second request.
    voiced = 'voiced: ["What\'s the weather in Paris?", "It\'s 22 degrees and sunny in Paris."]'
    assert voiced in out.splitlines()
    assert "the chat model was sent back: tool '22 degrees and sunny in Paris'" in out
    heard = re.search(r"transcribed: ([\d.]+) s of 24000 Hz audio", out)
    assert heard is not None and 1.2 <= float(heard.group(1)) < 2.0, out


def test_deepgram_elevenlabs_shows_interims_and_keeps_the_words_heard() -> None:
    out = run_example("deepgram_elevenlabs.py")
    assert out.startswith("on loopback servers\n"), out
    lines = out.splitlines()
    first_final = lines.index("final: What can you do?")
    interims = [line.removeprefix("  interim: ") for line in lines[1:first_final]]
    assert interims and all(line.startswith("  interim: ") for line in lines[1:first_final])
    assert interims[0] == "What"  # the words show up as they are spoken
    assert all("What can you do?".startswith(words) for words in interims)
    assert "final: Thanks, that's all." in lines

    conversation = [line for line in lines if line.startswith(("user: ", "assistant: "))]
    assert len(conversation) == 4, out
    assert conversation[0] == "user: What can you do?"
    assert conversation[2:] == ["user: Thanks, that's all.", "assistant: You're welcome!"]
    heard = re.fullmatch(r"assistant: (.+) \[interrupted\]", conversation[1])
    assert heard is not None, out
    words = heard.group(1)
    # Cut mid-answer, at a word boundary, with the words as written.
    assert HELP_TEXT.startswith(words) and len(words) < len(HELP_TEXT)
    assert HELP_TEXT[len(words)] == " "
    assert f"heard before the interruption: {words}" in lines
    # The voice's own word timings agree with what the session kept.
    assert f"its word timings put these words in the part played: {words}" in lines
    played = re.search(r"elevenlabs voiced ([\d.]+) s of the answer, ([\d.]+) s played", out)
    assert played is not None, out
    # Speaking over it 1 s in: about that much was played, far less than was voiced.
    assert 0.9 <= float(played.group(2)) < 3.0 < float(played.group(1))
    assert "deepgram: " in out and ", 2 Finalize" in out  # one utterance each


@pytest.mark.parametrize(
    ("args", "service"),
    [((), "the Realtime API"), (("--gpt-live",), "GPT-Live")],
)
def test_openai_realtime_agent_does_a_tool_round_trip(args: tuple[str, ...], service: str) -> None:
    out = run_example("openai_realtime_agent.py", *args)
    assert out.splitlines() == [
        f"on {service} (loopback server)",
        # Never listening between the question and the spoken answer: the tool's
        # continuation was owed throughout.
        "agent: initializing → listening → thinking → speaking → listening",
        "user: What's the weather in Oslo?",
        'tool call: get_weather({"city": "Oslo"})',
        "tool result: 12 degrees and light rain in Oslo",
        "assistant: It's 12 degrees with light rain in Oslo.",
        "sent back to the model: '12 degrees and light rain in Oslo'",
    ]
