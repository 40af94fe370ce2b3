"""The stream-input wire, without I/O: server messages read (JSON, errors, the character
alignment turned into ``WordTiming``s) and audio bytes cut into frames.

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
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...models.tts import TTSError, WordTiming

__all__ = [
    "FATAL_CLOSE_CODES",
    "Alignment",
    "FrameCutter",
    "Transient",
    "WordAligner",
    "close_failure",
    "decode_audio",
    "parse_alignment",
    "parse_message",
    "server_error",
]

# Close codes after which the same request cannot work: protocol error, unsupported or
# invalid data, policy violation (a bad key, the quota), too big, missing extension.
FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
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


def parse_message(raw: str) -> dict[str, Any]:
    """A server message as a JSON object, or a ``TTSError`` saying what came instead."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise TTSError(f"ElevenLabs sent a message that is not JSON: {raw[:80]!r}") from exc
    if not isinstance(data, dict):
        raise TTSError(f"ElevenLabs sent a message that is not a JSON object: {raw[:80]!r}")
    return data


class Transient(TTSError):
    """A failure the connection may be tried again after, if nothing was yielded yet."""

    def __init__(self, message: str, *, wait: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.wait = wait


def close_failure(code: int | None, reason: object) -> TTSError:
    """The connection closed before ``isFinal``: fatal for a policy code (a bad key, the
    quota, a bad message), otherwise a drop that a new connection may get past."""
    why = f": {reason}" if isinstance(reason, str) and reason else ""
    text = f"ElevenLabs closed the connection before the end of the audio (code {code}{why})"
    if code in FATAL_CLOSE_CODES:
        return TTSError(text, retryable=False)
    return Transient(text)


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
