"""How long after the user stopped speaking their turn ends: the one place that decides.

Three signals, none of which is the recognizer's punctuation (Whisper drops a final
period at random, most often on audio cut a little short):

* the words (``judge_text_end``): a clause that breaks off on "and", "the", "to", "um"
  or a comma is incomplete; one that ends on a word that can end a sentence is complete;
  a particle ("... the lights on", "... the weather in") could be either;
  and a sentence whose last word the recognizer was unsure of (``last_word_confidence``
  under ``LOW_CONFIDENCE``) is only *maybe* complete: Whisper writes a plausible word
  where a speaker broke off ("a hotel near the ..." came out "a hotel near now.");
* the audio turn model's verdict, when the session has one (Smart Turn hears intonation
  and hesitation), with its probability. On a *continuation* (the user paused, then
  went on: the utterance judged is the part after the pause) an "incomplete" counts for
  nothing against complete words: the model hears a fragment ("Paris tomorrow.") and
  calls it unfinished. On the conversation benchmark's tuning voices, 8 of 32 two-part
  requests were judged incomplete at their true end, and each waited a second more;
* the recognizer's own end-of-turn probability, when it has a turn model
  (``Transcript.end_of_turn_probability``: AssemblyAI's ``end_of_turn_confidence``),
  ``RECOGNIZER_COMPLETE`` or more meaning "complete". One more signal, never the decider:
  without an audio model it stands in for one; with one, its "complete" breaks the tie
  when the audio model says "incomplete" to whole words; it never shortens the hold of
  words that break off, and its "complete" never lengthens a delay.

The delay is counted from the end of speech, so the VAD's own silence is inside it. The
table, in seconds (``min``/``max`` are the session's endpointing delays):

==========  ============  ==========  ==================  ==============================
words       audio says    recognizer  delay               why
==========  ============  ==========  ==================  ==============================
complete    complete      any         0                   both agree: answer now
complete    incomplete    complete    ``min``             two of three say complete: the
                                                          words' own delay, as with no
                                                          audio model
complete    incomplete    incomplete  ``maybe``           they disagree: 1 s, not ``max``
                          or none                         (the model is often wrong on
                                                          clear questions, p = 0.1 on
                                                          "... rain in London?"), not
                                                          ``min`` (the recognizer mishears
                                                          the word that breaks a clause
                                                          off: "a pizza and," came out "a
                                                          pizza end.")
complete    incomplete,   any         ``min``             the verdict on a fragment is no
            continuation                                  verdict
complete    (no model)    complete    0                   the recognizer stands in for the
                                                          audio model
complete    (no model)    incomplete  ``maybe``           ... both ways (``min`` on a
                                                          continuation)
complete    (no model)    (none)      ``min``
maybe       complete      any         ``maybe``           1 s (or ``max`` if smaller): long
                                                          enough for a short pause after
                                                          "... the weather in"
maybe       incomplete    any         ``mid``             halfway: ``(min + max) / 2``; a
                                                          recognizer's "complete" against
                                                          the audio model leaves it so
maybe       (no model)    complete    ``maybe``, at most  stands in; never longer than
                                      ``mid``             without it
maybe       (no model)    incomplete  ``mid``
                          or none
incomplete  any           any         ``hold`` .. ``max`` a clause broken off: the user is
                                                          likely to go on. At least
                                                          ``hold`` (1.5 s, or ``max`` if
                                                          smaller), more the less sure the
                                                          audio model is; the recognizer
                                                          is not asked
==========  ============  ==========  ==================  ==============================

So a complete sentence never waits ``max_endpointing_delay`` while the user is silent,
and a mid-thought pause ("I'd like to book, um, ...") is given well over a second.
"""

from __future__ import annotations

import math

from ...models.turn_text import TextEnd, judge_text_end

__all__ = [
    "INCOMPLETE_HOLD",
    "LOW_CONFIDENCE",
    "MAYBE_HOLD",
    "RECOGNIZER_COMPLETE",
    "judge_words",
    "turn_end_delay",
]

INCOMPLETE_HOLD = 1.5
"""The least a turn that breaks off waits (s): people resume after a filler or an "and"
within about a second."""

MAYBE_HOLD = 1.0
"""What a turn whose last word may or may not end it ("... the lights on", "... the
weather in") waits when the audio model says it is complete (s)."""


LOW_CONFIDENCE = 0.3
"""A last word the recognizer gave less than this probability does not make a sentence
complete. Chosen on the conversation benchmark's tuning voices (Whisper tiny.en, beam 5):
below it were 4 of the 12 broken-off requests whose words read as complete on 16 kHz
audio and none of 48 finished ones; on the phone band 6 of 17 and 3 of 48."""


RECOGNIZER_COMPLETE = 0.5
"""A recognizer's end-of-turn probability from which its verdict is "complete"."""


def judge_words(transcript: str, last_word_confidence: float | None = None) -> TextEnd:
    """What the words say about the turn's end: ``judge_text_end``, with a complete
    sentence demoted to *maybe* when its last word was barely heard."""
    verdict = judge_text_end(transcript)
    if (
        verdict is TextEnd.COMPLETE
        and last_word_confidence is not None
        and last_word_confidence < LOW_CONFIDENCE
    ):
        return TextEnd.MAYBE
    return verdict


def turn_end_delay(
    words: TextEnd,
    *,
    audio_complete: bool | None,
    probability: float | None,
    min_delay: float,
    max_delay: float,
    continuation: bool = False,
    recognizer_probability: float | None = None,
) -> float:
    """Seconds from the end of speech to the end of the turn (see the module's table).

    ``audio_complete`` is the audio model's verdict (``None``: no model, or it failed);
    ``probability`` its probability that the turn is complete; ``continuation``: the
    verdict is on what the user said after a pause within the turn;
    ``recognizer_probability``: the recognizer's own end-of-turn probability (``None``:
    it has no turn model; a value that is not a finite number counts as ``None``).
    """
    if words is TextEnd.INCOMPLETE:
        hold = min(INCOMPLETE_HOLD, max_delay)
        sure = probability if probability is not None else 0.0
        return hold + (max_delay - hold) * (1.0 - min(1.0, max(0.0, sure)))
    delay = _whole_or_maybe(words, audio_complete, min_delay, max_delay, continuation)
    recognizer = _recognizer_verdict(recognizer_probability)
    if recognizer is None:
        return delay
    if audio_complete is None:  # no audio model: the recognizer's verdict stands in
        stand_in = _whole_or_maybe(words, recognizer, min_delay, max_delay, continuation)
        return min(delay, stand_in) if recognizer else stand_in
    if recognizer and not audio_complete:
        # The audio model and the recognizer cancel out: the words decide alone.
        return min(delay, _whole_or_maybe(words, None, min_delay, max_delay, continuation))
    return delay


def _whole_or_maybe(
    words: TextEnd,
    audio_complete: bool | None,
    min_delay: float,
    max_delay: float,
    continuation: bool,
) -> float:
    """The table's rows for words that are complete or maybe, by the audio's verdict."""
    if words is TextEnd.COMPLETE:
        if audio_complete is None or (continuation and not audio_complete):
            return min_delay
        return 0.0 if audio_complete else max(min_delay, min(MAYBE_HOLD, max_delay))
    if audio_complete:
        return max(min_delay, min(MAYBE_HOLD, max_delay))
    return (min_delay + max_delay) / 2.0


def _recognizer_verdict(probability: float | None) -> bool | None:
    if probability is None or not math.isfinite(probability):
        return None
    return probability >= RECOGNIZER_COMPLETE
