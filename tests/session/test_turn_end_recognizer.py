"""The recognizer's own end-of-turn probability as one more turn-end signal
(``Transcript.end_of_turn_probability``, ``turn_end.turn_end_delay``): it stands in for a
missing audio turn model, breaks the tie when the audio model calls whole words
unfinished, and never overrides words that break off. The table's rows one by one, two
properties over every input, and the session ending turns by it on virtual time."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.turn_text import TextEnd
from rejoinder.session.hearing.turn_end import (
    INCOMPLETE_HOLD,
    MAYBE_HOLD,
    RECOGNIZER_COMPLETE,
    turn_end_delay,
)
from rejoinder.testing import ScriptedSTT
from rejoinder.testing.scripted_turn import ScriptedTurnDetector

from ._mic_session import Call

MIN, MAX = 0.4, 3.0
MID = (MIN + MAX) / 2
SURE, UNSURE = 0.9, 0.1  # the recognizer's end-of-turn probability


def delay(
    words: TextEnd,
    audio: bool | None,
    recognizer: float | None,
    *,
    continuation: bool = False,
    probability: float | None = None,
) -> float:
    if probability is None and audio is not None:
        probability = 0.9 if audio else 0.1
    return turn_end_delay(
        words,
        audio_complete=audio,
        probability=probability,
        min_delay=MIN,
        max_delay=MAX,
        continuation=continuation,
        recognizer_probability=recognizer,
    )


# (words, audio model's verdict, recognizer's probability, continuation) -> delay
TABLE = [
    # the recognizer breaks the tie on whole words the audio model calls unfinished
    ((TextEnd.COMPLETE, False, SURE, False), MIN),
    ((TextEnd.COMPLETE, False, UNSURE, False), MAYBE_HOLD),
    ((TextEnd.COMPLETE, False, None, False), MAYBE_HOLD),
    ((TextEnd.COMPLETE, False, SURE, True), MIN),
    ((TextEnd.COMPLETE, False, UNSURE, True), MIN),
    # ... and does not overrule an audio model that agrees with the words
    ((TextEnd.COMPLETE, True, UNSURE, False), 0.0),
    ((TextEnd.COMPLETE, True, SURE, False), 0.0),
    # without an audio model it stands in for one
    ((TextEnd.COMPLETE, None, SURE, False), 0.0),
    ((TextEnd.COMPLETE, None, UNSURE, False), MAYBE_HOLD),
    ((TextEnd.COMPLETE, None, UNSURE, True), MIN),
    ((TextEnd.COMPLETE, None, None, False), MIN),
    ((TextEnd.MAYBE, None, SURE, False), MAYBE_HOLD),
    ((TextEnd.MAYBE, None, UNSURE, False), MID),
    ((TextEnd.MAYBE, None, None, False), MID),
    # maybe-words: the audio model's verdict stands
    ((TextEnd.MAYBE, True, UNSURE, False), MAYBE_HOLD),
    ((TextEnd.MAYBE, False, SURE, False), MID),
    # words that break off are held whatever the recognizer says
    ((TextEnd.INCOMPLETE, None, SURE, False), MAX),
    ((TextEnd.INCOMPLETE, False, 1.0, False), INCOMPLETE_HOLD + (MAX - INCOMPLETE_HOLD) * 0.9),
    ((TextEnd.INCOMPLETE, True, 1.0, False), INCOMPLETE_HOLD + (MAX - INCOMPLETE_HOLD) * 0.1),
]


@pytest.mark.parametrize(("row", "expected"), TABLE)
def test_the_table_rows(
    row: tuple[TextEnd, bool | None, float | None, bool], expected: float
) -> None:
    words, audio, recognizer, continuation = row
    assert delay(words, audio, recognizer, continuation=continuation) == pytest.approx(expected)


def test_the_threshold_is_inclusive_and_junk_counts_as_no_signal() -> None:
    assert delay(TextEnd.COMPLETE, None, RECOGNIZER_COMPLETE) == 0.0
    assert delay(TextEnd.COMPLETE, None, RECOGNIZER_COMPLETE - 1e-6) == MAYBE_HOLD
    for junk in (float("nan"), float("inf"), float("-inf")):
        assert delay(TextEnd.COMPLETE, None, junk) == MIN
        assert delay(TextEnd.COMPLETE, False, junk) == MAYBE_HOLD


def test_a_confident_recognizer_never_lengthens_maybe_words_when_max_is_short() -> None:
    # With max 1.2, "maybe" (1 s) is longer than halfway (0.8): the stand-in takes the
    # shorter, as a "complete" must never make the user wait more.
    short = turn_end_delay(
        TextEnd.MAYBE,
        audio_complete=None,
        probability=None,
        min_delay=0.4,
        max_delay=1.2,
        recognizer_probability=SURE,
    )
    assert short == pytest.approx(0.8)


WORDS = st.sampled_from(list(TextEnd))
AUDIO = st.sampled_from([None, True, False])
PROBABILITY = st.none() | st.floats(0.0, 1.0)
DELAYS = st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 5.0)).filter(lambda d: d[0] <= d[1])


@given(
    words=WORDS,
    audio=AUDIO,
    probability=PROBABILITY,
    delays=DELAYS,
    continuation=st.booleans(),
    recognizer=st.floats(0.0, 1.0, allow_nan=False) | st.just(float("nan")),
)
def test_the_recognizer_is_one_signal_never_the_decider(
    words: TextEnd,
    audio: bool | None,
    probability: float | None,
    delays: tuple[float, float],
    continuation: bool,
    recognizer: float,
) -> None:
    """Whatever the other signals: the recognizer never shortens the hold of words that
    break off; its "complete" never lengthens a delay; with an audio model it never
    lengthens one at all; and every delay stays within 0 .. max."""
    min_delay, max_delay = delays

    def wait(recognizer_probability: float | None) -> float:
        return turn_end_delay(
            words,
            audio_complete=audio,
            probability=probability,
            min_delay=min_delay,
            max_delay=max_delay,
            continuation=continuation,
            recognizer_probability=recognizer_probability,
        )

    without, with_it = wait(None), wait(recognizer)
    assert 0.0 <= with_it <= max(max_delay, min_delay) + 1e-9
    if words is TextEnd.INCOMPLETE:
        assert with_it == without
    if recognizer >= RECOGNIZER_COMPLETE:
        assert with_it <= without
    if audio is not None:
        assert with_it <= without


@given(
    words=WORDS,
    audio=AUDIO,
    delays=DELAYS,
    continuation=st.booleans(),
    low=st.floats(0.0, 1.0),
    high=st.floats(0.0, 1.0),
)
def test_a_surer_recognizer_never_makes_the_user_wait_longer(
    words: TextEnd,
    audio: bool | None,
    delays: tuple[float, float],
    continuation: bool,
    low: float,
    high: float,
) -> None:
    low, high = sorted((low, high))

    def wait(recognizer_probability: float) -> float:
        return turn_end_delay(
            words,
            audio_complete=audio,
            probability=None if audio is None else float(audio),
            min_delay=delays[0],
            max_delay=delays[1],
            continuation=continuation,
            recognizer_probability=recognizer_probability,
        )

    assert wait(high) <= wait(low)


# -- in a session ---------------------------------------------------------------------------


def transcripts(*parts: tuple[str, float | None]) -> Sequence[rj.Transcript]:
    return [rj.Transcript(text, end_of_turn_probability=p) for text, p in parts]


@pytest.mark.parametrize(
    ("probability", "ends_after"),
    [
        (SURE, 0.3),  # at once: as soon as the VAD ended the utterance (its 0.3 s)
        (None, 0.4),  # min_endpointing_delay, as always without a turn model
        (UNSURE, 1.0),  # the recognizer hears an unfinished turn: 1 s
    ],
)
async def test_without_a_turn_model_the_recognizer_stands_in(
    probability: float | None, ends_after: float
) -> None:
    stt = ScriptedSTT(transcripts(("Hello there.", probability)))
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + ends_after)]
        assert c.user_turns() == ["Hello there."]


@pytest.mark.parametrize(("probability", "ends_after"), [(SURE, 0.4), (UNSURE, 1.0), (None, 1.0)])
async def test_a_sure_recognizer_breaks_the_tie_against_the_audio_model(
    probability: float | None, ends_after: float
) -> None:
    # Smart Turn says "incomplete" (0.2) to a whole sentence: 1 s, unless the recognizer
    # is sure the turn ended: then min_endpointing_delay.
    stt = ScriptedSTT(transcripts(("Hello there.", probability)))
    detector = ScriptedTurnDetector([0.2])
    async with Call(stt, min_silence=0.2, turn_detection=detector) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + ends_after)]


async def test_a_sure_recognizer_does_not_end_words_that_break_off() -> None:
    stt = ScriptedSTT(transcripts(("Book a table for", 1.0)))
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(4.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + MAX)]
        assert c.user_turns() == ["Book a table for"]
