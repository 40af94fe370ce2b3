"""What a transport writes to one WebSocket, and the one writer that drains it.

Shared by the WebSocket transport (protocol v1, audio in binary frames) and the telephony
media streams (audio inside JSON text frames): both need text that never waits, audio
that waits for room (the session's backpressure) and can be dropped at once on a barge-in,
and at most one close, written after everything queued before it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from .protocol import CloseCode

__all__ = ["CloseRequest", "Outbox", "bounded"]

logger = logging.getLogger("rejoinder.io")


@dataclass(frozen=True, slots=True)
class CloseRequest:
    code: CloseCode
    reason: str


@dataclass(slots=True)
class _Audio:
    data: str | bytes


class Outbox:
    """What is to be written to one socket, in order: text messages, audio and at most
    one close. Text never waits (a client that lets ``max_messages`` pile up is closed
    with ``SLOW_CLIENT``); audio waits while ``max_audio_bytes`` are queued, which is the
    session's backpressure. ``clear_audio`` drops the audio not yet written, including a
    frame still waiting for room. Audio is written as it was given: ``bytes`` as a binary
    frame, ``str`` (a provider's JSON media message) as a text frame."""

    def __init__(self, *, max_messages: int = 2000, max_audio_bytes: int = 1024 * 1024) -> None:
        self._items: deque[str | _Audio] = deque()
        self._max_messages = max_messages
        self._max_audio = max_audio_bytes
        self._messages = 0
        self._audio = 0
        self._generation = 0
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.close_request: CloseRequest | None = None

    @property
    def closing(self) -> bool:
        return self.close_request is not None

    def put_text(self, text: str) -> None:
        if self.closing:
            return
        if self._messages >= self._max_messages:
            self.close(CloseCode.SLOW_CLIENT, "the client does not read its messages")
            return
        self._messages += 1
        self._items.append(text)
        self._ready.set()

    async def put_audio(self, data: str | bytes) -> None:
        generation = self._generation
        while self._audio >= self._max_audio and not self.closing:
            self._room.clear()
            await self._room.wait()
            if generation != self._generation:
                return  # cleared while it waited: this audio was interrupted
        if self.closing or generation != self._generation:
            return
        self._audio += len(data)
        self._items.append(_Audio(data))
        self._ready.set()

    def put_audio_now(self, data: str | bytes) -> None:
        """Queue audio without waiting for room (a segment's last small piece, from code
        that cannot wait); ``clear_audio`` drops it like any other."""
        if self.closing:
            return
        self._audio += len(data)
        self._items.append(_Audio(data))
        self._ready.set()

    def clear_audio(self) -> None:
        self._generation += 1
        if self._audio:
            self._items = deque(item for item in self._items if isinstance(item, str))
            self._audio = 0
        self._room.set()

    def close(self, code: CloseCode, reason: str) -> None:
        """Write what is queued, then close (the first close asked for wins)."""
        if self.close_request is None:
            self.close_request = CloseRequest(code, reason)
            self._ready.set()
            self._room.set()

    async def get(self) -> str | bytes | CloseRequest:
        """The next thing to write; the ``CloseRequest`` once the queue is empty."""
        while True:
            if self._items:
                item = self._items.popleft()
                if isinstance(item, str):
                    self._messages -= 1
                    return item
                self._audio -= len(item.data)
                self._room.set()
                return item.data
            if self.close_request is not None:
                return self.close_request
            self._ready.clear()
            await self._ready.wait()


async def bounded(task: asyncio.Task[None], seconds: float, what: str) -> None:
    """Wait up to ``seconds`` for ``task``; cancel it (bounded too) if it is not done."""
    done, _ = await asyncio.wait((task,), timeout=seconds)
    if not done:
        logger.warning("%s did not finish within %.1f s; cancelling it", what, seconds)
        task.cancel()
        await asyncio.wait((task,), timeout=5.0)
    elif not task.cancelled() and task.exception() is not None:
        logger.warning("%s failed: %r", what, task.exception())
