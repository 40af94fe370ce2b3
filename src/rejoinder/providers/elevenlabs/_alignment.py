"""ElevenLabs' character alignment turned into ``WordTiming``s, and audio bytes into frames.

An audio message of the stream-input WebSocket carries ``alignment``: three parallel
lists, ``chars``, ``charStartTimesMs`` and ``charsDurationsMs`` (the SDKs also spell them
``charsStartTimesMs`` / ``charDurationsMs``; both are read), with times relative to the
start of *that message's* audio. ``WordAligner`` places each message at the audio that
came before it, so the timings it reports are seconds from the start of the stream.

A word is a run of non-space characters. A word may be cut by a message boundary, so the
last run of a message is held until the next message starts with a space (or the stream
ends): reporting it early would report half a word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...models.tts import WordTiming

__all__ = ["Alignment", "FrameCutter", "WordAligner", "parse_alignment"]


@dataclass(frozen=True, slots=True)
class Alignment:
    chars: Sequence[str]
    starts_ms: Sequence[float]
    durations_ms: Sequence[float]


def _numbers(value: object, what: str) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(item, int | float) and not isinstance(item, bool) for item in value
    ):
        raise ValueError(f"alignment {what} is not a list of numbers")
    return [float(item) for item in value]


def parse_alignment(value: object) -> Alignment | None:
    """The ``alignment`` of a server message; None when absent. Raises ``ValueError`` when
    it is there but malformed (lists of other types or of different lengths)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError("alignment is not an object")
    chars = value.get("chars")
    if not isinstance(chars, list) or not all(isinstance(c, str) for c in chars):
        raise ValueError("alignment chars is not a list of strings")
    starts = _numbers(value.get("charStartTimesMs", value.get("charsStartTimesMs")), "starts")
    durations = _numbers(value.get("charsDurationsMs", value.get("charDurationsMs")), "durations")
    if not len(chars) == len(starts) == len(durations):
        raise ValueError(
            f"alignment lists differ in length ({len(chars)}, {len(starts)}, {len(durations)})"
        )
    return Alignment(chars, starts, durations)


class WordAligner:
    """Words from the alignment of consecutive audio messages."""

    def __init__(self) -> None:
        self._word = ""
        self._start = 0.0
        self._end = 0.0

    def push(self, alignment: Alignment, offset: float) -> list[WordTiming]:
        """The words completed by one message whose audio starts ``offset`` seconds into
        the stream."""
        words: list[WordTiming] = []
        for char, start_ms, duration_ms in zip(
            alignment.chars, alignment.starts_ms, alignment.durations_ms, strict=True
        ):
            if not char.strip():  # a space (or an empty entry) ends the word
                if (word := self._take()) is not None:
                    words.append(word)
                continue
            start = offset + start_ms / 1000
            if not self._word:
                self._start = start
            self._word += char
            self._end = max(self._end, start + duration_ms / 1000)
        return words

    def finish(self) -> list[WordTiming]:
        """The word still open at the end of the stream, if any."""
        word = self._take()
        return [word] if word is not None else []

    def _take(self) -> WordTiming | None:
        if not self._word:
            return None
        word = WordTiming(self._word, self._start, self._end)
        self._word, self._end = "", 0.0
        return word


class FrameCutter:
    """Cuts PCM bytes arriving in pieces of any length (a sample may be split across two)
    into frames of ``frame_bytes``; ``tail`` is what is left at the end."""

    def __init__(self, frame_bytes: int) -> None:
        self._frame_bytes = frame_bytes
        self._pending = b""

    def push(self, pcm: bytes) -> list[bytes]:
        self._pending += pcm
        size = self._frame_bytes
        cut = len(self._pending) - len(self._pending) % size
        frames = [self._pending[i : i + size] for i in range(0, cut, size)]
        self._pending = self._pending[cut:]
        return frames

    def tail(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest[: len(rest) - len(rest) % 2]  # an odd last byte is half a sample
