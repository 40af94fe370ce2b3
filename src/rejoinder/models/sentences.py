"""Streaming sentence splitting for speech.

``SentenceSplitter`` cuts a reply's streamed text into sentences so that the TTS can
speak the first one while the rest is still being written: ``push`` a delta and get the
sentences it completed, ``flush`` the remainder at the end. Very short fragments
("Sure!", "Well...") are kept and spoken with the next sentence, which sounds better
and costs no latency worth noticing.

The rules (English first, with CJK sentence punctuation):

* a sentence ends at ``!`` or ``?`` (runs such as ``?!`` included) followed by white
  space, at ``.`` followed by white space unless the period belongs to an abbreviation
  or an initial, at a CJK terminator (``。！？`` and the full-width ``．``, no space
  needed), and at a line break (paragraphs, list items and code-fence lines);
* closing quotes and brackets after the terminator stay with its sentence;
* an ellipsis (``...`` or ``…``) never ends a sentence;
* ``e.g.``, ``i.e.``, ``Dr.``, ``Mr.``, ``Mrs.``, ``vs.`` and other titles never end
  one; ``etc.``, ``p.m.``, ``a.m.`` and other dotted abbreviations end one only when the
  next word starts with a capital letter ("At 5 p.m. The doors open.");
* a single capital letter before the period is an initial ("J. R. R. Tolkien");
* a period followed by a lower-case word is not a sentence end ("the U.S. army");
* a period inside a token (``3.14``, ``$4.99``, ``2.0.1``, URLs, e-mail addresses) is
  never a candidate, since a boundary needs white space after it.

A boundary is only decided once the text after it (up to the next visible character) has
arrived, so streaming the text in any chunks gives exactly the sentences that pushing it
whole gives.

A model that stops writing after a sentence (thinking, streaming a tool call's arguments,
a slow backend) would leave that sentence waiting for a character that does not come, so
``release`` gives it up on the caller's word: the caller decides the stream has paused,
and the pending text is judged as if the next word started with a capital letter (the
likeliest continuation after a pause at a terminator). Only ``release`` guesses; text that
keeps flowing is split by the rules above alone.

Why no library: ``pysbd`` (0.3.4, MIT, pure Python, last release February 2021) and
``blingfire`` (0.1.8, September 2021, a native library that needs numpy) both segment
the cases above correctly, but only whole texts: streaming would mean re-segmenting the
growing buffer on every delta, and neither keeps abbreviations such as "Well... I think"
together or knows the fragment-merging the TTS wants. They were no better than these
rules on the cases tested (see ``tests/models/test_sentences.py``), so no dependency.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .._lazy import LazyPattern

__all__ = ["SentenceSplitter", "split_sentences"]

# Abbreviations that never end a sentence (lower case, without the final period).
_NEVER_FINAL = frozenset(
    {
        "e.g", "i.e", "cf", "viz", "vs", "v", "dr", "mr", "mrs", "ms", "mx", "prof",
        "st", "mt", "ft", "sr", "jr", "rev", "gen", "col", "capt", "lt", "sgt", "gov",
        "sen", "rep", "hon", "fig", "no", "nos", "vol", "pp", "approx", "ca", "dept",
        "est", "ave", "blvd", "rd",
    }
)  # fmt: skip
# Abbreviations that end a sentence only when the next word is capitalised.
_MAYBE_FINAL = frozenset(
    {
        "etc", "p.m", "a.m", "inc", "ltd", "co", "corp", "llc", "u.s", "u.k", "e.u",
        "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
        "dec", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "min", "max", "hr", "hrs",
    }
)  # fmt: skip

_CLOSERS = "\"')]}»”’」』）】〕》〉*_`"
_CJK_END = "。！？．｡"
# Candidate ends: a CJK terminator run, a Latin terminator run, or a line break.
_CANDIDATE = LazyPattern(
    rf"(?P<cjk>[{_CJK_END}!?！？]*[{_CJK_END}][{_CJK_END}!?！？]*)"
    rf"|(?P<latin>[.!?…]+)"
    r"|(?P<newline>\n)"
)
# The last visible character of pending text that may end a sentence (closers included:
# they follow the terminator). A cheap pre-test for ``SentenceSplitter.release``.
_ENDS_LIKE_A_SENTENCE = frozenset(f"{_CJK_END}!?！？.…{_CLOSERS}")
# A token that may go on after a terminator with no space yet: a number ("3." → "3.14"),
# a URL, an address or a domain ("example." → "example.com").
_TOKEN_GOES_ON = LazyPattern(r"[/@:]|\d$|\.\w{2,}")
_WORD_BEFORE = LazyPattern(r"(\S+)$")
_AFTER_CJK = LazyPattern(f"[{re.escape(_CJK_END + _CLOSERS)}]")


def _token_before(text: str, index: int) -> str:
    """The non-space token ending at ``index`` (exclusive), without leading brackets."""
    match = _WORD_BEFORE.search(text, 0, index)
    token = _AFTER_CJK.split(match.group(1))[-1] if match else ""
    return token.lstrip("\"'([{«“‘*_")


def _period_ends(token: str, following: str) -> bool:
    """Whether a single period after ``token`` ends a sentence, given the next visible
    character ``following``."""
    word = token.lower()
    if following.islower():
        return False
    if word in _NEVER_FINAL:
        return False
    if len(token) == 1 and token.isalpha() and token.isupper():
        return False  # an initial
    if word in _MAYBE_FINAL or re.fullmatch(r"(?:[a-z]\.)+[a-z]", word):
        return following.isupper()
    return True


def _boundaries(text: str, pos: int = 0) -> Iterator[int]:
    """The ends (exclusive, closers included) of the sentences in ``text`` after ``pos``
    that are decided already; the last candidate may wait for more text."""
    n = len(text)
    for match in _CANDIDATE.finditer(text, pos):
        end = match.end()
        if match.group("newline") is not None:
            yield end
            continue
        while end < n and text[end] in _CLOSERS:
            end += 1
        if end == n:
            return  # a closer or the next text may still come
        if match.group("cjk") is not None:
            yield end
            continue
        run = match.group("latin")
        if not text[end].isspace():
            continue  # inside a token: 3.14, a.b@c.com, "?!x"
        if "…" in run or ".." in run:
            continue  # an ellipsis
        if "!" in run or "?" in run:
            yield end
            continue
        # A single period: look at the token before it and the next visible character.
        after = end
        while after < n and text[after].isspace() and text[after] != "\n":
            after += 1
        if after == n:
            return  # the next word decides
        if text[after] == "\n":
            yield end
            continue
        token = _token_before(text, match.start())
        line_start = text.rfind("\n", 0, match.start()) + 1
        if token.isdigit() and text[line_start : match.start()].strip() == token:
            continue  # a numbered list marker: "1. First"
        if _period_ends(token, text[after]):
            yield end


class SentenceSplitter:
    """Cuts streamed text into sentences: ``push`` returns the ones completed so far,
    ``flush`` the remainder. Fragments shorter than ``min_chars`` are kept for the next
    sentence."""

    def __init__(self, min_chars: int = 12) -> None:
        # The whole text so far is kept (a reply is short): the rules look back at the
        # line and the word before a period, which may precede the pending sentence.
        self._text = ""
        self._start = 0
        self._min_chars = min_chars

    def push(self, text: str) -> list[str]:
        self._text += text
        sentences: list[str] = []
        for end in _boundaries(self._text, self._start):
            candidate = self._text[self._start : end].strip()
            if not candidate:  # only white space (a blank line): never a "sentence"
                self._start = end
            elif len(candidate) >= self._min_chars:
                sentences.append(candidate)
                self._start = end
        return sentences

    @property
    def holding(self) -> bool:
        """Whether the pending text ends like a sentence (a terminator, maybe closers and
        white space after it), so that ``release`` may give it up. Cheap: it looks at the
        last visible character only."""
        text, i = self._text, len(self._text)
        while i > self._start and text[i - 1].isspace():
            i -= 1
        return i > self._start and text[i - 1] in _ENDS_LIKE_A_SENTENCE

    def release(self) -> str:
        """The stream has paused: the pending text if it ends a sentence that is only
        waiting for the text after it, judged as if the next word were capitalised; else
        "". What is returned is no longer pending. A fragment shorter than ``min_chars``
        is released too: after a pause, speaking it now beats waiting to merge it.

        With no white space after the terminator yet, a token that may go on ("3.",
        "example.", "http://a.b/c?") is kept: the pause may be inside it."""
        text, start = self._text, self._start
        end = len(text.rstrip())
        if end <= start or text[end - 1] not in _ENDS_LIKE_A_SENTENCE:
            return ""
        # Boundaries come in increasing order: the largest is the last one.
        if max(_boundaries(text[:end] + " X", start), default=-1) != end:
            return ""  # not a sentence end even before a capital: "e.g.", "Dr.", "..."
        if end == len(text) and self._token_may_go_on(end):
            return ""
        self._start = end
        return text[start:end].strip()

    def _token_may_go_on(self, end: int) -> bool:
        text, i = self._text, end
        while i > self._start and text[i - 1] in _CLOSERS:
            i -= 1
        if text[i - 1] not in ".!?…":
            return False  # a CJK terminator needs no space after it
        while i > self._start and text[i - 1] in ".!?…":
            i -= 1
        return _TOKEN_GOES_ON.search(_token_before(text, i)) is not None

    def flush(self) -> str:
        rest = self._text[self._start :].strip()
        self._text, self._start = "", 0
        return rest


def split_sentences(text: str, min_chars: int = 12) -> list[str]:
    """All the sentences of a whole ``text`` (the streaming splitter, pushed once)."""
    splitter = SentenceSplitter(min_chars)
    sentences = splitter.push(text)
    if rest := splitter.flush():
        sentences.append(rest)
    return sentences
