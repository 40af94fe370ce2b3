"""A virtual-time event loop: when nothing is ready to run, the clock jumps to the next timer.

``rejoinder simulate`` runs a scenario on it, so a minute of conversation takes a few
milliseconds and the same steps every time. It is the idea of ``looptime`` (the test
suite's loop), kept to what a simulation needs and with no dependency: I/O is still
polled first, and a loop with no timer left waits for I/O on the wall clock as usual.
The clock starts at 0, so scenario times are loop times.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

__all__ = ["VirtualTimeLoop", "new_virtual_loop"]


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._virtual_now = start
        selector: selectors.BaseSelector = self._selector  # type: ignore[attr-defined]
        self._poll = selector.select
        selector.select = self._select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._virtual_now

    def _select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        ready = self._poll(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer at all: only the outside world can wake us
            return self._poll(None)
        # Nothing to run now: move the clock to the earliest timer, exactly (the loop has
        # already dropped cancelled timers from the head of its heap).
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        target = scheduled[0].when() if scheduled else self._virtual_now + timeout
        self._virtual_now = max(self._virtual_now, target)
        return []


def new_virtual_loop() -> VirtualTimeLoop:
    return VirtualTimeLoop()
