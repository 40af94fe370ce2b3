"""Deepgram's live transcription wire: the request URL, the control messages and the server
messages the client acts on. Opening the socket is ``.._ws``'s (a refused upgrade says why
in Deepgram's ``dg-error`` header), the audio encoding ``.._audio_chunks``'s; what an
utterance makes of the messages is ``stt.py``'s business (which also cites the
documentation pages)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

DEFAULT_BASE_URL = "wss://api.deepgram.com/v1"
REASON_HEADER = "dg-error"
"""Where Deepgram says why it refused an upgrade (the body says the same, but a WebSocket
client never reads the body of a refused upgrade)."""

# Sent as text frames: Deepgram mishandles control messages sent as binary.
KEEPALIVE = json.dumps({"type": "KeepAlive"})
FINALIZE = json.dumps({"type": "Finalize"})
CLOSE_STREAM = json.dumps({"type": "CloseStream"})

QueryValue = str | int | float | bool


def _query_value(value: QueryValue) -> str:
    # Deepgram spells booleans in lower case; Python's str(True) would be refused.
    return str(value).lower() if isinstance(value, bool) else str(value)


def listen_url(base_url: str, params: Mapping[str, QueryValue | None]) -> str:
    """``<base_url>/listen?...`` with the options that are set (None is left out)."""
    query = {name: _query_value(value) for name, value in params.items() if value is not None}
    return f"{base_url}/listen?{urlencode(query)}"


@dataclass(frozen=True, slots=True)
class Result:
    """One ``Results`` message, reduced to what a turn needs."""

    transcript: str
    is_final: bool
    speech_final: bool
    from_finalize: bool
    start: float
    """Stream time (seconds of audio sent on this connection) the result begins at."""
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class ServerError:
    """An error the server reported in a message (``{"type": "Error", ...}``)."""

    message: str


@dataclass(frozen=True, slots=True)
class Other:
    """A message the client does not act on (Metadata, SpeechStarted, UtteranceEnd, ...)."""

    type: str
    data: dict[str, Any]


Message = Result | ServerError | Other


def parse(text: str) -> Message:
    """Decode one text frame. Raises ``ValueError`` when it is not a JSON object or a
    ``Results`` message lacks what it must carry; the caller logs and ignores it."""
    data: object = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data.get("type")
    if kind == "Results":
        return _result(data)
    if kind == "Error" or (kind is None and ("err_code" in data or "err_msg" in data)):
        return ServerError(_error_text(data))
    return Other(kind if isinstance(kind, str) else repr(kind), data)


def _result(data: dict[str, Any]) -> Result:
    try:
        alternatives = data["channel"]["alternatives"]
        transcript = alternatives[0]["transcript"] if alternatives else ""
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"Results without channel.alternatives: {exc!r}") from exc
    if not isinstance(transcript, str):
        raise ValueError("Results transcript is not a string")
    start, duration = data.get("start", 0.0), data.get("duration", 0.0)
    if not isinstance(start, int | float) or not isinstance(duration, int | float):
        raise ValueError("Results start/duration are not numbers")
    return Result(
        transcript=transcript.strip(),
        is_final=data.get("is_final") is True,
        speech_final=data.get("speech_final") is True,
        from_finalize=data.get("from_finalize") is True,
        start=float(start),
        duration=float(duration),
    )


def _error_text(data: Mapping[str, Any]) -> str:
    parts = [
        str(data[name])
        for name in ("err_code", "variant", "description", "message", "err_msg")
        if data.get(name)
    ]
    return ": ".join(parts) or json.dumps(data)[:200]
