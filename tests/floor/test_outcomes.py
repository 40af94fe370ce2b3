"""The kinds table enforced: the outcomes each kind closes with, the kinds it hands over to.

``Floor.close`` accepts only an outcome of each obligation's kind (``KindSpec.outcomes``);
``Floor.hand_over`` only a successor of a kind each predecessor hands over to
(``KindSpec.hands_over_to``), closing them as ``handed_over`` or one of their kind's
outcomes; ``remove_owner`` and ``close_all`` the ``FLOOR_OUTCOMES`` or the kinds' own.
Anything else is a bug in the caller: ``FloorError``, naming the kind and what it allows,
and nothing changed, so the next call returns the effects it would have returned anyway
(each test compares against a twin floor that never saw the refused call).
"""

from __future__ import annotations

import pytest

from rejoinder.floor import (
    KINDS,
    SESSION_OWNER,
    Floor,
    FloorError,
    Obligation,
    ObligationKind,
    Phase,
)
from rejoinder.floor.kinds import FLOOR_OUTCOMES, HANDED_OVER

AWAY = 30.0
A, B = "agent_a", "agent_b"
TOOL = ObligationKind.TOOL
REPLY = ObligationKind.REPLY
HOLD = ObligationKind.HOLD
HANDOFF = ObligationKind.HANDOFF

KIND_LIST = list(ObligationKind)
KIND_OUTCOMES = frozenset().union(*(spec.outcomes for spec in KINDS.values()))
"""Every outcome some kind closes with."""


def ids(value: object) -> str:
    return value.value if isinstance(value, ObligationKind) else str(value)


def foreign(kind: ObligationKind) -> list[str]:
    """Outcomes ``kind`` does not close with: other kinds' own, and a made-up one."""
    return [*sorted(KIND_OUTCOMES - KINDS[kind].outcomes), "no such outcome"]


def foreign_pairs() -> list[tuple[ObligationKind, str]]:
    return [(kind, outcome) for kind in KIND_LIST for outcome in foreign(kind)]


def a_target(kind: ObligationKind) -> ObligationKind:
    return sorted(KINDS[kind].hands_over_to)[0]


HANDING_KINDS = [k for k in KIND_LIST if KINDS[k].hands_over_to]


def scene(kind: ObligationKind, *, owner: str = A) -> tuple[Floor, Obligation, Obligation]:
    """A started floor (away timeout, current ``A``) with a committed tool of ``A`` and an
    audible obligation of ``kind`` owned by ``owner`` open."""
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    floor.start(0.0)
    tool = floor.obligation(TOOL, owner=A, label="tool")
    floor.open(tool, 1.0)
    ob = floor.obligation(kind, owner=owner, label="x")
    floor.open(ob, 1.5)
    floor.set_audible(ob, True, 1.5)
    return floor, tool, ob


def state(floor: Floor) -> tuple[object, ...]:
    """What the floor derived and what it holds open, every fact of it."""
    return (
        floor.agent_state,
        floor.user_state,
        floor.away_deadline,
        floor.current_owner,
        [
            (ob.id, ob.kind, ob.owner, ob.phase, ob.committed, ob.audible, ob.yielded, ob.deadline)
            for ob in floor.open_obligations()
        ],
    )


def assert_unchanged(
    floor: Floor, twin: Floor, before: tuple[object, ...], *untouched: Obligation
) -> None:
    """Nothing changed: the same state as before, the obligations still as they were, and
    the next calls return what they return on the twin that never saw the refused call."""
    assert state(floor) == before == state(twin)
    for ob in untouched:
        assert ob.phase is Phase.OPEN, ob
        assert (ob.outcome, ob.closed_at) == (None, None), ob
    assert floor.set_user_speaking(True, 3.0) == twin.set_user_speaking(True, 3.0)
    assert floor.set_user_speaking(False, 4.0) == twin.set_user_speaking(False, 4.0)
    assert floor.remove_owner(A, 5.0) == twin.remove_owner(A, 5.0)
    assert floor.close_all(6.0) == twin.close_all(6.0)
    assert state(floor) == state(twin)


def assert_names(
    err: pytest.ExceptionInfo[FloorError], kind: ObligationKind, *allowed: str
) -> None:
    message = str(err.value)
    assert f"an obligation of kind {kind.value} " in message, message
    for what in allowed:
        assert what in message, (what, message)


# ----------------------------------------------------------------------------- close


@pytest.mark.parametrize(("kind", "outcome"), foreign_pairs(), ids=ids)
def test_closing_with_an_outcome_of_another_kind_raises(kind: ObligationKind, outcome: str) -> None:
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.close(ob, 2.0, outcome)
    assert_names(err, kind, repr(outcome), *(repr(o) for o in KINDS[kind].outcomes))
    assert ob.audible is True
    assert_unchanged(floor, twin, before, ob, tool)


@pytest.mark.parametrize("kind", [k for k in KIND_LIST if k is not TOOL], ids=ids)
def test_one_foreign_outcome_closes_none_of_several(kind: ObligationKind) -> None:
    """``"done"`` closes the tool, not the other one: neither closes, nothing uncommits."""
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.close([tool, ob], 2.0, "done", uncommit=[tool])
    assert_names(err, kind, "'done'")
    assert tool.committed is True
    assert_unchanged(floor, twin, before, ob, tool)


def test_the_default_outcome_is_a_tool_s() -> None:
    floor, tool, reply = scene(REPLY)
    with pytest.raises(FloorError, match="reply"):
        floor.close(reply, 2.0)
    floor.close(tool, 2.0)
    assert tool.outcome == "done"


# ------------------------------------------------------------------------- hand over


@pytest.mark.parametrize(
    ("old", "new"), [(HOLD, REPLY), (REPLY, TOOL), (REPLY, REPLY), (HANDOFF, REPLY)], ids=ids
)
def test_an_illegal_hand_over_raises(old: ObligationKind, new: ObligationKind) -> None:
    floor, tool, ob = scene(old)
    twin, _, _ = scene(old)
    successor = floor.obligation(new, owner=A)
    twin.obligation(new, owner=A)  # (the same ids on both)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.hand_over(ob, successor, 2.0, uncommit=[tool])
    targets = sorted(k.value for k in KINDS[old].hands_over_to) or ["nothing"]
    assert_names(err, old, "hands over to", *targets)
    assert successor.phase is Phase.NEW
    assert tool.committed is True
    assert_unchanged(floor, twin, before, ob, tool)
    # the successor can still be opened once the caller fixes its call
    assert floor.open(successor, 7.0) == twin.open(twin.obligation(new, owner=A), 7.0)


@pytest.mark.parametrize(
    "kind", [k for k in KIND_LIST if REPLY not in KINDS[k].hands_over_to], ids=ids
)
def test_one_illegal_predecessor_hands_none_over(kind: ObligationKind) -> None:
    """A tool hands over to a reply, the other one does not: nothing is handed over."""
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    reply = floor.obligation(REPLY, owner=A)
    twin.obligation(REPLY, owner=A)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.hand_over([tool, ob], reply, 2.0)
    assert_names(err, kind, "cannot be handed over")
    assert reply.phase is Phase.NEW
    assert_unchanged(floor, twin, before, ob, tool)


@pytest.mark.parametrize(
    ("kind", "outcome"),
    [
        (kind, outcome)
        for kind in HANDING_KINDS
        for outcome in ["no such outcome", "played", "released", "expired", "session_closed"]
        if outcome not in KINDS[kind].outcomes
    ],
    ids=ids,
)
def test_handing_over_with_a_foreign_outcome_raises(kind: ObligationKind, outcome: str) -> None:
    """A legal successor, but the predecessor cannot close as ``outcome``."""
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    successor = floor.obligation(a_target(kind), owner=A)
    twin.obligation(a_target(kind), owner=A)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.hand_over(ob, successor, 2.0, outcome)
    allowed = KINDS[kind].outcomes | {HANDED_OVER}
    assert_names(err, kind, repr(outcome), *(repr(o) for o in allowed))
    assert successor.phase is Phase.NEW
    assert_unchanged(floor, twin, before, ob, tool)


# ------------------------------------------------------------- remove_owner, close_all


@pytest.mark.parametrize(("kind", "outcome"), foreign_pairs(), ids=ids)
def test_removing_an_owner_with_a_foreign_outcome_raises(
    kind: ObligationKind, outcome: str
) -> None:
    floor, tool, ob = scene(kind, owner=B)
    twin, _, _ = scene(kind, owner=B)
    floor.set_current(B, 1.8)
    floor.pause(B, 1.9)
    twin.set_current(B, 1.8)
    twin.pause(B, 1.9)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.remove_owner(B, 2.0, outcome)
    allowed = FLOOR_OUTCOMES | KINDS[kind].outcomes
    assert_names(err, kind, repr(outcome), *(repr(o) for o in sorted(allowed)))
    # still current, still paused
    assert floor.current_owner == B
    assert not floor.is_live(B)
    assert_unchanged(floor, twin, before, ob, tool)


@pytest.mark.parametrize(("kind", "outcome"), foreign_pairs(), ids=ids)
def test_closing_all_with_a_foreign_outcome_raises(kind: ObligationKind, outcome: str) -> None:
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.close_all(2.0, outcome)
    # the first open obligation that cannot close so is named (the tool, if it cannot)
    refusing = [k for k in (TOOL, kind) if outcome not in KINDS[k].outcomes | FLOOR_OUTCOMES]
    assert_names(err, refusing[0], repr(outcome), *(repr(o) for o in sorted(FLOOR_OUTCOMES)))
    assert_unchanged(floor, twin, before, ob, tool)


@pytest.mark.parametrize("kind", [k for k in KIND_LIST if k is not TOOL], ids=ids)
def test_closing_all_with_an_outcome_only_the_tool_has(kind: ObligationKind) -> None:
    """``close_all`` checks every open obligation before it closes any."""
    floor, tool, ob = scene(kind)
    twin, _, _ = scene(kind)
    outcome = next(o for o in sorted(KINDS[TOOL].outcomes) if o not in KINDS[kind].outcomes)
    before = state(floor)
    with pytest.raises(FloorError) as err:
        floor.close_all(2.0, outcome)
    assert_names(err, kind, repr(outcome))
    assert_unchanged(floor, twin, before, ob, tool)


def test_a_refused_close_all_leaves_the_opening_on() -> None:
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    floor.start(0.0, opening=True)
    entering = floor.obligation(HANDOFF, owner=A)
    floor.open(entering, 0.0)
    with pytest.raises(FloorError, match="handoff"):
        floor.close_all(1.0, "played")
    assert floor.agent_state == "initializing"
    assert entering.is_open
    # the opening still runs: closing its handoff is no listening until entered()
    assert floor.close(entering, 2.0, "entered") != []
    assert floor.agent_state == "initializing"


def test_only_the_removed_owner_s_obligations_are_checked() -> None:
    floor, tool, reply = scene(REPLY, owner=B)
    hold = floor.obligation(HOLD, owner=SESSION_OWNER)
    floor.open(hold, 1.6)
    floor.remove_owner(B, 2.0, "played")  # a hold never plays, but the hold is not B's
    assert reply.outcome == "played"
    assert tool.is_open and hold.is_open


def test_close_all_with_an_outcome_every_open_kind_has() -> None:
    floor, tool, reply = scene(REPLY)
    floor.close_all(2.0, "interrupted")
    assert (tool.outcome, reply.outcome) == ("interrupted", "interrupted")


# ---------------------------------------------------------------------- the table


def one_open(kind: ObligationKind) -> tuple[Floor, Obligation]:
    floor = Floor(user_away_timeout=AWAY)
    floor.set_current(A, 0.0)
    floor.start(0.0)
    ob = floor.obligation(kind, owner=A)
    floor.open(ob, 1.0)
    return floor, ob


@pytest.mark.parametrize("kind", KIND_LIST, ids=ids)
def test_every_outcome_of_a_kind_closes_it(kind: ObligationKind) -> None:
    assert KINDS[kind].outcomes, f"{kind.value} has no outcome of its own"
    assert not KINDS[kind].outcomes & FLOOR_OUTCOMES
    for outcome in sorted(KINDS[kind].outcomes):
        floor, ob = one_open(kind)
        floor.close(ob, 2.0, outcome)
        assert (ob.phase, ob.outcome, ob.closed_at) == (Phase.CLOSED, outcome, 2.0)
        assert floor.open_obligations() == []


@pytest.mark.parametrize("kind", KIND_LIST, ids=ids)
@pytest.mark.parametrize("how", ["remove_owner", "close_all"])
def test_every_floor_outcome_and_every_own_outcome_ends_a_kind(
    kind: ObligationKind, how: str
) -> None:
    for outcome in sorted(FLOOR_OUTCOMES | KINDS[kind].outcomes):
        floor, ob = one_open(kind)
        if how == "remove_owner":
            floor.remove_owner(A, 2.0, outcome)
        else:
            floor.close_all(2.0, outcome)
        assert (ob.phase, ob.outcome) == (Phase.CLOSED, outcome)


@pytest.mark.parametrize("new", KIND_LIST, ids=ids)
@pytest.mark.parametrize("old", KIND_LIST, ids=ids)
def test_hand_over_table(old: ObligationKind, new: ObligationKind) -> None:
    """Each kind hands over to exactly the kinds of its ``hands_over_to``."""
    floor, ob = one_open(old)
    successor = floor.obligation(new, owner=A)
    if new in KINDS[old].hands_over_to:
        floor.hand_over(ob, successor, 2.0)
        assert (ob.phase, ob.outcome, ob.closed_at) == (Phase.CLOSED, HANDED_OVER, 2.0)
        assert floor.open_obligations() == [successor]
    else:
        before = state(floor)
        with pytest.raises(FloorError, match=f"an obligation of kind {old.value} hands over to"):
            floor.hand_over(ob, successor, 2.0)
        assert successor.phase is Phase.NEW
        assert ob.is_open
        assert state(floor) == before


@pytest.mark.parametrize("kind", HANDING_KINDS, ids=ids)
def test_every_hand_over_outcome_of_a_kind(kind: ObligationKind) -> None:
    """A hand-over closes its predecessor as ``handed_over`` or one of its kind's."""
    for outcome in sorted(KINDS[kind].outcomes | {HANDED_OVER}):
        floor, ob = one_open(kind)
        successor = floor.obligation(a_target(kind), owner=A)
        floor.hand_over(ob, successor, 2.0, outcome)
        assert (ob.outcome, successor.phase) == (outcome, Phase.OPEN)


def test_hand_over_from_nothing_takes_any_kind() -> None:
    for kind in KIND_LIST:
        floor, _ = one_open(HOLD)
        floor.hand_over([], floor.obligation(kind, owner=A), 2.0)
        assert floor.open_count == 2
