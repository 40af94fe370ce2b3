"""What the tests of the realtime (speech-to-speech) sessions against their loopback
servers share: a recorder of a session's events to wait on by type, and, for the tests
that run whole sessions on a rig, the ``rigs`` fixture and a spoken turn played out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

import pytest

from rejoinder.models.realtime import RealtimeEvent

E = TypeVar("E")


class _Session(Protocol):
    def events(self) -> AsyncIterator[RealtimeEvent]: ...


class Recorder:
    """Consumes a session's events in a task, so tests can wait for them by type."""

    def __init__(self, session: _Session) -> None:
        self.events: list[RealtimeEvent] = []
        self.ended = False
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._consume(session))

    async def _consume(self, session: _Session) -> None:
        async for event in session.events():
            self.events.append(event)
            self._changed.set()
        self.ended = True
        self._changed.set()

    def of(self, kind: type[E]) -> list[E]:
        return [event for event in self.events if isinstance(event, kind)]

    def kinds(self, since: int = 0) -> list[str]:
        return [type(event).__name__ for event in self.events[since:]]

    async def wait_for(self, kind: type[E], count: int = 1, within: float = 5.0) -> E:
        await self.until(lambda: len(self.of(kind)) >= count, within)
        return self.of(kind)[count - 1]

    async def wait_ended(self, within: float = 10.0) -> None:
        await self.until(lambda: self.ended, within)

    async def until(self, predicate: Callable[[], bool], within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


def rigs_fixture() -> Any:
    """The ``rigs`` fixture: a list the test appends its rigs to, each closed after the
    test. In a test module: ``rigs = rigs_fixture()``."""

    @pytest.fixture(name="rigs")
    async def rigs() -> AsyncIterator[list[Any]]:
        made: list[Any] = []
        yield made
        for rig in made:
            await rig.aclose()

    return rigs


async def spoken_turn(server: Any, rig: Any, text: str, seconds: float = 1.0) -> None:
    """A whole spoken turn of ``seconds`` saying ``text``, played out on ``rig``."""
    await server.answer(text, seconds)
    await rig.settle(seconds + 0.2)
