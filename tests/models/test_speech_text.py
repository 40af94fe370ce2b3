"""Text for speech: markdown and emoji removed for the TTS (rejoinder.models.speech_text)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.models.sentences import split_sentences
from rejoinder.models.speech_text import (
    CODE_OMITTED,
    SpeechText,
    clean_for_speech,
    speech_filter,
)


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("# Title", "Title"),
        ("### A *small* heading", "A small heading"),
        ("**Sure!** It is _really_ ***good***.", "Sure! It is really good."),
        ("Run `pip install x` now.", "Run pip install x now."),
        ("See [the docs](http://x.y).", "See the docs."),
        ('See [the docs](http://x.y "Docs") and ![a cat](cat.png).', "See the docs and a cat."),
        ("Read [the guide][1] first.", "Read the guide first."),
        ("Go to <https://example.com> now.", "Go to https://example.com now."),
        ("- one\n- two\n* three\n+ four", "one two three four"),
        ("1. First\n2) Second\n10. Tenth", "First Second Tenth"),
        ("- [x] done\n- [ ] todo", "done todo"),
        ("> quoted\n>> deeper", "quoted deeper"),
        ("Above\n\n---\n\nBelow", "Above Below"),
        ("| Name | Age |\n|------|:---:|\n| Ann | 31 |", "Name, Age Ann, 31"),
        ("~~old~~ new", "old new"),
        ("Here:\n```python\nx = 1\nprint(x)\n```\nDone.", f"Here: {CODE_OMITTED}. Done."),
        ("Here:\n~~~\nx\n~~~", f"Here: {CODE_OMITTED}."),
        ("Unclosed:\n```\nx = 1", f"Unclosed: {CODE_OMITTED}."),
        ("  lots   of\n\n\tspace  ", "lots of space"),
    ],
)
def test_markdown(written: str, spoken: str) -> None:
    assert clean_for_speech(written) == spoken


@pytest.mark.parametrize(
    "kept",
    [
        "snake_case names",
        "2 * 3 = 6",
        "a_b_c",
        "3.14 p.m.",
        "It costs $4.99, £3, ¥500 or €5.",
        "café, naïve, Ελληνικά, русский, עברית",
        "日本語の文です。中文。한국어",
        "© 2024 ACME® Widget™",
        "It's 50% off #1 item",
        "a -> b",
    ],
)
def test_plain_text_is_kept(kept: str) -> None:
    assert clean_for_speech(kept) == kept


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("Great 😀 job 👍🏽!", "Great job !"),
        ("Paris 🇫🇷 is nice ✨", "Paris is nice"),
        ("Family 👨‍👩‍👧 time ❤️", "Family time"),
        ("Press 1️⃣ now ⭐", "Press 1 now"),
        ("Sun ☀ and ⏰ clock", "Sun and clock"),
        ("café 日本語 €5 🎉", "café 日本語 €5"),
    ],
)
def test_emoji_removed(written: str, spoken: str) -> None:
    assert clean_for_speech(written) == spoken


def test_switches() -> None:
    assert clean_for_speech("**hi** 😀", markdown=False) == "**hi**"
    assert clean_for_speech("**hi** 😀", emoji=False) == "hi 😀"
    assert clean_for_speech("**hi**  😀", markdown=False, emoji=False) == "**hi** 😀"


def test_code_spanning_sentences_is_omitted_once() -> None:
    text = "Here is code:\n```python\nx = 1. y = 2\nprint(x)\n```\nThat is all."
    speech = SpeechText()
    spoken = [s for s in map(speech, split_sentences(text, min_chars=1)) if s]
    assert spoken == ["Here is code:", f"{CODE_OMITTED}.", "That is all."]


def test_streamed_deltas_are_cleaned_whole() -> None:
    speech = SpeechText()
    deltas = [
        "**Su",
        "re!** 😀 See [the ",
        "docs](http://x",
        ".y) and `co",
        "de` now.\n- a\n",
        "- b",
    ]
    spoken = "".join(speech.push(d) for d in deltas) + speech.flush()
    assert spoken.split() == ["Sure!", "See", "the", "docs", "and", "code", "now.", "a", "b"]


def test_speech_filter() -> None:
    assert isinstance(speech_filter(clean_for_speech), SpeechText)
    assert speech_filter(None) is None
    assert speech_filter(str.upper) is str.upper


MARKUP = st.sampled_from(
    [
        "*",
        "**",
        "_",
        "`",
        "```",
        "\n",
        "# ",
        "- ",
        "1. ",
        "|",
        "[",
        "](",
        ")",
        "~~",
        "😀",
        "🏽",
        "\u200d",
        "\ufe0f",
        "é",
        "日",
        " ",
    ]
)
TEXT = st.lists(MARKUP | st.text(max_size=5), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXT, st.booleans(), st.booleans())
def test_never_raises_never_grows_and_is_idempotent(text: str, markdown: bool, emoji: bool) -> None:
    spoken = clean_for_speech(text, markdown=markdown, emoji=emoji)
    omitted = spoken.count(CODE_OMITTED) * (len(CODE_OMITTED) + 3)
    assert len(spoken) <= len(text) + omitted
    assert clean_for_speech(spoken, markdown=markdown, emoji=emoji) == spoken


@settings(max_examples=200, deadline=None)
@given(TEXT, st.lists(st.integers(0, 200), max_size=8))
def test_streaming_form_never_raises(text: str, cuts: list[int]) -> None:
    speech = SpeechText()
    bounds = sorted(min(c, len(text)) for c in cuts)
    spoken = ""
    for start, end in zip([0, *bounds], [*bounds, len(text)], strict=True):
        spoken += speech.push(text[start:end])
    spoken += speech.flush()
    sentences = SpeechText()
    for sentence in split_sentences(text):
        sentences(sentence)
