"""ModelWorker: one thread of its own per speech model, taking work in order of urgency.

A local model object is shared by every session of the process (``rj.shared``), and
CTranslate2, ONNX Runtime and Piper each run one inference at a time on it. With
``asyncio.to_thread``, every waiting call held one of the loop's default executor
threads (six on two cores) while it queued inside the model: five sessions' Whisper
passes could take them all, and Piper's next sentence or Smart Turn's verdict then
waited for Whisper, so every call degraded together. Here each model has one worker
thread (the model runs one inference at a time anyway), so one model's queue never
blocks another's, and the loop's executor stays free for everything else.

The queue is ordered by urgency, then by arrival: a recognition that ends a user's turn
(``URGENT``) goes before a pass over words still being spoken (``BACKGROUND``), whichever
session asked first. Work whose caller stopped waiting (its task was cancelled: the
overlap was decided, the session closed) before it started is skipped, not run for
nobody; work that started runs to its end (no model here can be stopped midway).

The thread starts with the first job and ends after ``idle_seconds`` without one, so a
model object that is no longer used holds no thread. It is a ``concurrent.futures``
executor, used through ``loop.run_in_executor``: one worker serves sessions on any loop
(tests run many, one after another, some on virtual time, which counts work in
executors as pending).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import enum
import itertools
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["ModelWorker", "Urgency"]

T = TypeVar("T")

_EXIT_JOIN_SECONDS = 10.0
"""How long the interpreter's exit waits for a model's running job (a transcription is
about a second) before leaving its thread to the interpreter."""


class Urgency(enum.IntEnum):
    URGENT = 0
    """Someone waits for this now: the words that end a turn, a sentence to speak."""
    BACKGROUND = 1
    """Useful if it is in soon, never at the cost of urgent work: a pass over the words
    of an utterance still being spoken."""


class _Call(Generic[T]):
    """A call with its urgency, as ``run_in_executor`` hands it to ``submit``."""

    __slots__ = ("args", "fn", "urgency")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], urgency: Urgency) -> None:
        self.fn, self.args, self.urgency = fn, args, urgency

    def __call__(self) -> T:
        return self.fn(*self.args)


@dataclass(order=True)
class _Job:
    urgency: int
    seq: int
    call: Callable[[], Any] = field(compare=False)
    future: concurrent.futures.Future[Any] = field(compare=False)


class ModelWorker(concurrent.futures.Executor):
    """``await worker.run(fn, *args, urgency=Urgency.URGENT)`` runs ``fn(*args)`` on the
    worker's thread and returns its result (or raises its exception)."""

    def __init__(self, name: str, *, idle_seconds: float = 30.0) -> None:
        if idle_seconds <= 0:
            raise ValueError("idle_seconds must be positive")
        self.name = name
        self.idle_seconds = idle_seconds
        self._queue: queue.PriorityQueue[_Job] = queue.PriorityQueue()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.started_threads = 0
        """How many times a thread was started (once, unless it went idle in between)."""
        _live.add(self)

    @property
    def pending(self) -> int:
        """Jobs waiting for the thread (not counting the one it runs)."""
        return self._queue.qsize()

    async def run(
        self, fn: Callable[..., T], /, *args: Any, urgency: Urgency = Urgency.URGENT
    ) -> T:
        """``fn(*args)`` on the worker's thread. Cancelling the caller before the job
        started skips it."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self, _Call(fn, args, urgency))

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        urgency = fn.urgency if isinstance(fn, _Call) else Urgency.URGENT
        call = fn if not (args or kwargs) else (lambda: fn(*args, **kwargs))
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self._queue.put(_Job(int(urgency), next(self._seq), call, future))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name=f"rejoinder-{self.name}", daemon=True
                )
                self.started_threads += 1
                self._thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """End the thread once the job it runs is done; queued jobs are cancelled (a
        later ``submit`` starts a thread again). ``wait``: join it (at most 10 s)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._queue.put(_Job(-1, next(self._seq), _stop, concurrent.futures.Future()))
        if wait and thread is not threading.current_thread():
            thread.join(_EXIT_JOIN_SECONDS)

    def _work(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:  # submit() queues and checks for a thread under this lock
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            if job.call is _stop:
                with self._lock:
                    while not self._queue.empty():
                        self._queue.get_nowait().future.cancel()
                    self._thread = None
                return
            if not job.future.set_running_or_notify_cancel():
                continue  # cancelled while queued: nobody waits for it
            try:
                result = job.call()
            except BaseException as exc:  # delivered to the caller, whatever it is
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)


def _stop() -> None:
    """The job that ends a worker's thread (``ModelWorker.shutdown``)."""


_live: weakref.WeakSet[ModelWorker] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    # At exit, while the interpreter still runs: a daemon thread left waiting would be
    # killed during finalization, and a native library's thread-local state torn down
    # then (CTranslate2's: "terminate called without an active exception") aborts the
    # process with status 134 after everything went well.
    for worker in list(_live):
        worker.shutdown(wait=True)
