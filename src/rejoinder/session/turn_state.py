"""Drives the floor from the event loop: stamps facts with loop time, applies effects.

This is the only place in the runtime that talks to ``Floor``. It decides nothing about
states (the floor does); it turns effects into events, timers and expiry callbacks.
Effects are applied in order even when an event callback re-enters the session: a
re-entrant mutation's effects are queued behind the ones being applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable

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
from .events import AgentStateChangedEvent, ErrorEvent, EventEmitter, UserStateChangedEvent

logger = logging.getLogger("rejoinder")


class ObligationExpiredError(TimeoutError):
    """An obligation outlived its watchdog; the work behind it was stopped."""


class TurnState:
    def __init__(
        self,
        floor: Floor,
        events: EventEmitter,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._floor = floor
        self._events = events
        self._loop = loop
        self._on_expire: dict[int, Callable[[], None]] = {}
        self._away_timer: asyncio.TimerHandle | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._queue: deque[Effect] = deque()
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
        return self._loop.time()

    async def nothing_open(self) -> None:
        """Wait until no obligation is open (nothing owed, no work for the user)."""
        if self._floor.open_count == 0:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._idle_waiters.append(waiter)
        await waiter

    # -------------------------------------------------------------- mutations

    def start(self) -> None:
        self._apply(self._floor.start(self.now()))

    def set_current(self, owner: str) -> None:
        self._apply(self._floor.set_current(owner, self.now()))

    def remove_owner(self, owner: str) -> None:
        self._forget(self._floor.open_obligations(owner))
        self._apply(self._floor.remove_owner(owner, self.now()))

    def close_all(self) -> None:
        self._forget(self._floor.open_obligations())
        self._apply(self._floor.close_all(self.now()))

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

    def open_new(self, ob: Obligation, *, on_expire: Callable[[], None] | None = None) -> None:
        """Open an obligation made with ``new``."""
        if on_expire is not None:
            self._on_expire[ob.id] = on_expire
        self._apply(self._floor.open(ob, self.now()))

    def close(
        self,
        obs: Obligation | Iterable[Obligation],
        outcome: str = "done",
        *,
        uncommit: Iterable[Obligation] = (),
    ) -> None:
        obs = [obs] if isinstance(obs, Obligation) else list(obs)
        self._forget(obs)
        self._apply(self._floor.close(obs, self.now(), outcome, uncommit=uncommit))

    def hand_over(
        self,
        old: Obligation | Iterable[Obligation],
        new: Obligation,
        *,
        on_expire: Callable[[], None] | None = None,
        uncommit: Iterable[Obligation] = (),
    ) -> None:
        """Open ``new`` and close ``old`` in one floor step (DESIGN.md Rule 2)."""
        old = [old] if isinstance(old, Obligation) else list(old)
        self._forget(old)
        if on_expire is not None:
            self._on_expire[new.id] = on_expire
        self._apply(self._floor.hand_over(old, new, self.now(), uncommit=uncommit))

    def set_committed(self, ob: Obligation, committed: bool) -> None:
        self._apply(self._floor.set_committed(ob, committed, self.now()))

    def set_audible(self, ob: Obligation, audible: bool) -> None:
        if ob.audible != audible:
            self._apply(self._floor.set_audible(ob, audible, self.now()))

    def set_yielded(self, ob: Obligation, yielded: bool) -> None:
        self._apply(self._floor.set_yielded(ob, yielded, self.now()))

    def set_user_speaking(self, speaking: bool) -> None:
        self._apply(self._floor.set_user_speaking(speaking, self.now()))

    def user_activity(self) -> None:
        self._apply(self._floor.user_activity(self.now()))

    def shutdown(self) -> None:
        """Cancel timers; the session is gone."""
        for handle in (self._away_timer, self._watchdog):
            if handle is not None:
                handle.cancel()
        self._away_timer = self._watchdog = None
        self._on_expire.clear()

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
        self._queue.extend(effects)
        if self._applying:
            return  # the outer call drains the queue, keeping effects in order
        self._applying = True
        try:
            while self._queue:
                self._apply_one(self._queue.popleft())
        finally:
            self._applying = False

    def _apply_one(self, effect: Effect) -> None:
        if isinstance(effect, AgentStateChanged):
            self._events.emit(
                "agent_state_changed",
                AgentStateChangedEvent(effect.old_state, effect.new_state, effect.at),
            )
        elif isinstance(effect, UserStateChanged):
            self._events.emit(
                "user_state_changed",
                UserStateChangedEvent(effect.old_state, effect.new_state, effect.at),
            )
        elif isinstance(effect, ArmAwayTimer):
            if self._away_timer is not None:
                self._away_timer.cancel()
            self._away_timer = self._loop.call_at(effect.deadline, self._away_fired)
        elif isinstance(effect, CancelAwayTimer):
            if self._away_timer is not None:
                self._away_timer.cancel()
                self._away_timer = None
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

    def _watchdog_fired(self) -> None:
        self._watchdog = None
        self._apply(self._floor.expire_due(self.now()))

    def _expired(self, ob: Obligation) -> None:
        logger.warning(
            "%s stayed open past its %.0f s watchdog; closed as expired", ob, ob.watchdog
        )
        error = ObligationExpiredError(f"{ob.kind.value} obligation {ob.label!r} expired")
        self._events.emit("error", ErrorEvent(error, source="watchdog", recoverable=True))
        stop_work = self._on_expire.pop(ob.id, None)
        if stop_work is not None:
            try:
                stop_work()
            except Exception:
                logger.exception("stopping the work behind %s failed", ob)
