"""The phone providers' media-stream messages, one small table per provider, no I/O.

Twilio, Telnyx and Plivo stream a call over a WebSocket in JSON text frames with the same
shape — a ``start`` announcing the call, base64 audio in ``media`` messages, keypad
``dtmf``, echoes of the markers we put in the outgoing audio, a ``stop`` — and differ in
names: event and field names, the codec, the marker and clear messages. A ``Dialect``
describes one provider by those facts; ``parse`` turns any text into one typed fact
(junk included: it never raises) and the ``*_message`` methods build what we send.

References:
- Twilio: https://www.twilio.com/docs/voice/media-streams/websocket-messages
- Telnyx: https://developers.telnyx.com/docs/voice/programmable-voice/media-streaming
- Plivo: https://www.plivo.com/docs/voice/xml/the-stream-element (and its events pages)
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "DIALECTS",
    "PLIVO",
    "TELNYX",
    "TWILIO",
    "CallInfo",
    "Dialect",
    "Fact",
    "Ignored",
    "KeyPressed",
    "MarkEchoed",
    "Media",
    "Started",
    "Stopped",
]

Codec = Literal["mulaw", "alaw"]


@dataclass(frozen=True, slots=True)
class CallInfo:
    """The call a media stream carries, as its ``start`` message announced it."""

    provider: str
    call_id: str
    """Twilio's CallSid, Telnyx's call_control_id, Plivo's callId."""
    stream_id: str
    codec: Codec
    sample_rate: int
    account_id: str | None = None
    from_number: str | None = None
    to_number: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    """Custom parameters (Twilio ``<Parameter>``s; Plivo ``extraHeaders``)."""


# ----------------------------------------------------------------- facts


@dataclass(frozen=True, slots=True)
class Started:
    call: CallInfo


@dataclass(frozen=True, slots=True)
class Media:
    audio: bytes
    """Encoded audio (base64 already decoded)."""


@dataclass(frozen=True, slots=True)
class MarkEchoed:
    name: str


@dataclass(frozen=True, slots=True)
class KeyPressed:
    digit: str


@dataclass(frozen=True, slots=True)
class Stopped:
    pass


@dataclass(frozen=True, slots=True)
class Ignored:
    """Nothing to act on: a known no-op (``connected``, an outbound track, a clear
    acknowledgement) when ``problem`` is None, otherwise junk, said why."""

    event: str | None
    problem: str | None = None


Fact: TypeAlias = Started | Media | MarkEchoed | KeyPressed | Stopped | Ignored

_KEYS = frozenset("0123456789*#ABCD")


# ---------------------------------------------------------------- tables


@dataclass(frozen=True, slots=True)
class Dialect:
    """One provider's media-stream messages. Paths name nested JSON fields."""

    name: str
    events: Mapping[str, str]
    """Provider event name -> what it is: start, media, mark, dtmf, stop, error, ignore."""
    read_start: Callable[[dict[str, Any]], CallInfo]
    media_message: Callable[[CallInfo, str], dict[str, Any]]
    """Our audio (base64) as the provider's message."""
    mark_message: Callable[[CallInfo, str], dict[str, Any]]
    clear_message: Callable[[CallInfo], dict[str, Any]]
    mark_path: tuple[str, ...] = ("mark", "name")
    inbound_tracks: frozenset[str] = frozenset({"inbound", "inbound_track"})
    marks_echoed_on_clear: bool = True
    """Documented: pending marks come back at once on a clear (Twilio, Telnyx). Either
    way is handled: marks carry their clear epoch."""

    def parse(self, text: str) -> Fact:
        """One text frame as a fact. Never raises: junk becomes ``Ignored(problem=...)``."""
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested too deep
            return Ignored(None, "not JSON")
        if not isinstance(message, dict):
            return Ignored(None, "not a JSON object")
        event = message.get("event")
        kind = self.events.get(event) if isinstance(event, str) else None
        if kind is None:
            return Ignored(str(event)[:40], "unknown event")
        try:
            return self._fact(kind, message)
        except (KeyError, TypeError, ValueError) as exc:
            return Ignored(event, f"malformed {event}: {exc}"[:200])

    def _fact(self, kind: str, message: dict[str, Any]) -> Fact:
        if kind == "media":
            media = _obj(message["media"], "media")
            track = media.get("track")
            if track is not None and track not in self.inbound_tracks:
                return Ignored("media")  # our own audio, echoed on a both-tracks stream
            payload = media["payload"]
            if not isinstance(payload, str):
                raise TypeError("payload is not a string")
            try:
                return Media(base64.b64decode(payload, validate=True))
            except binascii.Error as exc:
                raise ValueError("payload is not base64") from exc
        if kind == "mark":
            return MarkEchoed(_text(_at(message, self.mark_path), "mark name"))
        if kind == "dtmf":
            digit = _text(message["dtmf"]["digit"], "digit").upper()
            if digit not in _KEYS:
                raise ValueError(f"{digit[:8]!r} is not a keypad key")
            return KeyPressed(digit)
        if kind == "start":
            return Started(self.read_start(message))
        if kind == "stop":
            return Stopped()
        if kind == "error":  # the provider refused something we sent: worth a warning
            error = _obj(message.get("payload") or {}, "payload")
            said = " ".join(str(error.get(k, ""))[:60] for k in ("code", "title", "detail"))
            return Ignored("error", f"{self.name} reports an error: {said.strip()}"[:200])
        return Ignored(message.get("event"))

    def encode(self, message: dict[str, Any]) -> str:
        return json.dumps(message, separators=(",", ":"))


def _at(message: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = message
    for key in path:
        value = value[key]
    return value


def _obj(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is missing")
    return value


def _opt(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _codec(encoding: object, rate: object, known: Mapping[str, Codec], how: str) -> Codec:
    """``how``: what to configure at the provider to get G.711 at 8 kHz. No encoding
    given: the provider's default (the first of ``known``)."""
    if encoding is None:
        encoding = next(iter(known))
    codec = known.get(encoding) if isinstance(encoding, str) else None
    if codec is None:
        raise ValueError(f"audio {str(encoding)[:24]!r} is not supported; {how}")
    if rate not in (8000, "8000", None):
        raise ValueError(f"audio at {str(rate)[:12]!r} Hz is not supported; {how}")
    return codec


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k)[:256]: str(v)[:4096] for k, v in value.items() if isinstance(v, str | int)}


# ----------------------------------------------------------------- Twilio


def _twilio_start(message: dict[str, Any]) -> CallInfo:
    start = _obj(message["start"], "start")
    fmt = _obj(start.get("mediaFormat") or {}, "mediaFormat")
    params = _string_map(start.get("customParameters"))
    return CallInfo(
        provider="twilio",
        call_id=_text(start.get("callSid"), "callSid"),
        stream_id=_text(start.get("streamSid") or message.get("streamSid"), "streamSid"),
        codec=_codec(
            fmt.get("encoding"),
            fmt.get("sampleRate"),
            {"audio/x-mulaw": "mulaw"},
            "a bidirectional Twilio <Connect><Stream> is audio/x-mulaw at 8000 Hz",
        ),
        sample_rate=8000,
        account_id=_opt(start.get("accountSid")),
        # Twilio's start has no numbers; our TwiML passes the webhook's From/To along.
        from_number=params.get("From"),
        to_number=params.get("To"),
        parameters=params,
    )


TWILIO = Dialect(
    name="twilio",
    events={
        "connected": "ignore",
        "start": "start",
        "media": "media",
        "mark": "mark",
        "dtmf": "dtmf",
        "stop": "stop",
    },
    read_start=_twilio_start,
    media_message=lambda call, audio: {
        "event": "media",
        "streamSid": call.stream_id,
        "media": {"payload": audio},
    },
    mark_message=lambda call, name: {
        "event": "mark",
        "streamSid": call.stream_id,
        "mark": {"name": name},
    },
    clear_message=lambda call: {"event": "clear", "streamSid": call.stream_id},
)
"""Twilio Media Streams (``<Connect><Stream>``): μ-law at 8 kHz, marks echoed once
played, ``clear`` echoing the marks it dropped."""


# ----------------------------------------------------------------- Telnyx


def _telnyx_start(message: dict[str, Any]) -> CallInfo:
    start = _obj(message["start"], "start")
    fmt = _obj(start.get("media_format") or {}, "media_format")
    codec = _codec(
        fmt.get("encoding"),
        fmt.get("sample_rate"),
        {"PCMU": "mulaw", "PCMA": "alaw"},
        'set stream_codec and stream_bidirectional_codec to "PCMU" (or "PCMA"), 8000 Hz',
    )
    params = _string_map(start.get("custom_parameters"))
    client_state = _opt(start.get("client_state"))
    if client_state is not None:
        params.setdefault("client_state", client_state)
    return CallInfo(
        provider="telnyx",
        call_id=_text(start.get("call_control_id"), "call_control_id"),
        stream_id=_text(message.get("stream_id") or start.get("stream_id"), "stream_id"),
        codec=codec,
        sample_rate=8000,
        account_id=_opt(start.get("user_id")),
        from_number=_opt(start.get("from")),
        to_number=_opt(start.get("to")),
        parameters=params,
    )


TELNYX = Dialect(
    name="telnyx",
    events={
        "connected": "ignore",
        "start": "start",
        "media": "media",
        "mark": "mark",
        "dtmf": "dtmf",
        "stop": "stop",
        "error": "error",
    },
    read_start=_telnyx_start,
    media_message=lambda call, audio: {"event": "media", "media": {"payload": audio}},
    mark_message=lambda call, name: {"event": "mark", "mark": {"name": name}},
    clear_message=lambda call: {"event": "clear"},
)
"""Telnyx media streaming (Call Control's ``stream_url``, bidirectional RTP mode): μ-law
or A-law at 8 kHz, marks and ``clear`` as Twilio's."""


# ------------------------------------------------------------------ Plivo


def _plivo_start(message: dict[str, Any]) -> CallInfo:
    start = _obj(message["start"], "start")
    fmt = _obj(start.get("mediaFormat") or {}, "mediaFormat")
    codec = _codec(
        fmt.get("encoding"),
        fmt.get("sampleRate"),
        {"audio/x-mulaw": "mulaw"},
        'set contentType="audio/x-mulaw;rate=8000" on the <Stream> element',
    )
    params: dict[str, str] = {}
    extra = message.get("extra_headers")
    if isinstance(extra, str):  # "a=1;b=2" (the docs show both ; and , between pairs)
        for pair in extra.replace(",", ";").split(";"):
            key, sep, value = pair.partition("=")
            if sep and key.strip():
                params[key.strip()[:256]] = value.strip()[:4096]
    return CallInfo(
        provider="plivo",
        call_id=_text(start.get("callId"), "callId"),
        stream_id=_text(start.get("streamId") or message.get("streamId"), "streamId"),
        codec=codec,
        sample_rate=8000,
        account_id=_opt(start.get("accountId")),
        parameters=params,
    )


PLIVO = Dialect(
    name="plivo",
    events={
        "start": "start",
        "media": "media",
        "playedStream": "mark",
        "dtmf": "dtmf",
        "stop": "stop",
        "clearedAudio": "ignore",
    },
    read_start=_plivo_start,
    media_message=lambda call, audio: {
        "event": "playAudio",
        "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000, "payload": audio},
    },
    mark_message=lambda call, name: {
        "event": "checkpoint",
        "streamId": call.stream_id,
        "name": name,
    },
    clear_message=lambda call: {"event": "clearAudio", "streamId": call.stream_id},
    mark_path=("name",),
    # "playedStream will only be emitted if the preceding events were played successfully"
    marks_echoed_on_clear=False,
)
"""Plivo audio streams (``<Stream bidirectional>``): μ-law at 8 kHz, ``checkpoint``
echoed as ``playedStream`` once played, ``clearAudio`` dropping the pending ones."""

DIALECTS: Mapping[str, Dialect] = {d.name: d for d in (TWILIO, TELNYX, PLIVO)}
"""Every provider's dialect by name (``"twilio"``, ``"telnyx"``, ``"plivo"``), as
``--telephony`` and ``create_app(telephony=[...])`` name them."""
