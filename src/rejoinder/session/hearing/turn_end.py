"""How long after the user stopped speaking their turn ends: the one place that decides.

Two signals, neither of which is the recognizer's punctuation (Whisper drops a final
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
  requests were judged incomplete at their true end, and each waited a second more.

The delay is counted from the end of speech, so the VAD's own silence is inside it. The
table, in seconds (``min``/``max`` are the session's endpointing delays):

=================  ===========  ==================  ====================================
words              audio says   delay               why
=================  ===========  ==================  ====================================
complete           complete     0                   both agree: answer now
complete           incomplete   ``maybe``           they disagree: 1 s, not ``max`` (the
                                                    model is often wrong on clear questions,
                                                    p = 0.1 on "... rain in London?"), not
                                                    ``min`` (the recognizer mishears the word
                                                    that breaks a clause off: "a pizza and,"
                                                    came out "a pizza end.")
complete           incomplete,  ``min``             the verdict on a fragment is no verdict
                   continuation
complete           (no model)   ``min``
maybe              complete     ``maybe``           1 s (or ``max`` if smaller): long enough
                                                    for a short pause after "... the
                                                    weather in"
maybe              incomplete   ``mid``             halfway: ``(min + max) / 2``
maybe              (no model)   ``mid``
incomplete         any          ``hold`` .. ``max`` a clause broken off: the user is
                                                    likely to go on. At least ``hold``
                                                    (1.5 s, or ``max`` if smaller), more
                                                    the less sure the audio model is
=================  ===========  ==================  ====================================

So a complete sentence never waits ``max_endpointing_delay`` while the user is silent,
and a mid-thought pause ("I'd like to book, um, ...") is given well over a second.
"""

from __future__ import annotations

from ...models.turn_text import TextEnd, judge_text_end

__all__ = ["INCOMPLETE_HOLD", "LOW_CONFIDENCE", "MAYBE_HOLD", "judge_words", "turn_end_delay"]

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
) -> float:
    """Seconds from the end of speech to the end of the turn (see the module's table).

    ``audio_complete`` is the audio model's verdict (``None``: no model, or it failed);
    ``probability`` its probability that the turn is complete; ``continuation``: the
    verdict is on what the user said after a pause within the turn.
    """
    if words is TextEnd.INCOMPLETE:
        hold = min(INCOMPLETE_HOLD, max_delay)
        sure = probability if probability is not None else 0.0
        return hold + (max_delay - hold) * (1.0 - min(1.0, max(0.0, sure)))
    if words is TextEnd.COMPLETE:
        if audio_complete is None or (continuation and not audio_complete):
            return min_delay
        return 0.0 if audio_complete else max(min_delay, min(MAYBE_HOLD, max_delay))
    if audio_complete:
        return max(min_delay, min(MAYBE_HOLD, max_delay))
    return (min_delay + max_delay) / 2.0
