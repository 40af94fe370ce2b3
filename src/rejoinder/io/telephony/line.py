"""PhoneLine: what a phone call can do besides carry audio, whatever carries it.

A media stream (Twilio, Telnyx, Plivo) and a SIP call each put one on their
``Connection`` (``conn.line``). ``Connection.serve`` hands it to the session as its
keypad (``session.send_dtmf``), and ``conn.transfer`` goes through it. Keeping this a
protocol keeps the session and the connection free of any one provider.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["PhoneLine", "TransferFailed", "WarmTransferLine"]


class TransferFailed(RuntimeError):
    """The call could not be handed over (refused, no answer, a provider error): the
    caller is still with the agent."""


class PhoneLine(Protocol):
    """A phone call's line (``conn.line``): keys out and a cold transfer, whether the
    call is a provider's media stream or a SIP call."""

    async def send_dtmf(self, digits: str) -> None:
        """Press ``digits`` (``0-9 * # A-D``, ``w`` half a second's pause, ``W`` a
        second's) down the line; return once they were sent."""
        ...

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (a phone number in E.164 form or a ``sip:`` URI)
        and return once the provider took it over; raise ``TransferFailed`` otherwise.
        The caller leaves the agent: the transport ends the session afterwards."""
        ...


class WarmTransferLine(PhoneLine, Protocol):
    """A line that can also hand the caller over warm (the provider can call a person
    and join two calls)."""

    async def warm_transfer(self, target: str, *, summary: str, ring_timeout: float) -> bool:
        """Call ``target`` while the caller hears hold audio; when a person answers,
        brief them with ``summary``, then join the caller to them and return True. When
        nobody answers within ``ring_timeout`` (busy, voicemail, a failure), stop the
        hold audio, hang up that call and return False: the caller is still with the
        agent. Raises ``TransferFailed`` only when the transfer could not be tried."""
        ...
