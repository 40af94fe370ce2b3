"""The session's phone-call surface, apart from the rest of the facade: keys pressed by
the caller (``push_dtmf``) and by the agent (``send_dtmf``), who answered a call the
agent placed (``push_answered_by``), and a transfer as an obligation (``transferring``).

``AgentSession`` inherits it. Each method goes through the session's own parts (the turn
state, the events, the output slots), named below for the type checker only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from ..floor import SESSION_OWNER, Obligation, ObligationKind
from .arguments import require
from .events import AnsweredBy, AnsweredByEvent, DTMFEvent, EventEmitter
from .options import SessionOutput

if TYPE_CHECKING:
    from .turn_state import TurnState

__all__ = ["ANSWERED_BY", "DTMF_KEYS", "PhoneCalls", "TransferOutcome"]

DTMF_KEYS = "0123456789*#ABCD"
DTMF_PAUSES = "wW"
ANSWERED_BY = ("human", "machine", "screening", "unknown")


class TransferOutcome:
    """How a transfer ended (``session.transferring``): set ``value`` before leaving."""

    def __init__(self) -> None:
        self.value: Literal["transferred", "failed", "taken back"] = "failed"


class PhoneCalls:
    """Mixed into ``AgentSession`` (see the module docstring)."""

    output: SessionOutput
    _events: EventEmitter
    _close_reason: str | None
    _close_task: asyncio.Task[None] | None
    _transferred: Obligation | None
    """A transfer that handed the caller over: closed as the session closes."""

    if TYPE_CHECKING:

        @property
        def _turn_state(self) -> TurnState: ...
        def _is_closing(self) -> bool: ...
        def _begin_close(self) -> None: ...

    def push_dtmf(self, digits: str) -> None:
        """Keys the user pressed on a phone keypad (telephony transports call this; so
        can tests and other inputs): one ``dtmf`` event per key, in order, and the user
        counts as present. Raises ``ValueError`` for anything but ``0-9 * # A-D``."""
        require(digits, str, "digits")
        keys = digits.upper()
        if not keys or keys.strip(DTMF_KEYS):
            raise ValueError(f"DTMF digits are 0-9, *, # and A-D; got {digits!r:.40}")
        state = self._turn_state
        state.user_activity()
        for key in keys:
            self._events.emit("dtmf", DTMFEvent(key, state.now()))

    async def send_dtmf(self, digits: str) -> None:
        """Press keys on the phone line (to navigate another company's phone menu):
        ``0-9 * # A-D``, with ``w`` for a half-second pause and ``W`` for a second.
        Returns once they were sent. Raises ``ValueError`` for other characters and
        ``RuntimeError`` when the session is closing or its transport is not a phone line."""
        require(digits, str, "digits")
        if not digits or digits.strip(DTMF_KEYS + DTMF_PAUSES):
            raise ValueError(f"DTMF digits are 0-9, *, #, A-D, w and W; got {digits!r:.40}")
        keypad = self.output.keypad
        if keypad is None:
            raise RuntimeError("this session's transport has no keypad: it is not a phone call")
        if self._is_closing():
            raise RuntimeError("the session is closing: no keys can be sent")
        await keypad.send_dtmf(digits)

    def push_answered_by(
        self,
        answered_by: AnsweredBy,
        *,
        source: Literal["provider", "audio"],
        beep: bool = False,
        detail: str = "",
    ) -> None:
        """Who answered a call the agent placed (phone transports and detectors call this):
        an ``answered_by`` event. Raises ``ValueError`` for an unknown kind or source."""
        if answered_by not in ANSWERED_BY:
            raise ValueError(f"answered_by is one of {ANSWERED_BY}; got {answered_by!r:.40}")
        if source not in ("provider", "audio"):
            raise ValueError(f"source is 'provider' or 'audio'; got {source!r:.40}")
        event = AnsweredByEvent(answered_by, source, self._turn_state.now(), beep, detail)
        self._events.emit("answered_by", event)

    @contextmanager
    def transferring(self, target: str) -> Iterator[TransferOutcome]:
        """Around a call transfer (the phone transports use it): a committed obligation,
        so the agent reports ``thinking`` while the caller waits on it, and is never
        marked away. Set ``outcome.value`` to ``"transferred"`` or ``"taken back"``; an
        exception closes it ``"failed"``."""
        require(target, str, "target")
        ob = self._turn_state.open(ObligationKind.TRANSFER, SESSION_OWNER, label=target[:80])
        outcome = TransferOutcome()
        try:
            yield outcome
        except BaseException:
            self._turn_state.close(ob, "failed")
            raise
        if outcome.value != "transferred":
            self._turn_state.close(ob, outcome.value)
            return
        # The caller is gone: the session ends. The obligation stays open into the close
        # (closed there, last), so no `listening` is reported between the hand-over and
        # the end, as if the agent waited for a caller who left.
        self._transferred = ob
        self._close_reason = self._close_reason or "transferred"
        if self._close_task is None:
            self._begin_close()
