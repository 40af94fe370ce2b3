"""The requests we send inside a call's dialog (BYE, REFER) and their client
transactions: sent again on Timer E until answered, given up on Timer F, each final
answer handed over once (a REFER's as ``ReferAnswered``; 408 when none came)."""

from __future__ import annotations

from collections.abc import Callable

from .dialog import Address, Dialog
from .events import Output, ReferAnswered, Send
from .message import SipMessage
from .transactions import ClientTransaction, Timers

__all__ = ["OutgoingRequests"]


class OutgoingRequests:
    """Our in-dialog requests in flight (see the module docstring)."""

    def __init__(self, *, port: int, advertise: Callable[[Address], str], timers: Timers) -> None:
        self.port = port
        self.advertise = advertise
        self.timers = timers
        self._pending: dict[str, tuple[ClientTransaction, Dialog]] = {}
        """top Via branch -> the transaction and its call."""

    def send(
        self,
        dialog: Dialog,
        method: str,
        now: float,
        headers: list[tuple[str, str]] | None = None,
    ) -> list[Output]:
        host = self.advertise(dialog.peer)
        request = dialog.request(method, host=host, port=self.port, headers=headers)
        data = request.to_bytes()
        transaction = ClientTransaction(method, data, now, timers=self.timers)
        self._pending[request.branch] = (transaction, dialog)
        return [Send(data, dialog.peer)]

    def answered(self, response: SipMessage, now: float) -> list[Output]:
        """A response from the caller's side: reported when it is a REFER's final one."""
        found = self._pending.get(response.branch)
        if found is None or response.status is None:
            return []
        transaction, dialog = found
        if transaction.received(response.status, now) and transaction.method == "REFER":
            return [ReferAnswered(dialog, response.status)]
        return []

    def poll(self, now: float) -> list[Output]:
        out: list[Output] = []
        for branch, (transaction, dialog) in list(self._pending.items()):
            data = transaction.poll(now)
            if data is not None:
                out.append(Send(data, dialog.peer))
            if transaction.done:
                del self._pending[branch]
                if transaction.timed_out and transaction.method == "REFER":
                    out.append(ReferAnswered(dialog, 408))
        return out

    @property
    def deadlines(self) -> list[float]:
        times = [transaction.deadline for transaction, _ in self._pending.values()]
        return [t for t in times if t is not None]

    def involve(self, dialog: Dialog) -> bool:
        """A request of ``dialog`` is still in flight."""
        return any(d is dialog for _, d in self._pending.values())
