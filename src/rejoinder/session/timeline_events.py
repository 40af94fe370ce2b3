"""The session's public events as timeline entries (``timeline`` documents the kinds).

The floor's side (obligations, derived states, the user's speech) is written by
``TurnState``, the only code that talks to the floor; everything else that happens in a
session is announced as an event, and this turns those events into entries.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from typing import Any

from .._dataclass import dataclass
from ..floor import Obligation
from ..models import AgentHandoff, ChatMessage, FunctionCall, FunctionCallOutput
from .events import EventEmitter
from .timeline import Timeline

__all__ = ["Owed", "owed_now", "record_events"]


@dataclass(frozen=True, slots=True)
class Owed:
    """One thing the session owes or works on right now (``session.owed()``)."""

    kind: str
    """The obligation's kind: ``reply``, ``tool``, ``handoff``, ``backend_response``, ..."""
    owner: str
    """The activity (agent) it belongs to, or ``session``."""
    label: str
    age: float
    """Seconds since it opened."""
    deadline: float | None
    """Loop time at which its watchdog closes it as expired."""
    committed: bool
    """It keeps the agent out of ``listening`` (an uncommitted one only keeps the user
    from being marked away)."""
    audible: bool
    yielded: bool
    id: int


def owed_now(obligations: Iterable[Obligation], now: float) -> list[Owed]:
    """``Owed`` rows for the open obligations, at loop time ``now``."""
    return [
        Owed(
            kind=ob.kind.value,
            owner=ob.owner,
            label=ob.label,
            age=now - (ob.opened_at if ob.opened_at is not None else now),
            deadline=ob.deadline,
            committed=ob.committed,
            audible=ob.audible,
            yielded=ob.yielded,
            id=ob.id,
        )
        for ob in obligations
    ]


def record_events(timeline: Timeline, events: EventEmitter) -> None:
    """Subscribe ``timeline`` to the events worth keeping (for the session's life): one
    tap for them all, not a handler per event (a session is small; eighteen handler
    lists and closures were a tenth of an idle one)."""
    events.tap(_RECORDED, functools.partial(_record, timeline))


def _record(timeline: Timeline, name: str, ev: Any) -> None:
    _ENTRIES[name](timeline, ev)


def _now() -> float:
    return asyncio.get_running_loop().time()


def _item_added(timeline: Timeline, ev: Any) -> None:
    item = ev.item
    if isinstance(item, ChatMessage) and item.role == "assistant":
        timeline.add(
            _now(),
            "transcript",
            role="agent",
            text=item.content,
            final=True,
            interrupted=item.interrupted,
        )
    elif isinstance(item, FunctionCall):
        timeline.add(_now(), "tool", name=item.name, call_id=item.call_id, status="started")
    elif isinstance(item, FunctionCallOutput):
        timeline.add(
            _now(),
            "tool",
            name=item.name,
            call_id=item.call_id,
            status="finished",
            error=item.is_error,
        )
    elif isinstance(item, AgentHandoff):
        timeline.add(_now(), "handoff", old=item.old_agent_id, new=item.new_agent_id)


def _transcribed(timeline: Timeline, ev: Any) -> None:
    if ev.is_final:
        timeline.add(_now(), "transcript", role="user", text=ev.transcript, final=True)


def _error(timeline: Timeline, ev: Any) -> None:
    err = ev.error
    timeline.add(
        _now(),
        "error",
        source=ev.source,
        error=f"{type(err).__name__}: {err}"[:300],
        recoverable=ev.recoverable,
    )


def _metrics(timeline: Timeline, ev: Any) -> None:
    payload = ev.metrics
    to_dict = getattr(payload, "to_dict", None)
    timeline.add(_now(), "metrics", metrics=to_dict() if callable(to_dict) else payload)


def _discarded(timeline: Timeline, ev: Any) -> None:
    timeline.add(ev.created_at, "turn_discarded", text=ev.text, reason=ev.reason)


def _speculation(timeline: Timeline, ev: Any) -> None:
    timeline.add(ev.created_at, "speculation", event=ev.event, reason=ev.reason)


def _background_tool(timeline: Timeline, ev: Any) -> None:
    timeline.add(
        ev.created_at, "background_tool", name=ev.name, call_id=ev.call_id, error=ev.is_error
    )


def _away_timer(timeline: Timeline, ev: Any) -> None:
    timeline.add(ev.created_at, "away_timer", armed=ev.armed, deadline=ev.deadline)


def _closed(timeline: Timeline, ev: Any) -> None:
    timeline.add(_now(), "session", event="closed", reason=ev.reason)


_ENTRIES: dict[str, Callable[[Timeline, Any], None]] = {
    "conversation_item_added": _item_added,
    "user_input_transcribed": _transcribed,
    "error": _error,
    "metrics_collected": _metrics,
    "user_turn_discarded": _discarded,
    "speculation": _speculation,
    "background_tool_finished": _background_tool,
    "away_timer": _away_timer,
    "close": _closed,
}
_RECORDED = frozenset(_ENTRIES)
