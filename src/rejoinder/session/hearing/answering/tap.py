"""``LineTap``: the session's microphone, read from the call's answer on, every frame
shown to a listener on its way to the session.

The session's engine starts reading its microphone only once the first agent has
entered, and an outbound agent enters by waiting for who answered: the detector must
hear the line before that. So the tap reads the line in a task of its own and queues the
frames for the session, which gets them unchanged and in order whenever it starts
reading (and the transport's failure, if the line fails). It is an ``AudioInput``, as
the line it wraps is: what else wraps the microphone at the session's start (the call
recorder) still finds one. A transport's microphone keeps
only a few seconds for a reader that does not come and then drops new audio; the tap
drains it, and keeps at most ``MAX_QUEUED`` seconds itself (then the oldest go).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from ....models.audio import AudioFrame, AudioInput

__all__ = ["MAX_QUEUED", "LineTap"]

MAX_QUEUED = 30.0
"""Seconds of frames kept for a session that does not read yet."""


class LineTap(AudioInput):
    """The session's microphone, read from the answer on: each frame is shown to
    ``see`` when it arrives and queued for the session, which may start reading later
    (its engine reads the microphone once the first agent has entered, and an outbound
    agent's ``on_enter`` is where it waits for the answer). The frames reach the session
    unchanged and in order; at most ``MAX_QUEUED`` seconds wait (then the oldest go)."""

    def __init__(self, inner: AsyncIterable[AudioFrame], see: Callable[[AudioFrame], None]):
        self.inner, self._see = inner, see
        self._queue: deque[AudioFrame | None] = deque()
        self._queued = 0.0
        self._ready = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._failure: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)  # the transport's own members (sample_rate, ...)

    def start(self) -> None:
        self._pump = asyncio.get_running_loop().create_task(self._read(), name="rejoinder-amd")

    def stop(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
        self._put(None)

    async def _read(self) -> None:
        try:
            async for frame in self.inner:
                self._see(frame)
                self._put(frame)
        except Exception as exc:  # the transport's failure: the session's reader gets it
            self._failure = exc
        finally:
            self._put(None)

    def _put(self, frame: AudioFrame | None) -> None:
        if self._queue and self._queue[-1] is None:
            return  # ended already
        self._queue.append(frame)
        if frame is not None:
            self._queued += frame.duration
            while self._queued > MAX_QUEUED and self._queue[0] is not None:
                dropped = self._queue.popleft()
                assert dropped is not None
                self._queued -= dropped.duration
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            frame = self._queue.popleft()
            if frame is None:
                if self._failure is not None:
                    raise self._failure
                return
            self._queued -= frame.duration
            yield frame
