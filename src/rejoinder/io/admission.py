"""Who may start a session: the process's measured load, a limit on live sessions, and a
graceful drain.

``SessionGate`` is framework-free. The server wraps each request that would start a
session (the WebSocket upgrade, a WebRTC offer) in ``gate.admit()`` and answers HTTP 503
with ``refusal()`` when it is refused; every entry-point call runs inside
``gate.run(entrypoint, conn)``, which counts it as live. ``drain(seconds)`` stops
admitting, waits up to ``seconds`` for the live sessions to end on their own, then closes
the rest: ``close(conn)`` first (the app closes the connection's session, so the entry
point returns and the transport says goodbye), cancelling what is still running after
``CANCEL_GRACE`` seconds.

With a ``LoadGauge`` (``rejoinder.io.load``) a session is also refused while the process's
predicted CPU load with one more session would pass the gauge's target: a full server
says so (``status`` is ``"full"``) instead of slowing every live session down.

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
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from .load import LoadGauge

__all__ = ["Admission", "SessionGate"]

logger = logging.getLogger("rejoinder.io.admission")

C = TypeVar("C")

CANCEL_GRACE = 5.0
"""Seconds a cancelled session gets to close after the drain timeout."""


@dataclass(eq=False)
class Admission:
    """A place held by an admitted request until its entry point starts."""

    gate: SessionGate[Any]
    claimed: bool = False
    released: bool = False
    _timer: asyncio.TimerHandle | None = None

    def release(self) -> None:
        """Give the place back (unless a session took it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.released:
            self.released = True
            self.gate._held.discard(self)
            self.gate._changed()

    def release_later(self, seconds: float) -> None:
        if seconds <= 0:
            self.release()
        else:
            self._timer = asyncio.get_running_loop().call_later(seconds, self.release)

    def claim(self) -> None:
        self.claimed = True
        self.release()


_current: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "rejoinder_admission", default=None
)


@dataclass(eq=False)
class SessionGate(Generic[C]):
    """Counts live sessions, refuses over ``max_sessions`` and while draining.

    ``close``: how to end one live connection gracefully when the drain time is up
    (default: cancel its entry point)."""

    max_sessions: int | None = None
    close: Callable[[C], Awaitable[None]] | None = None
    load: LoadGauge | None = None
    """Admission by measured load (``None``: by ``max_sessions`` alone)."""
    _live: dict[asyncio.Task[Any], C] = field(default_factory=dict)
    _held: set[Admission] = field(default_factory=set)
    _began: dict[asyncio.Task[Any], float] = field(default_factory=dict)
    """When each live session started (loop time)."""
    _draining: bool = False
    _idle: asyncio.Event | None = None
    started_total: int = 0
    refused_total: int = 0
    on_draining: list[Callable[[], None]] = field(default_factory=list)
    """Called once, as the gate starts draining (the sessions waiting for a client to
    resume end then: a client that comes back is sent to another server)."""

    def __post_init__(self) -> None:
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {self.max_sessions}")

    # ------------------------------------------------------------- reading

    @property
    def live(self) -> int:
        """Sessions whose entry point is running."""
        return len(self._live)

    @property
    def connections(self) -> list[C]:
        """The connections whose entry point is running."""
        return list(self._live.values())

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def status(self) -> Literal["ok", "draining", "full"]:
        if self._draining:
            return "draining"
        return "ok" if self.refusal() is None else "full"

    def refusal(self) -> str | None:
        """Why a new session would be refused now, or ``None``."""
        if self._draining:
            return "the server is shutting down (draining); try again elsewhere"
        taken = self.live + len(self._held)
        if self.max_sessions is not None and taken >= self.max_sessions:
            limit = self.max_sessions
            return f"the server is full (at most {limit} live session(s)); try again later"
        if self.load is not None:
            from .load import WINDOW_SECONDS

            now = asyncio.get_running_loop().time()
            young = sum(1 for began in self._began.values() if now - began < WINDOW_SECONDS)
            return self.load.refusal(taken, young + len(self._held))
        return None

    # ----------------------------------------------------------- admitting

    @contextlib.contextmanager
    def admit(self, linger: float = 0.0) -> Iterator[Admission | None]:
        """Around a request that may start a session: yields ``None`` when refused, else
        an ``Admission`` that holds a place until the request's entry point starts. The
        place is held in a context variable, so a task the request creates to run the
        entry point finds it. ``linger``: how long the place stays held after the request
        ended without its entry point starting yet (a WebRTC answer is sent before the
        peer connects and the session starts)."""
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
                admission.release_later(linger)

    async def run(self, entrypoint: Callable[[C], Awaitable[None]], conn: C) -> None:
        """Run one entry-point call as a live session."""
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - always called from a task
            raise RuntimeError("SessionGate.run must be awaited in a task")
        admission = _current.get()
        if admission is not None and not admission.claimed and not admission.released:
            admission.claim()
        elif self._draining:
            logger.info("a connection arrived while draining; not starting its session")
            return
        self._live[task] = conn
        self._began[task] = asyncio.get_running_loop().time()
        self.started_total += 1
        try:
            await entrypoint(conn)
        finally:
            self._live.pop(task, None)
            self._began.pop(task, None)
            self._changed()

    # ------------------------------------------------------------- draining

    def stop_admitting(self) -> None:
        """From now on every new session is refused (``status`` is ``"draining"``)."""
        if self._draining:
            return
        self._draining = True
        for call in self.on_draining:
            try:
                call()
            except Exception:  # one listener's bug must not stop the drain
                logger.exception("a drain listener failed")

    async def drain(self, seconds: float) -> int:
        """Stop admitting; wait up to ``seconds`` for live sessions to end, then
        cancel the rest. Returns how many had to be cancelled."""
        self.stop_admitting()
        await self.wait_idle(seconds)
        return await self.close_all()

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

    async def close_all(self, grace: float = CANCEL_GRACE) -> int:
        """End every live session: ``close(conn)`` for each (when given), then cancel the
        entry points still running after ``grace`` seconds. Returns how many were live."""
        live = dict(self._live)
        if not live:
            return 0
        tasks = set(live)
        if self.close is not None:
            closing = [asyncio.ensure_future(self._close_one(conn)) for conn in live.values()]
            await asyncio.wait(tasks, timeout=grace)
            for future in closing:
                future.cancel()
        still = [task for task in tasks if not task.done()]
        for task in still:
            task.cancel()
        if still:
            _done, pending = await asyncio.wait(still, timeout=grace)
            if pending:
                logger.warning("%d session(s) did not stop within %.1f s", len(pending), grace)
        return len(live)

    async def _close_one(self, conn: C) -> None:
        assert self.close is not None
        try:
            await self.close(conn)
        except Exception:
            logger.exception("closing a live session failed")

    def _changed(self) -> None:
        if self._idle is not None and not self._live:
            self._idle.set()
