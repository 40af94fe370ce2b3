# ruff: noqa: E501
# (the tables below read best one step per line)
"""Table tests of a yielded obligation: output paused because the user may be interrupting.

The rule under test: a yielded obligation is not audible, but it is still owed. While it
is open the agent is ``thinking``, never ``listening``; the pause ends either with the
output resuming (``speaking`` again, straight from ``thinking``) or with the obligation
closed (the interruption was confirmed), and only then may ``listening`` be reported. A
``listening`` edge is therefore final for the paused output.

Each table starts from a started floor (away timeout 30 s, current activity ``a``, ``t =
0``); each step applies one floor call and asserts the exact effects it returned and the
resulting ``agent_state`` and ``user_state``, so a ``listening`` in between cannot hide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest

from rejoinder.floor import (
    KINDS,
    AgentState,
    AgentStateChanged,
    ArmAwayTimer,
    ArmWatchdog,
    CancelAwayTimer,
    CancelWatchdog,
    Effect,
    Floor,
    FloorError,
    Obligation,
    ObligationExpired,
    ObligationKind,
    UserState,
    UserStateChanged,
)

AWAY = 30.0
A, B = "a", "b"
REPLY = ObligationKind.REPLY
TOOL = ObligationKind.TOOL
HANDOFF = ObligationKind.HANDOFF

Agent = AgentStateChanged
User = UserStateChanged
Arm = ArmAwayTimer
CANCEL = CancelAwayTimer()
NO_WATCHDOG = CancelWatchdog()

Obligations = dict[str, Obligation]
Call = Callable[[Floor, Obligations, float], list[Effect]]


def due(kind: ObligationKind, at: float) -> ArmWatchdog:
    return ArmWatchdog(at + KINDS[kind].watchdog)


def open_(
    name: str, kind: ObligationKind = REPLY, *, owner: str = A, committed: bool | None = None
) -> Call:
    def call(floor: Floor, obs: Obligations, at: float) -> list[Effect]:
        obs[name] = floor.obligation(kind, owner=owner, committed=committed, label=name)
        return floor.open(obs[name], at)

    return call


def flag(which: str, name: str, value: bool = True) -> Call:
    return lambda floor, obs, at: getattr(floor, f"set_{which}")(obs[name], value, at)


def close(name: str, outcome: str = "interrupted") -> Call:
    return lambda floor, obs, at: floor.close(obs[name], at, outcome)


def user(speaking: bool) -> Call:
    return lambda floor, obs, at: floor.set_user_speaking(speaking, at)


def owner(op: str, who: str) -> Call:
    return lambda floor, obs, at: getattr(floor, op)(who, at)


def away_fired(floor: Floor, obs: Obligations, at: float) -> list[Effect]:
    return floor.away_timer_fired(at)


def close_all(floor: Floor, obs: Obligations, at: float) -> list[Effect]:
    return floor.close_all(at)


class Step(NamedTuple):
    at: float
    call: Call
    effects: list[Effect]
    agent: AgentState
    user: UserState = "listening"


def run(steps: list[Step]) -> tuple[Floor, Obligations]:
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    floor.start(0.0)
    obs: Obligations = {}
    for i, step in enumerate(steps):
        got = step.call(floor, obs, step.at)
        where = f"step {i} at t={step.at}"
        assert got == step.effects, where
        assert (floor.agent_state, floor.user_state) == (step.agent, step.user), where
    return floor, obs


# The common start: a reply opened at 1 s, heard from 2 s, the user starts speaking over
# it at 3 s and the runtime pauses it at 3.06 s (the VAD confirmed speech).
# fmt: off
HEARD = [
    Step(1.0, open_("R"), [Agent("listening", "thinking", 1.0), CANCEL, due(REPLY, 1.0)], "thinking"),
    Step(2.0, flag("audible", "R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
    Step(3.0, user(True), [User("listening", "speaking", 3.0)], "speaking", "speaking"),
    Step(3.06, flag("yielded", "R"), [Agent("speaking", "thinking", 3.06)], "thinking", "speaking"),
]

TABLES: dict[str, list[Step]] = {
    "a noise: the reply resumes, speaking straight from thinking": [
        *HEARD,
        # the noise ended: the user is quiet, but the paused reply is still owed, so
        # neither listening nor an away timer
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(4.94, flag("yielded", "R", False), [Agent("thinking", "speaking", 4.94)], "speaking"),
        Step(6.0, close("R", "played"), [Agent("speaking", "listening", 6.0), Arm(6.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "a real interruption: listening once the reply is closed, while the user talks": [
        *HEARD,
        Step(3.5, close("R"), [Agent("thinking", "listening", 3.5), NO_WATCHDOG], "listening", "speaking"),
        Step(4.0, user(False), [User("speaking", "listening", 4.0), Arm(4.0 + AWAY)], "listening"),
        # the user's turn is answered by a new reply, not by the old one
        Step(4.4, open_("R2"), [Agent("listening", "thinking", 4.4), CANCEL, due(REPLY, 4.4)], "thinking"),
    ],
    "the noise ends, then words come: the paused reply is interrupted late": [
        *HEARD,
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(4.0, close("R"), [Agent("thinking", "listening", 4.0), Arm(4.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "a second noise before the first resumed: one pause, still thinking": [
        *HEARD,
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(4.0, user(True), [User("listening", "speaking", 4.0)], "thinking", "speaking"),
        Step(4.06, flag("yielded", "R"), [], "thinking", "speaking"),
        Step(4.5, user(False), [User("speaking", "listening", 4.5)], "thinking"),
        Step(6.5, flag("yielded", "R", False), [Agent("thinking", "speaking", 6.5)], "speaking"),
    ],
    "the output went silent during the pause: un-yielded, it is still a committed reply": [
        *HEARD,
        Step(3.2, flag("audible", "R", False), [], "thinking", "speaking"),
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(5.0, flag("yielded", "R", False), [], "thinking"),
        Step(5.1, flag("audible", "R"), [Agent("thinking", "speaking", 5.1)], "speaking"),
    ],
    "an uncommitted output that was heard is owed while paused": [
        Step(1.0, open_("R", committed=False), [CANCEL, due(REPLY, 1.0)], "listening"),
        Step(2.0, flag("audible", "R"), [Agent("listening", "speaking", 2.0)], "speaking"),
        Step(3.0, flag("yielded", "R"), [Agent("speaking", "thinking", 3.0)], "thinking"),
        Step(4.0, flag("yielded", "R", False), [Agent("thinking", "speaking", 4.0)], "speaking"),
    ],
    "a paused reply of an owner that stops being live is still owed": [
        *HEARD,
        # a task takes over; the caller's paused reply was reaching the user
        Step(3.2, owner("set_current", B), [], "thinking", "speaking"),
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(5.0, close("R"), [Agent("thinking", "listening", 5.0), Arm(5.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # (a reply never hands over: the tool opens while the paused reply is still owed)
    "a tool opened over a paused reply, which then closes: thinking throughout": [
        *HEARD,
        Step(3.5, open_("T", TOOL), [], "thinking", "speaking"),
        Step(3.5, close("R"), [due(TOOL, 3.5)], "thinking", "speaking"),
        Step(4.0, close("T", "done"), [Agent("thinking", "listening", 4.0), NO_WATCHDOG], "listening", "speaking"),
    ],
    "the session closes over a paused reply": [
        *HEARD,
        Step(3.5, close_all, [Agent("thinking", "listening", 3.5), NO_WATCHDOG], "listening", "speaking"),
    ],
    "the paused reply's owner is removed": [
        *HEARD,
        Step(3.5, user(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(3.6, owner("remove_owner", A), [Agent("thinking", "listening", 3.6), Arm(3.6 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "a paused reply is work for the user: it ends away": [
        Step(AWAY, away_fired, [User("listening", "away", AWAY)], "listening", "away"),
        # audible output of an owner that is not live leaves the user away ...
        Step(31.0, open_("R", owner=B), [due(REPLY, 31.0)], "listening", "away"),
        Step(32.0, flag("audible", "R"), [Agent("listening", "speaking", 32.0)], "speaking", "away"),
        # ... but once paused it is owed, and owed work ends away
        Step(33.0, flag("yielded", "R"), [Agent("speaking", "thinking", 33.0), User("away", "listening", 33.0)], "thinking"),
        Step(34.0, close("R"), [Agent("thinking", "listening", 34.0), Arm(34.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
}
# fmt: on


@pytest.mark.parametrize("name", list(TABLES))
def test_yield_table(name: str) -> None:
    run(TABLES[name])


def test_a_yielded_reply_keeps_its_audible_fact_for_the_resume() -> None:
    _, obs = run(HEARD)
    assert obs["R"].audible is True
    assert obs["R"].yielded is True
    assert "Y" in repr(obs["R"])


def test_yielding_before_start_is_initializing() -> None:
    floor = Floor()
    floor.set_current(A, 0.0)
    reply = floor.obligation(REPLY, owner=A)
    floor.open(reply, 1.0)
    floor.set_audible(reply, True, 1.0)
    assert floor.set_yielded(reply, True, 2.0) == []
    assert floor.start(3.0) == [Agent("initializing", "thinking", 3.0)]


def test_the_watchdog_closes_a_reply_left_paused() -> None:
    floor, obs = run(HEARD)
    floor.set_user_speaking(False, 3.5)
    assert floor.agent_state == "thinking"
    assert floor.expire_due(301.0) == [
        ObligationExpired(obs["R"]),
        Agent("thinking", "listening", 301.0),
        Arm(301.0 + AWAY),
        NO_WATCHDOG,
    ]


def test_yielding_a_never_opened_obligation_raises() -> None:
    floor = Floor()
    with pytest.raises(FloorError, match="never opened"):
        floor.set_yielded(floor.obligation(HANDOFF, owner=A), True, 0.0)
