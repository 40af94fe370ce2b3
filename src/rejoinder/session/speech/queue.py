"""SpeechQueue: an agent's speeches, delivered one at a time in priority order.

The next speech starts once the one before has ended its *output*; tools of earlier
speeches run on meanwhile (their obligations keep the state true). Tool follow-ups go
first: they continue the reply in progress. The queue can be paused (its agent waits on
a task) and knows which speech is being delivered and which still run.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
from collections.abc import Callable

from .run import SpeechRun

FOLLOW_UP = 0
NORMAL = 1

StartSpeech = Callable[[SpeechRun], asyncio.Task[None]]
OnIdle = Callable[[], bool]
"""Called when nothing is queued: may queue something (a deferred reply); returns
whether it did."""
OnUnstarted = Callable[[SpeechRun], None]
"""A speech whose task was cancelled before its first step: resolve it."""


class _Flag:
    """An ``asyncio.Event`` for one waiter: the queue's own ``run``. An Event allocates a
    waiter deque (about 380 bytes) whether anyone waits or not; every idle agent has two
    of these, so they count in a session's memory."""

    __slots__ = ("_set", "_waiter")

    def __init__(self, value: bool = False) -> None:
        self._set = value
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        assert self._waiter is None, "a _Flag has one waiter"
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class SpeechQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, SpeechRun]] = []
        self._seq = itertools.count()
        self._wake = _Flag()
        self._resumed = _Flag(True)
        self.current: SpeechRun | None = None
        """The speech whose output is being delivered."""
        self._running: set[SpeechRun] = set()
        """Speeches whose task runs: delivering output, or waiting on their tools."""

    @property
    def paused(self) -> bool:
        return not self._resumed.is_set()

    def push(self, run: SpeechRun, priority: int = NORMAL) -> None:
        heapq.heappush(self._heap, (priority, next(self._seq), run))
        self._wake.set()

    def wake(self) -> None:
        """Something may be ready to queue (a deferred result landed)."""
        self._wake.set()

    def pause(self) -> None:
        self._resumed.clear()

    def resume(self) -> None:
        self._resumed.set()

    def drop(self) -> None:
        """Every queued speech is resolved as interrupted (it was never heard)."""
        while self._heap:
            _, _, run = heapq.heappop(self._heap)
            run.interrupt()

    def interrupt(self) -> asyncio.Future[None]:
        """Interrupt every speech that allows it: queued ones are dropped, the one being
        delivered stops, and ones still waiting on their tools are cancelled with them.
        The future resolves once those speeches have stopped."""
        stopping: list[asyncio.Task[None]] = []
        for run in [*(queued for _, _, queued in self._heap), *self._running]:
            if run.done() or not run.handle.allow_interruptions:
                continue
            run.interrupt()
            if run.task is not None and not run.task.done():
                stopping.append(run.task)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        remaining = len(stopping)

        def one_stopped(_: object) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0 and not waiter.done():
                waiter.set_result(None)

        if not stopping:
            waiter.set_result(None)
        for task in stopping:
            task.add_done_callback(one_stopped)
        return waiter

    async def run(self, start: StartSpeech, on_idle: OnIdle, on_unstarted: OnUnstarted) -> None:
        """Deliver speeches forever (until cancelled with the agent's scope)."""
        while True:
            await self._resumed.wait()
            speech = self._next()
            if speech is None:
                if on_idle():
                    continue
                self._wake.clear()
                await self._wake.wait()
                continue
            self.current = speech
            task = start(speech)
            speech.attach(task)
            self._running.add(speech)
            task.add_done_callback(functools.partial(self._ended, speech, on_unstarted))
            try:
                await asyncio.wait((task, speech.playout), return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.current = None

    def _next(self) -> SpeechRun | None:
        while self._heap:
            _, _, run = heapq.heappop(self._heap)
            if not run.done():
                return run
        return None

    def _ended(self, speech: SpeechRun, on_unstarted: OnUnstarted, _: object) -> None:
        self._running.discard(speech)
        if not speech.started and not speech.done():
            on_unstarted(speech)
