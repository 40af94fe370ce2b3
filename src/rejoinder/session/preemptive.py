"""Preemptive generation: start the model on the user's transcript before the turn ends.

A ``Preemptive`` runs the model into a buffer (nothing is delivered and no tool runs) under
an uncommitted ``preemptive`` obligation, so the agent still reports ``listening`` and the
user is not marked away. When the turn ends, the reply takes it over only if everything the
model saw is still what it would see now (``key``: the user's text, the context items, the
instructions and the very tools offered); otherwise it is discarded. Whoever abandons it (a
newer attempt, a discarded turn, interrupt, drain, close, pause, handoff) calls
``discard``: there is no path that leaves it parked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from ..floor import Obligation, ObligationKind
from ..models import ChatChunk, ChatContext, ChatItem, ChatMessage
from ..models.llm import LLM
from .tools import FunctionTool
from .turn_state import TurnState

logger = logging.getLogger("rejoinder")


def speculation_key(
    user_text: str, items: Sequence[ChatItem], instructions: str, tools: Mapping[str, FunctionTool]
) -> Hashable:
    """Everything a reply's model call depends on: if any of it changed (a hook edited
    the message, the context, the instructions or the tools), the speculation is stale."""
    return (
        user_text,
        tuple(item.id for item in items),
        instructions,
        tuple((name, id(tool)) for name, tool in tools.items()),
    )


class Preemptive:
    def __init__(self, key: Hashable, obligation: Obligation) -> None:
        self.key = key
        self.obligation = obligation
        self.task: asyncio.Task[None] | None = None
        self._chunks: list[ChatChunk] = []
        self._more = asyncio.Event()
        self._finished = False
        self._error: BaseException | None = None

    async def collect(self, stream: AsyncIterator[ChatChunk]) -> None:
        """Run in its own task: buffer the model's output."""
        try:
            async with aclosing(stream):  # type: ignore[type-var]
                async for chunk in stream:
                    self._chunks.append(chunk)
                    self._more.set()
        except asyncio.CancelledError:
            self._error = asyncio.CancelledError()
            raise
        except Exception as exc:  # replayed to the reply that uses it
            self._error = exc
        finally:
            self._finished = True
            self._more.set()

    async def replay(self) -> AsyncIterator[ChatChunk]:
        """What the model produced, as a stream: buffered chunks first, then live ones."""
        sent = 0
        while True:
            while sent < len(self._chunks):
                yield self._chunks[sent]
                sent += 1
            if self._finished:
                break
            self._more.clear()
            await self._more.wait()
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


class Speculation:
    """One agent's slot for a speculative reply: at most one runs at a time."""

    def __init__(
        self,
        state: TurnState,
        owner: str,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        self._state = state
        self._owner = owner
        self._spawn = spawn
        self._current: Preemptive | None = None

    def start(
        self,
        llm: LLM,
        key: Hashable,
        context: list[ChatItem],
        user_text: str,
        tools: Mapping[str, FunctionTool],
    ) -> None:
        """Start generating a reply to ``user_text`` (kept as is when one with the same
        key is already running)."""
        if self._current is not None and self._current.key == key:
            return
        self.discard("a newer attempt")
        prepared = Preemptive(key, self._state.new(ObligationKind.PREEMPTIVE, self._owner))
        self._state.open_new(prepared.obligation, on_expire=prepared.cancel)
        stream = llm.chat(
            ChatContext([*context, ChatMessage(role="user", content=user_text)]),
            [t.definition for t in tools.values()],
            "auto" if tools else "none",
        )
        prepared.task = self._spawn(prepared.collect(stream))
        self._current = prepared

    def discard(self, reason: str) -> None:
        prepared, self._current = self._current, None
        if prepared is not None:
            logger.debug("preemptive reply discarded: %s", reason)
            prepared.cancel()
            self._state.close(prepared.obligation, "discarded")

    def claim(self) -> Preemptive | None:
        """The speculative reply, for the user turn that just ended (checked before use)."""
        prepared, self._current = self._current, None
        return prepared
