"""``CallControl``: one provider's call-control API, as the rest of rejoinder sees it.

A media stream carries a call's audio; placing a call, handing it elsewhere and hanging
it up go through the provider's REST API instead (Twilio's Calls resource, Telnyx Call
Control, Plivo's Call API). Each provider module implements this protocol; the media
stream's line (``conn.line``) and outbound dialing use only it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from ...._dataclass import dataclass

__all__ = [
    "FINAL_STATUSES",
    "STATUS_ORDER",
    "AnsweredKind",
    "CallControl",
    "CallStatus",
    "CarrierError",
    "DialRequest",
    "Dialing",
    "PersonCall",
    "PlacedCall",
    "StatusUpdate",
    "WarmTransferring",
]

CallStatus = Literal[
    "queued",
    "initiated",
    "ringing",
    "answered",
    "completed",
    "busy",
    "no-answer",
    "failed",
    "canceled",
]
"""A placed call's progress, the same words for every provider (each maps its own)."""

STATUS_ORDER: Mapping[str, int] = {
    "queued": 0,
    "initiated": 1,
    "ringing": 2,
    "answered": 3,
    "completed": 4,
    "busy": 4,
    "no-answer": 4,
    "failed": 4,
    "canceled": 4,
}
"""How far along each status is: a call's status only ever moves to a higher rank."""

FINAL_STATUSES = frozenset(("completed", "busy", "no-answer", "failed", "canceled"))

AnsweredKind = Literal["human", "machine", "screening", "unknown"]
"""Who answered (the session's ``answered_by`` kinds)."""


class CarrierError(RuntimeError):
    """The provider refused a request or could not be reached (after bounded retries).
    ``status`` is the HTTP status when there was one; ``code`` the provider's error code."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class PlacedCall:
    provider: str
    call_id: str
    """Twilio's CallSid, Telnyx's call_control_id, Plivo's request_uuid then call_uuid."""


class CallControl(Protocol):
    """One provider account's call control (see the module docstring)."""

    provider: str

    async def transfer(self, call_id: str, target: str) -> None:
        """Connect the live call ``call_id`` to ``target`` (E.164 number or ``sip:`` URI)
        instead of the agent (a cold transfer). Raises ``CarrierError``."""
        ...

    async def hangup(self, call_id: str) -> None:
        """End the call. Raises ``CarrierError``."""
        ...


@dataclass(frozen=True, slots=True)
class DialRequest:
    """A call to place, with the URLs the provider needs to reach us back."""

    to: str
    from_: str
    status_url: str
    """Our status-callback (Telnyx: event webhook) URL for this call."""
    stream_url: str
    """``ws(s)://`` media socket the answered call streams to (Telnyx's ``stream_url``,
    the ``<Stream>`` of Twilio's TwiML and of Plivo's answer)."""
    stream_parameters: Mapping[str, str]
    """Custom parameters the stream's ``start`` must bring back (Twilio ``<Parameter>``s)."""
    answer_url: str = ""
    """Our answer webhook for this call (Plivo's ``answer_url``: it returns the stream)."""
    ring_timeout: float = 30.0
    machine_detection: bool = True


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """One status callback, in the same words for every provider."""

    call_id: str | None
    status: CallStatus | None = None
    """None: the callback said nothing about progress (an AMD result, a stream event)."""
    answered_by: AnsweredKind | None = None
    beep: bool = False
    detail: str = ""
    """The provider's own words (its status, AMD result or hang-up cause), for the log."""
    briefed: bool = False
    """The provider finished speaking a briefing to the call (Telnyx ``call.speak.ended``)."""


class Dialing(CallControl, Protocol):
    """A call-control API that can also place calls and read its status callbacks."""

    async def dial(self, request: DialRequest) -> PlacedCall:
        """Place the call; returns once the provider accepted it. Raises ``CarrierError``
        (never retried past a 429 or an unreachable provider: see ``http``)."""
        ...

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        """One (already authenticated) status callback, or None when it is not one."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PersonCall:
    """The call to the person a warm transfer hands the caller to: it never streams to
    the agent; the provider briefs the person with ``summary``, then the caller joins."""

    to: str
    from_: str
    status_url: str
    """Our status-callback (Telnyx: event webhook) URL for this call."""
    summary: str
    room: str
    """The conference both legs join (Twilio, Plivo): random, named for this transfer."""
    answer_url: str = ""
    """Plivo: our webhook answering the person's call with the briefing and the room."""
    ring_timeout: float = 30.0


class WarmTransferring(Dialing, Protocol):
    """A call control that can also call a person, brief them and join them to a live
    call (``warm_transfer.py`` runs the sequence)."""

    briefs_inline: bool
    """True: the briefing is part of the person's call (Twilio's TwiML, Plivo's answer
    XML), so the caller may join as soon as a person answered. False: ``brief`` asks for
    it once answered, and the provider reports its end (``StatusUpdate.briefed``)."""

    async def call_person(self, request: PersonCall) -> PlacedCall:
        """Place the person's call. Raises ``CarrierError``."""
        ...

    async def brief(self, person_call_id: str, summary: str) -> None:
        """Speak ``summary`` to the answered person (when not ``briefs_inline``)."""
        ...

    async def join(
        self, caller_call_id: str, person_call_id: str, room: str, room_url: str
    ) -> None:
        """Join the live caller's call to the person's (the conference ``room``; Plivo
        fetches ``room_url`` for the caller's new XML). The caller's media stream ends.
        Raises ``CarrierError``."""
        ...
