"""The stream-input wire, without I/O: server messages read (errors, audio, the character
alignment turned into ``WordTiming``s). What a message that is not JSON or a close means
is decided with Cartesia's in ``.._tts_stream``; cutting audio into frames is
``.._audio_chunks``'s.

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

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...models.tts import TTSError, WordTiming
from .._ws import FATAL_CLOSE_CODES

__all__ = [
    "Alignment",
    "WordAligner",
    "decode_audio",
    "parse_alignment",
    "server_error",
]

_FATAL_ERROR_WORDS = ("api key", "api_key", "unauthorized", "quota", "invalid", "not found")


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


def server_error(message: Mapping[str, Any]) -> TTSError:
    """The ``TTSError`` for an error message: not retryable when it names the key, the
    quota or an invalid request, or carries a policy close code or a 4xx code."""
    text = str(message.get("message") or message.get("error") or "unknown error")
    kind, code = message.get("error"), message.get("code")
    details = ", ".join(str(part) for part in (kind, code) if part and str(part) != text)
    lowered = f"{text} {kind}".lower()
    fatal = code in FATAL_CLOSE_CODES or any(word in lowered for word in _FATAL_ERROR_WORDS)
    if isinstance(code, int) and 400 <= code < 500 and code not in (408, 429):
        fatal = True
    suffix = f" ({details})" if details else ""
    return TTSError(f"ElevenLabs reported an error: {text}{suffix}", retryable=not fatal)


def decode_audio(message: Mapping[str, Any]) -> tuple[bytes, Alignment | None] | None:
    """The PCM and alignment of an audio message; None for a message without audio. An
    error message raises its ``TTSError``, and so does a malformed one: garbage must not
    be played."""
    if message.get("error") or ("message" in message and "audio" not in message):
        raise server_error(message)
    audio = message.get("audio")
    if audio is None or audio == "":
        return None
    try:
        if not isinstance(audio, str):
            raise ValueError("audio is not a base64 string")
        return base64.b64decode(audio, validate=True), parse_alignment(message.get("alignment"))
    except (binascii.Error, ValueError) as exc:
        raise TTSError(f"ElevenLabs sent a malformed audio message: {exc}") from exc
