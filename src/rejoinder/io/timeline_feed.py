"""TimelineFeed: the floor's timeline entries, forwarded to a client that asked for them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .protocol import TIMELINE_KINDS, ServerMessage, TimelineMessage, json_safe

if TYPE_CHECKING:
    from ..session import AgentSession

__all__ = ["TIMELINE_POLL", "TimelineFeed"]

logger = logging.getLogger("rejoinder")


TIMELINE_POLL = 0.1
"""Longest wait (s) before a new timeline entry goes to a client that asked for them."""


class TimelineFeed:
    """Forwards the floor's timeline entries (``TIMELINE_KINDS``) to the client, ``t``
    made relative to the session's start: those so far at once, then new ones on each
    state change and at least every ``TIMELINE_POLL`` seconds. The timeline is a bounded
    deque, so what was sent is tracked by the count of entries ever added."""

    def __init__(self, session: AgentSession[Any], send: Callable[[ServerMessage], None]) -> None:
        self._session = session
        self._send = send
        self._seen = 0
        self._t0: float | None = None
        self._loop = asyncio.get_running_loop()
        self._soon: asyncio.Handle | None = None
        self._handlers: list[tuple[Any, Any]] = [
            ("agent_state_changed", self._changed),
            ("user_state_changed", self._changed),
        ]
        for name, handler in self._handlers:
            session.on(name, handler)
        self.flush()
        self._task = asyncio.ensure_future(self._poll())

    def stop(self) -> None:
        """Send what is left and stop (the session closed)."""
        self._task.cancel()
        if self._soon is not None:
            self._soon.cancel()
        for name, handler in self._handlers:
            self._session.off(name, handler)
        self.flush()

    def _changed(self, _: Any) -> None:
        # the entry is noted in the same step as the event, maybe after it: read it soon
        if self._soon is None:
            self._soon = self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._soon = None
        self.flush()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(TIMELINE_POLL)
            self.flush()

    def flush(self) -> None:
        try:
            timeline = self._session.timeline
            total = len(timeline) + timeline.dropped
            new = total - self._seen
            if new <= 0:
                return
            self._seen = total
            entries = timeline.entries()
            if self._t0 is None:
                started = (e for e in entries if e["kind"] == "session")
                first = next(started, entries[0] if entries else None)
                self._t0 = float(first["t"]) if first is not None else self._loop.time()
            for entry in entries[-new:] if new < len(entries) else entries:
                if entry["kind"] not in TIMELINE_KINDS:
                    continue
                fields = json_safe({k: v for k, v in entry.items() if k != "t"})
                t = round(float(entry["t"]) - self._t0, 3)
                self._send(TimelineMessage(entry={"t": t, **fields}))
        except Exception:  # a bad entry must not stop the call
            logger.exception("sending the timeline failed")
