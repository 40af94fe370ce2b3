"""Drives the floor from the event loop: stamps facts with loop time, applies effects.

This is the only place in the runtime that talks to ``Floor``. It decides nothing about
states (the floor does); it turns effects into events, timers and expiry callbacks.
Effects are applied in order even when an event callback re-enters the session: a
re-entrant mutation's effects are queued behind the ones being applied.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from typing import Concatenate, ParamSpec

from ..floor import (
    AgentState,
    AgentStateChanged,
    ArmAwayTimer,
    ArmWatchdog,
    CancelAwayTimer,
    CancelWatchdog,
    Effect,
    Floor,
    Obligation,
    ObligationExpired,
    ObligationKind,
    UserState,
    UserStateChanged,
)
from .events import (
    AgentStateChangedEvent,
    AwayTimerEvent,
    ErrorEvent,
    EventEmitter,
    EventName,
    UserStateChangedEvent,
)
from .timeline import Timeline

logger = logging.getLogger("rejoinder")

_P = ParamSpec("_P")


def _one_step(
    method: Callable[Concatenate[TurnState, _P], None],
) -> Callable[Concatenate[TurnState, _P], None]:
    """One floor step: everything it records is stamped with the time it began."""

    @functools.wraps(method)
    def step(self: TurnState, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if self._at is not None:  # nested in a step: the same instant
            method(self, *args, **kwargs)
            return
        self._at = self._loop.time()
        try:
            method(self, *args, **kwargs)
        finally:
            self._at = None

    return step


class ObligationExpiredError(TimeoutError):
    """An obligation outlived its watchdog; the work behind it was stopped."""

    kind: str = ""
    """The obligation's kind (``tool``, ``reply``, ...)."""


class TurnState:
    def __init__(
        self,
        floor: Floor,
        events: EventEmitter,
        loop: asyncio.AbstractEventLoop,
        timeline: Timeline | None = None,
    ) -> None:
        self._floor = floor
        self.timeline = timeline if timeline is not None else Timeline()
        """Every obligation opened, handed over, flagged and closed, and every derived
        state change, in the order the floor saw them (``session.timeline``)."""
        self._events = events
        self._loop = loop
        self._at: float | None = None
        self._on_expire: dict[int, Callable[[], None]] = {}
        self._away_timer: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._queue: list[Effect] = []
        """Effects still to apply, in order (a list: an empty deque is 0.6 KiB a session)."""
        self._applying = False
        self._idle_waiters: list[asyncio.Future[None]] = []

    # ---------------------------------------------------------------- reading

    @property
    def agent_state(self) -> AgentState:
        return self._floor.agent_state

    @property
    def user_state(self) -> UserState:
        return self._floor.user_state

    @property
    def floor(self) -> Floor:
        """Read-only use (inspection, tests); mutate only through this class."""
        return self._floor

    def now(self) -> float:
        """The loop's clock — or, inside one floor step, the step's time: a step's floor
        call, its timeline entries and its state changes carry one time (on the real
        clock, reading it twice could put an entry after the state change it caused)."""
        return self._at if self._at is not None else self._loop.time()

    async def nothing_open(self) -> None:
        """Wait until no obligation is open (nothing owed, no work for the user)."""
        if self._floor.open_count == 0:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._idle_waiters.append(waiter)
        await waiter

    # -------------------------------------------------------------- mutations

    def start(self) -> None:
        """The session runs; its first agent enters next (the floor's opening)."""
        self._apply(self._floor.start(self.now(), opening=True))

    def entered(self) -> None:
        self._apply(self._floor.entered(self.now()))

    def set_current(self, owner: str) -> None:
        self._apply(self._floor.set_current(owner, self.now()))

    def remove_owner(self, owner: str) -> None:
        open_ones = self._floor.open_obligations(owner)
        self._forget(open_ones)
        effects = self._floor.remove_owner(owner, self.now())
        self._note_closed(open_ones)
        self._apply(effects)

    def close_all(self) -> None:
        open_ones = self._floor.open_obligations()
        self._forget(open_ones)
        effects = self._floor.close_all(self.now())
        self._note_closed(open_ones)
        self._apply(effects)

    def new(
        self,
        kind: ObligationKind,
        owner: str,
        *,
        label: str = "",
        committed: bool | None = None,
    ) -> Obligation:
        """Create an obligation without opening it (to open it, or hand over to it)."""
        return self._floor.obligation(kind, owner=owner, label=label, committed=committed)

    def open(self, kind: ObligationKind, owner: str, *, label: str = "") -> Obligation:
        ob = self.new(kind, owner, label=label)
        self.open_new(ob)
        return ob

    @_one_step
    def open_new(self, ob: Obligation, *, on_expire: Callable[[], None] | None = None) -> None:
        """Open an obligation made with ``new``."""
        if on_expire is not None:
            self._on_expire[ob.id] = on_expire
        effects = self._floor.open(ob, self.now())
        self._note_opened(ob)
        self._apply(effects)

    @_one_step
    def close(
        self,
        obs: Obligation | Iterable[Obligation],
        outcome: str = "done",
        *,
        uncommit: Iterable[Obligation] = (),
    ) -> None:
        obs = [obs] if isinstance(obs, Obligation) else list(obs)
        uncommit = list(uncommit)
        was_open = [ob for ob in obs if ob.is_open]
        self._forget(obs)
        effects = self._floor.close(obs, self.now(), outcome, uncommit=uncommit)
        self._note_uncommitted(uncommit)
        self._note_closed(was_open)
        self._apply(effects)

    @_one_step
    def hand_over(
        self,
        old: Obligation | Iterable[Obligation],
        new: Obligation,
        *,
        on_expire: Callable[[], None] | None = None,
        uncommit: Iterable[Obligation] = (),
    ) -> None:
        """Open ``new`` and close ``old`` in one floor step (hand-over before release)."""
        old = [old] if isinstance(old, Obligation) else list(old)
        uncommit = list(uncommit)
        was_open = [ob for ob in old if ob.is_open]
        self._forget(old)
        if on_expire is not None:
            self._on_expire[new.id] = on_expire
        effects = self._floor.hand_over(old, new, self.now(), uncommit=uncommit)
        self._note_opened(new)
        self.note("ob_handed_over", ids=[ob.id for ob in was_open], to=new.id)
        self._note_uncommitted(uncommit)
        self._note_closed(was_open)
        self._apply(effects)

    @_one_step
    def set_committed(self, ob: Obligation, committed: bool) -> None:
        self._flag(ob, "committed", committed, self._floor.set_committed(ob, committed, self.now()))

    @_one_step
    def set_audible(self, ob: Obligation, audible: bool) -> None:
        if ob.audible != audible:
            self._flag(ob, "audible", audible, self._floor.set_audible(ob, audible, self.now()))

    @_one_step
    def set_yielded(self, ob: Obligation, yielded: bool) -> None:
        self._flag(ob, "yielded", yielded, self._floor.set_yielded(ob, yielded, self.now()))

    @_one_step
    def set_user_speaking(self, speaking: bool) -> None:
        effects = self._floor.set_user_speaking(speaking, self.now())
        self.note("user_speaking", speaking=speaking)
        self._apply(effects)

    def report(self, name: EventName, event: object) -> None:
        """Emit a public session event from a part that has only this object."""
        self._events.emit(name, event)

    def note(self, kind: str, **fields: object) -> None:
        """Add a timeline entry at the current loop time."""
        self.timeline.add(self.now(), kind, **fields)

    def owed(self) -> list[Obligation]:
        """The obligations open now, oldest first."""
        return sorted(self._floor.open_obligations(), key=lambda ob: ob.id)

    def user_activity(self) -> None:
        self._apply(self._floor.user_activity(self.now()))

    def shutdown(self) -> None:
        """Cancel timers; the session is gone."""
        for handle in (self._away_timer, self._watchdog):
            if handle is not None:
                handle.cancel()
        self._away_timer = self._watchdog = None
        self._on_expire.clear()

    # --------------------------------------------------------------- timeline

    def _note_opened(self, ob: Obligation) -> None:
        if ob.is_open:
            self.note(
                "ob_opened",
                id=ob.id,
                ob=ob.kind.value,
                owner=ob.owner,
                label=ob.label,
                committed=ob.committed,
            )

    def _note_closed(self, obs: Iterable[Obligation]) -> None:
        for ob in obs:
            if not ob.is_open:
                self.note(
                    "ob_closed",
                    id=ob.id,
                    ob=ob.kind.value,
                    owner=ob.owner,
                    label=ob.label,
                    reason=ob.outcome,
                )

    def _note_uncommitted(self, obs: Iterable[Obligation]) -> None:
        for ob in obs:
            if ob.is_open and not ob.committed:
                self.note("ob_flag", id=ob.id, flag="committed", value=False)

    def _flag(self, ob: Obligation, flag: str, value: bool, effects: list[Effect]) -> None:
        self.note("ob_flag", id=ob.id, flag=flag, value=value)
        self._apply(effects)

    # ---------------------------------------------------------------- effects

    def _forget(self, obs: Iterable[Obligation]) -> None:
        for ob in obs:
            self._on_expire.pop(ob.id, None)

    def _apply(self, effects: list[Effect]) -> None:
        if self._idle_waiters and self._floor.open_count == 0:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        if not effects:
            return
        queue = self._queue
        queue.extend(effects)
        if self._applying:
            return  # the outer call drains the queue, keeping effects in order
        self._applying = True
        done = 0
        try:
            while done < len(queue):
                effect = queue[done]
                done += 1
                self._apply_one(effect)
        finally:
            del queue[:done]  # what a failing effect left is applied on the next call
            self._applying = False

    def _apply_one(self, effect: Effect) -> None:
        if isinstance(effect, AgentStateChanged):
            self.timeline.add(
                effect.at, "agent_state", state=effect.new_state, old=effect.old_state
            )
            self._events.emit(
                "agent_state_changed",
                AgentStateChangedEvent(effect.old_state, effect.new_state, effect.at),
            )
        elif isinstance(effect, UserStateChanged):
            self.timeline.add(effect.at, "user_state", state=effect.new_state, old=effect.old_state)
            self._events.emit(
                "user_state_changed",
                UserStateChangedEvent(effect.old_state, effect.new_state, effect.at),
            )
        elif isinstance(effect, ArmAwayTimer):
            if self._away_timer is not None:
                self._away_timer.cancel()
            self._away_timer = self._loop.call_at(effect.deadline, self._away_fired)
            self._events.emit("away_timer", AwayTimerEvent(True, effect.deadline, self.now()))
        elif isinstance(effect, CancelAwayTimer):
            if self._away_timer is not None:
                self._away_timer.cancel()
                self._away_timer = None
                self._events.emit("away_timer", AwayTimerEvent(False, None, self.now()))
        elif isinstance(effect, ArmWatchdog):
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._watchdog = self._loop.call_at(effect.deadline, self._watchdog_fired)
        elif isinstance(effect, CancelWatchdog):
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None
        elif isinstance(effect, ObligationExpired):
            self._expired(effect.obligation)

    def _away_fired(self) -> None:
        self._away_timer = None
        self._apply(self._floor.away_timer_fired(self.now()))

    @_one_step
    def _watchdog_fired(self) -> None:
        self._watchdog = None
        self._apply(self._floor.expire_due(self.now()))

    def _expired(self, ob: Obligation) -> None:
        logger.warning(
            "%s stayed open past its %.0f s watchdog; closed as expired", ob, ob.watchdog
        )
        self.note("ob_expired", id=ob.id, ob=ob.kind.value, owner=ob.owner, label=ob.label)
        self._note_closed([ob])
        error = ObligationExpiredError(f"{ob.kind.value} obligation {ob.label!r} expired")
        error.kind = ob.kind.value
        self._events.emit("error", ErrorEvent(error, source="watchdog", recoverable=True))
        stop_work = self._on_expire.pop(ob.id, None)
        if stop_work is not None:
            try:
                stop_work()
            except Exception:
                logger.exception("stopping the work behind %s failed", ob)
