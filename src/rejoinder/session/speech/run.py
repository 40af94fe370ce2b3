"""SpeechRun: one speech the agent owes, from queued to over, and the only owner of its
reply obligation.

``SpeechHandle`` is what the application holds (await it, interrupt it); the run is the
runtime side. It opens the ``reply`` obligation when the speech is queued (new, or
taking over what produced it), and every later change to that obligation is one of its
methods: ``yield_for_barge_in`` / ``resume`` while the user may be interrupting,
``played`` when its output is over (heard in full or not), ``discarded`` when it is
dropped from the queue, ``never_started`` when its task was cancelled before its first
step. The floor's kinds table (``floor/kinds.py``) rejects any other outcome. No other
module touches the obligation or the handle's runtime state.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ...floor import Obligation, ObligationKind

if TYPE_CHECKING:
    from ..turn_state import TurnState
    from .handle import Mark, ReplyRequest, SpeechHandle


class SpeechRun:
    __slots__ = ("_began", "_cutting", "_started", "_state", "_task", "handle", "reply")

    def __init__(
        self,
        state: TurnState,
        handle: SpeechHandle,
        owner: str,
        *,
        hand_over_from: list[Obligation] | None = None,
        uncommit: list[Obligation] | None = None,
    ) -> None:
        self._state = state
        self.handle = handle
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._began: Mark | None = None
        """Where the record stood when this speech began (its text goes there)."""
        self._cutting = False
        """Its output was cut (its agent paused for a task); its tools go on."""
        reply = state.new(ObligationKind.REPLY, owner, label=f"{handle.source} {handle.id}")
        self.reply = reply
        handle._run = self
        expire = handle._interrupt  # the watchdog stops a stuck reply
        if hand_over_from or uncommit:
            state.hand_over(hand_over_from or [], reply, on_expire=expire, uncommit=uncommit or [])
        else:
            state.open_new(reply, on_expire=expire)

    def __repr__(self) -> str:
        return f"<SpeechRun {self.handle.id} started={self._started}>"

    # ------------------------------------------------------------------ reading

    @property
    def request(self) -> ReplyRequest | None:
        return self.handle._request

    @property
    def text(self) -> str | None:
        return self.handle._text

    @property
    def began(self) -> Mark | None:
        return self._began

    @property
    def audible(self) -> bool:
        """The user hears (or heard) this speech's output."""
        return self.reply.audible

    @property
    def playout(self) -> asyncio.Future[None]:
        """Resolves when this speech's own output ended."""
        return self.handle._playout

    @property
    def playing(self) -> bool:
        return not self.handle._playout.done()

    @property
    def cutting(self) -> bool:
        return self._cutting

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    def done(self) -> bool:
        return self.handle.done()

    # ---------------------------------------------------------------- lifecycle

    def attach(self, task: asyncio.Task[None]) -> None:
        """The queue started the task that delivers this speech."""
        self._task = task

    def begin(self, mark: Mark) -> None:
        """The task's first step: from here the task closes the reply itself."""
        self._started = True
        self._began = mark

    @property
    def started(self) -> bool:
        return self._started

    def heard(self) -> None:
        """Its delivery reached the user (audio playing, text shown): audible."""
        if not self.reply.audible:  # told once per chunk: the first one tells the floor
            self._state.set_audible(self.reply, True)

    def not_heard(self) -> None:
        """Its output was cut from outside (the listener went away): still owed, but
        nobody hears it now."""
        if self.reply.audible:
            self._state.set_audible(self.reply, False)

    def yield_for_barge_in(self) -> None:
        """The user may be interrupting: the reply stops counting while its audio pauses."""
        self._state.set_yielded(self.reply, True)

    def resume(self) -> None:
        """It was only a noise: the paused reply counts (and plays) again."""
        self._state.set_yielded(self.reply, False)

    def played(self, *, interrupted: bool) -> None:
        """Its output is over, heard in full or not: the reply closes, the playout ends."""
        self._state.close(self.reply, "interrupted" if interrupted else "played")
        self.handle._mark_playout_done()

    def discarded(self) -> None:
        """Dropped while still queued: it was never delivered."""
        self._state.close(self.reply, "discarded")

    def never_started(self) -> None:
        """Its task was cancelled before its first step, so nothing else closes it."""
        self._state.close(self.reply, "interrupted")
        self.handle._mark_done()

    def finished(self) -> None:
        """Everything it owed is over (its tools too): the handle resolves."""
        self.handle._mark_done()

    def chain(self, follow_up: SpeechHandle) -> None:
        """The handle resolves only when ``follow_up`` (the tools' answer) does."""
        self.handle._chain(follow_up)

    def interrupt(self) -> None:
        self.handle._interrupt()

    def stop(self) -> None:
        """Interrupted (by the handle): a queued speech is finished now; a running one is
        cancelled and closes its reply as it unwinds."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        elif self._task is None:
            self.discarded()
            self.handle._mark_done()

    def cut(self) -> None:
        """End this speech's output now, keeping its tool calls running (the agent that
        said it was paused). What was heard is kept, marked interrupted."""
        handle = self.handle
        if self._cutting or handle._playout.done() or handle.done():
            return
        self._cutting = True
        handle._interrupted = True
        if self._task is not None and self._started and not self._task.done():
            self._task.cancel()

    def take_cut(self) -> bool:
        """In the speech's task, on CancelledError: was it only our cut? Then the
        cancellation is consumed and the speech goes on to its tools."""
        if not self._cutting:
            return False
        task = asyncio.current_task()
        return task is not None and task.uncancel() == 0


class VoicedReply:
    """A reply a realtime provider voices itself: there is no queue or delivery of ours,
    and its reply obligations are the provider's (``realtime/provider_obligations.py``).
    The engine says when the user cut it short and when it is over."""

    __slots__ = ("handle",)

    def __init__(self, handle: SpeechHandle) -> None:
        self.handle = handle

    def cut_short(self) -> None:
        """The user interrupted what was playing: the handle reports ``interrupted``."""
        self.handle._interrupted = True

    def over(self) -> None:
        """The provider owes nothing more for it and nothing plays: the handle resolves."""
        self.handle._mark_done()
