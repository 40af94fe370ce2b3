"""Text for speech: what a TTS should say of what the model wrote.

``clean_for_speech`` strips markdown and emoji from a piece of text and collapses its
white space; the transcript and the history keep the model's own text, only the string
handed to the TTS is cleaned. ``TTS.text_filter`` (default ``clean_for_speech``, ``None``
to disable) chooses the filter per engine; ``speech_filter`` turns it into the stateful
per-reply filter the session uses.

Markdown: headings, bold/italic/strike markers, inline-code backticks, block quotes,
horizontal rules and list markers go; links and images keep their text; table rows keep
their cells, separated by commas, and their separator rows vanish. A fenced code block is
replaced by "code omitted": read aloud, code is noise, but silently dropping it would
leave "here is the code:" dangling, so the listener is told something was skipped.

Emoji (pictographs, dingbats, flags, keycaps, skin tones, joiners and variation
selectors) are removed by Unicode range; letters of every script, accents, currency
signs, ©, ® and ™ stay.

Streaming: ``SpeechText`` is the same filter with state across pieces, so a code block
that spans several sentences is dropped as a whole (``__call__`` takes a sentence, as the
splitter emits them), and ``push``/``flush`` take raw deltas for a streaming TTS, holding
back an unfinished word, link or inline code span until it is complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .._lazy import LazyPattern

__all__ = ["CODE_OMITTED", "SpeechText", "clean_for_speech", "speech_filter"]

CODE_OMITTED = "code omitted"

_FENCE = LazyPattern(r"^[ \t]*(?:```|~~~)[^\n]*$", re.MULTILINE)
_IMAGE_OR_LINK = LazyPattern(r"!?\[([^\]\n]*)\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")
_REFERENCE_LINK = LazyPattern(r"\[([^\]\n]+)\]\[[^\]\n]*\]")
_AUTOLINK = LazyPattern(r"<((?:https?://|mailto:)[^>\s]+)>")
_HEADING = LazyPattern(r"^[ \t]*#{1,6}(?=\s|$)", re.MULTILINE)
_RULE = LazyPattern(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.MULTILINE)
_QUOTE = LazyPattern(r"^[ \t]*(?:>[ \t]?)+", re.MULTILINE)
_LIST = LazyPattern(r"^[ \t]*(?:[-*+•]|\d{1,3}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?", re.MULTILINE)
_TABLE_SEPARATOR = LazyPattern(
    r"^[ \t]*\|?(?:[ \t]*:?-+:?[ \t]*\|)+(?:[ \t]*:?-+:?[ \t]*)?$", re.MULTILINE
)
_TABLE_EDGE = LazyPattern(r"^[ \t]*\|[ \t]*|[ \t]*\|[ \t]*$", re.MULTILINE)
_PIPE = LazyPattern(r"\s*\|\s*")
_STARS = LazyPattern(r"(?<!\w)\*+(?=\S)|(?<=\S)\*+(?!\w)")
_UNDERSCORES = LazyPattern(r"(?<![\w\\])_+(?=\S)|(?<=\S)_+(?![\w])")
_STRIKE = LazyPattern(r"~~")
_BACKTICKS = LazyPattern(r"`+")
_WHITESPACE = LazyPattern(r"\s+")

_EMOJI_RANGES = (
    "\U0001f000-\U0001faff"  # mahjong .. symbols and pictographs extended-A (flags too)
    "\u2600-\u27bf"  # miscellaneous symbols, dingbats
    "\u2b00-\u2bff"  # miscellaneous symbols and arrows (⭐, ⬛)
    "\u231a\u231b\u2328\u23cf\u23e9-\u23f3\u23f8-\u23fa"  # ⌚ ⏰ ...
    "\u2934\u2935\u3030\u303d\u3297\u3299"
)
_EMOJI = LazyPattern(
    rf"[{_EMOJI_RANGES}](?:[\ufe0e\ufe0f\u20e3\U000e0020-\U000e007f]|\u200d[{_EMOJI_RANGES}])*"
    r"|[\ufe0e\ufe0f\u20e3\U000e0020-\U000e007f]"
)


def _pipe(match: re.Match[str]) -> str:
    # "a | b" -> "a, b"; "a|b" -> "a,b": never longer than the original.
    return ", " if len(match.group()) > 1 else ","


def _clean_markdown(text: str) -> str:
    text = _IMAGE_OR_LINK.sub(r"\1", text)
    text = _REFERENCE_LINK.sub(r"\1", text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _TABLE_SEPARATOR.sub("", text)
    text = _RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _LIST.sub("", text)
    text = _TABLE_EDGE.sub("", text)
    text = _PIPE.sub(_pipe, text)
    text = _BACKTICKS.sub("", text)
    text = _STRIKE.sub("", text)
    text = _STARS.sub("", text)
    return _UNDERSCORES.sub("", text)


def _drop_fences(text: str, in_code: bool) -> tuple[str, bool]:
    """Replace fenced code by ``CODE_OMITTED``; ``in_code`` says whether ``text`` starts
    inside a block (and the result whether it ends inside one)."""
    out: list[str] = []
    position = 0
    for fence in _FENCE.finditer(text):
        if not in_code:
            out.append(text[position : fence.start()])
            out.append(f" {CODE_OMITTED}. ")
        in_code = not in_code
        position = fence.end()
    if not in_code:
        out.append(text[position:])
    return "".join(out), in_code


def _clean(text: str, markdown: bool, emoji: bool) -> str:
    for _ in range(8):  # to a fixed point ("* - x" is two list markers), so idempotent
        before = text
        if markdown:
            text = _clean_markdown(text)
        if emoji:
            text = _EMOJI.sub("", text)
        text = _WHITESPACE.sub(" ", text).strip()
        if text == before:
            break
    return text


def clean_for_speech(text: str, *, markdown: bool = True, emoji: bool = True) -> str:
    """``text`` as a TTS should say it: markdown (``markdown``) and emoji (``emoji``)
    removed, white space collapsed. A fenced code block becomes "code omitted"."""
    if markdown and ("`" in text or "~~~" in text):
        text, _ = _drop_fences(text, False)
    return _clean(text, markdown, emoji)


# An inline construct still open at the end of a delta: wait for the rest.
_OPEN_CONSTRUCT = LazyPattern(r"!?\[[^\]\n]*(?:\]\([^)\n]*)?$|`[^`\n]*$")


class SpeechText:
    """``clean_for_speech`` with state across the pieces of one reply: a code block that
    spans several sentences is omitted once, as a whole. ``__call__`` takes complete
    pieces (sentences); ``push`` and ``flush`` take raw deltas."""

    def __init__(self, *, markdown: bool = True, emoji: bool = True) -> None:
        self._markdown = markdown
        self._emoji = emoji
        self._in_code = False
        self._buffer = ""

    def __call__(self, piece: str) -> str:
        if self._markdown:
            was_in_code = self._in_code
            piece, self._in_code = _drop_fences(piece, self._in_code)
            if was_in_code and not piece.strip():
                return ""
        return _clean(piece, self._markdown, self._emoji)

    def push(self, delta: str) -> str:
        """The cleaned text of ``delta`` that is safe to speak now, with a trailing space
        when more may follow; the rest waits for the next delta or ``flush``."""
        self._buffer += delta
        cut = max(self._buffer.rfind(" "), self._buffer.rfind("\n"), self._buffer.rfind("\t"))
        if cut < 0:
            return ""
        head = self._buffer[: cut + 1]
        if self._markdown and _OPEN_CONSTRUCT.search(head.rstrip()):
            return ""
        # Only a line break ends a line: keep the start of the next piece off line start.
        newline = head.rfind("\n")
        if newline >= 0:
            head, rest = self._buffer[: newline + 1], self._buffer[newline + 1 :]
        else:
            rest = self._buffer[cut + 1 :]
        self._buffer = rest
        cleaned = self(head)
        return f"{cleaned} " if cleaned else ""

    def flush(self) -> str:
        rest, self._buffer = self._buffer, ""
        return self(rest) if rest else ""


def speech_filter(text_filter: Callable[[str], str] | None) -> Callable[[str], str] | None:
    """The filter one reply uses for ``text_filter`` (a ``TTS.text_filter``): the default
    ``clean_for_speech`` becomes a fresh ``SpeechText``, so that code blocks spanning
    sentences are omitted whole; any other callable is used as it is."""
    if text_filter is clean_for_speech:
        return SpeechText()
    return text_filter
