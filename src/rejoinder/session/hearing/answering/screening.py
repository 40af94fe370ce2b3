"""What call-screening assistants say, to tell them from a person or a voicemail greeting.

iOS's call screening asks the caller to "record your name and reason for calling" before
it rings the phone; Google Pixel's Call Screen says the person "is using a screening
service from Google" and asks to "say your name and why you're calling"; Samsung's and
carriers' assistants ("call assist", "please stay on the line") ask much the same. None of
them records a message: the caller should say who they are and why, and may then be put
through. The phrases are regular expressions over the lowercased transcript, interim or
final (a streaming recognizer's words come while the assistant still speaks).
"""

from __future__ import annotations

import re

__all__ = ["SCREENING_PHRASES", "screening_phrase"]

SCREENING_PHRASES = (
    r"record your name and (the )?reason",
    r"(say|state|tell me|give me) your name and (the )?reason",
    r"your name and why you('re| are) calling",
    r"(using|uses) (a|an|the)( call)? screening",
    r"screening service",
    r"google assistant",
    r"call ?assist",
    r"call screen",
    r"please stay on the line",
    r"see if (this|the) person is available",
    r"person you('re| are) calling (is|will)",
    r"get a copy of this conversation",
)

_SCREENING = re.compile("|".join(f"(?:{p})" for p in SCREENING_PHRASES))


def screening_phrase(text: str) -> str | None:
    """The screening phrase ``text`` contains (as it matched), or ``None``."""
    found = _SCREENING.search(text.lower())
    return None if found is None else found.group(0)
