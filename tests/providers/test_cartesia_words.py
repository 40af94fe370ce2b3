"""cartesia._wire.WordMatcher: Cartesia's word timestamps placed on the words as written,
whatever the service reports (punctuation dropped, numbers read out, words skipped)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from rejoinder.models.tts import WordTiming
from rejoinder.providers.cartesia._wire import WordMatcher


def place(pieces: list[str], reported: list[tuple[str, float, float]]) -> list[WordTiming]:
    matcher = WordMatcher()
    for piece in pieces:
        matcher.add_text(piece)
    placed = [t for word in reported for t in matcher.push(*word)]
    return placed + matcher.finish()


def test_matcher_keeps_punctuation_and_spoken_forms() -> None:
    words = place(
        ["It costs $5 — ", "e.g. today, well-known."],
        [
            ("It", 0.0, 0.1),
            ("costs", 0.1, 0.4),
            ("five", 0.4, 0.6),
            ("dollars", 0.6, 0.9),
            ("for", 1.0, 1.1),  # "e.g." read out
            ("example", 1.1, 1.5),
            ("today", 1.5, 1.8),
            ("well", 1.8, 2.0),
            ("known", 2.0, 2.3),
        ],
    )
    assert [(w.word, w.start, w.end) for w in words] == [
        ("It", 0.0, 0.1),
        ("costs", 0.1, 0.4),
        # Two spoken forms in a row cannot be told apart: both go to the first...
        ("$5", 0.4, 1.5),
        # ...and the words up to the next one recognized start where it starts.
        ("—", 1.5, 1.5),
        ("e.g.", 1.5, 1.5),
        ("today,", 1.5, 1.8),
        ("well-known.", 1.8, 2.3),
    ]


def test_matcher_finds_its_place_again_after_a_skipped_word() -> None:
    words = place(["the the cat sat "], [("the", 0, 1), ("cat", 1, 2), ("sat", 2, 3)])
    assert [(w.word, w.start, w.end) for w in words] == [
        ("the", 0, 1),
        ("the", 1, 1),
        ("cat", 1, 2),
        ("sat", 2, 3),
    ]


_WORD = st.text(st.sampled_from("abcXY19,.!?'-$—"), min_size=1, max_size=6)


@given(
    written=st.lists(_WORD, min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 12), max_size=5),
    reported=st.lists(
        st.tuples(st.text("abcxy19 .", max_size=5), st.floats(0, 10), st.floats(0, 10)),
        max_size=15,
    ),
    interleave=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_matcher_reports_every_written_word_once_in_order(
    written: list[str],
    cuts: list[int],
    reported: list[tuple[str, float, float]],
    interleave: list[bool],
) -> None:
    """Whatever Cartesia reports, the words come out as written: each once, in order."""
    bounds = sorted({0, len(written), *(min(c, len(written)) for c in cuts)})
    pieces = [" ".join(written[a:b]) + " " for a, b in itertools.pairwise(bounds)]
    matcher, placed = WordMatcher(), []
    steps = iter(interleave)
    while pieces or reported:
        if pieces and (not reported or next(steps, True)):
            matcher.add_text(pieces.pop(0))
        else:
            placed.extend(matcher.push(*reported.pop(0)))
    placed.extend(matcher.finish())
    assert [w.word for w in placed] == written


@given(
    written=st.lists(st.text("abcdefg", min_size=1, max_size=5), min_size=1, max_size=10),
    gaps=st.lists(st.floats(0.0, 0.5), min_size=10, max_size=10),
)
def test_matcher_gives_reported_times_to_exact_words(written: list[str], gaps: list[float]) -> None:
    at, reported = 0.0, []
    for word, gap in zip(written, gaps, strict=False):
        reported.append((word.upper(), at, at + gap))
        at += gap
    words = place([" ".join(written)], reported)
    assert [(w.word, w.start, w.end) for w in words] == [
        (word, start, end) for word, (_, start, end) in zip(written, reported, strict=True)
    ]
