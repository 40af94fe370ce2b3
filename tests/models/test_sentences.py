"""The streaming sentence splitter the TTS is fed by (rejoinder.models.sentences)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.models.sentences import SentenceSplitter, split_sentences
from rejoinder.models.tts import SentenceSplitter as TTSSentenceSplitter


def split(text: str) -> list[str]:
    return split_sentences(text, min_chars=1)


def test_tts_module_delegates_to_sentences() -> None:
    assert TTSSentenceSplitter is SentenceSplitter


@pytest.mark.parametrize(
    "sentence",
    [
        "Use a tool, e.g. a hammer, to fix it.",
        "That is, i.e. the rest of it, fine.",
        "Meet at 3 p.m. tomorrow.",
        "Wake me at 6 a.m. sharp.",
        "It's 3.14 p.m. in Paris.",
        "Dr. Smith and Mr. Jones met Mrs. Brown on Main St. today.",
        "Ms. Lee will see Prof. Kay at noon.",
        "It's cats vs. dogs in the end.",
        "Apples, pears, etc. are fruit.",
        "J. R. R. Tolkien wrote it.",
        "Pi is 3.14 and it costs $4.99 now.",
        "Install version 2.0.1 today.",
        "Well... I think so.",
        "Wait… what happened?",
        "See http://example.com/a.b?c=d for more.",
        "Mail me at a.b@c.example.com now.",
        "The U.S. army came.",
        'He said "stop."',
    ],
)
def test_stays_one_sentence(sentence: str) -> None:
    assert split(f"{sentence} Then we go home.") == [sentence, "Then we go home."]


def test_abbreviation_before_a_capital_may_end_a_sentence() -> None:
    assert split("At 5 p.m. The doors open.") == ["At 5 p.m.", "The doors open."]
    assert split("Bring pens, paper, etc. Then sit.") == ["Bring pens, paper, etc.", "Then sit."]


def test_titles_never_end_a_sentence() -> None:
    assert split("Ask Dr. Who. He knows.") == ["Ask Dr. Who.", "He knows."]


def test_exclamation_question_and_closers() -> None:
    assert split("Really?! Yes (it is.) Okay!") == ["Really?!", "Yes (it is.)", "Okay!"]


def test_cjk_terminators_split_without_spaces() -> None:
    assert split("今日は晴れです。明日は雨！本当？はい．終わり") == [
        "今日は晴れです。",
        "明日は雨！",
        "本当？",
        "はい．",
        "終わり",
    ]
    assert split("「こんにちは。」と言った。") == ["「こんにちは。」", "と言った。"]
    assert split("你好。Dr. Wang is here. Yes.") == ["你好。", "Dr. Wang is here.", "Yes."]


def test_lines_are_sentences_and_list_markers_are_not_ends() -> None:
    text = "Steps:\n1. First do this.\n2. Then that.\n\nDone now"
    assert split(text) == ["Steps:", "1. First do this.", "2. Then that.", "Done now"]


def test_short_fragments_merge_with_the_next_sentence() -> None:
    splitter = SentenceSplitter()  # min_chars=12
    assert splitter.push("Sure! Okay. Here is the full answer. ") == []
    assert splitter.push("And more.") == ["Sure! Okay. Here is the full answer."]
    assert splitter.flush() == "And more."
    assert splitter.flush() == ""


def test_a_boundary_waits_for_the_next_word() -> None:
    splitter = SentenceSplitter(min_chars=1)
    assert splitter.push("It is 5 p.m. ") == []  # "The..." or "in..."?
    assert splitter.push("in") == []
    assert splitter.push(" Paris. The") == ["It is 5 p.m. in Paris."]
    assert splitter.flush() == "The"


def test_streamed_as_it_comes() -> None:
    splitter = SentenceSplitter()
    assert splitter.push("Hello there, friend. How are") == ["Hello there, friend."]
    assert splitter.push(" you today? I") == ["How are you today?"]
    assert splitter.flush() == "I"


PIECES = [
    "Hello there.",
    " e.g. ",
    "Dr. Smith",
    " 3.14",
    " $4.99",
    " p.m.",
    " The",
    "...",
    " http://x.y/z.html",
    "。",
    "本当？",
    "!",
    "?",
    "\n",
    "\n1. ",
    "J. R. R.",
    ' "ok."',
    " a",
    " B",
    " ",
    "**Sure!**",
]


@st.composite
def text_and_cuts(draw: st.DrawFn) -> tuple[str, list[int]]:
    text = "".join(draw(st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=25)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    return text, cuts


@settings(max_examples=300, deadline=None)
@given(text_and_cuts(), st.integers(0, 15))
def test_streaming_in_any_chunks_equals_pushing_whole(
    case: tuple[str, list[int]], min_chars: int
) -> None:
    text, cuts = case
    whole = SentenceSplitter(min_chars)
    expected = whole.push(text) + [rest for rest in [whole.flush()] if rest]
    streamed = SentenceSplitter(min_chars)
    got: list[str] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        got += streamed.push(text[start:end])
    got += [rest for rest in [streamed.flush()] if rest]
    assert got == expected
    assert "".join("".join(got).split()) == "".join(text.split())


# ----------------------------------------------------------- release after a pause


@pytest.mark.parametrize(
    ("pending", "released"),
    [
        ("Please hold on while I read you a notice. ", "Please hold on while I read you a notice."),
        ("Please hold on while I read you a notice.", "Please hold on while I read you a notice."),
        ("Are you still there?", "Are you still there?"),  # "?" and a space end it at once
        ('He said "stop."', 'He said "stop."'),
        ("Sure! ", "Sure!"),  # short, but speaking it now beats waiting to merge it
        ("**Sure!**", "**Sure!**"),
        ("今日は晴れです。", "今日は晴れです。"),
        ("Meet me at 5 p.m.", "Meet me at 5 p.m."),  # a capital is the guess after a pause
        ("Bring pens, paper, etc. ", "Bring pens, paper, etc."),
        ("I have 3. ", "I have 3."),  # the space after it shows the number is whole
    ],
)
def test_release_gives_up_a_sentence_waiting_for_the_next_character(
    pending: str, released: str
) -> None:
    splitter = SentenceSplitter()
    assert splitter.push(pending) == []
    assert splitter.holding
    assert splitter.release() == released
    assert splitter.release() == ""
    assert splitter.flush() == ""


@pytest.mark.parametrize(
    "pending",
    [
        "Use a tool, e.g. ",
        "Then ask Dr. ",
        "Written by J. R. R. ",
        "Well... ",
        "Wait… ",
        "Pi is 3.",  # may be "3.14"
        "Install version 2.",
        "See www.example.",  # may be "www.example.com"
        "Open http://example.com/a?",  # may be "?q=1"
        "Mail a.b@c.",
        "Steps:\n1. ",  # a list marker, the item is still to come
        "Hello there, frie",
        "Sure! Okay",  # "Sure!" is complete but not at the end: the rest is unfinished
        "",
    ],
)
def test_release_keeps_what_does_not_end_a_sentence(pending: str) -> None:
    splitter = SentenceSplitter()
    splitter.push(pending)
    assert splitter.release() == ""
    assert splitter.flush() == pending.strip()


def test_holding_is_false_when_nothing_can_be_released() -> None:
    splitter = SentenceSplitter()
    assert not splitter.holding
    splitter.push("Hello there, friend")
    assert not splitter.holding
    assert splitter.push(". How are you") == ["Hello there, friend."]
    assert not splitter.holding
    splitter.push("?")
    assert splitter.holding


def test_text_after_a_release_starts_the_next_sentence() -> None:
    splitter = SentenceSplitter(min_chars=1)
    splitter.push("The office is closed")
    splitter.push(".")
    assert splitter.release() == "The office is closed."
    assert splitter.push(" It opens on Monday. Bye") == ["It opens on Monday."]
    assert splitter.flush() == "Bye"


def test_without_a_release_flowing_text_keeps_the_rules() -> None:
    # "p.m." before a lower-case word is no sentence end while the text keeps coming;
    # only a pause (release) makes the capital-letter guess.
    splitter = SentenceSplitter(min_chars=1)
    assert splitter.push("Meet me at 5 p.m.") == []
    assert splitter.holding
    assert splitter.push(" tomorrow. Then") == ["Meet me at 5 p.m. tomorrow."]


@st.composite
def chunks_and_pauses(draw: st.DrawFn) -> tuple[str, list[tuple[int, bool]]]:
    text = "".join(draw(st.lists(st.sampled_from(PIECES) | st.text(max_size=4), max_size=25)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    return text, [(cut, draw(st.booleans())) for cut in cuts]


@settings(max_examples=300, deadline=None)
@given(chunks_and_pauses(), st.integers(0, 15))
def test_releases_at_any_pauses_lose_and_repeat_nothing(
    case: tuple[str, list[tuple[int, bool]]], min_chars: int
) -> None:
    text, pauses = case
    splitter = SentenceSplitter(min_chars)
    got: list[str] = []
    start = 0
    for cut, paused in [*pauses, (len(text), False)]:
        got += splitter.push(text[start:cut])
        start = cut
        if paused:
            released = splitter.release()
            assert released == released.strip()
            got += [released] if released else []
            assert splitter.release() == ""  # nothing is given up twice
    got += [rest for rest in [splitter.flush()] if rest]
    assert all(got)
    assert "".join("".join(got).split()) == "".join(text.split())


@settings(max_examples=300, deadline=None)
@given(text_and_cuts(), st.integers(0, 15))
def test_a_release_with_nothing_held_changes_nothing(
    case: tuple[str, list[int]], min_chars: int
) -> None:
    # Releasing when the splitter is not holding (as the delivery never does, but a
    # caller might) must not change the sentences: release is a no-op then.
    text, cuts = case
    whole = SentenceSplitter(min_chars)
    expected = whole.push(text) + [rest for rest in [whole.flush()] if rest]
    streamed = SentenceSplitter(min_chars)
    got: list[str] = []
    for start, end in zip([0, *cuts], [*cuts, len(text)], strict=True):
        got += streamed.push(text[start:end])
        if not streamed.holding:
            assert streamed.release() == ""
    got += [rest for rest in [streamed.flush()] if rest]
    assert got == expected


def test_blank_lines_are_never_sentences_even_with_min_chars_zero() -> None:
    assert SentenceSplitter(min_chars=0).push("\n\nHi there.\n") == ["Hi there."]
