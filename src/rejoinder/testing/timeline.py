"""StateTimeline: every reported state change with its loop time, for assertions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

Who = Literal["agent", "user"]


@dataclass(frozen=True, slots=True)
class StateChange:
    """One reported state change: when (loop time), whose (``"agent"`` or ``"user"``),
    from and to which state."""

    at: float
    who: Who
    old: str
    new: str


class StateTimeline:
    """Subscribe before the behaviour under test; the initial states are recorded too."""

    def __init__(self, session: Any) -> None:
        self._start = asyncio.get_running_loop().time()
        self.initial: dict[str, str] = {
            "agent": str(session.agent_state),
            "user": str(session.user_state),
        }
        self.changes: list[StateChange] = []
        session.on("agent_state_changed", lambda ev: self._add("agent", ev))
        session.on("user_state_changed", lambda ev: self._add("user", ev))

    def _add(self, who: Who, event: Any) -> None:
        last = self.changes_of(who)
        old = last[-1].new if last else self.initial[who]
        if event.old_state != old:
            raise AssertionError(f"{who} went {event.old_state}→{event.new_state}, was {old}")
        self.changes.append(StateChange(event.created_at, who, event.old_state, event.new_state))

    def changes_of(self, who: Who) -> list[StateChange]:
        """The changes of the agent's or the user's state, in order."""
        return [c for c in self.changes if c.who == who]

    def agent_states(self, since: float | None = None) -> list[str]:
        """The agent's states in order, starting with the one it had at ``since``."""
        return self._states("agent", since)

    def user_states(self, since: float | None = None) -> list[str]:
        """The user's states in order, starting with the one they had at ``since``."""
        return self._states("user", since)

    def _states(self, who: Who, since: float | None) -> list[str]:
        changes = self.changes_of(who)
        if since is None:
            return [self.initial[who], *(c.new for c in changes)]
        before = [c for c in changes if c.at < since]
        states = [before[-1].new if before else self.initial[who]]
        return states + [c.new for c in changes if c.at >= since]

    def state_at(self, t: float, who: Who = "agent") -> str:
        """The state after every change at or before ``t``."""
        state = self.initial[who]
        for change in self.changes_of(who):
            if change.at <= t:
                state = change.new
        return state

    def times_of(self, state: str, who: Who = "agent") -> list[float]:
        """When ``who`` entered ``state``."""
        return [c.at for c in self.changes_of(who) if c.new == state]

    def assert_never(
        self, state: str, *, between: tuple[float, float] | None = None, who: Who = "agent"
    ) -> None:
        """Not one change to ``state`` strictly inside ``(t0, t1)`` (anywhere when ``between``
        is None). Changes at the same instant as an edge are ambiguous on a clock; assert
        the order of those with ``agent_states()``/``user_states()``."""
        t0, t1 = between if between is not None else (float("-inf"), float("inf"))
        bad = [c for c in self.changes_of(who) if c.new == state and t0 < c.at < t1]
        if bad:
            raise AssertionError(
                f"{who} went to {state!r} at {[round(c.at, 6) for c in bad]} "
                f"within {between}; timeline: {self.describe(who)}"
            )

    def describe(self, who: Who = "agent") -> str:
        """The states as text, each with its time (for a failure message)."""
        parts = [self.initial[who]] + [f"{c.new}@{c.at:.3f}" for c in self.changes_of(who)]
        return " → ".join(parts)
