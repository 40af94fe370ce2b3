"""A phone call's transfers, as ``Connection`` methods: ``conn.transfer`` (cold) and
``conn.warm_transfer``. Each runs inside the session's ``transferring`` obligation (the
agent reports ``thinking`` while the caller waits on it) and goes through the call's
line (``conn.line``, a ``PhoneLine`` each phone transport provides); a handed-over caller
has left the agent, so the connection then ends as a client that left."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import AgentSession
    from .telephony.line import PhoneLine

__all__ = ["CallTransfers"]


class CallTransfers:
    """Mixed into ``Connection`` (see the module docstring)."""

    line: PhoneLine | None
    session: AgentSession[Any] | None
    _left: asyncio.Event

    if TYPE_CHECKING:

        def client_left(self, reason: str = "client left") -> None: ...

    async def warm_transfer(self, target: str, *, summary: str, ring_timeout: float = 30.0) -> bool:
        """Hand the caller to a person, warm: ``target`` is called while the caller hears
        hold audio, the person who answers is briefed with ``summary``, then the two are
        joined and the session ends (``"transferred"``); returns True. If nobody answers
        in ``ring_timeout`` seconds (or voicemail does), the caller is taken back: returns
        False and the agent goes on (say so to the caller). The agent reports
        ``thinking`` all along. Raises ``TransferFailed`` or ``RuntimeError`` as
        ``transfer`` does, and when the line cannot transfer warm (SIP: ``transfer``)."""
        line, session = self.line, self.session
        warm = getattr(line, "warm_transfer", None)
        if line is None or warm is None:
            raise RuntimeError("warm_transfer() needs a phone line that can call a person")
        if session is None or self._left.is_set():
            raise RuntimeError("warm_transfer() needs the call's session running")
        with session.transferring(target) as outcome:
            handed = bool(await warm(target, summary=summary, ring_timeout=ring_timeout))
            outcome.value = "transferred" if handed else "taken back"
        if handed:
            self.client_left("transferred")
        return handed

    async def transfer(self, target: str) -> None:
        """Hand the caller to ``target`` (``"+15551234567"`` or a ``sip:`` URI): a cold
        transfer. The agent reports ``thinking`` meanwhile, until the session ends (with
        the reason ``"transferred"``) once the provider took the call over. Raises
        ``TransferFailed`` (the call stays with the agent) or ``RuntimeError`` when this
        is not a phone call or its session is not running."""
        line, session = self.line, self.session
        if line is None:
            raise RuntimeError("transfer() is for phone calls: this connection has no line")
        if session is None or self._left.is_set():
            raise RuntimeError("transfer() needs the call's session running")
        with session.transferring(target) as outcome:
            await line.transfer(target)
            outcome.value = "transferred"
        self.client_left("transferred")
