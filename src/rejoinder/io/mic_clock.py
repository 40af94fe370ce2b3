"""The shared clock on which microphone audio is handed to the sessions.

Every client's microphone frames arrive at their own phase, so a server with N listening
sessions would wake a session's reader N times per frame period, and run N VAD models
(Silero: about 1.2 MB of weights) at N different moments. Between two of them the CPU
goes idle or runs something else, and each model run starts with cold caches: measured
on a shared 2-core VM, 10 Silero runs spread over 32 ms cost about 2.5 times as much CPU
as the same 10 run back to back. So a ``PushAudioInput`` that has audio for an idle
reader does not wake it at once: it asks the loop's clock to, at its next tick, and every
reader with audio wakes in that same loop iteration. A frame waits at most one
``interval`` (20 ms by default, one frame of a typical client) before the session sees
it; a reader that is busy finds the frames queued and never waits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import Callable

__all__ = ["MIC_BATCH_INTERVAL", "MicClock", "mic_clock"]

logger = logging.getLogger("rejoinder.io")

MIC_BATCH_INTERVAL = 0.02
"""Seconds between two hand-overs of microphone audio (0: hand each frame over at once)."""


class MicClock:
    """Runs the callbacks given to ``call_at_tick`` together, at the next multiple of
    ``interval`` on the loop's clock, in order. One given while the tick runs (a frame
    a callback pushed wakes its reader) runs in the same tick. The timer is armed only
    while something waits."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._loop = loop
        self.interval = interval
        self._due: list[Callable[[], object]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._ticking = False

    def call_at_tick(self, callback: Callable[[], object]) -> None:
        self._due.append(callback)
        if self._timer is None and not self._ticking:
            tick = (math.floor(self._loop.time() / self.interval) + 1) * self.interval
            self._timer = self._loop.call_at(tick, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._ticking = True
        try:
            while self._due:
                due, self._due = self._due, []
                for callback in due:
                    try:
                        callback()
                    except Exception:  # one session's bug must not starve the others
                        logger.exception("a microphone hand-over failed")
        finally:
            self._ticking = False


_clocks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, MicClock]] = (
    weakref.WeakKeyDictionary()
)


def mic_clock(interval: float) -> MicClock:
    """The running loop's clock for ``interval``."""
    loop = asyncio.get_running_loop()
    clocks = _clocks.get(loop)
    if clocks is None:
        clocks = _clocks[loop] = {}
    clock = clocks.get(interval)
    if clock is None:
        clock = clocks[interval] = MicClock(loop, interval)
    return clock
