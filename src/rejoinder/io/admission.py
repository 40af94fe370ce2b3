"""Who may start a session: a limit on live sessions, and a graceful drain.

``SessionGate`` is framework-free. The server asks ``refusal()`` before it accepts a
connection that would start a session (the WebSocket upgrade, a WebRTC offer) and answers
HTTP 503 with the reason when there is one; every entry-point call runs inside
``gate.run(...)``, which counts it as live. ``drain(timeout)`` stops admitting, waits up to
``timeout`` seconds for the live sessions to end on their own, then cancels the rest (each
entry point's ``finally`` closes its session) and waits for them, bounded.

A request that was admitted holds a place until its entry point starts (or the request
ends without one), so two requests racing for the last place cannot both get it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["Admission", "SessionGate"]

logger = logging.getLogger("rejoinder.io.admission")

T = TypeVar("T")

CANCEL_GRACE = 5.0
"""Seconds a cancelled session gets to close after the drain timeout."""


@dataclass(eq=False)
class Admission:
    """A place held by an admitted request until its entry point starts."""

    gate: SessionGate
    claimed: bool = False
    released: bool = False

    def release(self) -> None:
        """The request ended: give the place back unless a session took it."""
        if not self.released:
            self.released = True
            self.gate._held.discard(self)
            self.gate._changed()


_current: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "rejoinder_admission", default=None
)


@dataclass(eq=False)
class SessionGate:
    """Counts live sessions, refuses over ``max_sessions`` and while draining."""

    max_sessions: int | None = None
    _live: set[asyncio.Task[Any]] = field(default_factory=set)
    _held: set[Admission] = field(default_factory=set)
    _draining: bool = False
    _idle: asyncio.Event | None = None
    started_total: int = 0
    refused_total: int = 0

    def __post_init__(self) -> None:
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {self.max_sessions}")

    # ------------------------------------------------------------- reading

    @property
    def live(self) -> int:
        """Sessions whose entry point is running."""
        return len(self._live)

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def status(self) -> Literal["ok", "draining"]:
        return "draining" if self._draining else "ok"

    def refusal(self) -> str | None:
        """Why a new session would be refused now, or ``None``."""
        if self._draining:
            return "the server is shutting down (draining); try again elsewhere"
        if self.max_sessions is not None and self.live + len(self._held) >= self.max_sessions:
            return f"the server is full ({self.max_sessions} live sessions); try again later"
        return None

    # ----------------------------------------------------------- admitting

    @contextlib.contextmanager
    def admit(self) -> Iterator[Admission | None]:
        """Around a request that may start a session: yields ``None`` when refused, else
        an ``Admission`` that holds a place until the request's entry point starts. The
        place is held in a context variable, so a task the request creates to run the
        entry point finds it."""
        if self.refusal() is not None:
            self.refused_total += 1
            yield None
            return
        admission = Admission(self)
        self._held.add(admission)
        token = _current.set(admission)
        try:
            yield admission
        finally:
            _current.reset(token)
            if not admission.claimed:
                admission.release()

    async def run(self, entrypoint: Callable[[T], Awaitable[None]], conn: T) -> None:
        """Run one entry-point call as a live session."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always called from a task
            raise RuntimeError("SessionGate.run must be awaited in a task")
        admission = _current.get()
        if admission is not None and not admission.claimed and not admission.released:
            admission.claimed = True
            self._held.discard(admission)
        elif self._draining:
            logger.info("a connection arrived while draining; not starting its session")
            return
        self._live.add(task)
        self.started_total += 1
        try:
            await entrypoint(conn)
        finally:
            self._live.discard(task)
            self._changed()

    # ------------------------------------------------------------- draining

    def stop_admitting(self) -> None:
        """From now on every new session is refused (``status`` is ``"draining"``)."""
        self._draining = True

    async def drain(self, seconds: float) -> int:
        """Stop admitting; wait up to ``seconds`` for live sessions to end, then
        cancel the rest. Returns how many had to be cancelled."""
        self.stop_admitting()
        await self.wait_idle(seconds)
        return await self.cancel_all()

    async def wait_idle(self, seconds: float | None = None) -> bool:
        """Wait until no session is live (``True``) or ``seconds`` passed (``False``)."""
        loop = asyncio.get_running_loop()
        loop_deadline = None if seconds is None else loop.time() + seconds
        while self._live:
            self._idle = asyncio.Event()
            remaining = None if loop_deadline is None else loop_deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._idle.wait(), remaining)
            except TimeoutError:
                return not self._live
        return True

    async def cancel_all(self, grace: float = CANCEL_GRACE) -> int:
        """Cancel every live session and wait up to ``grace`` seconds for them to stop."""
        tasks = list(self._live)
        for task in tasks:
            task.cancel()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            if pending:
                logger.warning("%d session(s) did not stop within %.1f s", len(pending), grace)
        return len(tasks)

    def _changed(self) -> None:
        if self._idle is not None and not self._live:
            self._idle.set()
