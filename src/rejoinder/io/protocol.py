"""The client protocol, version 1: a sans-I/O core (``docs/protocol.md`` is its reference).

Text in, typed messages out; typed messages in, text out. No sockets, no clock: the
WebSocket transport feeds it the text frames it receives, the WebRTC transport the data
channel's messages, a test recorded JSON or junk from hypothesis. Binary frames (PCM16LE
mono audio, both ways) never come here: the transport carries them.

``parse_client_message`` returns one of the ``ClientMessage`` types or raises
``ProtocolError`` with a machine-readable ``code``; it raises nothing else, whatever the
input. Unknown fields are ignored (a newer client may send more); unknown types are an
error the transport reports with an ``error`` event, never a reason to crash.
"""

from __future__ import annotations

import json
import math
from enum import IntEnum
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

__all__ = [
    "MAX_SAMPLE_RATE",
    "MAX_TEXT_CHARS",
    "MAX_USER_TEXT_CHARS",
    "MIN_SAMPLE_RATE",
    "PROTOCOL_VERSION",
    "TIMELINE_KINDS",
    "AgentStateMessage",
    "Clear",
    "ClientMessage",
    "CloseCode",
    "ErrorCode",
    "ErrorMessage",
    "IceServerInfo",
    "Interrupt",
    "MetricsMessage",
    "Mute",
    "Ping",
    "Played",
    "Pong",
    "ProtocolError",
    "Ready",
    "ServerMessage",
    "Start",
    "TimelineMessage",
    "ToolMessage",
    "TranscriptMessage",
    "UserStateMessage",
    "UserText",
    "encode",
    "json_safe",
    "parse_client_message",
    "parse_server_message",
]

PROTOCOL_VERSION = 1
MIN_SAMPLE_RATE = 8000
MAX_SAMPLE_RATE = 96000
MAX_TEXT_CHARS = 65536
"""Longest JSON text message accepted (characters)."""
MAX_USER_TEXT_CHARS = 8192
"""Longest typed user input (``{"type": "text"}``)."""
MAX_SAMPLES = 2**53
"""A ``played`` count above this is not a count (about 6000 years at 48 kHz)."""


class CloseCode(IntEnum):
    """WebSocket close codes the server uses (RFC 6455 numbers where one fits)."""

    NORMAL = 1000
    """The session ended (the agent closed it, or the client said goodbye)."""
    UNSUPPORTED_DATA = 1003
    """Binary audio before ``start``."""
    INVALID_JSON = 1007
    """A text frame that is not JSON."""
    POLICY_VIOLATION = 1008
    """An invalid ``start`` message (the session cannot begin)."""
    MESSAGE_TOO_BIG = 1009
    """A frame over the size limit."""
    INTERNAL_ERROR = 1011
    """The agent's entry point failed."""
    START_TIMEOUT = 4001
    """No ``start`` message arrived in time."""
    SLOW_CLIENT = 4002
    """The client does not read what the server sends (its queue overflowed)."""
    PROTOCOL_MISMATCH = 4003
    """``start`` named a protocol version this server does not speak."""
    RESUME_FAILED = 4004
    """``start`` asked to resume a session that is gone (unknown or expired token, or
    resuming is off): start a new session."""
    RESUMED = 4005
    """Another connection resumed this session (with its token): this one is replaced."""


class ErrorCode:
    """Values of ``error.code``."""

    INVALID_JSON = "invalid_json"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_TYPE = "unknown_type"
    TOO_LARGE = "too_large"
    NOT_STARTED = "not_started"
    ALREADY_STARTED = "already_started"
    NOT_READY = "not_ready"
    AUDIO_OVERRUN = "audio_overrun"
    START_TIMEOUT = "start_timeout"
    PLAYBACK_REPORTS = "playback_reports"
    """A warning: the client's ``played`` reports stopped (or a ``clear`` was never
    confirmed); the server estimates playback until they resume."""
    SESSION = "session_error"
    INTERNAL = "internal_error"
    PROTOCOL_MISMATCH = "protocol_mismatch"
    RESUME_FAILED = "resume_failed"


class ProtocolError(Exception):
    """A client message the protocol cannot accept. ``code`` is an ``ErrorCode`` value."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.message!r})"


# ------------------------------------------------------------ client -> server


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)


class Start(_Message):
    """First message: the microphone audio that follows is PCM16LE mono at this rate."""

    type: Literal["start"] = "start"
    sample_rate: Annotated[int, Field(ge=MIN_SAMPLE_RATE, le=MAX_SAMPLE_RATE)]
    timeline: bool = False
    """Send ``timeline`` messages: the floor's entries of the session timeline."""
    protocol: Annotated[int, Field(ge=1)] | None = None
    """The protocol version the client speaks; another than the server's is refused
    (``protocol_mismatch``, close 4003). Absent: the client takes the server's."""
    resume: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """The ``resume_token`` of an earlier ``ready``: continue that session (it was kept
    for ``resume_grace`` seconds after its connection dropped)."""


class Played(_Message):
    """Playback truth: agent samples played so far, in total, at the server's rate.
    ``cleared`` marks the report sent right after processing a ``clear``."""

    type: Literal["played"] = "played"
    samples: Annotated[int, Field(ge=0, le=MAX_SAMPLES)]
    cleared: bool = False


class UserText(_Message):
    """Typed user input: a user turn, like a transcript."""

    type: Literal["text"] = "text"
    text: Annotated[str, Field(min_length=1, max_length=MAX_USER_TEXT_CHARS)]


class Mute(_Message):
    """The user muted (or unmuted) their microphone: the session hears silence meanwhile
    (``session.mute_input``); the client may keep sending audio or not."""

    type: Literal["mute"] = "mute"
    muted: bool


class Interrupt(_Message):
    """Stop what the agent is saying now (a button, not speech): ``session.interrupt()``;
    the server answers with ``clear`` as for a barge-in."""

    type: Literal["interrupt"] = "interrupt"


class Ping(_Message):
    """Is this connection alive? The server answers at once with a ``pong`` carrying the
    same ``id``, on the connection the ping came by. A browser cannot see a WebSocket that
    died silently (a network change leaves it open for minutes): a client that gets no
    ``pong`` in time takes the connection for dropped and resumes."""

    type: Literal["ping"] = "ping"
    id: Annotated[int, Field(ge=0, le=MAX_SAMPLES)] | None = None


ClientMessage: TypeAlias = Start | Played | UserText | Mute | Interrupt | Ping
_CLIENT_TYPES: dict[str, type[_Message]] = {
    "start": Start,
    "played": Played,
    "text": UserText,
    "mute": Mute,
    "interrupt": Interrupt,
    "ping": Ping,
}


# ------------------------------------------------------------ server -> client


class IceServerInfo(BaseModel):
    """A STUN or TURN server for the client's peer connection (as an RTCIceServer)."""

    # a part of ``ready``, not a message: no ``type`` (a _Message is one)
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    urls: Annotated[list[str], Field(min_length=1)]
    username: str | None = None
    credential: str | None = None


class Ready(_Message):
    type: Literal["ready"] = "ready"
    sample_rate: int
    """Rate of the agent audio the server sends (PCM16LE mono)."""
    protocol: int = PROTOCOL_VERSION
    session_id: str | None = None
    """The session's id (the same after a resume)."""
    resume_token: str | None = None
    """Give it as ``start.resume`` (WebRTC: the offer's ``resume`` query parameter) to
    continue this session after the connection drops; single use: each ``ready`` brings
    a new one. Absent: the server keeps no session for resuming."""
    resume_grace: float | None = None
    """Seconds the session is kept after its connection drops."""
    resumed: bool | None = None
    """True when this ``ready`` continues an earlier connection's session."""
    ice_servers: list[IceServerInfo] | None = None
    """The STUN/TURN servers for the client's next peer connection (a reconnect), with
    TURN credentials minted for this session. Absent: the server has none configured.
    Before its first offer a client gets them from ``GET /api/ice`` (docs/webrtc.md)."""
    ice_transport_policy: Literal["all", "relay"] | None = None
    """The ``iceTransportPolicy`` the server asks for: ``relay`` means TURN relays only."""


class Pong(_Message):
    """The answer to a ``ping``, with its ``id``."""

    type: Literal["pong"] = "pong"
    id: int | None = None


class Clear(_Message):
    """Drop all queued agent audio now, then report ``played`` with ``cleared: true``."""

    type: Literal["clear"] = "clear"


AgentStateName = Literal["initializing", "listening", "thinking", "speaking"]
UserStateName = Literal["listening", "speaking", "away"]


class AgentStateMessage(_Message):
    type: Literal["agent_state"] = "agent_state"
    state: AgentStateName


class UserStateMessage(_Message):
    type: Literal["user_state"] = "user_state"
    state: UserStateName


class TranscriptMessage(_Message):
    """The whole text of one user or agent turn so far (not a delta). ``final`` ends it;
    a final agent transcript is what was heard, ``interrupted`` when cut short."""

    type: Literal["transcript"] = "transcript"
    role: Literal["user", "agent"]
    text: str
    final: bool
    interrupted: bool | None = None


class ToolMessage(_Message):
    type: Literal["tool"] = "tool"
    name: str
    call_id: str
    status: Literal["started", "finished"]
    error: bool | None = None


class MetricsMessage(_Message):
    type: Literal["metrics"] = "metrics"
    metrics: dict[str, Any]


TIMELINE_KINDS = frozenset(
    {
        "agent_state",
        "user_state",
        "ob_opened",
        "ob_closed",
        "ob_handed_over",
        "ob_flag",
        "ob_expired",
    }
)
"""Timeline entry kinds a ``timeline`` message carries (``rejoinder.session.timeline``)."""


class TimelineMessage(_Message):
    """One entry of the session timeline (``{"t", "kind", ...fields}``), ``t`` in seconds
    since the session started. Only for a client whose ``start`` asked for it; the kinds
    are ``TIMELINE_KINDS`` today, and a client skips kinds it does not know."""

    type: Literal["timeline"] = "timeline"
    entry: dict[str, Any]

    @field_validator("entry")
    @classmethod
    def _an_entry(cls, entry: dict[str, Any]) -> dict[str, Any]:
        t = entry.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise ValueError('an entry has a finite number "t"')
        if not isinstance(entry.get("kind"), str):
            raise ValueError('an entry has a string "kind"')
        return entry


class ErrorMessage(_Message):
    type: Literal["error"] = "error"
    code: str
    message: str
    source: str | None = None
    """For ``session_error``: which part of the session failed."""


ServerMessage: TypeAlias = (
    Ready
    | Clear
    | AgentStateMessage
    | UserStateMessage
    | TranscriptMessage
    | ToolMessage
    | MetricsMessage
    | TimelineMessage
    | ErrorMessage
    | Pong
)
_server_adapter: TypeAdapter[ServerMessage] = TypeAdapter(
    Annotated[ServerMessage, Field(discriminator="type")]
)


# ------------------------------------------------------------------- codec


def _load(text: object) -> dict[str, Any]:
    if not isinstance(text, str):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message is a JSON text")
    if len(text) > MAX_TEXT_CHARS:
        raise ProtocolError(
            ErrorCode.TOO_LARGE, f"a text message is at most {MAX_TEXT_CHARS} characters"
        )
    try:
        data = json.loads(text)
    except RecursionError:
        raise ProtocolError(ErrorCode.INVALID_JSON, "the JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        raise ProtocolError(ErrorCode.INVALID_JSON, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message is a JSON object")
    return data


def _kind(data: dict[str, Any]) -> str:
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, 'every message has a string "type"')
    return kind


def _validate(model: type[_Message], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'message'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)[:3]
        )
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"invalid {data.get('type')!s:.40} message: {problems}"
        ) from None
    except RecursionError:  # pragma: no cover - pydantic is iterative for these shapes
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "the message is nested too deeply") from None


def parse_client_message(text: str) -> ClientMessage:
    """One client text message → a typed message; anything else → ``ProtocolError``."""
    data = _load(text)
    kind = _kind(data)
    model = _CLIENT_TYPES.get(kind)
    if model is None:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind!r:.60}")
    message: ClientMessage = _validate(model, data)
    return message


def parse_server_message(text: str) -> ServerMessage:
    """For clients written in Python (and tests): one server text message, typed."""
    data = _load(text)
    _kind(data)
    try:
        return _server_adapter.validate_python(data)
    except ValidationError as exc:
        if any(err["type"] == "union_tag_invalid" for err in exc.errors()):
            raise ProtocolError(
                ErrorCode.UNKNOWN_TYPE, f"unknown message type {data['type']!r:.60}"
            ) from None
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"invalid server message: {exc}") from None


def encode(message: ServerMessage | ClientMessage) -> str:
    """A typed message → its JSON text (optional fields left out when unset)."""
    return message.model_dump_json(exclude_none=True)


def json_safe(value: object, _depth: int = 0) -> Any:
    """``value`` made JSON-safe for a ``metrics`` message: non-finite floats become
    null, unknown objects their ``str``, containers are copied (at most 8 levels)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if _depth >= 8:
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, _depth + 1) for v in value]
    return str(value)
