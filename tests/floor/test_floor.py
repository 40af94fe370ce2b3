"""Focused unit tests of the floor: lifecycle, owners, away timer, watchdog, errors.
(Yielded obligations have their own tables, in ``test_yield.py``.)"""

from __future__ import annotations

import pytest

from rejoinder.floor import (
    KINDS,
    SESSION_OWNER,
    AgentStateChanged,
    ArmAwayTimer,
    ArmWatchdog,
    CancelAwayTimer,
    CancelWatchdog,
    Floor,
    FloorError,
    Obligation,
    ObligationExpired,
    ObligationKind,
    Phase,
    UserStateChanged,
)

AWAY = 30.0
A = "agent_a"
B = "agent_b"

REPLY = ObligationKind.REPLY
TOOL = ObligationKind.TOOL
HOLD = ObligationKind.HOLD
ANSWER = ObligationKind.ANSWER
PREEMPTIVE = ObligationKind.PREEMPTIVE
HANDOFF = ObligationKind.HANDOFF
DEFERRED = ObligationKind.DEFERRED_REPLY

Agent = AgentStateChanged
User = UserStateChanged
Arm = ArmAwayTimer
CANCEL = CancelAwayTimer()
Watchdog = ArmWatchdog
NO_WATCHDOG = CancelWatchdog()


def an_outcome(kind: ObligationKind) -> str:
    """One outcome ``kind`` may close with (``Floor.close`` refuses any other)."""
    return next(iter(sorted(KINDS[kind].outcomes)))


def started(
    *, current: str | None = A, at: float = 0.0, user_away_timeout: float | None = AWAY
) -> Floor:
    floor = Floor(user_away_timeout=user_away_timeout)
    if current is not None:
        floor.set_current(current, at)
    floor.start(at)
    return floor


def opened(
    floor: Floor,
    kind: ObligationKind,
    at: float,
    *,
    owner: str = A,
    committed: bool | None = None,
    watchdog: float | None = None,
) -> Obligation:
    ob = floor.obligation(kind, owner=owner, committed=committed, watchdog=watchdog)
    floor.open(ob, at)
    return ob


# --------------------------------------------------------------------------- lifecycle


def test_initializing_until_start() -> None:
    floor = Floor(user_away_timeout=AWAY)
    assert floor.agent_state == "initializing"
    assert floor.user_state == "listening"
    assert floor.set_current(A, 0.0) == []
    # facts are recorded before start, but the agent state stays initializing and no
    # away timer is armed; the watchdog already runs
    reply = floor.obligation(REPLY, owner=A)
    assert floor.open(reply, 1.0) == [Watchdog(301.0)]
    assert floor.set_audible(reply, True, 2.0) == []
    assert floor.agent_state == "initializing"
    assert floor.set_user_speaking(True, 3.0) == [User("listening", "speaking", 3.0)]
    assert floor.set_user_speaking(False, 4.0) == [User("speaking", "listening", 4.0)]
    assert floor.away_deadline is None
    assert floor.start(5.0) == [Agent("initializing", "speaking", 5.0)]
    assert floor.start(6.0) == []  # starting twice changes nothing
    assert floor.close(reply, 7.0, "played") == [
        Agent("speaking", "listening", 7.0),
        Arm(7.0 + AWAY),
        NO_WATCHDOG,
    ]


def test_start_arms_the_away_timer() -> None:
    floor = Floor(user_away_timeout=AWAY)
    assert floor.start(2.0) == [Agent("initializing", "listening", 2.0), Arm(2.0 + AWAY)]
    assert floor.away_deadline == 2.0 + AWAY


def test_the_opening_stays_initializing_until_the_first_agent_entered() -> None:
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    assert floor.start(0.0, opening=True) == []  # no listening before the agent entered
    entering = opened(floor, HANDOFF, 0.0)
    assert floor.agent_state == "initializing"  # entering is the session starting
    assert floor.away_deadline is None
    assert floor.close(entering, 1.0, "entered") == [NO_WATCHDOG]
    assert floor.entered(1.0) == [Agent("initializing", "listening", 1.0), Arm(1.0 + AWAY)]


def test_a_greeting_ends_the_opening_at_once() -> None:
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    floor.start(0.0, opening=True)
    entering = opened(floor, HANDOFF, 0.0)
    greeting = floor.obligation(REPLY, owner=A)
    assert floor.open(greeting, 0.5)[0] == Agent("initializing", "thinking", 0.5)
    floor.close(entering, 0.6, "entered")
    floor.close(greeting, 2.0, "played")
    assert floor.agent_state == "listening"
    # once it left initializing, the opening is over: a handoff counts as usual
    handoff = opened(floor, HANDOFF, 3.0)
    assert floor.agent_state == "thinking"
    floor.close(handoff, 4.0, "entered")
    assert floor.entered(4.0) == []  # late: nothing to change


def test_closing_during_the_opening_ends_listening() -> None:
    floor = Floor()
    floor.set_current(A, 0.0)
    floor.start(0.0, opening=True)
    opened(floor, HANDOFF, 0.0)
    assert floor.close_all(1.0) == [Agent("initializing", "listening", 1.0), NO_WATCHDOG]


def test_close_all_closes_everything() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    floor.set_audible(reply, True, 1.0)
    tool = opened(floor, TOOL, 2.0)
    hold = opened(floor, HOLD, 3.0, owner=SESSION_OWNER)
    paused = opened(floor, TOOL, 3.0, owner=B)
    assert floor.close_all(4.0) == [
        Agent("speaking", "listening", 4.0),
        Arm(4.0 + AWAY),
        NO_WATCHDOG,
    ]
    assert floor.open_obligations() == []
    for ob in (reply, tool, hold, paused):
        assert ob.phase is Phase.CLOSED
        assert ob.outcome == "session_closed"
        assert ob.closed_at == 4.0
    assert reply.audible is False
    assert floor.close_all(5.0) == []


def test_close_all_custom_outcome() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    floor.close_all(2.0, outcome="discarded")  # one of the reply's own outcomes
    assert reply.outcome == "discarded"


# ------------------------------------------------------------------------------ owners


def test_paused_owner_does_not_make_the_agent_thinking() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    assert floor.agent_state == "thinking"
    # the owner is paused (an AgentTask took over): its tool no longer counts, neither
    # for thinking nor for holding the away timer (scenario B5)
    assert floor.pause(A, 2.0) == [Agent("thinking", "listening", 2.0), Arm(2.0 + AWAY)]
    assert not floor.is_live(A)
    assert floor.open_obligations() == [tool]
    # resuming makes it count again
    assert floor.resume(A, 3.0) == [Agent("listening", "thinking", 3.0), CANCEL]
    assert floor.is_live(A)
    assert floor.resume(A, 4.0) == []  # resuming a running owner changes nothing
    assert floor.pause(B, 4.0) == []  # pausing a non-current owner changes nothing


def test_paused_owner_still_reports_speaking_while_audible() -> None:
    """Audible is audible: whatever the owner, the user hears it."""
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    floor.set_audible(reply, True, 1.0)
    assert floor.pause(A, 2.0) == []
    assert floor.agent_state == "speaking"
    assert floor.set_audible(reply, False, 3.0) == [
        Agent("speaking", "listening", 3.0),
        Arm(3.0 + AWAY),
    ]


def test_set_current_to_another_owner() -> None:
    floor = started()
    opened(floor, TOOL, 1.0)
    assert floor.set_current(B, 2.0) == [Agent("thinking", "listening", 2.0), Arm(2.0 + AWAY)]
    assert floor.current_owner == B
    assert not floor.is_live(A)
    assert floor.is_live(B)
    # B's own obligation counts at once
    reply_b = opened(floor, REPLY, 3.0, owner=B)
    assert floor.agent_state == "thinking"
    assert floor.close(reply_b, 4.0, "played")[0] == Agent("thinking", "listening", 4.0)
    assert floor.set_current(A, 5.0) == [Agent("listening", "thinking", 5.0), CANCEL]
    assert floor.set_current(A, 6.0) == []


def test_handoff_without_a_listening_pulse() -> None:
    """Open the new agent's reply first, switch, then close the old agent's tool."""
    floor = started()
    tool_a = opened(floor, TOOL, 1.0)
    reply_b = floor.obligation(REPLY, owner=B)
    # B is not current yet: no state change (only the earlier watchdog deadline)
    assert floor.open(reply_b, 2.0) == [Watchdog(302.0)]
    assert floor.set_current(B, 2.0) == []  # A's tool stops counting, B's reply starts
    assert floor.close(tool_a, 2.0) == []
    assert floor.agent_state == "thinking"


def test_obligation_of_a_never_current_owner_does_not_count() -> None:
    floor = started()
    opened(floor, REPLY, 1.0, owner=B)
    assert floor.agent_state == "listening"
    assert floor.away_deadline == AWAY  # still armed from start


def test_no_current_owner() -> None:
    floor = started(current=None)
    assert floor.current_owner is None
    opened(floor, REPLY, 1.0, owner=A)
    assert floor.agent_state == "listening"
    assert floor.set_current(A, 2.0) == [Agent("listening", "thinking", 2.0), CANCEL]


def test_session_owner_is_always_live() -> None:
    floor = started()
    floor.pause(A, 1.0)
    assert floor.is_live(SESSION_OWNER)
    backend = opened(floor, ObligationKind.BACKEND_RESPONSE, 2.0, owner=SESSION_OWNER)
    assert floor.agent_state == "thinking"
    assert floor.set_current(B, 3.0) == []
    assert floor.pause(B, 4.0) == []
    assert floor.pause(SESSION_OWNER, 5.0) == []  # cannot be paused
    assert floor.remove_owner(A, 6.0) == []
    assert floor.agent_state == "thinking"
    assert floor.close(backend, 7.0, "completed") == [
        Agent("thinking", "listening", 7.0),
        Arm(7.0 + AWAY),
        NO_WATCHDOG,
    ]


def test_session_owner_cannot_be_made_current() -> None:
    floor = started()
    with pytest.raises(FloorError):
        floor.set_current(SESSION_OWNER, 1.0)
    assert floor.current_owner == A


def test_remove_owner_closes_its_obligations() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    hold = opened(floor, HOLD, 1.0)
    other = opened(floor, TOOL, 1.0, owner=B)
    session = opened(floor, HOLD, 1.0, owner=SESSION_OWNER)
    assert floor.remove_owner(A, 2.0) == [
        Agent("thinking", "listening", 2.0),
        Watchdog(601.0),
    ]
    assert (reply.outcome, hold.outcome) == ("owner_closed", "owner_closed")
    assert reply.closed_at == 2.0
    assert floor.current_owner is None
    assert floor.open_obligations() == [other, session]
    assert floor.open_obligations(A) == []
    assert floor.open_obligations(B) == [other]
    # the session's hold still keeps the away timer off
    assert floor.away_deadline is None


def test_remove_owner_custom_outcome_and_forgets_pause() -> None:
    floor = started()
    opened(floor, TOOL, 1.0, owner=B)
    floor.pause(B, 1.0)
    tool_b2 = floor.obligation(TOOL, owner=B)
    floor.open(tool_b2, 1.5)
    assert floor.remove_owner(B, 2.0, outcome="abandoned") == [NO_WATCHDOG]
    assert tool_b2.outcome == "abandoned"
    # a later activity with the same name starts un-paused
    floor.set_current(B, 3.0)
    assert floor.is_live(B)


def test_remove_owner_that_is_not_current_keeps_the_current_one() -> None:
    floor = started()
    floor.remove_owner(B, 1.0)
    assert floor.current_owner == A


# -------------------------------------------------------------------------- away timer


def test_away_deadline_is_quiet_time_plus_timeout() -> None:
    floor = started()
    assert floor.away_deadline == AWAY
    reply = opened(floor, REPLY, 5.0)
    assert floor.away_deadline is None
    assert floor.close(reply, 10.0, "played") == [
        Agent("thinking", "listening", 10.0),
        Arm(40.0),
        NO_WATCHDOG,
    ]
    assert floor.away_deadline == 40.0
    # unrelated facts do not move it
    assert floor.pause(B, 20.0) == []
    assert floor.away_deadline == 40.0


def test_user_activity_restarts_the_count() -> None:
    floor = started()
    assert floor.user_activity(10.0) == [Arm(10.0 + AWAY)]
    assert floor.away_deadline == 10.0 + AWAY
    assert floor.user_activity(10.0) == []  # same instant, same deadline
    assert floor.user_activity(15.0) == [Arm(15.0 + AWAY)]
    # the timer armed at 10 s fires at 40 s: stale
    assert floor.away_timer_fired(10.0 + AWAY) == []
    assert floor.user_state == "listening"
    assert floor.away_timer_fired(15.0 + AWAY) == [User("listening", "away", 15.0 + AWAY)]


def test_user_activity_while_not_armed_emits_nothing() -> None:
    floor = started()
    opened(floor, REPLY, 1.0)
    assert floor.user_activity(2.0) == []
    assert floor.away_deadline is None


def test_stale_fire_before_the_deadline_is_ignored() -> None:
    floor = started()
    assert floor.away_timer_fired(AWAY - 0.001) == []
    assert floor.user_state == "listening"
    assert floor.away_deadline == AWAY


def test_fire_a_hair_early_still_counts() -> None:
    """Float rounding in the event loop must not make a due timer stale."""
    floor = started(at=0.1)
    deadline = floor.away_deadline
    assert deadline is not None
    assert deadline == pytest.approx(0.1 + AWAY)
    assert floor.away_timer_fired(deadline - 1e-12) != []
    assert floor.user_state == "away"


def test_firing_makes_the_user_away() -> None:
    floor = started()
    assert floor.away_timer_fired(AWAY) == [User("listening", "away", AWAY)]
    assert floor.user_state == "away"
    assert floor.agent_state == "listening"
    assert floor.away_deadline is None  # consumed: nothing to cancel
    assert floor.away_timer_fired(AWAY + 1) == []  # a second firing is stale
    assert floor.user_activity(AWAY + 1) == [User("away", "listening", AWAY + 1), Arm(2 * AWAY + 1)]


def test_late_fire_counts() -> None:
    floor = started()
    assert floor.away_timer_fired(AWAY + 5) == [User("listening", "away", AWAY + 5)]


def test_fire_without_a_timer_is_ignored() -> None:
    floor = started()
    opened(floor, REPLY, 1.0)
    assert floor.away_timer_fired(100.0) == []
    assert floor.user_state == "listening"


def test_user_speaking_brings_them_back_from_away() -> None:
    floor = started()
    floor.away_timer_fired(AWAY)
    assert floor.set_user_speaking(True, 40.0) == [User("away", "speaking", 40.0)]
    assert floor.set_user_speaking(False, 42.0) == [
        User("speaking", "listening", 42.0),
        Arm(42.0 + AWAY),
    ]


@pytest.mark.parametrize("kind", [REPLY, HOLD, PREEMPTIVE], ids=lambda k: k.value)
def test_opening_a_live_obligation_brings_them_back(kind: ObligationKind) -> None:
    """Committed or not: the agent works for the user again, so they are not away."""
    floor = started()
    floor.away_timer_fired(AWAY)
    ob = floor.obligation(kind, owner=SESSION_OWNER)
    effects = floor.open(ob, 40.0)
    assert User("away", "listening", 40.0) in effects
    assert floor.user_state == "listening"
    assert floor.away_deadline is None
    assert floor.close(ob, 50.0, an_outcome(kind))[-2:] == [Arm(50.0 + AWAY), NO_WATCHDOG]


def test_obligation_of_a_non_live_owner_leaves_the_user_away() -> None:
    floor = started()
    floor.away_timer_fired(AWAY)
    opened(floor, TOOL, 40.0, owner=B)
    assert floor.user_state == "away"
    # once that owner becomes current the agent works for the user: not away
    assert floor.set_current(B, 41.0) == [
        Agent("listening", "thinking", 41.0),
        User("away", "listening", 41.0),
    ]


def test_resuming_a_working_owner_brings_them_back() -> None:
    floor = started()
    opened(floor, TOOL, 1.0)
    floor.pause(A, 2.0)
    assert floor.away_timer_fired(2.0 + AWAY) == [User("listening", "away", 2.0 + AWAY)]
    assert floor.resume(A, 40.0) == [
        Agent("listening", "thinking", 40.0),
        User("away", "listening", 40.0),
    ]


def test_no_away_timer_without_timeout() -> None:
    floor = Floor()
    floor.set_current(A, 0.0)
    assert floor.start(0.0) == [Agent("initializing", "listening", 0.0)]
    reply = opened(floor, REPLY, 1.0)
    assert floor.close(reply, 2.0, "played") == [Agent("thinking", "listening", 2.0), NO_WATCHDOG]
    assert floor.user_activity(3.0) == []
    assert floor.away_deadline is None
    assert floor.away_timer_fired(1e9) == []
    assert floor.user_state == "listening"


def test_user_speaking_cancels_the_timer() -> None:
    floor = started()
    assert floor.set_user_speaking(True, 5.0) == [User("listening", "speaking", 5.0), CANCEL]
    assert floor.away_deadline is None
    assert floor.away_timer_fired(AWAY) == []  # the cancelled timer, if it still fires
    assert floor.user_state == "speaking"
    assert floor.set_user_speaking(True, 6.0) == []
    assert floor.set_user_speaking(False, 8.0) == [
        User("speaking", "listening", 8.0),
        Arm(8.0 + AWAY),
    ]


@pytest.mark.parametrize("state", ["thinking", "speaking"])
def test_no_away_timer_while_the_agent_is_busy(state: str) -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    if state == "speaking":
        floor.set_audible(reply, True, 1.0)
    assert floor.agent_state == state
    assert floor.away_deadline is None


def test_audible_speech_of_a_non_live_owner_holds_the_timer() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0, owner=B)
    assert floor.away_deadline == AWAY
    assert floor.set_audible(reply, True, 2.0) == [Agent("listening", "speaking", 2.0), CANCEL]
    assert floor.set_audible(reply, False, 3.0) == [
        Agent("speaking", "listening", 3.0),
        Arm(3.0 + AWAY),
    ]


def test_yielded_obligation_holds_the_timer() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0, committed=False)
    assert floor.away_deadline is None  # an open obligation of a live owner
    assert floor.set_yielded(reply, True, 2.0) == [Agent("listening", "thinking", 2.0)]
    assert floor.away_deadline is None
    assert floor.set_yielded(reply, False, 3.0) == [Agent("thinking", "listening", 3.0)]
    assert floor.away_deadline is None  # still open, so still no timer


# ---------------------------------------------------------------------------- watchdog


def test_watchdog_follows_the_earliest_deadline() -> None:
    floor = Floor()
    floor.set_current(A, 0.0)
    floor.start(0.0)
    reply = floor.obligation(REPLY, owner=A)
    assert floor.open(reply, 0.0)[-1] == Watchdog(300.0)
    answer = floor.obligation(ANSWER, owner=A)
    assert floor.open(answer, 1.0) == [Watchdog(11.0)]
    tool = floor.obligation(TOOL, owner=A)
    assert floor.open(tool, 2.0) == []  # 602 is later than 11
    assert floor.close(answer, 3.0, "unvoiced") == [Watchdog(300.0)]
    assert floor.close(reply, 4.0, "played") == [Watchdog(602.0)]
    assert floor.close(tool, 5.0)[-1] == NO_WATCHDOG


def test_expire_due_closes_expired_obligations() -> None:
    floor = started()
    reply = opened(floor, REPLY, 0.0)
    answer = opened(floor, ANSWER, 1.0)
    answer2 = opened(floor, ANSWER, 1.5)
    assert floor.expire_due(10.9) == []
    assert floor.expire_due(11.5) == [
        ObligationExpired(answer),
        ObligationExpired(answer2),
        Watchdog(300.0),
    ]
    for ob in (answer, answer2):
        assert ob.phase is Phase.CLOSED
        assert ob.outcome == "expired"
        assert ob.closed_at == 11.5
    assert floor.open_obligations() == [reply]
    assert floor.agent_state == "thinking"
    floor.set_audible(reply, True, 20.0)
    assert floor.expire_due(300.0) == [
        ObligationExpired(reply),
        Agent("speaking", "listening", 300.0),
        Arm(300.0 + AWAY),
        NO_WATCHDOG,
    ]
    assert reply.audible is False
    assert floor.expire_due(1000.0) == []


def test_expire_due_exactly_at_the_deadline() -> None:
    floor = started()
    tool = opened(floor, TOOL, 0.3, watchdog=0.7)
    deadline = tool.deadline
    assert deadline is not None
    assert deadline == pytest.approx(1.0)
    assert floor.expire_due(deadline) == [
        ObligationExpired(tool),
        Agent("thinking", "listening", deadline),
        Arm(deadline + AWAY),
        NO_WATCHDOG,
    ]


def test_expiring_a_non_live_obligation_changes_no_state() -> None:
    floor = started()
    tool = opened(floor, TOOL, 0.0, owner=B)
    assert floor.expire_due(600.0) == [ObligationExpired(tool), NO_WATCHDOG]


def test_per_kind_watchdog_override() -> None:
    floor = Floor(watchdogs={REPLY: 5, "tool": 7.5})
    floor.set_current(A, 0.0)
    floor.start(0.0)
    reply = floor.obligation(REPLY, owner=A)
    tool = floor.obligation(TOOL, owner=A)
    hold = floor.obligation(HOLD, owner=A)
    assert floor.open(tool, 1.0) == [Agent("listening", "thinking", 1.0), Watchdog(8.5)]
    assert floor.open(reply, 2.0) == [Watchdog(7.0)]
    assert floor.open(hold, 3.0) == []
    assert hold.deadline == 3.0 + 3600.0  # not overridden: the kind's default
    assert floor.expire_due(7.0) == [ObligationExpired(reply), Watchdog(8.5)]


def test_per_obligation_watchdog_override() -> None:
    floor = started()
    ob = floor.obligation(HOLD, owner=A, watchdog=2.0)
    assert floor.open(ob, 1.0) == [CANCEL, Watchdog(3.0)]


# ------------------------------------------------------------------ closing and errors


def test_obligation_defaults() -> None:
    floor = Floor()
    first = floor.obligation(REPLY, owner=A, label="greeting")
    second = floor.obligation(HOLD, owner=SESSION_OWNER)
    assert second.id != first.id
    assert (first.committed, second.committed) == (True, False)
    assert first.phase is Phase.NEW
    assert not first.is_open
    assert first.label == "greeting"
    assert "greeting" in repr(first)
    assert first.opened_at is None
    assert first.deadline is None


def test_closing_twice_is_a_no_op() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    assert floor.close(reply, 2.0, outcome="interrupted") != []
    assert floor.close(reply, 3.0, outcome="played") == []
    assert reply.outcome == "interrupted"
    assert reply.closed_at == 2.0


def test_close_several_in_one_step() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    tool = opened(floor, TOOL, 1.0)
    # "interrupted": an outcome both kinds have
    assert floor.close([reply, tool], 2.0, "interrupted") == [
        Agent("thinking", "listening", 2.0),
        Arm(32.0),
        NO_WATCHDOG,
    ]
    assert floor.close((ob for ob in [reply, tool]), 3.0, "interrupted") == []  # any iterable


def test_opening_twice_raises() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    with pytest.raises(FloorError):
        floor.open(reply, 2.0)
    floor.close(reply, 3.0, "played")
    with pytest.raises(FloorError):
        floor.open(reply, 4.0)  # a closed obligation cannot be reopened either
    with pytest.raises(FloorError):
        floor.hand_over([], reply, 5.0)


def test_closing_a_never_opened_obligation_raises() -> None:
    floor = started()
    ob = floor.obligation(REPLY, owner=A)
    with pytest.raises(FloorError):
        floor.close(ob, 1.0)
    with pytest.raises(FloorError):
        floor.hand_over(ob, floor.obligation(REPLY, owner=A), 1.0)
    for method in (floor.set_audible, floor.set_committed, floor.set_yielded):
        with pytest.raises(FloorError):
            method(ob, True, 1.0)
    assert ob.phase is Phase.NEW


def test_failed_close_changes_nothing() -> None:
    """A call that raises must not leave half its facts applied and unreported."""
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    never = floor.obligation(TOOL, owner=A)
    with pytest.raises(FloorError):
        floor.close([reply, never], 2.0, "played")
    assert reply.is_open
    assert floor.open_obligations() == [reply]
    assert floor.agent_state == "thinking"
    assert floor.close(reply, 3.0, "played") == [
        Agent("thinking", "listening", 3.0),
        Arm(33.0),
        NO_WATCHDOG,
    ]


def test_failed_hand_over_changes_nothing() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    never = floor.obligation(TOOL, owner=A)
    follow_up = floor.obligation(REPLY, owner=A)
    with pytest.raises(FloorError):
        floor.hand_over([tool, never], follow_up, 2.0)
    assert follow_up.phase is Phase.NEW
    assert tool.is_open
    assert floor.open_obligations() == [tool]
    # the follow-up can still be handed over to once the caller fixes its call
    assert floor.hand_over(tool, follow_up, 3.0) == [Watchdog(303.0)]


def test_hand_over_several_old_obligations() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    floor.set_audible(reply, True, 1.0)
    t1 = opened(floor, TOOL, 2.0)
    t2 = opened(floor, TOOL, 2.5)
    floor.close(reply, 3.0, "played")
    follow_up = floor.obligation(REPLY, owner=A)
    assert floor.hand_over([t1, t2], follow_up, 4.0) == [Watchdog(304.0)]
    assert (t1.outcome, t2.outcome) == ("handed_over", "handed_over")
    assert t1.closed_at == t2.closed_at == follow_up.opened_at == 4.0
    assert floor.open_obligations() == [follow_up]
    assert floor.agent_state == "thinking"


def test_hand_over_custom_outcome_and_from_a_closed_obligation() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    floor.close(tool, 2.0, outcome="failed")
    reply = floor.obligation(REPLY, owner=A)
    # the predecessor already closed (it lost a race): the successor still opens
    assert floor.hand_over(tool, reply, 3.0, outcome="answered") == [
        Agent("listening", "thinking", 3.0),
        CANCEL,
        Watchdog(303.0),
    ]
    assert tool.outcome == "failed"
    # an open one records the custom outcome (one of its kind's: a reply never hands
    # over, so a deferred result carried by the next reply)
    deferred = opened(floor, DEFERRED, 3.5)
    other = floor.obligation(REPLY, owner=A)
    floor.hand_over(deferred, other, 4.0, outcome="carried")
    assert deferred.outcome == "carried"


def test_hand_over_between_owners() -> None:
    """A session-owned successor keeps the agent thinking while the owner is paused."""
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    floor.pause(A, 2.0)
    assert floor.agent_state == "listening"
    continuation = floor.obligation(ObligationKind.PROVIDER_CONTINUATION, owner=SESSION_OWNER)
    assert floor.hand_over(tool, continuation, 3.0) == [
        Agent("listening", "thinking", 3.0),
        CANCEL,
        Watchdog(63.0),
    ]


def test_close_uncommits_in_the_same_step() -> None:
    """An interrupted speech closes its inline tool and releases a background one at once."""
    floor = started()
    inline = opened(floor, TOOL, 1.0)
    released = opened(floor, TOOL, 1.0)
    assert floor.close(inline, 2.0, "interrupted", uncommit=[released]) == [
        Agent("thinking", "listening", 2.0)
    ]  # no away timer: the released tool still works for the user
    assert released.is_open
    assert released.committed is False
    assert inline.outcome == "interrupted"
    assert floor.close(released, 3.0) == [Arm(3.0 + AWAY), NO_WATCHDOG]


def test_hand_over_uncommits_in_the_same_step() -> None:
    """The follow-up to a tool's interim result takes over; the tool goes on uncommitted."""
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    follow_up = floor.obligation(REPLY, owner=A)
    assert floor.hand_over([], follow_up, 2.0, uncommit=[tool]) == [Watchdog(302.0)]
    assert tool.is_open
    assert tool.committed is False
    assert floor.agent_state == "thinking"
    assert floor.close(follow_up, 3.0, "played") == [
        Agent("thinking", "listening", 3.0),
        Watchdog(601.0),
    ]


def test_uncommitting_a_closed_obligation_is_ignored() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    reply = opened(floor, REPLY, 1.0)
    floor.close(tool, 2.0)
    assert floor.close(reply, 3.0, "played", uncommit=[tool]) == [
        Agent("thinking", "listening", 3.0),
        Arm(3.0 + AWAY),
        NO_WATCHDOG,
    ]
    assert tool.committed is True


def test_failed_uncommit_changes_nothing() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    reply = opened(floor, REPLY, 1.0)
    never = floor.obligation(TOOL, owner=A)
    follow_up = floor.obligation(REPLY, owner=A)
    with pytest.raises(FloorError):
        floor.close(reply, 2.0, uncommit=[tool, never])
    with pytest.raises(FloorError):
        floor.hand_over(reply, follow_up, 2.0, uncommit=[tool, never])
    assert tool.committed is True
    assert reply.is_open
    assert follow_up.phase is Phase.NEW
    assert floor.open_obligations() == [tool, reply]


def test_late_facts_on_a_closed_obligation_are_ignored() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    floor.set_audible(reply, True, 1.0)
    floor.close(reply, 2.0, outcome="interrupted")
    assert reply.audible is False
    # trailing audio after the interruption
    assert floor.set_audible(reply, True, 2.1) == []
    assert reply.audible is False
    assert floor.agent_state == "listening"
    assert floor.set_committed(reply, False, 2.2) == []
    assert reply.committed is True
    assert floor.set_yielded(reply, True, 2.3) == []
    assert reply.yielded is False


def test_setting_a_fact_to_its_current_value_emits_nothing() -> None:
    floor = started()
    reply = opened(floor, REPLY, 1.0)
    assert floor.set_committed(reply, True, 2.0) == []
    assert floor.set_audible(reply, False, 2.0) == []
    assert floor.set_yielded(reply, False, 2.0) == []


def test_committed_flag_can_be_raised_again() -> None:
    floor = started()
    tool = opened(floor, TOOL, 1.0)
    floor.set_committed(tool, False, 2.0)
    assert floor.agent_state == "listening"
    assert floor.set_committed(tool, True, 3.0) == [Agent("listening", "thinking", 3.0)]


# ------------------------------------------------------------------------ construction


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_away_timeout_must_be_positive(timeout: float) -> None:
    with pytest.raises(ValueError, match="user_away_timeout"):
        Floor(user_away_timeout=timeout)


@pytest.mark.parametrize("seconds", [0.0, -5.0, float("nan")])
def test_watchdog_override_must_be_positive(seconds: float) -> None:
    with pytest.raises(ValueError, match="watchdog"):
        Floor(watchdogs={REPLY: seconds})
    with pytest.raises(ValueError, match="watchdog"):
        Floor().obligation(REPLY, owner="a", watchdog=seconds)


def test_watchdog_override_for_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="no_such_kind"):
        Floor(watchdogs={"no_such_kind": 5.0})
