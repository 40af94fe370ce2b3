"""Preemptive generation: start the model on the user's transcript before the turn ends.

A ``Preemptive`` runs the model into a buffer (nothing is delivered and no tool runs) under
an uncommitted ``preemptive`` obligation, so the agent still reports ``listening`` and the
user is not marked away. When the turn ends, the reply takes it over only if everything the
model saw is still what it would see now (``key``: the user's text and the images shown
with it, the context items, the instructions and the very tools offered); otherwise it is
discarded. Whoever abandons it (a newer attempt, a discarded turn, interrupt, drain,
close, pause, handoff) calls
``discard``: there is no path that leaves it parked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from contextlib import aclosing
from typing import Protocol

from ...floor import Obligation
from ...models import ChatChunk, ChatItem, ChatMessage, ImageContent
from ...models.tools import ToolDefinition

logger = logging.getLogger("rejoinder")


class OfferedTool(Protocol):
    """A tool offered to the model (a ``FunctionTool``)."""

    @property
    def definition(self) -> ToolDefinition: ...


def speculation_key(
    user_text: str,
    images: Sequence[ImageContent],
    items: Sequence[ChatItem],
    instructions: str,
    tools: Mapping[str, OfferedTool],
) -> Hashable:
    """Everything a reply's model call depends on: if any of it changed (a hook edited
    the message, the context, the instructions or the tools, or an image was shown since),
    the speculation is stale."""
    return (
        user_text,
        tuple(id(image) for image in images),
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
        self.on_outcome: Callable[[str, str], None] | None = None
        """Told ``("used", "")`` or ``("dropped", why)`` when a reply decides (events)."""

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

    def reuse_for(
        self,
        message: ChatMessage,
        items: Sequence[ChatItem],
        instructions: str,
        tools: Mapping[str, OfferedTool],
        *,
        extra_instructions: str | None,
    ) -> AsyncIterator[ChatChunk] | None:
        """Its stream, for the reply to ``message`` given the agent's context ``items``
        and ``instructions``, if everything it saw is still what that reply would see;
        otherwise it is cancelled (``None``: generate anew)."""
        before = items[:-1] if items and items[-1] is message else items
        key = speculation_key(message.content, message.images, before, instructions, tools)
        if extra_instructions is None and key == self.key:
            self._decided("used", "")
            return self.replay()
        self._decided("dropped", "the turn differed from the one it guessed")
        self.cancel()
        return None

    def _decided(self, outcome: str, reason: str) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome, reason)
