"""SIP transactions over UDP (RFC 3261 §17, RFC 6026), without sockets or clocks.

A transaction keeps the last thing it sent and when to send it again; the owner (the
``SipCore`` in ``dialog``) asks ``poll(now)`` for what is due and reads ``deadline``
to know when to ask next. Nothing here touches the network: each call returns bytes.

- ``ServerTransaction`` (``invite=True`` or not): a retransmitted request gets the last
  response again (``retransmission``). An INVITE's final response is repeated on Timer G
  (T1, doubling up to T2) until the ACK comes, or given up after Timer H (64·T1). That
  holds for the 200 as well (RFC 6026's *Accepted* state: the 200's ACK has a branch of
  its own, so the core routes it here by dialog). A non-INVITE transaction keeps its
  final response for Timer J (64·T1) to answer retransmissions.
- ``ClientTransaction``: our BYE, REFER. Sent again on Timer E (T1 doubling to T2; T2
  once a provisional response came), given up after Timer F (64·T1); the final response
  is handed over once, later copies are absorbed for Timer K (T4).

Reference: RFC 3261 https://www.rfc-editor.org/rfc/rfc3261 (§17.1.2, §17.2.1, §17.2.2,
table 4 of the timers), RFC 6026 https://www.rfc-editor.org/rfc/rfc6026 (§7.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ClientTransaction", "ServerTransaction", "Timers"]


@dataclass(frozen=True, slots=True)
class Timers:
    """RFC 3261's T1 (round-trip estimate), T2 (retransmit cap) and T4 (network lifetime)."""

    t1: float = 0.5
    t2: float = 4.0
    t4: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.t1 <= self.t2 or self.t4 <= 0:
            raise ValueError("SIP timers need 0 < t1 <= t2 and t4 > 0")

    @property
    def timeout(self) -> float:
        """64·T1: Timers B, F, H and J."""
        return 64 * self.t1


ServerState = Literal["proceeding", "completed", "accepted", "confirmed", "terminated"]


class ServerTransaction:
    """One request we answer (see the module docstring)."""

    def __init__(self, *, invite: bool, timers: Timers) -> None:
        self.invite = invite
        self.timers = timers
        self.state: ServerState = "proceeding"
        self.last_response: bytes | None = None
        self.final_status: int | None = None
        self.timed_out = False
        """The final response went unacknowledged for Timer H."""
        self._resend_at: float | None = None
        self._interval = timers.t1
        self._give_up_at: float | None = None
        self._end_at: float | None = None

    @property
    def deadline(self) -> float | None:
        times = [t for t in (self._resend_at, self._give_up_at, self._end_at) if t is not None]
        return min(times) if times else None

    @property
    def done(self) -> bool:
        return self.state == "terminated"

    def respond(self, status: int, data: bytes, now: float) -> bytes | None:
        """Record a response and return it to send (None: a final was given already)."""
        if self.final_status is not None:
            return None
        self.last_response = data
        if status < 200:
            return data
        self.final_status = status
        if not self.invite:
            self.state = "completed"
            self._end_at = now + self.timers.timeout  # Timer J (UDP)
            return data
        self.state = "accepted" if status < 300 else "completed"
        self._interval = self.timers.t1
        self._resend_at = now + self._interval  # Timer G
        self._give_up_at = now + self.timers.timeout  # Timer H (and RFC 6026's Timer L)
        return data

    def retransmission(self) -> bytes | None:
        """The request came again: what to send back (the last response, if any)."""
        if self.state in ("confirmed", "terminated"):
            return None
        return self.last_response

    def acknowledged(self, now: float) -> bool:
        """The ACK of our final response came (False when it was not awaited)."""
        if self.state not in ("completed", "accepted"):
            return False
        # RFC 6026 Timer L: after a 2xx, late copies of the INVITE are absorbed for
        # 64·T1; after a refusal, copies of the ACK for Timer I (T4).
        linger = self.timers.timeout if self.state == "accepted" else self.timers.t4
        self.state = "confirmed"
        self._resend_at = self._give_up_at = None
        self._end_at = now + linger
        return True

    def poll(self, now: float) -> bytes | None:
        """What is due at ``now``: a copy of the final response, or nothing."""
        if self._end_at is not None and now >= self._end_at:
            self.state = "terminated"
            self._end_at = None
            return None
        if self._give_up_at is not None and now >= self._give_up_at:
            self.state = "terminated"
            self.timed_out = True
            self._resend_at = self._give_up_at = None
            return None
        if self._resend_at is not None and now >= self._resend_at:
            self._interval = min(self._interval * 2, self.timers.t2)
            self._resend_at = now + self._interval
            return self.last_response
        return None


ClientState = Literal["trying", "proceeding", "completed", "terminated"]


class ClientTransaction:
    """One non-INVITE request we sent (see the module docstring)."""

    def __init__(self, method: str, data: bytes, now: float, *, timers: Timers) -> None:
        self.method = method
        self.data = data
        self.timers = timers
        self.state: ClientState = "trying"
        self.final_status: int | None = None
        self.timed_out = False
        self._interval = timers.t1
        self._resend_at: float | None = now + timers.t1  # Timer E
        self._give_up_at: float | None = now + timers.timeout  # Timer F
        self._end_at: float | None = None

    @property
    def deadline(self) -> float | None:
        times = [t for t in (self._resend_at, self._give_up_at, self._end_at) if t is not None]
        return min(times) if times else None

    @property
    def done(self) -> bool:
        return self.state == "terminated"

    def received(self, status: int, now: float) -> bool:
        """A response came; True when it is the final one, first seen (hand it over)."""
        if self.state in ("completed", "terminated"):
            return False
        if status < 200:
            self.state = "proceeding"
            self._interval = self.timers.t2
            self._resend_at = now + self._interval
            return False
        self.state = "completed"
        self.final_status = status
        self._resend_at = self._give_up_at = None
        self._end_at = now + self.timers.t4  # Timer K
        return True

    def poll(self, now: float) -> bytes | None:
        """What is due at ``now``: the request again, or nothing (``timed_out`` tells a
        request that got no answer at all)."""
        if self._end_at is not None and now >= self._end_at:
            self.state = "terminated"
            self._end_at = None
            return None
        if self._give_up_at is not None and now >= self._give_up_at:
            self.state = "terminated"
            self.timed_out = True
            self._resend_at = self._give_up_at = None
            return None
        if self._resend_at is not None and now >= self._resend_at:
            if self.state == "trying":
                self._interval = min(self._interval * 2, self.timers.t2)
            self._resend_at = now + self._interval
            return self.data
        return None
