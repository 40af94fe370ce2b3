"""Word error, one definition for every benchmark: lowercase words without punctuation,
hyphens split ("uh-huh" is two words), numbers 0-20 spelled out (Whisper writes "5" for
"five"), "ok" as "okay"; the word-level edit distance against the reference."""

from __future__ import annotations

import re
from collections.abc import Sequence

_UNITS = [
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    *("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"),
    *("seventeen", "eighteen", "nineteen", "twenty"),
]
_SPELLING = {"ok": "okay"}


def normalize(text: str) -> list[str]:
    text = text.lower().replace("\u2019", "'").replace("-", " ")
    text = re.sub(r"[^a-z0-9' ]", " ", text)
    out: list[str] = []
    for word in text.split():
        word = word.strip("'")
        if word.isdigit() and int(word) <= 20:
            word = _UNITS[int(word)]
        if word:
            out.append(_SPELLING.get(word, word))
    return out


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        diagonal, row[0] = row[0], i
        for j in range(1, len(hyp) + 1):
            cost = min(row[j] + 1, row[j - 1] + 1, diagonal + (ref[i - 1] != hyp[j - 1]))
            diagonal, row[j] = row[j], cost
    return row[len(hyp)]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word-level edit distance, reference word count) after ``normalize``."""
    ref = normalize(reference)
    return edit_distance(ref, normalize(hypothesis)), len(ref)
