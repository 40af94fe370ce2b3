"""The obligation kinds: one table row per reason the agent can owe the user something.

Each row says whether an obligation of that kind is committed by default (a reply will
follow, so the agent reports ``thinking``), how long it may stay open before the watchdog
closes it as expired (so nothing stays owed forever), which outcomes it may close with and
which kinds it may hand over to. The floor enforces the last two (as h11 enforces its
table of legal transitions): closing a ``reply`` as ``"answered"`` or handing a ``hold``
over to a ``reply`` raises ``FloorError`` and changes nothing. Such a call is a bug in the
code that drives the floor; the randomized tests look for it.

Every kind may also end as ``FLOOR_OUTCOMES`` say: handed over, expired at its watchdog,
closed with its owner (an agent that stopped) or with the session.

Provider kinds (``provider_continuation``, ``backend_response``, ``answer``) are listed so
that the table stays the single place that names kinds; the runtime opens them once it
speaks a realtime or duplex protocol.
"""

from __future__ import annotations

from enum import StrEnum

from .._dataclass import dataclass


class ObligationKind(StrEnum):
    REPLY = "reply"
    TOOL = "tool"
    DEFERRED_REPLY = "deferred_reply"
    PREEMPTIVE = "preemptive"
    HOLD = "hold"
    HANDOFF = "handoff"
    PROVIDER_CONTINUATION = "provider_continuation"
    BACKEND_RESPONSE = "backend_response"
    ANSWER = "answer"
    CLIENT_DELEGATION = "client_delegation"
    RECOGNITION = "recognition"
    TRANSFER = "transfer"


HANDED_OVER = "handed_over"
EXPIRED = "expired"
OWNER_CLOSED = "owner_closed"
SESSION_CLOSED = "session_closed"
FLOOR_OUTCOMES = frozenset({HANDED_OVER, EXPIRED, OWNER_CLOSED, SESSION_CLOSED})
"""Outcomes open to every kind: set by ``Floor.hand_over``, the watchdog,
``Floor.remove_owner`` and ``Floor.close_all`` (which may be given others of the kind's)."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    committed: bool
    """Default for ``Obligation.committed``: does a reply follow this obligation?"""
    watchdog: float
    """Seconds an obligation of this kind may stay open before it expires."""
    closed_by: str
    """What closes it, in words."""
    outcomes: frozenset[str]
    """The outcomes ``Floor.close`` accepts for it. ``FLOOR_OUTCOMES`` are set by the
    floor's own paths (``hand_over``, the watchdog, ``remove_owner``, ``close_all``),
    never passed to ``close``."""
    hands_over_to: frozenset[ObligationKind] = frozenset()
    """The kinds it may be handed over to (``Floor.hand_over``); none: it never is."""


K = ObligationKind


KINDS: dict[ObligationKind, KindSpec] = {
    ObligationKind.REPLY: KindSpec(
        committed=True,
        watchdog=300.0,
        closed_by="playout finished, or interrupted/cancelled before it was heard",
        outcomes=frozenset({"played", "interrupted", "discarded"}),
    ),
    ObligationKind.TOOL: KindSpec(
        committed=True,
        watchdog=600.0,
        closed_by="the tool returned (hand-over to a reply when one is required)",
        outcomes=frozenset(
            {"done", "answered", "interrupted", "failed", "cancelled", "abandoned", "closed"}
        ),
        hands_over_to=frozenset({K.REPLY, K.DEFERRED_REPLY, K.HANDOFF, K.PROVIDER_CONTINUATION}),
    ),
    ObligationKind.DEFERRED_REPLY: KindSpec(
        committed=True,
        watchdog=120.0,
        closed_by="the reply carrying the result was created (hand-over, or carried by one "
        "already running), or its agent stopped",
        outcomes=frozenset({"carried"}),
        hands_over_to=frozenset({K.REPLY}),
    ),
    ObligationKind.PREEMPTIVE: KindSpec(
        committed=False,
        watchdog=60.0,
        closed_by="used (hand-over to a reply) or discarded, on every discarding path",
        outcomes=frozenset({"discarded"}),
        hands_over_to=frozenset({K.REPLY}),
    ),
    ObligationKind.HOLD: KindSpec(
        committed=False,
        watchdog=3600.0,
        closed_by="released by the application",
        outcomes=frozenset({"released"}),
    ),
    ObligationKind.HANDOFF: KindSpec(
        committed=True,
        watchdog=60.0,
        closed_by="the new agent entered (its on_enter returned; what it says is a reply)",
        outcomes=frozenset({"entered"}),
        hands_over_to=frozenset({K.HANDOFF}),
    ),
    ObligationKind.PROVIDER_CONTINUATION: KindSpec(
        committed=True,
        watchdog=60.0,
        closed_by="the provider created its response (hand-over) or failed",
        outcomes=frozenset({"failed", "connection lost"}),
        hands_over_to=frozenset({K.BACKEND_RESPONSE}),
    ),
    ObligationKind.BACKEND_RESPONSE: KindSpec(
        committed=True,
        watchdog=300.0,
        closed_by="completed (its tool calls are open obligations already; hand-over to "
        "answer when speech should follow), failed, incomplete, cancelled, connection lost",
        outcomes=frozenset(
            {
                "completed",
                "cancelled",
                "connection lost",
                "response failed",
                "response incomplete",
                "response cancelled",
            }
        ),
        hands_over_to=frozenset({K.ANSWER}),
    ),
    ObligationKind.ANSWER: KindSpec(
        committed=True,
        watchdog=10.0,
        closed_by="the next audible agent speech started (hand-over), or the bounded wait ran out",
        outcomes=frozenset({"refused", "unvoiced", "connection lost"}),
        hands_over_to=frozenset({K.ANSWER, K.BACKEND_RESPONSE, K.REPLY}),
    ),
    # The user finished an utterance and the recognizer is still on it: work for the
    # user (never marked away meanwhile), not yet a reply (the words may be a cough).
    ObligationKind.RECOGNITION: KindSpec(
        committed=False,
        watchdog=30.0,
        closed_by="transcribed: its transcript or the recognizer's failure arrived; at the "
        "watchdog the recognition is stopped and the utterance dropped, with an error event",
        outcomes=frozenset({"transcribed"}),
    ),
    # A phone call is being handed to a person (cold: the provider is asked to connect
    # it elsewhere; warm: the person is called and briefed first). The caller waits on
    # the agent meanwhile, so it is committed: the agent reports ``thinking``.
    ObligationKind.TRANSFER: KindSpec(
        committed=True,
        watchdog=300.0,
        closed_by="the caller was handed over (the session then ends), or the transfer "
        "failed or was given up and the agent has the caller back",
        outcomes=frozenset({"transferred", "failed", "taken back"}),
    ),
    ObligationKind.CLIENT_DELEGATION: KindSpec(
        committed=True,
        watchdog=120.0,
        closed_by="the application's answer was sent (hand-over to answer), or it failed, "
        "was cancelled or its session ended",
        outcomes=frozenset({"failed", "cancelled", "nothing to say", "connection lost", "closed"}),
        hands_over_to=frozenset({K.CLIENT_DELEGATION, K.ANSWER}),
    ),
}
