"""The session's public events as timeline entries (``timeline`` documents the kinds).

The floor's side (obligations, derived states, the user's speech) is written by
``TurnState``, the only code that talks to the floor; everything else that happens in a
session is announced as an event, and this turns those events into entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..floor import Obligation
from ..models import AgentHandoff, ChatMessage, FunctionCall, FunctionCallOutput
from .events import EventEmitter, EventName
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
    """Subscribe ``timeline`` to the events worth keeping (for the session's life)."""

    def now() -> float:
        return asyncio.get_running_loop().time()

    def item_added(ev: Any) -> None:
        item = ev.item
        if isinstance(item, ChatMessage) and item.role == "assistant":
            timeline.add(
                now(),
                "transcript",
                role="agent",
                text=item.content,
                final=True,
                interrupted=item.interrupted,
            )
        elif isinstance(item, FunctionCall):
            timeline.add(now(), "tool", name=item.name, call_id=item.call_id, status="started")
        elif isinstance(item, FunctionCallOutput):
            timeline.add(
                now(),
                "tool",
                name=item.name,
                call_id=item.call_id,
                status="finished",
                error=item.is_error,
            )
        elif isinstance(item, AgentHandoff):
            timeline.add(now(), "handoff", old=item.old_agent_id, new=item.new_agent_id)

    def transcribed(ev: Any) -> None:
        if ev.is_final:
            timeline.add(now(), "transcript", role="user", text=ev.transcript, final=True)

    def error(ev: Any) -> None:
        err = ev.error
        timeline.add(
            now(),
            "error",
            source=ev.source,
            error=f"{type(err).__name__}: {err}"[:300],
            recoverable=ev.recoverable,
        )

    def metrics(ev: Any) -> None:
        payload = ev.metrics
        to_dict = getattr(payload, "to_dict", None)
        timeline.add(now(), "metrics", metrics=to_dict() if callable(to_dict) else payload)

    def discarded(ev: Any) -> None:
        timeline.add(ev.created_at, "turn_discarded", text=ev.text, reason=ev.reason)

    def speculation(ev: Any) -> None:
        timeline.add(ev.created_at, "speculation", event=ev.event, reason=ev.reason)

    def background_tool(ev: Any) -> None:
        timeline.add(
            ev.created_at, "background_tool", name=ev.name, call_id=ev.call_id, error=ev.is_error
        )

    def away_timer(ev: Any) -> None:
        timeline.add(ev.created_at, "away_timer", armed=ev.armed, deadline=ev.deadline)

    handlers: list[tuple[EventName, Callable[[Any], None]]] = [
        ("conversation_item_added", item_added),
        ("user_input_transcribed", transcribed),
        ("error", error),
        ("metrics_collected", metrics),
        ("user_turn_discarded", discarded),
        ("speculation", speculation),
        ("background_tool_finished", background_tool),
        ("away_timer", away_timer),
        (
            "close",
            lambda ev: timeline.add(now(), "session", event="closed", reason=ev.reason),
        ),
    ]
    for name, handler in handlers:
        events.on(name, handler)
