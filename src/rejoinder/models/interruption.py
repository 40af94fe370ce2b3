"""Interruption detection: does the user mean to stop the agent, or only say "uh-huh"?

When the user starts speaking while the agent's reply is audible, the session asks an
``InterruptionDetector``. People make sounds over a speaker all the time without wanting
the floor — backchannels ("uh-huh", "yeah", "right", "okay", "mm-hmm"), a cough,
laughter — and they also interrupt ("wait, stop", "no, Wednesday"), and then expect the
agent to stop at once. A rule on duration alone (``min_interruption_duration``) makes the
agent talk over a real interruption for half a second, and still stops for a long "okay".

The detector is asked, while the agent keeps talking:

1. ``at_onset``: with the first ``onset_seconds`` of the user's audio. ``INTERRUPT``
   stops the agent now (at the listener: the transport clears its queue);
   ``IGNORE`` (plainly a noise) and ``UNDECIDED`` let it talk on.
   ``at_second_look`` (when ``second_look_seconds`` is set): the same, with the audio up
   to ``second_look_seconds`` after the onset, if nothing is decided by then.
2. ``while_speaking`` (when ``interim_from`` is set): with the words so far, while the
   user goes on speaking: ``INTERRUPT`` stops the agent then; anything else waits on.
3. ``after_transcript``: with the recognizer's transcript of the user's utterance, if it
   ended before ``max_undecided_seconds`` of speech: words the recognizer was unsure of
   throughout are a sound it made words of, anything else goes to ``after_words``
   (``is_backchannel`` by default). ``IGNORE`` drops the utterance —
   the agent goes on, no state changes, nothing is added to the conversation;
   ``INTERRUPT`` interrupts and the words are the user's turn.

Speech that goes on past ``max_undecided_seconds`` interrupts in any case.

``AgentSession(interruption_detection=...)`` takes one; ``local.OnsetInterruptionDetector()``
is the offline one the shipped voice setup uses. Without one, the duration rule applies.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._lazy import LazyPattern

if TYPE_CHECKING:
    from .audio import AudioFrame
    from .stt import Transcript

__all__ = [
    "BACKCHANNELS",
    "INTERIM_SURE",
    "UNSURE_WORDS",
    "Interruption",
    "InterruptionDetector",
    "is_backchannel",
]

UNSURE_WORDS = 0.1
"""A transcript whose words the recognizer gave less than this probability on average,
spoken over the agent, is a sound it made words of. Whisper tiny.en wrote "here." for a
"yeah" and "further." for an "uh-huh" at 0.02-0.09; the 40 interruptions of the
conversation benchmark's tuning voices (16 kHz and phone band) averaged 0.27 and over, but
a held-out voice's "hang on" came out "Hanyong." at 0.22, so the bar stays well below them:
an interruption talked through is worse than a laugh that stops the agent."""


INTERIM_SURE = 0.5
"""Words so far of an utterance still being spoken over the agent interrupt only when the
recognizer gives them at least this probability on average. A pass over the first few
hundred milliseconds makes words of a hum more often than the whole utterance does
(Whisper tiny.en wrote "And I'm." for the start of an "mm-hmm" at 0.43, "Oh look." for an
"oh okay" at 0.48); the real interruptions the onset model took for feedback came out
"Hold on.", "Sorry.", "No." at 0.6-0.9 (the conversation benchmark's tuning voices)."""


class Interruption(enum.Enum):
    """An interruption detector's verdict on speech over the agent."""

    INTERRUPT = "interrupt"
    """The user wants the floor: stop the agent."""
    IGNORE = "ignore"
    """A backchannel, a cough, laughter or noise: the agent goes on as if nothing
    happened."""
    UNDECIDED = "undecided"
    """Not yet known: the agent goes on while the user's words are awaited."""


BACKCHANNELS = frozenset(
    {
        "uh-huh", "uh", "huh", "mhm", "mm-hmm", "mm", "mmm", "hmm", "hm", "um", "uhm",
        "yeah", "yea", "yep", "yup", "yes", "ya", "right", "okay", "ok", "kay", "sure",
        "alright", "all", "i", "see", "oh", "ah", "wow", "cool", "nice", "great",
        "got", "it", "gotcha", "totally", "exactly", "indeed", "true", "ha", "haha",
        "hahaha", "hehe", "heh", "hah", "aha", "ahh", "ooh", "so", "good", "fine",
        "interesting", "really", "thank", "thanks", "you",
    }
)  # fmt: skip
"""Words that, alone, say "go on": a listener's feedback, not a request for the floor.
("So", "really" and "all right" are here because alone they are feedback; with more
words after them they are a turn. "Thank you" over the agent is politeness, and what
Whisper writes for many a non-speech sound.)"""

# What recognizers write for sounds that are not words: "(coughs)", "[laughter]", "*sigh*".
_NON_SPEECH = LazyPattern(r"[\(\[\*][^\)\]\*]*[\)\]\*]")
_WORD = LazyPattern(r"[a-z]+(?:[-'][a-z]+)*")
# A backchannel phrase is short; past this many words it is a sentence.
_MAX_BACKCHANNEL_WORDS = 4


# A hum or a grunt, however the recognizer spells it: "mm-ma", "mmhmm", "uh-uh", "hmmm".
_HUM = LazyPattern(r"^(?:[mh]+[au]?)+(?:-(?:[mh]+[au]?)+)*$|^u+h+(?:-h?u+h+)*$")
# Laughter, however spelt: "heh", "hah", "chah", "hehehe", "hee".
_LAUGH = LazyPattern(r"^(?:c?h[aeiou]+h?)+$")
# Words that mean nothing alone: an article or a preposition the recognizer caught from
# a sound ("the"), or a word it heard cut off ("C-").
_STRAY = frozenset({"the", "an", "of", "to", "in", "on", "at", "for"})
_CUT_OFF = LazyPattern(r"\b[a-z]+-(?![a-z])")


def is_backchannel(transcript: str) -> bool:
    """Whether the words are only a listener's feedback, a sound or nothing: "Uh-huh.",
    "Yeah, yeah.", "Oh, I see.", "(coughs)", "Ha ha.", "" — not "Yeah, but wait"."""
    text = _NON_SPEECH.sub(" ", transcript.lower().replace("’", "'"))
    text = _CUT_OFF.sub(" ", text)
    words = _WORD.findall(text)
    if len(words) >= 3 and all(len(word) == 1 for word in words):
        return True  # "C C C C", "H H H H H": a sound spelt out, not a choice of "B"
    if len(words) == 1 and words[0] in _STRAY:
        return True
    if len(words) > _MAX_BACKCHANNEL_WORDS:
        return False
    return all(word in BACKCHANNELS or _HUM.match(word) or _LAUGH.match(word) for word in words)


class InterruptionDetector(ABC):
    """Decides whether speech over the agent is meant to stop it, while the agent goes on
    talking (``AgentSession(interruption_detection=...)``): nothing pauses, so a "mm-hm"
    or a cough leaves no trace, and a real interruption stops the agent as soon as it is
    recognized. The session asks ``at_onset`` first, then (if set up) ``at_second_look``
    and ``while_speaking`` on the words so far, then ``after_transcript`` on the whole
    utterance; speech that lasts ``max_undecided_seconds`` interrupts whatever was
    decided. ``local.OnsetInterruptionDetector`` is the shipped one; implement
    ``at_onset`` for your own."""

    onset_seconds: float = 0.2
    """How much of the user's audio from the onset of speech ``at_onset`` is given (it is
    judged that long after the onset)."""

    lead_seconds: float = 0.05
    """How much audio from before the VAD's estimate of the onset ``at_onset`` is given
    as well (the estimate is coarse: Silero's came 0-0.18 s after the real onset)."""

    max_undecided_seconds: float = 1.0
    """Speech over the agent that lasts this long interrupts, whatever was decided."""

    second_look_seconds: float | None = None
    """If set, ``at_second_look`` is asked this many seconds after the onset (with the
    audio from ``lead_seconds`` before it), when nothing is decided by then: a longer
    look at a sound the onset could not tell from feedback (an "uh-huh" is over after
    half a second, "stop, stop" goes on). ``None``: one look."""

    interim_from: float | None = None
    """From this many seconds after the onset on, while the user still speaks and nothing
    is decided, the words so far are judged by ``while_speaking``: a streaming
    recognizer's interim transcripts as they come, otherwise a pass over the utterance
    so far, repeated (one at a time, at most every ``interim_every`` seconds) until it is
    decided or the user stops. ``None``: only the whole utterance's words are judged."""

    interim_every: float = 0.1
    """The shortest time between two passes over the words so far (see ``interim_from``)."""

    @abstractmethod
    async def at_onset(self, frames: Sequence[AudioFrame]) -> Interruption:
        """Judge the start of the user's speech over the agent (the audio from
        ``lead_seconds`` before the VAD's estimate of the onset to ``onset_seconds``
        after it; the estimate may be up to about 0.2 s late or 0.1 s early).
        Must be quick: the agent is still talking. Slow work belongs off the loop."""

    async def at_second_look(self, frames: Sequence[AudioFrame]) -> Interruption:
        """Judge the user's speech over the agent again, ``second_look_seconds`` after
        the onset (the audio from ``lead_seconds`` before the VAD's estimate of the onset
        on), if neither the onset nor the words decided. ``INTERRUPT`` stops the agent;
        anything else lets it talk on. Quick, like ``at_onset``."""
        return Interruption.UNDECIDED

    def while_speaking(self, transcript: Transcript) -> Interruption:
        """Judge the words so far of an utterance the user is still speaking over the
        agent: ``INTERRUPT`` when the recognizer is sure enough of them (``INTERIM_SURE``;
        a recognizer that does not say is taken at its word) and they are no backchannel;
        otherwise ``UNDECIDED`` (never ``IGNORE``: "yeah" may go on "... but wait")."""
        text = transcript.text
        confidence = transcript.confidence
        if not text.strip() or (confidence is not None and confidence < INTERIM_SURE):
            return Interruption.UNDECIDED
        if self.after_words(text) is Interruption.INTERRUPT:
            return Interruption.INTERRUPT
        return Interruption.UNDECIDED

    def after_transcript(self, transcript: Transcript) -> Interruption:
        """Judge the user's whole utterance, spoken over the agent, by what the
        recognizer made of it: words it was unsure of throughout (``UNSURE_WORDS``) are a
        sound; otherwise ``after_words`` decides."""
        confidence = transcript.confidence
        if transcript.text.strip() and confidence is not None and confidence < UNSURE_WORDS:
            return Interruption.IGNORE
        return self.after_words(transcript.text)

    def after_words(self, transcript: str) -> Interruption:
        """Judge the user's whole utterance, spoken over the agent, by its words: a
        backchannel or a sound is ignored, anything else interrupts."""
        return Interruption.IGNORE if is_backchannel(transcript) else Interruption.INTERRUPT

    async def warm_up(self) -> None:  # noqa: B027 - most detectors have nothing to load
        """Load what the first judgement needs."""

    async def aclose(self) -> None:  # noqa: B027 - most detectors hold nothing to release
        """Release resources. Idempotent."""
