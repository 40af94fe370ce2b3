"""The obligation kinds: one table row per reason the agent can owe the user something.

Each row says whether an obligation of that kind is committed by default (a reply will
follow, so the agent reports ``thinking``), how long it may stay open before the watchdog
closes it as expired (so nothing stays owed forever), and which events close it. The
closing events are documentation for the runtime that drives the floor; the floor itself
only records facts.

Provider kinds (``provider_continuation``, ``backend_response``, ``answer``) are listed so
that the table stays the single place that names kinds; the runtime opens them once it
speaks a realtime or duplex protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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


@dataclass(frozen=True, slots=True)
class KindSpec:
    committed: bool
    """Default for ``Obligation.committed``: does a reply follow this obligation?"""
    watchdog: float
    """Seconds an obligation of this kind may stay open before it expires."""
    closed_by: str
    """What closes it (documentation for the code that drives the floor)."""


KINDS: dict[ObligationKind, KindSpec] = {
    ObligationKind.REPLY: KindSpec(
        committed=True,
        watchdog=300.0,
        closed_by="playout finished, or interrupted/cancelled before it was heard",
    ),
    ObligationKind.TOOL: KindSpec(
        committed=True,
        watchdog=600.0,
        closed_by="the tool returned (hand-over to a reply when one is required)",
    ),
    ObligationKind.DEFERRED_REPLY: KindSpec(
        committed=True,
        watchdog=120.0,
        closed_by="the reply carrying the result was created (hand-over), or it was dropped",
    ),
    ObligationKind.PREEMPTIVE: KindSpec(
        committed=False,
        watchdog=60.0,
        closed_by="used (hand-over to a reply) or discarded, on every discarding path",
    ),
    ObligationKind.HOLD: KindSpec(
        committed=False,
        watchdog=3600.0,
        closed_by="released by the application",
    ),
    ObligationKind.HANDOFF: KindSpec(
        committed=True,
        watchdog=60.0,
        closed_by="the new agent entered (its on_enter returned; what it says is a reply)",
    ),
    ObligationKind.PROVIDER_CONTINUATION: KindSpec(
        committed=True,
        watchdog=60.0,
        closed_by="the provider created its response (hand-over) or failed",
    ),
    ObligationKind.BACKEND_RESPONSE: KindSpec(
        committed=True,
        watchdog=300.0,
        closed_by="completed (hand-over to answer/tool), failed, incomplete, error, reconnect",
    ),
    ObligationKind.ANSWER: KindSpec(
        committed=True,
        watchdog=10.0,
        closed_by="the next audible agent speech started (hand-over), or the bounded wait ran out",
    ),
    # The user finished an utterance and the recognizer is still on it: work for the
    # user (never marked away meanwhile), not yet a reply (the words may be a cough).
    ObligationKind.RECOGNITION: KindSpec(
        committed=False,
        watchdog=30.0,
        closed_by="its transcript or the recognizer's failure arrived; at the watchdog the "
        "recognition is stopped and the utterance dropped, with an error event",
    ),
    ObligationKind.CLIENT_DELEGATION: KindSpec(
        committed=True,
        watchdog=120.0,
        closed_by="the application's answer was sent (hand-over to answer), or it failed, "
        "was cancelled or its session ended",
    ),
}
