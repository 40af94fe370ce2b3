"""The fault steps the loopback text-to-speech servers share (``Refuse``, ``Cut``,
``Stall``) and how a connection carries them out as its audio goes out. Each server adds
its own ``SendError`` (the service's error message) and ``Garbage`` (its default text)
and finishes those itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the handshake with this HTTP status (and the service's error JSON)."""

    status: int
    message: str = "Service temporarily unavailable"
    retry_after: float | None = None

    def headers(self) -> dict[str, str]:
        """The refusal's headers: ``Retry-After`` when ``retry_after`` is set."""
        return {"Retry-After": f"{self.retry_after:g}"} if self.retry_after else {}


@dataclass(frozen=True, slots=True)
class Cut:
    """Drop the TCP connection (no close frame) once ``after`` audio messages were sent."""

    after: int


@dataclass(frozen=True, slots=True)
class Stall:
    """Once ``after`` audio messages were sent, read on but never answer again."""

    after: int = 0


class AudioFaults:
    """The fault one connection carries, done when its audio reaches the fault's count."""

    def __init__(self, fault: object, request: web.Request) -> None:
        self._fault = None if isinstance(fault, Refuse) else fault
        self._request = request
        self.stalled = False
        """A ``Stall`` came: the connection answers nothing more."""

    def due(self, sent: int) -> object | None:
        """The fault due before the audio message after ``sent`` ones, once: a ``Cut``
        has dropped the TCP connection and a ``Stall`` has silenced the connection when
        they come back; anything else is for the caller to carry out. ``None`` when no
        fault is due (or a ``Cut`` finds the connection gone already)."""
        fault = self._fault
        if fault is None or getattr(fault, "after", None) != sent:
            return None
        if isinstance(fault, Cut):
            transport = self._request.transport
            if transport is None:
                return None
            transport.abort()
        elif isinstance(fault, Stall):
            self.stalled = True
        self._fault = None
        return fault
