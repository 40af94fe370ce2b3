"""What a transcript's last words say about whether the user finished.

Recognizers punctuate unpredictably: Whisper writes "Set a timer for five seconds." for the
whole utterance and "Set a timer for 5 seconds" for the same audio cut 0.1 s short, so a
turn-end rule that waits for a period waits the full ``max_endpointing_delay`` for no
reason. People who are not done, on the other hand, stop on a word that needs a
continuation: a conjunction ("and", "because"), an article or possessive ("a", "my"), a
preposition that takes an object ("to", "for", "of"), an auxiliary ("can", "is"), or a
filler ("um"). That holds with or without punctuation, so this reads the words.

No text end-of-utterance model ships offline in a package we can use (the one in a wheel,
LiveKit's, is under a licence that allows it only inside LiveKit Agents), so this is a
word rule, deliberately small: it only says *incomplete* where English grammar demands a
continuation, *maybe* where a word is often a particle ("turn the lights on", "log in")
and *complete* otherwise. The session combines it with the audio turn model.
"""

from __future__ import annotations

import enum

from .._lazy import LazyPattern

__all__ = ["TextEnd", "judge_text_end"]


class TextEnd(enum.Enum):
    COMPLETE = "complete"
    """Nothing in the words asks for more (the last word can end a sentence)."""
    MAYBE = "maybe"
    """The last word often ends a sentence and often does not ("... the weather in")."""
    INCOMPLETE = "incomplete"
    """The words break off: a trailing comma or ellipsis, or a word that needs a
    continuation ("and", "the", "to", "um")."""


_FILLERS = {"um", "umm", "uh", "uhh", "uhm", "erm", "er", "hmm", "mm", "ah", "eh"}
# Words that (nearly) always need a continuation when they end what was said.
_NEEDS_MORE = {
    # conjunctions
    "and", "but", "or", "nor", "so", "because", "cause", "if", "when", "while",
    "although", "though", "unless", "until", "since", "whether", "where", "which",
    "who", "whose", "whom", "whereas", "plus",
    # articles and possessives
    "a", "an", "the", "my", "your", "his", "her", "our", "their", "its", "every",
    "each", "another",
    # prepositions that take an object
    "to", "for", "of", "with", "from", "by", "into", "onto", "between", "among",
    "towards", "toward", "during", "without", "within", "via", "per", "except",
    "including", "like", "than", "at", "about", "as", "against", "across", "through",
    "near", "upon", "versus",
    # a subject, or a subject and its verb, with nothing after
    "i", "i'm", "i'd", "i'll", "i've", "we're", "we'd", "we'll", "you're", "you'd",
    "it's", "there's", "let's", "what's", "whats", "very", "gonna", "wanna", "gotta",
    "be", "being",
}  # fmt: skip
# Often the end of a sentence, often not: a particle ("turn it on", "log in"), a verb
# that can stand last ("that's all I need", "what time is it, and where it is"), a
# demonstrative, a pronoun as often as a determiner ("what is this?" against "I'd like
# this ... one": as an article it held "what is this?" for the whole maximum delay).
_MAYBE = {
    "in", "on", "off", "up", "out", "over", "down", "around", "back", "after", "before",
    "under", "behind", "past", "that", "then", "also", "either", "is", "are",
    "was", "were", "am", "can", "could", "would", "will", "should", "shall", "may",
    "might", "must", "want", "need", "not", "really", "more", "most", "some", "any",
    "how", "maybe", "been", "this", "these", "those",
}  # fmt: skip
_MODALS = {"can", "could", "would", "will", "should", "may", "might", "shall"}
_SUBJECTS = {"you", "we", "i", "they"}

_BREAKS_OFF = LazyPattern(r"(\.\.\.|…|,|;|:|-|–|—)\s*['\")\]]*\s*$")
_WORD = LazyPattern(r"[a-z0-9]+(?:'[a-z]+)?")


def judge_text_end(transcript: str) -> TextEnd:
    """Whether the transcript's words end a sentence (``COMPLETE``), break off
    (``INCOMPLETE``), or cannot tell (``MAYBE``). An empty transcript is ``MAYBE``."""
    text = transcript.strip()
    if not text:
        return TextEnd.MAYBE
    if _BREAKS_OFF.search(text):
        return TextEnd.INCOMPLETE
    words = _WORD.findall(text.lower().replace("’", "'"))
    if not words:
        return TextEnd.MAYBE
    last = words[-1]
    if last in _FILLERS:
        return TextEnd.INCOMPLETE
    if len(words) == 1:
        # One word is an answer ("No.", "Really?", "Maybe."), unless it only joins on.
        return TextEnd.INCOMPLETE if last in _NEEDS_MORE and last != "i" else TextEnd.COMPLETE
    if last in _NEEDS_MORE:
        return TextEnd.INCOMPLETE
    if last in _SUBJECTS and words[-2] in _MODALS:  # "... can you", "... could we"
        return TextEnd.INCOMPLETE
    if last in _MAYBE:
        # Whatever the punctuation: Whisper writes "Can you tell me the weather in?" for
        # a user who paused there (and went on "Paris tomorrow").
        return TextEnd.MAYBE
    return TextEnd.COMPLETE
