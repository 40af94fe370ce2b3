"""What the streaming TTS providers over a WebSocket (ElevenLabs, Cartesia) decide alike
about a stream, in one place: which failures a stream may be tried again after
(``Transient``: only before any of its audio was delivered), what a server message that
is not a JSON object means (the stream cannot go on), and what a connection closed before
the end of the audio means (fatal for a close code that says the request is wrong,
otherwise a drop another connection may get past)."""

from __future__ import annotations

from typing import Any

from ..models.tts import TTSError
from . import _json
from ._ws import FATAL_CLOSE_CODES, TryAgain

__all__ = ["Transient", "close_failure", "parse_message"]


class Transient(TTSError, TryAgain):
    """A failure the stream may be tried again after, if nothing was delivered yet: a
    ``TTSError`` (retryable) for whoever sees it, a ``TryAgain`` for the retry loop."""

    def __init__(self, message: str, *, wait: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.wait = wait


def parse_message(server: str, raw: str) -> dict[str, Any]:
    """A server message as a JSON object, or a ``TTSError`` saying what came instead."""
    try:
        data = _json.loads(raw)
    except ValueError as exc:
        raise TTSError(f"{server} sent a message that is not JSON: {raw[:80]!r}") from exc
    if not isinstance(data, dict):
        raise TTSError(f"{server} sent a message that is not a JSON object: {raw[:80]!r}")
    return data


def close_failure(server: str, code: int | None, reason: str) -> TTSError:
    """The connection closed before the end of the audio: fatal for a close code after
    which the same request cannot work (a bad key, the quota, a bad message), otherwise
    a drop that a new connection may get past."""
    why = f": {reason}" if reason else ""
    text = f"{server} closed the connection before the end of the audio (code {code}{why})"
    if code in FATAL_CLOSE_CODES:
        return TTSError(text, retryable=False)
    return Transient(text)
