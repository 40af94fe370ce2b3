"""What the SIP core reports: datagrams to send and what happened to calls."""

from __future__ import annotations

from dataclasses import dataclass

from .dialog import Address, Dialog
from .sdp import Negotiated

__all__ = [
    "CallCancelled",
    "CallConfirmed",
    "CallEnded",
    "CallOffered",
    "Event",
    "KeysPressed",
    "MediaChanged",
    "Output",
    "ReferAnswered",
    "Send",
    "TransferNotified",
]


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes
    to: Address


@dataclass(frozen=True, slots=True)
class CallOffered:
    """A new call passed every check: open its media, then ``accept`` or ``reject``."""

    dialog: Dialog
    negotiated: Negotiated


@dataclass(frozen=True, slots=True)
class CallConfirmed:
    dialog: Dialog


@dataclass(frozen=True, slots=True)
class CallCancelled:
    """The caller gave up before our answer (487 sent): nothing must run."""

    dialog: Dialog


@dataclass(frozen=True, slots=True)
class CallEnded:
    dialog: Dialog
    reason: str


@dataclass(frozen=True, slots=True)
class MediaChanged:
    """A re-INVITE was answered: hold, unhold, or a new address."""

    dialog: Dialog
    negotiated: Negotiated


@dataclass(frozen=True, slots=True)
class ReferAnswered:
    dialog: Dialog
    status: int


@dataclass(frozen=True, slots=True)
class TransferNotified:
    dialog: Dialog
    status: int
    """The sipfrag's status (100 trying, 180, 200 the target answered, 4xx-6xx failed)."""
    final: bool


@dataclass(frozen=True, slots=True)
class KeysPressed:
    """A key the caller pressed, sent as SIP INFO (a PBX set to INFO DTMF) rather than
    in the RTP (RFC 4733, the media's)."""

    dialog: Dialog
    key: str


Event = (
    CallOffered
    | CallConfirmed
    | CallCancelled
    | CallEnded
    | MediaChanged
    | ReferAnswered
    | TransferNotified
    | KeysPressed
)
Output = Send | Event
