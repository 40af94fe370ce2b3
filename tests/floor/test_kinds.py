# ruff: noqa: E501
# (the scenario tables below read best one step per line)
"""Table tests: one realistic life cycle per obligation kind (the kinds table).

Every scenario starts from a started floor (away timeout 30 s, current activity ``agent``,
``t = 0``) and is a list of steps. Each step applies one floor call at a virtual time and
asserts the *exact* list of effects it returned and the resulting ``agent_state`` and
``user_state``. An exact effect list is the strongest form of "never ``listening``": a
hand-over that stays ``thinking`` must return no ``AgentStateChanged`` at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    Obligation,
    ObligationExpired,
    ObligationKind,
    UserState,
    UserStateChanged,
)

AWAY = 30.0
AGENT = "agent"

REPLY = ObligationKind.REPLY
TOOL = ObligationKind.TOOL
DEFERRED = ObligationKind.DEFERRED_REPLY
PREEMPTIVE = ObligationKind.PREEMPTIVE
HOLD = ObligationKind.HOLD
HANDOFF = ObligationKind.HANDOFF
CONTINUATION = ObligationKind.PROVIDER_CONTINUATION
BACKEND = ObligationKind.BACKEND_RESPONSE
ANSWER = ObligationKind.ANSWER
DELEGATION = ObligationKind.CLIENT_DELEGATION
RECOGNITION = ObligationKind.RECOGNITION
TRANSFER = ObligationKind.TRANSFER

Agent = AgentStateChanged
User = UserStateChanged
Arm = ArmAwayTimer
CANCEL = CancelAwayTimer()
Watchdog = ArmWatchdog
NO_WATCHDOG = CancelWatchdog()


def due(kind: ObligationKind, opened_at: float) -> float:
    """The watchdog deadline of an obligation of ``kind`` opened at ``opened_at``."""
    return opened_at + KINDS[kind].watchdog


def an_outcome(kind: ObligationKind) -> str:
    """One outcome ``kind`` may close with (``Floor.close`` refuses any other)."""
    return next(iter(sorted(KINDS[kind].outcomes)))


Obligations = dict[str, Obligation]


@dataclass(frozen=True)
class Op:
    desc: str
    apply: Callable[[Floor, Obligations, float], list[Effect]]

    def __repr__(self) -> str:
        return self.desc


@dataclass(frozen=True)
class Expired:
    """Placeholder for ``ObligationExpired(<the obligation named name>)`` in a table."""

    name: str


def open_(name: str, kind: ObligationKind, *, committed: bool | None = None) -> Op:
    def apply(floor: Floor, obs: Obligations, at: float) -> list[Effect]:
        obs[name] = floor.obligation(kind, owner=AGENT, committed=committed, label=name)
        return floor.open(obs[name], at)

    return Op(f"open {name}:{kind.value}", apply)


def close(name: str, outcome: str = "done") -> Op:
    return Op(f"close {name} ({outcome})", lambda f, obs, at: f.close(obs[name], at, outcome))


def hand_over(
    old: str | Sequence[str], new: str, kind: ObligationKind, *, uncommit: Sequence[str] = ()
) -> Op:
    olds = [old] if isinstance(old, str) else list(old)

    def apply(floor: Floor, obs: Obligations, at: float) -> list[Effect]:
        obs[new] = floor.obligation(kind, owner=AGENT, label=new)
        background = [obs[o] for o in uncommit]
        return floor.hand_over([obs[o] for o in olds], obs[new], at, uncommit=background)

    desc = f"hand over {'+'.join(olds) or '()'} -> {new}:{kind.value}"
    return Op(desc + (f", uncommit {'+'.join(uncommit)}" if uncommit else ""), apply)


def audible(name: str, value: bool = True) -> Op:
    return Op(f"audible {name}={value}", lambda f, obs, at: f.set_audible(obs[name], value, at))


def committed(name: str, value: bool) -> Op:
    return Op(f"committed {name}={value}", lambda f, obs, at: f.set_committed(obs[name], value, at))


def yielded(name: str, value: bool = True) -> Op:
    return Op(f"yielded {name}={value}", lambda f, obs, at: f.set_yielded(obs[name], value, at))


def user_speaking(value: bool) -> Op:
    return Op(f"user speaking={value}", lambda f, obs, at: f.set_user_speaking(value, at))


AWAY_TIMER_FIRED = Op("away timer fired", lambda f, obs, at: f.away_timer_fired(at))
EXPIRE_DUE = Op("expire due", lambda f, obs, at: f.expire_due(at))


class Step(NamedTuple):
    at: float
    op: Op
    effects: list[Effect | Expired]
    agent: AgentState
    user: UserState = "listening"


def run(steps: Sequence[Step]) -> tuple[Floor, Obligations]:
    floor = Floor(user_away_timeout=AWAY)
    assert floor.set_current(AGENT, 0.0) == []
    assert floor.start(0.0) == [Agent("initializing", "listening", 0.0), Arm(AWAY)]
    obs: Obligations = {}
    for i, step in enumerate(steps):
        got = step.op.apply(floor, obs, step.at)
        want = [
            ObligationExpired(obs[e.name]) if isinstance(e, Expired) else e for e in step.effects
        ]
        where = f"step {i} at t={step.at}: {step.op!r}"
        assert got == want, where
        assert floor.agent_state == step.agent, where
        assert floor.user_state == step.user, where
    return floor, obs


# --------------------------------------------------------------------------- the table
# fmt: off

# One reply opened at 1 s and heard from 2 s, then a tool dispatched at 3 s inside it: the
# common prefix of the tool and provider scenarios.
TOOL_INSIDE_REPLY = [
    Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
    Step(2.0, audible("R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
    # dispatched while the reply carrying it is still audible: still speaking
    Step(3.0, open_("T", TOOL), [], "speaking"),
    # the reply's playout ended, the tool still runs: thinking, never listening
    Step(4.0, close("R", "played"), [Agent("speaking", "thinking", 4.0), Watchdog(due(TOOL, 3.0))], "thinking"),
]

SCENARIOS: dict[str, list[Step]] = {
    # reply -------------------------------------------------------------------------------
    "reply: played to the end": [
        Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
        Step(2.0, audible("R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
        Step(5.0, close("R", "played"), [Agent("speaking", "listening", 5.0), Arm(5.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "reply: interrupted before it was heard": [
        Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
        Step(2.0, user_speaking(True), [User("listening", "speaking", 2.0)], "thinking", "speaking"),
        Step(2.5, close("R", "interrupted"), [Agent("thinking", "listening", 2.5), NO_WATCHDOG], "listening", "speaking"),
        Step(4.0, user_speaking(False), [User("speaking", "listening", 4.0), Arm(4.0 + AWAY)], "listening"),
    ],
    "reply: yielded to a false interruption, then resumed": [
        Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
        Step(2.0, audible("R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
        Step(3.0, user_speaking(True), [User("listening", "speaking", 3.0)], "speaking", "speaking"),
        # paused for a possible barge-in: silent, but the rest of it is still owed
        Step(3.2, yielded("R"), [Agent("speaking", "thinking", 3.2)], "thinking", "speaking"),
        # just a noise; the yielded reply is still owed, so no away timer
        Step(3.5, user_speaking(False), [User("speaking", "listening", 3.5)], "thinking"),
        Step(4.5, yielded("R", False), [Agent("thinking", "speaking", 4.5)], "speaking"),
        Step(6.0, close("R", "played"), [Agent("speaking", "listening", 6.0), Arm(6.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "reply: yielded, then the barge-in is confirmed": [
        Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
        Step(2.0, audible("R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
        Step(3.0, user_speaking(True), [User("listening", "speaking", 3.0)], "speaking", "speaking"),
        Step(3.2, yielded("R"), [Agent("speaking", "thinking", 3.2)], "thinking", "speaking"),
        # the interruption is confirmed: only now is nothing owed
        Step(3.6, close("R", "interrupted"), [Agent("thinking", "listening", 3.6), NO_WATCHDOG], "listening", "speaking"),
        # the user's turn ends and a reply to it is owed at once
        Step(5.0, user_speaking(False), [User("speaking", "listening", 5.0), Arm(5.0 + AWAY)], "listening"),
        Step(5.0, open_("R2", REPLY), [Agent("listening", "thinking", 5.0), CANCEL, Watchdog(due(REPLY, 5.0))], "thinking"),
        Step(5.5, audible("R2"), [Agent("thinking", "speaking", 5.5)], "speaking"),
        Step(7.0, close("R2", "played"), [Agent("speaking", "listening", 7.0), Arm(7.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # tool --------------------------------------------------------------------------------
    "tool: inline, hands over to a follow-up reply": [
        *TOOL_INSIDE_REPLY,
        # the tool returned and a reply is required: successor opened before release
        Step(6.0, hand_over("T", "F", REPLY), [Watchdog(due(REPLY, 6.0))], "thinking"),
        Step(7.0, audible("F"), [Agent("thinking", "speaking", 7.0)], "speaking"),
        Step(9.0, close("F", "played"), [Agent("speaking", "listening", 9.0), Arm(9.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "tool: finishes before the reply's playout ends": [
        Step(1.0, open_("R", REPLY), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(REPLY, 1.0))], "thinking"),
        Step(2.0, audible("R"), [Agent("thinking", "speaking", 2.0)], "speaking"),
        Step(3.0, open_("T", TOOL), [], "speaking"),
        Step(3.5, hand_over("T", "F", REPLY), [], "speaking"),  # R's deadline is still the earliest
        Step(4.0, close("R", "played"), [Agent("speaking", "thinking", 4.0), Watchdog(due(REPLY, 3.5))], "thinking"),
        Step(4.2, audible("F"), [Agent("thinking", "speaking", 4.2)], "speaking"),
        Step(6.0, close("F", "played"), [Agent("speaking", "listening", 6.0), Arm(6.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "tool: returns with no reply required": [
        *TOOL_INSIDE_REPLY,
        Step(5.0, close("T"), [Agent("thinking", "listening", 5.0), Arm(5.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "tool: released with an interim result, uncommitted when its follow-up takes over": [
        *TOOL_INSIDE_REPLY,
        # ctx.update("working on it"): still committed, the interim result is owed a reply;
        # that reply takes over and the tool goes on uncommitted, in one step
        Step(5.0, hand_over([], "F", REPLY, uncommit=["T"]), [Watchdog(due(REPLY, 5.0))], "thinking"),
        Step(6.0, audible("F"), [Agent("thinking", "speaking", 6.0)], "speaking"),
        # the interim reply played; the tool still runs: listening, but not away
        Step(8.0, close("F", "played"), [Agent("speaking", "listening", 8.0), Watchdog(due(TOOL, 3.0))], "listening"),
        Step(40.0, AWAY_TIMER_FIRED, [], "listening"),
        Step(50.0, hand_over("T", "D", DEFERRED), [Agent("listening", "thinking", 50.0), Watchdog(due(DEFERRED, 50.0))], "thinking"),
        Step(51.0, hand_over("D", "F2", REPLY), [Watchdog(due(REPLY, 51.0))], "thinking"),
        Step(52.0, audible("F2"), [Agent("thinking", "speaking", 52.0)], "speaking"),
        Step(55.0, close("F2", "played"), [Agent("speaking", "listening", 55.0), Arm(55.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "tool: released to the background, result spoken later": [
        *TOOL_INSIDE_REPLY,
        # ctx.update: no reply follows for now; listening is true, but the user is not away
        Step(5.0, committed("T", False), [Agent("thinking", "listening", 5.0)], "listening"),
        Step(40.0, AWAY_TIMER_FIRED, [], "listening"),
        # the tool finished; its result must be spoken
        Step(50.0, hand_over("T", "D", DEFERRED), [Agent("listening", "thinking", 50.0), Watchdog(due(DEFERRED, 50.0))], "thinking"),
        Step(51.0, hand_over("D", "F", REPLY), [Watchdog(due(REPLY, 51.0))], "thinking"),
        Step(52.0, audible("F"), [Agent("thinking", "speaking", 52.0)], "speaking"),
        Step(55.0, close("F", "played"), [Agent("speaking", "listening", 55.0), Arm(55.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "tool: released to the background, finishes silently": [
        *TOOL_INSIDE_REPLY,
        Step(5.0, committed("T", False), [Agent("thinking", "listening", 5.0)], "listening"),
        Step(50.0, close("T"), [Arm(50.0 + AWAY), NO_WATCHDOG], "listening"),
        Step(80.0, AWAY_TIMER_FIRED, [User("listening", "away", 80.0)], "listening", "away"),
    ],
    # deferred_reply ----------------------------------------------------------------------
    "deferred_reply: hands over to the reply that carries it": [
        Step(1.0, open_("D", DEFERRED), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(DEFERRED, 1.0))], "thinking"),
        Step(2.0, hand_over("D", "F", REPLY), [Watchdog(due(REPLY, 2.0))], "thinking"),
        Step(3.0, audible("F"), [Agent("thinking", "speaking", 3.0)], "speaking"),
        Step(5.0, close("F", "played"), [Agent("speaking", "listening", 5.0), Arm(5.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "deferred_reply: the result is dropped": [
        Step(1.0, open_("D", DEFERRED), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(DEFERRED, 1.0))], "thinking"),
        # (the table has no "dropped": a deferred reply closes only as "carried")
        Step(2.0, close("D", "carried"), [Agent("thinking", "listening", 2.0), Arm(2.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # preemptive --------------------------------------------------------------------------
    "preemptive: discarded": [
        Step(1.0, user_speaking(True), [User("listening", "speaking", 1.0), CANCEL], "listening", "speaking"),
        Step(1.5, open_("P", PREEMPTIVE), [Watchdog(due(PREEMPTIVE, 1.5))], "listening", "speaking"),
        # the user's turn ended, but the speculative reply is still open: no away timer
        Step(2.0, user_speaking(False), [User("speaking", "listening", 2.0)], "listening"),
        Step(2.2, close("P", "discarded"), [Arm(2.2 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "preemptive: opened while quiet cancels the away timer": [
        Step(1.0, open_("P", PREEMPTIVE), [CANCEL, Watchdog(due(PREEMPTIVE, 1.0))], "listening"),
        Step(30.0, AWAY_TIMER_FIRED, [], "listening"),  # the timer armed at 0 is stale
        Step(31.0, close("P", "discarded"), [Arm(31.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "preemptive: used, hands over to the reply": [
        Step(1.0, user_speaking(True), [User("listening", "speaking", 1.0), CANCEL], "listening", "speaking"),
        Step(1.5, open_("P", PREEMPTIVE), [Watchdog(due(PREEMPTIVE, 1.5))], "listening", "speaking"),
        Step(2.0, user_speaking(False), [User("speaking", "listening", 2.0)], "listening"),
        Step(2.3, hand_over("P", "R", REPLY), [Agent("listening", "thinking", 2.3), Watchdog(due(REPLY, 2.3))], "thinking"),
        Step(2.4, audible("R"), [Agent("thinking", "speaking", 2.4)], "speaking"),
        Step(4.0, close("R", "played"), [Agent("speaking", "listening", 4.0), Arm(4.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # hold --------------------------------------------------------------------------------
    "hold: released": [
        Step(1.0, open_("H", HOLD), [CANCEL, Watchdog(due(HOLD, 1.0))], "listening"),
        Step(30.0, AWAY_TIMER_FIRED, [], "listening"),
        Step(100.0, close("H", "released"), [Arm(100.0 + AWAY), NO_WATCHDOG], "listening"),
        Step(129.0, AWAY_TIMER_FIRED, [], "listening"),  # not yet due
        Step(130.0, AWAY_TIMER_FIRED, [User("listening", "away", 130.0)], "listening", "away"),
    ],
    "hold: committed by the application": [
        Step(1.0, open_("H", HOLD, committed=True), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(HOLD, 1.0))], "thinking"),
        Step(9.0, close("H", "released"), [Agent("thinking", "listening", 9.0), Arm(9.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # transfer ----------------------------------------------------------------------------
    "transfer: the caller waits on the agent while the person is called, then is taken back": [
        Step(1.0, open_("X", TRANSFER), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(TRANSFER, 1.0))], "thinking"),
        Step(40.0, AWAY_TIMER_FIRED, [], "thinking"),  # never away while on hold for a person
        Step(45.0, close("X", "taken back"), [Agent("thinking", "listening", 45.0), Arm(45.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # recognition -------------------------------------------------------------------------
    "recognition: a slow transcript holds the away timer, then the turn's reply owes": [
        Step(1.0, user_speaking(True), [User("listening", "speaking", 1.0), CANCEL], "listening", "speaking"),
        Step(2.0, user_speaking(False), [User("speaking", "listening", 2.0), Arm(2.0 + AWAY)], "listening"),
        # the utterance ended and is being recognized: no reply promised (a cough?), but
        # the user is not away while their words are worked on
        Step(2.0, open_("S", RECOGNITION), [CANCEL, Watchdog(due(RECOGNITION, 2.0))], "listening"),
        # the transcript is in: the turn's reply opens, then the recognition closes (a
        # recognition never hands over), with no listening between
        Step(29.0, open_("R", REPLY), [Agent("listening", "thinking", 29.0)], "thinking"),
        Step(29.0, close("S", "transcribed"), [Watchdog(due(REPLY, 29.0))], "thinking"),
        Step(31.0, close("R", "played"), [Agent("thinking", "listening", 31.0), Arm(31.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "recognition: no words in it": [
        Step(2.0, open_("S", RECOGNITION), [CANCEL, Watchdog(due(RECOGNITION, 2.0))], "listening"),
        Step(3.0, close("S", "transcribed"), [Arm(3.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "recognition: a recognizer that never answers expires": [
        Step(2.0, open_("S", RECOGNITION), [CANCEL, Watchdog(due(RECOGNITION, 2.0))], "listening"),
        Step(due(RECOGNITION, 2.0), EXPIRE_DUE, [Expired("S"), Arm(due(RECOGNITION, 2.0) + AWAY), NO_WATCHDOG], "listening"),
    ],
    # handoff -----------------------------------------------------------------------------
    "handoff: a tool hands the user over; the new agent's greeting takes the debt over": [
        *TOOL_INSIDE_REPLY,
        Step(5.0, hand_over("T", "H", HANDOFF), [Watchdog(due(HANDOFF, 5.0))], "thinking"),
        # on_enter queues the greeting, then returns (a handoff hands over only to a handoff)
        Step(6.0, open_("G", REPLY), [], "thinking"),
        Step(6.0, close("H", "entered"), [Watchdog(due(REPLY, 6.0))], "thinking"),
        Step(6.5, audible("G"), [Agent("thinking", "speaking", 6.5)], "speaking"),
        Step(8.0, close("G", "played"), [Agent("speaking", "listening", 8.0), Arm(8.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "handoff: the new agent enters silently": [
        *TOOL_INSIDE_REPLY,
        Step(5.0, hand_over("T", "H", HANDOFF), [Watchdog(due(HANDOFF, 5.0))], "thinking"),
        Step(7.0, close("H", "entered"), [Agent("thinking", "listening", 7.0), Arm(7.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    # provider kinds ----------------------------------------------------------------------
    "provider_continuation: tool output -> backend -> answer -> reply": [
        *TOOL_INSIDE_REPLY,
        # tool outputs submitted, response.create sent
        Step(5.0, hand_over("T", "C", CONTINUATION), [Watchdog(due(CONTINUATION, 5.0))], "thinking"),
        # response.created
        Step(6.0, hand_over("C", "B", BACKEND), [Watchdog(due(BACKEND, 6.0))], "thinking"),
        # completed; its answer is still to be voiced
        Step(8.0, hand_over("B", "A", ANSWER), [Watchdog(due(ANSWER, 8.0))], "thinking"),
        # the next audible agent speech starts
        Step(9.0, hand_over("A", "F", REPLY), [Watchdog(due(REPLY, 9.0))], "thinking"),
        Step(9.0, audible("F"), [Agent("thinking", "speaking", 9.0)], "speaking"),
        Step(12.0, close("F", "played"), [Agent("speaking", "listening", 12.0), Arm(12.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "provider_continuation: the provider fails": [
        *TOOL_INSIDE_REPLY,
        Step(5.0, hand_over("T", "C", CONTINUATION), [Watchdog(due(CONTINUATION, 5.0))], "thinking"),
        Step(6.0, close("C", "failed"), [Agent("thinking", "listening", 6.0), Arm(6.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "backend_response: two tool calls, one combined continuation": [
        Step(1.0, open_("B", BACKEND), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(BACKEND, 1.0))], "thinking"),
        Step(3.0, open_("T1", TOOL), [], "thinking"),
        # the response completed with a second call (a backend response hands over only
        # to an answer): the call's tool opens, then the response closes
        Step(3.0, open_("T2", TOOL), [], "thinking"),
        Step(3.0, close("B", "completed"), [Watchdog(due(TOOL, 3.0))], "thinking"),
        Step(4.0, hand_over(["T1", "T2"], "C", CONTINUATION), [Watchdog(due(CONTINUATION, 4.0))], "thinking"),
        Step(5.0, hand_over("C", "B2", BACKEND), [Watchdog(due(BACKEND, 5.0))], "thinking"),
        Step(7.0, hand_over("B2", "A", ANSWER), [Watchdog(due(ANSWER, 7.0))], "thinking"),
        Step(7.5, hand_over("A", "F", REPLY), [Watchdog(due(REPLY, 7.5))], "thinking"),
        Step(7.5, audible("F"), [Agent("thinking", "speaking", 7.5)], "speaking"),
        Step(10.0, close("F", "played"), [Agent("speaking", "listening", 10.0), Arm(10.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "backend_response: reasoning longer than the away timeout, then fails": [
        Step(1.0, open_("B", BACKEND), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(BACKEND, 1.0))], "thinking"),
        Step(30.0, AWAY_TIMER_FIRED, [], "thinking"),
        Step(45.0, close("B", "response failed"), [Agent("thinking", "listening", 45.0), Arm(45.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "answer: no audio comes, the bounded wait expires": [
        Step(1.0, open_("B", BACKEND), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(BACKEND, 1.0))], "thinking"),
        Step(2.0, hand_over("B", "A", ANSWER), [Watchdog(due(ANSWER, 2.0))], "thinking"),
        Step(due(ANSWER, 2.0) - 0.5, EXPIRE_DUE, [], "thinking"),
        Step(due(ANSWER, 2.0), EXPIRE_DUE, [Expired("A"), Agent("thinking", "listening", due(ANSWER, 2.0)), Arm(due(ANSWER, 2.0) + AWAY), NO_WATCHDOG], "listening"),
    ],
    "answer: the next audible speech starts": [
        Step(1.0, open_("B", BACKEND), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(BACKEND, 1.0))], "thinking"),
        Step(2.0, hand_over("B", "A", ANSWER), [Watchdog(due(ANSWER, 2.0))], "thinking"),
        Step(2.5, hand_over("A", "R", REPLY), [Watchdog(due(REPLY, 2.5))], "thinking"),
        Step(2.5, audible("R"), [Agent("thinking", "speaking", 2.5)], "speaking"),
        Step(4.0, close("R", "played"), [Agent("speaking", "listening", 4.0), Arm(4.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "client_delegation: our answer takes longer than the away timeout, is sent, then voiced": [
        Step(1.0, open_("D", DELEGATION), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(DELEGATION, 1.0))], "thinking"),
        Step(30.0, AWAY_TIMER_FIRED, [], "thinking"),
        Step(40.0, hand_over("D", "A", ANSWER), [Watchdog(due(ANSWER, 40.0))], "thinking"),
        Step(41.0, hand_over("A", "R", REPLY), [Watchdog(due(REPLY, 41.0))], "thinking"),
        Step(41.0, audible("R"), [Agent("thinking", "speaking", 41.0)], "speaking"),
        Step(43.0, close("R", "played"), [Agent("speaking", "listening", 43.0), Arm(43.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
    "client_delegation: the answer fails": [
        Step(1.0, open_("D", DELEGATION), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(DELEGATION, 1.0))], "thinking"),
        Step(5.0, close("D", "failed"), [Agent("thinking", "listening", 5.0), Arm(5.0 + AWAY), NO_WATCHDOG], "listening"),
    ],
}
# fmt: on


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_kind_life_cycle(steps: list[Step]) -> None:
    floor, obs = run(steps)
    assert floor.open_obligations() == []
    # every obligation the scenario touched was closed, through the floor, exactly once
    assert all(ob.closed_at is not None and ob.outcome is not None for ob in obs.values())


def test_every_kind_has_a_scenario() -> None:
    covered = {
        kind.value for name in SCENARIOS for kind in ObligationKind if name.startswith(kind.value)
    }
    assert covered == {kind.value for kind in ObligationKind}


def test_hand_overs_record_their_outcome() -> None:
    _, obs = run(SCENARIOS["provider_continuation: tool output -> backend -> answer -> reply"])
    assert [obs[n].outcome for n in ("R", "T", "C", "B", "A", "F")] == [
        "played",
        "handed_over",
        "handed_over",
        "handed_over",
        "handed_over",
        "played",
    ]
    # each successor was opened at the instant its predecessor closed
    for old, new in [("T", "C"), ("C", "B"), ("B", "A"), ("A", "F")]:
        assert obs[old].closed_at == obs[new].opened_at


def test_expired_answer_outcome() -> None:
    _, obs = run(SCENARIOS["answer: no audio comes, the bounded wait expires"])
    assert obs["A"].outcome == "expired"
    assert obs["A"].closed_at == due(ANSWER, 2.0)


# ------------------------------------------------------------------- per-kind defaults

COMMITTED_KINDS = [
    REPLY,
    TOOL,
    DEFERRED,
    HANDOFF,
    CONTINUATION,
    BACKEND,
    ANSWER,
    DELEGATION,
    TRANSFER,
]
UNCOMMITTED_KINDS = [PREEMPTIVE, HOLD]


def test_kinds_table_is_complete() -> None:
    assert set(KINDS) == set(ObligationKind)
    assert {k for k, spec in KINDS.items() if spec.committed} == set(COMMITTED_KINDS)
    assert all(spec.watchdog > 0 and spec.closed_by for spec in KINDS.values())


@pytest.mark.parametrize("kind", COMMITTED_KINDS, ids=lambda k: k.value)
def test_committed_kind_alone_is_thinking(kind: ObligationKind) -> None:
    # fmt: off
    _, obs = run([
        Step(1.0, open_("X", kind), [Agent("listening", "thinking", 1.0), CANCEL, Watchdog(due(kind, 1.0))], "thinking"),
        Step(2.0, close("X", an_outcome(kind)), [Agent("thinking", "listening", 2.0), Arm(2.0 + AWAY), NO_WATCHDOG], "listening"),
    ])
    # fmt: on
    assert obs["X"].committed is True
    assert obs["X"].kind is kind


@pytest.mark.parametrize("kind", UNCOMMITTED_KINDS, ids=lambda k: k.value)
def test_uncommitted_kind_alone_is_listening_without_away_timer(kind: ObligationKind) -> None:
    run(
        [
            Step(1.0, open_("X", kind), [CANCEL, Watchdog(due(kind, 1.0))], "listening"),
            Step(AWAY, AWAY_TIMER_FIRED, [], "listening"),
            Step(40.0, close("X", an_outcome(kind)), [Arm(40.0 + AWAY), NO_WATCHDOG], "listening"),
        ]
    )


@pytest.mark.parametrize("kind", list(ObligationKind), ids=lambda k: k.value)
@pytest.mark.parametrize("override", [True, False])
def test_committed_override(kind: ObligationKind, override: bool) -> None:
    """``committed=`` overrides the kind's default, and only ``committed`` decides thinking."""
    opened: list[Effect | Expired] = [CANCEL, Watchdog(due(kind, 1.0))]
    closed: list[Effect | Expired] = [Arm(2.0 + AWAY), NO_WATCHDOG]
    if override:
        opened.insert(0, Agent("listening", "thinking", 1.0))
        closed.insert(0, Agent("thinking", "listening", 2.0))
    state: AgentState = "thinking" if override else "listening"
    _, obs = run(
        [
            Step(1.0, open_("X", kind, committed=override), opened, state),
            Step(2.0, close("X", an_outcome(kind)), closed, "listening"),
        ]
    )
    assert obs["X"].committed is override
