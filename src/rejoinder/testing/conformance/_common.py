"""What the four conformance suites share: ``NotSupported`` and its skip, bounded waits
that fail instead of hanging, and the checks that a model released everything (its
tasks, its connections to the harness's server).

The checks are generic on purpose: a provider in another package may use any client
library, so "released everything" is judged from the outside, by the event loop's tasks
and, on Linux, by the process's TCP connections to the server's port.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import pytest

from ._errors import NotSupported

__all__ = [
    "GRACE",
    "NotSupported",
    "ServedHarness",
    "Snapshot",
    "aclose_is_idempotent",
    "cancel_after_first",
    "elapsed_since",
    "only",
    "stage",
    "stage_async",
    "stall_bound",
    "suite_marks",
    "within",
]

T = TypeVar("T")


class Closable(Protocol):
    async def aclose(self) -> None: ...


ModelT = TypeVar("ModelT", bound=Closable)
_MadeT = TypeVar("_MadeT", bound=Closable, covariant=True)


class MakesModels(Protocol[_MadeT]):
    """What a harness has that the shared checks use."""

    @property
    def server_port(self) -> int | None: ...

    def make(self) -> _MadeT: ...


GRACE = 1.0
"""Seconds a bounded failure may come after the bound the harness states (scheduling,
a close handshake), on top of a fifth of that bound."""

SETTLE = 5.0
"""Seconds the leak checks wait for tasks and connections to end after ``aclose``."""


class ServedHarness:
    """What every harness shares: the loopback server it scripts may be checked for
    connections left open (override ``server_port``)."""

    @property
    def server_port(self) -> int | None:
        """The server's port on 127.0.0.1, to check that ``aclose`` closed every
        connection to it (``None``: not checked)."""
        return None


def suite_marks() -> list[pytest.MarkDecorator]:
    """The marks every conformance class carries: pytest-asyncio runs its ``async``
    tests (in strict mode too), and with the ``looptime`` plugin installed they run on
    virtual time, so a stalled server costs no wall-clock time. A provider that works in
    threads (virtual time would jump while they work) turns it off on its subclass with
    ``pytestmark = pytest.mark.looptime(False)``."""
    marks = [pytest.mark.asyncio]
    if importlib.util.find_spec("looptime") is not None:
        # Polls before the clock may jump: a connect handshake or a kernel-deferred
        # delivery over loopback gets a few milliseconds of margin (see the provider tests).
        marks.append(pytest.mark.looptime(noop_cycles=2000))
    return marks


def _skip(harness: object, method: str, reason: object) -> NoReturn:
    pytest.skip(f"{type(harness).__name__}.{method}: {reason}")


def stage(harness: object, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call a harness scripting method; ``NotSupported`` skips the test with its reason."""
    try:
        return getattr(harness, method)(*args, **kwargs)
    except NotSupported as gap:
        _skip(harness, method, gap)


async def stage_async(harness: object, method: str, *args: Any, **kwargs: Any) -> Any:
    """``stage`` for an ``async`` harness method."""
    try:
        return await getattr(harness, method)(*args, **kwargs)
    except NotSupported as gap:
        _skip(harness, method, gap)


@contextlib.contextmanager
def only(kind: type[Exception]) -> Iterator[None]:
    """Let ``kind`` (and the suite's own ``AssertionError``) through; any other exception
    fails the test, saying which error the interface promises instead."""
    try:
        yield
    except (kind, AssertionError):
        raise
    except Exception as error:
        raise AssertionError(
            f"{type(error).__name__} raised where the interface promises {kind.__name__}: {error!r}"
        ) from error


def stall_bound(stall_timeout: float) -> float:
    """How long a request to a stalled server may take, for a harness's ``stall_timeout``."""
    return stall_timeout * 1.2 + GRACE


async def within(seconds: float, awaitable: Awaitable[T], what: str) -> T:
    """``await awaitable``, failing the test (not hanging it) after ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"{what} did not finish within {seconds:g} s") from None


async def cancel_after_first(
    items: AsyncIterator[Any], give_up: float, first: str, what: str
) -> None:
    """Read ``items`` in a task until the first one (``first`` says what it is), then
    cancel the task: it must end with ``CancelledError`` within 5 s."""
    arrived = asyncio.Event()

    async def consume() -> None:
        async for _ in items:
            arrived.set()

    task = asyncio.create_task(consume())
    await within(give_up, arrived.wait(), first)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await within(5.0, task, what)


async def aclose_is_idempotent(
    harness: MakesModels[ModelT], kind: str, use: Callable[[ModelT], Awaitable[None]]
) -> None:
    """``aclose`` of an unused model returns; ``aclose`` of one that was ``use``d (a
    request, a synthesis, an utterance) releases everything; a second ``aclose`` is
    harmless."""
    snapshot = Snapshot(harness.server_port)
    unused = harness.make()
    await within(10.0, unused.aclose(), f"aclose of an unused {kind}")
    model = harness.make()
    try:
        await use(model)
    finally:
        await within(10.0, model.aclose(), "aclose")
    await within(10.0, model.aclose(), "a second aclose")
    await snapshot.assert_released("aclose")


def elapsed_since(started: float) -> float:
    return asyncio.get_running_loop().time() - started


async def eventually(
    check: Callable[[], T], done: Callable[[T], bool], seconds: float = SETTLE
) -> T:
    """``check()`` until ``done`` says its value is final, or ``seconds`` passed; the last
    value either way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        value = check()
        if done(value) or loop.time() >= deadline:
            return value
        await asyncio.sleep(0.1)


class Snapshot:
    """The tasks alive, taken before a model is made (or warmed up), to tell afterwards
    which tasks the model left behind. ``port``: the harness's server, whose open TCP
    connections from this process are counted too (Linux only; elsewhere not checked)."""

    def __init__(self, port: int | None = None) -> None:
        self._tasks = set(asyncio.all_tasks())
        self._port = port

    def _new_tasks(self) -> list[asyncio.Task[Any]]:
        current = asyncio.current_task()
        return [
            task
            for task in asyncio.all_tasks()
            if task not in self._tasks and task is not current and not task.done()
        ]

    async def assert_released(self, what: str) -> None:
        """Every task started since the snapshot ended (the server's handlers included:
        they end when the client closes its connections), and no connection to the
        server is still open, within ``SETTLE`` seconds."""
        left = await eventually(self._new_tasks, lambda tasks: not tasks)
        assert not left, f"{what} left tasks running: {_describe_tasks(left)}"
        if self._port is None:
            return
        port = self._port
        connections = await eventually(
            lambda: open_connections(port), lambda count: count is None or count == 0
        )
        assert not connections, (
            f"{what} left {connections} connection(s) to the server (port {port}) open"
        )


def _describe_tasks(tasks: Iterable[asyncio.Task[Any]]) -> str:
    names = []
    for task in tasks:
        coro = task.get_coro()
        where = getattr(coro, "__qualname__", type(coro).__name__)
        names.append(f"{task.get_name()} ({where})")
    return ", ".join(sorted(names))


# TCP states in /proc/net/tcp: a socket this process has not closed yet.
_ESTABLISHED, _CLOSE_WAIT = "01", "08"


def open_connections(port: int) -> int | None:
    """How many TCP sockets of this host are connected to ``port`` on 127.0.0.1 and not
    closed by their owner (established, or closed by the server but not by the client);
    ``None`` where ``/proc/net/tcp`` does not exist. The client's sockets are the ones
    whose remote port is ``port``."""
    found = False
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        found = True
        for line in lines:
            fields = line.split()
            if len(fields) < 4:
                continue
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] in (_ESTABLISHED, _CLOSE_WAIT):
                count += 1
    return count if found else None
