"""The scenario's ``expect:`` checked against what the simulation recorded.

Each check gives a ``Verdict``: passed or not, what it checked, and on failure the
offending time and state (``agent went to listening at t=2.350 (speaking → listening)``).
The states are the ones the session reported, change by change, on loop time; a state
that lasted zero seconds (two changes at the same instant) still counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..models import ChatMessage, FunctionCall, FunctionCallOutput
from ..testing import StateChange
from .runner import Simulation
from .scenario import Check

__all__ = ["Verdict", "check_all", "state_at"]

Who = Literal["agent", "user"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One ``expect:`` entry, checked: whether it held, what it was, and why not."""

    passed: bool
    what: str
    why: str = ""


def check_all(sim: Simulation) -> list[Verdict]:
    """Check every ``expect:`` entry of the simulation's scenario, in order."""
    return [check_one(sim, check) for check in sim.scenario.expect]


def check_one(sim: Simulation, check: Check) -> Verdict:
    if check.never is not None:
        return _never(sim, check.never, check.watched, check.between)
    if check.state_at is not None:
        spec = check.state_at
        wanted: list[tuple[Who, str]] = []
        if spec.agent is not None:
            wanted.append(("agent", spec.agent))
        if spec.user is not None:
            wanted.append(("user", spec.user))
        return _states_at(sim, spec.t, wanted, f"state at t={spec.t:g}")
    if check.final is not None:
        final: list[tuple[Who, str]] = []
        if check.final.agent is not None:
            final.append(("agent", check.final.agent))
        if check.final.user is not None:
            final.append(("user", check.final.user))
        return _states_at(sim, sim.end, final, f"final state (t={sim.end:g})")
    if check.history_contains is not None:
        return _history_contains(sim, check.history_contains, check.role)
    if check.final_agent is not None:
        what = f"final agent is {check.final_agent}"
        if sim.final_agent == check.final_agent:
            return Verdict(True, what)
        return Verdict(False, what, f"the current agent at t={sim.end:g} is {sim.final_agent}")
    if check.no_errors is not None:
        if not sim.errors and not sim.problems:
            return Verdict(True, "no errors")
        found = [*sim.errors, *sim.problems]
        return Verdict(False, "no errors", "; ".join(found[:5]))
    raise AssertionError(f"unhandled check {check!r}")  # pragma: no cover - validated


def changes_of(sim: Simulation, who: Who) -> list[StateChange]:
    return [c for c in sim.changes if c.who == who]


def state_at(sim: Simulation, t: float, who: Who) -> tuple[str, StateChange | None]:
    """The state after every change at or before ``t``, and the change that set it."""
    state, last = sim.initial[who], None
    for change in changes_of(sim, who):
        if change.at <= t + 1e-9:
            state, last = change.new, change
    return state, last


def _never(sim: Simulation, state: str, who: Who, between: tuple[float, float] | None) -> Verdict:
    t0, t1 = between if between is not None else (0.0, sim.end)
    what = f"never {who} {state}" + (f" between {t0:g} and {t1:g}" if between else "")
    before, since = state_at(sim, t0, who)
    if before == state and between is not None:
        when = f" (since t={since.at:.3f})" if since is not None else " (from the start)"
        return Verdict(False, what, f"{who} was already {state} at t={t0:g}{when}")
    bad = [c for c in changes_of(sim, who) if c.new == state and t0 - 1e-9 <= c.at < t1 - 1e-9]
    if between is None and sim.initial[who] == state:
        return Verdict(False, what, f"{who} was {state} from the start")
    if not bad:
        return Verdict(True, what)
    first = bad[0]
    lasted = _duration(sim, first)
    more = f", and {len(bad) - 1} more time(s)" if len(bad) > 1 else ""
    return Verdict(
        False,
        what,
        f"{who} went to {state} at t={first.at:.3f} ({first.old} → {first.new}{lasted}){more}",
    )


def _duration(sim: Simulation, change: StateChange) -> str:
    later = [c for c in changes_of(sim, change.who) if c.at >= change.at and c is not change]
    after = [c for c in later if sim.changes.index(c) > sim.changes.index(change)]
    if not after:
        return ", until the end"
    lasted = after[0].at - change.at
    return f", for {lasted * 1000:.0f} ms, then {after[0].new}"


def _states_at(sim: Simulation, t: float, wanted: list[tuple[Who, str]], what: str) -> Verdict:
    label = what + ": " + ", ".join(f"{who} {state}" for who, state in wanted)
    wrong: list[str] = []
    for who, state in wanted:
        actual, since = state_at(sim, t, who)
        if actual != state:
            when = f" since t={since.at:.3f}" if since is not None else " from the start"
            wrong.append(f"{who} was {actual}{when}, not {state}")
    if wrong:
        return Verdict(False, label, "; ".join(wrong))
    return Verdict(True, label)


def _history_contains(sim: Simulation, text: str, role: str | None) -> Verdict:
    what = f"history contains {text!r}" + (f" ({role})" if role else "")
    for item in sim.history:
        if _matches(item, text, role):
            return Verdict(True, what)
    said = [
        f"{item.role}: {item.content!r:.60}"
        for item in sim.history
        if isinstance(item, ChatMessage)
    ]
    return Verdict(False, what, "not found; the messages: " + ("; ".join(said) or "none"))


def _matches(item: Any, text: str, role: str | None) -> bool:
    if isinstance(item, ChatMessage):
        return (role is None or item.role == role) and text in item.content
    if isinstance(item, FunctionCallOutput):
        return role in (None, "tool") and text in item.output
    if isinstance(item, FunctionCall):
        return role in (None, "tool") and (text in item.name or text in item.arguments)
    return False
