"""``CallControl``: one provider's call-control API, as the rest of rejoinder sees it.

A media stream carries a call's audio; placing a call, handing it elsewhere and hanging
it up go through the provider's REST API instead (Twilio's Calls resource, Telnyx Call
Control, Plivo's Call API). Each provider module implements this protocol; the media
stream's line (``conn.line``) and outbound dialing use only it.
"""

from __future__ import annotations

from typing import Literal, Protocol

from ...._dataclass import dataclass

__all__ = ["CallControl", "CallStatus", "CarrierError", "PlacedCall"]

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
