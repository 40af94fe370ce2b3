"""The floor: recorded facts in, derived turn state and timer decisions out.

Everything that decides a reported state lives here, and nowhere else. The floor is
synchronous and I/O-free: it never awaits and never reads a clock; every mutation takes
``now`` and returns the effects it caused, which the runtime applies. One private method,
``_derive``, turns facts into states, so no mutation can report a state the facts do not
support, and effects come out only when something actually changed.

    agent_state = initializing  until start(), and after it while the first agent enters
                                with nothing else owed (until entered())
                = speaking      if an open, un-yielded obligation is audible
                = thinking      elif an obligation is yielded, or a committed obligation
                                of a live owner is open
                = listening     otherwise
    away timer armed  iff  agent_state is listening, the user is not speaking or away,
                           no obligation of a live owner is open, and a timeout is set

A live owner is the session, or the current activity while it is not paused.

The session's opening: between ``start(opening=True)`` and ``entered()`` the first
agent's ``on_enter`` runs. Its ``handoff`` obligation does not count then, so the first state after
``initializing`` is the truth once the agent has entered: ``thinking``/``speaking`` as soon
as it queues a greeting, ``listening`` (at ``entered()``) if it says nothing, and never a
``listening`` pulse before the greeting is queued. Leaving ``initializing`` ends the
opening early: it is never shown twice.

A yielded obligation is output paused because the user may be interrupting it. It is not
audible, but it is still owed: the pause ends either with the output resuming
(``speaking`` again) or with the obligation closed (interrupted). So ``listening`` never
shows while it is open, and a ``listening`` edge is final for the output that was paused:
a client that closes the user's turn on ``listening`` is never told so by a mere noise.
It counts whoever owns it, as audible output does: the user was hearing it. For the same
reason it counts as work for the user, so it ends ``away`` and holds the away timer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from .effects import (
    AgentState,
    AgentStateChanged,
    ArmAwayTimer,
    ArmWatchdog,
    CancelAwayTimer,
    CancelWatchdog,
    Effect,
    ObligationExpired,
    UserState,
    UserStateChanged,
)
from .kinds import FLOOR_OUTCOMES, HANDED_OVER, KINDS, ObligationKind
from .obligation import SESSION_OWNER, Obligation, Phase

# Timers are set by the runtime for exactly the deadline we gave; a callback that fires a
# hair early because of float rounding in the event loop must still count.
_CLOCK_SLACK = 1e-9


_DEFAULT_WATCHDOGS: Mapping[ObligationKind, float] = {
    kind: spec.watchdog for kind, spec in KINDS.items()
}
"""Each kind's watchdog, as ``kinds.py`` sets it; read by every floor that sets none of its
own (a copy per floor was 0.6 KiB of an idle session's 12)."""


class FloorError(RuntimeError):
    """A caller used the floor out of order (a bug in the runtime, never user input)."""


class Floor:
    def __init__(
        self,
        *,
        user_away_timeout: float | None = None,
        watchdogs: Mapping[ObligationKind, float] | Mapping[str, float] | None = None,
    ) -> None:
        if user_away_timeout is not None:
            _require_positive(user_away_timeout, "user_away_timeout")
        self._away_timeout = user_away_timeout
        self._watchdogs = _DEFAULT_WATCHDOGS  # shared unless a session sets its own
        if watchdogs:
            own = dict(_DEFAULT_WATCHDOGS)
            for kind, seconds in watchdogs.items():
                _require_positive(seconds, f"watchdog for {kind!s}")
                own[ObligationKind(kind)] = float(seconds)
            self._watchdogs = own
        self._ids = itertools.count(1)
        self._open: dict[int, Obligation] = {}
        self._started = False
        self._opening = False
        """Between start() and entered(): the first agent is entering."""
        self._current: str | None = None
        self._paused: set[str] = set()
        self._user_speaking = False
        self._user_away = False
        # Derived values as last reported; effects are emitted only when these change.
        self._agent_state: AgentState = "initializing"
        self._user_state: UserState = "listening"
        self._quiet_since: float | None = None
        self._away_deadline: float | None = None
        self._watchdog_deadline: float | None = None

    # ----------------------------------------------------------------- reading

    @property
    def agent_state(self) -> AgentState:
        return self._agent_state

    @property
    def user_state(self) -> UserState:
        return self._user_state

    @property
    def current_owner(self) -> str | None:
        return self._current

    @property
    def away_deadline(self) -> float | None:
        return self._away_deadline

    def is_live(self, owner: str) -> bool:
        return owner == SESSION_OWNER or (owner == self._current and owner not in self._paused)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def open_obligations(self, owner: str | None = None) -> list[Obligation]:
        return [ob for ob in self._open.values() if owner is None or ob.owner == owner]

    # ----------------------------------------------------------------- session

    def start(self, now: float, *, opening: bool = False) -> list[Effect]:
        """The session runs. ``opening``: its first agent is about to enter, and an idle
        agent stays ``initializing`` until ``entered`` (or until something is owed)."""
        self._started = True
        self._opening = opening
        return self._derive(now)

    def entered(self, now: float) -> list[Effect]:
        """The first agent has entered (its ``on_enter`` returned, or its bound passed):
        from here on an idle agent is ``listening``."""
        self._opening = False
        return self._derive(now)

    def close_all(self, now: float, outcome: str = "session_closed") -> list[Effect]:
        """Close every open obligation (the session is ending; so is its opening)."""
        open_ones = list(self._open.values())
        _require_outcomes(open_ones, outcome, FLOOR_OUTCOMES)  # a FloorError changes nothing
        for ob in open_ones:
            self._close(ob, now, outcome)
        self._opening = False
        return self._derive(now)

    # ------------------------------------------------------------------ owners

    def set_current(self, owner: str, now: float) -> list[Effect]:
        """Make ``owner`` the current activity; the previous one stops being live."""
        if owner == SESSION_OWNER:
            raise FloorError("the session owner cannot be made current")
        self._current = owner
        return self._derive(now)

    def pause(self, owner: str, now: float) -> list[Effect]:
        self._paused.add(owner)
        return self._derive(now)

    def resume(self, owner: str, now: float) -> list[Effect]:
        self._paused.discard(owner)
        return self._derive(now)

    def remove_owner(self, owner: str, now: float, outcome: str = "owner_closed") -> list[Effect]:
        """Forget an activity; whatever it still owed is closed."""
        owed = [ob for ob in self._open.values() if ob.owner == owner]
        _require_outcomes(owed, outcome, FLOOR_OUTCOMES)  # a FloorError changes nothing
        for ob in owed:
            self._close(ob, now, outcome)
        self._paused.discard(owner)
        if self._current == owner:
            self._current = None
        return self._derive(now)

    # ------------------------------------------------------------- obligations

    def obligation(
        self,
        kind: ObligationKind,
        *,
        owner: str,
        committed: bool | None = None,
        label: str = "",
        watchdog: float | None = None,
    ) -> Obligation:
        """Create (not open) an obligation, so it can be opened or handed over to."""
        spec = KINDS[kind]
        if watchdog is not None:
            _require_positive(watchdog, f"watchdog for {kind}")
        return Obligation(
            id=next(self._ids),
            kind=kind,
            owner=owner,
            committed=spec.committed if committed is None else committed,
            label=label,
            watchdog=self._watchdogs[kind] if watchdog is None else watchdog,
        )

    def open(self, ob: Obligation, now: float) -> list[Effect]:
        self._open_one(ob, now)
        return self._derive(now)

    def close(
        self,
        obs: Obligation | Iterable[Obligation],
        now: float,
        outcome: str = "done",
        *,
        uncommit: Iterable[Obligation] = (),
    ) -> list[Effect]:
        """Close one or several obligations in one step. Closing a closed one does nothing.
        ``uncommit`` obligations stay open but stop being committed in the same step.
        ``outcome`` must be one of each obligation's kind (``KindSpec.outcomes``), closed
        ones included: a wrong outcome is a bug even where it would change nothing."""
        olds, background = _opened(obs), _opened(uncommit)  # a FloorError changes nothing
        _require_outcomes(olds, outcome)
        self._uncommit(background)
        for ob in olds:
            self._close(ob, now, outcome)
        return self._derive(now)

    def hand_over(
        self,
        old: Obligation | Iterable[Obligation],
        new: Obligation,
        now: float,
        outcome: str = "handed_over",
        *,
        uncommit: Iterable[Obligation] = (),
    ) -> list[Effect]:
        """Open ``new`` and close ``old`` in one step: no state can be derived between them.
        ``uncommit`` obligations (work that goes on in the background now that ``new``
        carries the reply) stop being committed in the same step. Each of ``old`` must be
        of a kind that hands over to ``new``'s (``KindSpec.hands_over_to``)."""
        olds, background = _opened(old), _opened(uncommit)  # a FloorError changes nothing
        _require_hand_over(olds, new)
        _require_outcomes(olds, outcome, _HANDED_OVER)
        self._open_one(new, now)
        self._uncommit(background)
        for ob in olds:
            self._close(ob, now, outcome)
        return self._derive(now)

    def set_committed(self, ob: Obligation, committed: bool, now: float) -> list[Effect]:
        if self._require_open(ob):
            ob.committed = committed
        return self._derive(now)

    def set_audible(self, ob: Obligation, audible: bool, now: float) -> list[Effect]:
        if self._require_open(ob):
            ob.audible = audible
        return self._derive(now)

    def set_yielded(self, ob: Obligation, yielded: bool, now: float) -> list[Effect]:
        if self._require_open(ob):
            ob.yielded = yielded
        return self._derive(now)

    # -------------------------------------------------------------------- user

    def set_user_speaking(self, speaking: bool, now: float) -> list[Effect]:
        self._user_speaking = speaking
        return self.user_activity(now)

    def user_activity(self, now: float) -> list[Effect]:
        """The user did something (spoke, typed): not away, and the silence count restarts."""
        self._user_away = False
        if self._quiet_since is not None:
            self._quiet_since = now
        return self._derive(now)

    # ------------------------------------------------------------------ timers

    def away_timer_fired(self, now: float) -> list[Effect]:
        """The runtime's away timer went off; the floor checks it is still due."""
        if self._away_deadline is None or now + _CLOCK_SLACK < self._away_deadline:
            return []  # a stale timer: the facts changed since it was armed
        self._user_away = True
        self._away_deadline = None  # it fired; nothing to cancel
        return self._derive(now)

    def expire_due(self, now: float) -> list[Effect]:
        """Close (as ``expired``) every obligation whose watchdog deadline has passed."""
        expired: list[Effect] = []
        for ob in list(self._open.values()):
            if ob.deadline is not None and ob.deadline <= now + _CLOCK_SLACK:
                self._close(ob, now, "expired")
                expired.append(ObligationExpired(ob))
        return expired + self._derive(now)

    # ---------------------------------------------------------------- internal

    def _open_one(self, ob: Obligation, now: float) -> None:
        if ob.phase is not Phase.NEW:
            raise FloorError(f"{ob!r} was already opened")
        ob.phase = Phase.OPEN
        ob.opened_at = now
        ob.deadline = now + ob.watchdog
        self._open[ob.id] = ob

    def _close(self, ob: Obligation, now: float, outcome: str) -> None:
        if ob.phase is not Phase.OPEN:
            return
        ob.phase = Phase.CLOSED
        ob.closed_at = now
        ob.outcome = outcome
        ob.audible = False
        del self._open[ob.id]

    def _uncommit(self, obs: Iterable[Obligation]) -> None:
        for ob in obs:
            if self._require_open(ob):
                ob.committed = False

    def _require_open(self, ob: Obligation) -> bool:
        if ob.phase is Phase.NEW:
            raise FloorError(f"{ob!r} was never opened")
        # A closed obligation may still receive late facts (output that trails an
        # interruption or an expiry); they no longer mean anything.
        return ob.phase is Phase.OPEN

    def _derive(self, now: float) -> list[Effect]:
        audible = owed = working = False
        earliest: float | None = None
        for ob in self._open.values():
            if ob.deadline is not None and (earliest is None or ob.deadline < earliest):
                earliest = ob.deadline
            if ob.yielded:
                # Paused over a possible barge-in: silent, but the rest of it is still
                # owed until it resumes or is closed, whether or not its owner is live
                # (like audible output, it was reaching the user when it paused).
                owed = working = True
                continue
            if ob.audible:
                audible = True
            if self._opening and ob.kind is ObligationKind.HANDOFF:
                continue  # the first agent entering is the session starting
            if self.is_live(ob.owner):
                working = True
                if ob.committed:
                    owed = True

        effects: list[Effect] = []
        agent: AgentState
        if not self._started:
            agent = "initializing"
        elif audible:
            agent = "speaking"
        elif owed:
            agent = "thinking"
        elif self._opening:
            agent = "initializing"
        else:
            agent = "listening"
        if agent != "initializing":
            self._opening = False
        if agent != self._agent_state:
            effects.append(AgentStateChanged(self._agent_state, agent, now))
            self._agent_state = agent

        if self._user_away and working:
            self._user_away = False  # the agent is working for the user again
        user: UserState = (
            "speaking" if self._user_speaking else "away" if self._user_away else "listening"
        )
        if user != self._user_state:
            effects.append(UserStateChanged(self._user_state, user, now))
            self._user_state = user

        arm = (
            self._away_timeout is not None
            and agent == "listening"
            and user == "listening"
            and not working
        )
        if arm:
            if self._quiet_since is None:
                self._quiet_since = now
            assert self._away_timeout is not None
            deadline = self._quiet_since + self._away_timeout
            if deadline != self._away_deadline:
                effects.append(ArmAwayTimer(deadline))
                self._away_deadline = deadline
        else:
            self._quiet_since = None
            if self._away_deadline is not None:
                effects.append(CancelAwayTimer())
                self._away_deadline = None

        if earliest != self._watchdog_deadline:
            effects.append(CancelWatchdog() if earliest is None else ArmWatchdog(earliest))
            self._watchdog_deadline = earliest
        return effects


def _as_list(obs: Obligation | Iterable[Obligation]) -> list[Obligation]:
    return [obs] if isinstance(obs, Obligation) else list(obs)


_HANDED_OVER = frozenset({HANDED_OVER})


def _require_outcomes(
    obs: Iterable[Obligation], outcome: str, also: frozenset[str] = frozenset()
) -> None:
    """``outcome`` is one each obligation's kind may close with (or one of ``also``)."""
    if outcome in also:
        return
    for ob in obs:
        if outcome not in KINDS[ob.kind].outcomes:  # on every close: no set built here
            allowed = KINDS[ob.kind].outcomes | also
            raise FloorError(
                f"{ob!r} cannot close as {outcome!r}: an obligation of kind {ob.kind.value} "
                f"closes as one of {', '.join(repr(o) for o in sorted(allowed))}"
            )


def _require_hand_over(olds: Iterable[Obligation], new: Obligation) -> None:
    for ob in olds:
        targets = KINDS[ob.kind].hands_over_to
        if new.kind not in targets:
            to = ", ".join(sorted(k.value for k in targets)) or "nothing"
            raise FloorError(
                f"{ob!r} cannot be handed over to {new!r}: an obligation of kind "
                f"{ob.kind.value} hands over to {to}"
            )


def _require_positive(value: float, what: str) -> None:
    # "not > 0" also rejects NaN, which every comparison answers False.
    if not value > 0:
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")


def _opened(obs: Obligation | Iterable[Obligation]) -> list[Obligation]:
    """``obs`` as a list; FloorError (before anything changed) if one was never opened."""
    olds = _as_list(obs)
    for ob in olds:
        if ob.phase is Phase.NEW:
            raise FloorError(f"{ob!r} was never opened")
    return olds
