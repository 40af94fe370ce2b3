"""Word error, the measure the recognition tests bound."""

from __future__ import annotations

import re


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


def word_error(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance over the reference's length."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        previous, row[0] = row[:], i
        for j, h in enumerate(hyp, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (r != h))
    return row[-1] / len(ref)
