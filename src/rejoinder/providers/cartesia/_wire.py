"""The Cartesia TTS WebSocket wire, without I/O: server messages read (audio chunks, word
timestamps, errors) and the reported words placed on the words as written. What a message
that is not JSON or a close means is decided with ElevenLabs' in ``.._tts_stream``.

Server messages are JSON objects with a ``type``: ``chunk`` (base64 ``data``),
``timestamps`` (``word_timestamps``: three parallel lists ``words``, ``start``, ``end``, in
seconds), ``flush_done``, ``done`` and ``error``. An error carries ``status_code`` (an
HTTP-like code) and, from API version 2026-03-01, ``title``/``message``/``error_code``;
older versions put the text in ``error``. Both are read.

The words Cartesia reports need not be the words as written: the reference's own example
reports ``"Hello", "world"`` for ``"Hello, world!"``, and a reading of a number or a sign
("$5") is a different word. The session records the heard words as written, so
``WordMatcher`` places each reported word on the written word it belongs to, comparing
letters and digits only; a reported word that matches none of the next few written words
is taken as a spoken form of the current one.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...models.tts import TTSError, WordTiming
from .._retry import transient_status
from .._tts_stream import Transient

__all__ = [
    "WordMatcher",
    "decode_chunk",
    "parse_word_timestamps",
    "server_error",
]

LOOKAHEAD = 4
"""Written words a reported word is looked for in before it counts as a spoken form of
the current one (a skipped or normalized word is found again within a few words)."""
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")


def server_error(message: Mapping[str, Any]) -> TTSError:
    """The ``TTSError`` for an error message. A rate limit or a server failure (408, 429,
    5xx) is ``Transient``: a new context may get past it if nothing was heard yet. Any
    other status (an invalid model or voice, a refused key) is not retryable."""
    title, text = message.get("title"), message.get("message") or message.get("error")
    parts = [str(part) for part in (title, text) if part]
    summary = ": ".join(parts) if parts else "unknown error"
    status, code = message.get("status_code"), message.get("error_code")
    details = ", ".join(str(part) for part in (status, code) if part is not None)
    described = f"Cartesia reported an error: {summary}" + (f" ({details})" if details else "")
    if isinstance(status, int) and not isinstance(status, bool) and transient_status(status):
        return Transient(described)
    return TTSError(described, retryable=False)


def decode_chunk(message: Mapping[str, Any]) -> bytes | None:
    """The PCM of a ``chunk`` message; None for another message. Malformed audio raises
    ``TTSError``: garbage must not be played."""
    if message.get("type") != "chunk" and "data" not in message:
        return None
    data = message.get("data")
    if data is None or data == "":
        return None
    try:
        if not isinstance(data, str):
            raise ValueError("data is not a base64 string")
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TTSError(f"Cartesia sent a malformed audio chunk: {exc}") from exc


def _seconds(value: object, what: str) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(item, int | float) and not isinstance(item, bool) for item in value
    ):
        raise TTSError(f"Cartesia sent malformed word timestamps: {what} is not numbers")
    return [float(item) for item in value]


def parse_word_timestamps(value: object) -> list[tuple[str, float, float]]:
    """The ``word_timestamps`` of a ``timestamps`` message as (word, start, end) in
    seconds; a ``TTSError`` when malformed (lists of other types or lengths)."""
    if not isinstance(value, Mapping):
        raise TTSError("Cartesia sent malformed word timestamps: not an object")
    words = value.get("words")
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise TTSError("Cartesia sent malformed word timestamps: words is not strings")
    starts, ends = _seconds(value.get("start"), "start"), _seconds(value.get("end"), "end")
    if not len(words) == len(starts) == len(ends):
        raise TTSError(
            "Cartesia sent malformed word timestamps: lists differ in length "
            f"({len(words)}, {len(starts)}, {len(ends)})"
        )
    return list(zip(words, starts, ends, strict=True))


def letters(word: str) -> str:
    """What two spellings of a word are compared on: letters and digits, case folded."""
    return "".join(c for c in unicodedata.normalize("NFKC", word).casefold() if c.isalnum())


@dataclass(slots=True)
class _Written:
    word: str
    rest: str  # its letters not yet covered by a reported word
    start: float | None = None
    end: float = 0.0


class WordMatcher:
    """Reported word timestamps turned into ``WordTiming``s of the words as written.

    ``add_text`` takes the transcript as it is sent; a word is complete once whitespace
    follows it (or ``end_text``). ``push`` takes one reported word and returns the written
    words it completes, each with the times of the reported words that covered it; a
    written word the speech skipped is given the start of the next word heard, so it
    counts as heard once that word is.
    """

    def __init__(self) -> None:
        self._text = ""  # sent text after the last whitespace: a word that may go on
        self._words: deque[str] = deque()  # complete written words not yet placed
        self._current: _Written | None = None
        self._last_end = 0.0

    def add_text(self, text: str) -> None:
        self._text += text
        if (space := _LAST_SPACE.search(self._text)) is not None:
            self._words.extend(self._text[: space.start()].split())
            self._text = self._text[space.end() :]

    def end_text(self) -> None:
        """The transcript is complete: its last word too."""
        self._words.extend(self._text.split())
        self._text = ""

    def push(self, word: str, start: float, end: float) -> list[WordTiming]:
        key, current = letters(word), self._current
        placed: list[WordTiming] = []
        if not key:  # punctuation read out on its own: part of the word being spoken
            if current is not None and current.start is not None:
                current.end = max(current.end, end)
            return placed
        while True:
            if current is None:
                if (current := self._take()) is None:
                    return placed  # more speech than text sent: nothing to place it on
                if not current.rest:  # a written word with nothing to say ("-", "…")
                    placed.append(WordTiming(current.word, start, start))
                    current = self._current = None
                    continue
                self._current = current
            if current.rest.startswith(key):
                current.rest = current.rest[len(key) :]
                self._cover(current, start, end)
                if not current.rest:
                    placed.append(self._placed(current))
                    self._current = None
                return placed
            ahead = self._find_ahead(key)
            if ahead is None:  # a spoken form of this word ("$5": "five dollars")
                self._cover(current, start, end)
                return placed
            # The words before the match were skipped (or said as something else).
            placed.append(self._placed(current, start))
            placed.extend(WordTiming(self._words.popleft(), start, start) for _ in range(ahead))
            current = self._current = None

    def finish(self) -> list[WordTiming]:
        """The audio ended: every word sent was spoken, the rest at the last word's end."""
        self.end_text()
        placed: list[WordTiming] = []
        if self._current is not None:
            placed.append(self._placed(self._current, self._last_end))
            self._current = None
        at = self._last_end
        placed.extend(WordTiming(word, at, at) for word in self._words)
        self._words.clear()
        return placed

    def _take(self) -> _Written | None:
        if self._words:
            word = self._words.popleft()
        elif self._text:  # sent without a space after it yet (a flush): spoken now
            word, self._text = self._text, ""
        else:
            return None
        return _Written(word, letters(word))

    def _find_ahead(self, key: str) -> int | None:
        for index, word in enumerate(self._words):
            if index >= LOOKAHEAD:
                return None
            if (written := letters(word)) and written.startswith(key):
                return index
        return None

    def _cover(self, current: _Written, start: float, end: float) -> None:
        if current.start is None:
            current.start = start
        current.end = max(current.end, end)
        self._last_end = max(self._last_end, end)

    def _placed(self, written: _Written, default: float | None = None) -> WordTiming:
        if written.start is None:
            at = default if default is not None else self._last_end
            return WordTiming(written.word, at, at)
        return WordTiming(written.word, written.start, written.end)
