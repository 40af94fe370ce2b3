"""What the loopback WebSocket servers of the speech providers share: every handler task
is tracked so ``aclose`` can stop it, a socket can be tracked so ``aclose`` says goodbye
with 1001 first, and the faults scripted for the next connections wait in a queue, one
per connection. ``aiohttp`` is imported when a server starts.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ._loopback import LoopbackServer

if TYPE_CHECKING:
    from aiohttp import web

FaultT = TypeVar("FaultT")


class WebSocketServer(LoopbackServer, Generic[FaultT]):
    """A loopback server whose connections are WebSockets, each taking the next fault."""

    def __init__(self, *, faults: Iterable[FaultT] = (), port: int = 0) -> None:
        super().__init__(port=port)
        self._faults: deque[FaultT] = deque(faults)
        self._sockets: set[web.WebSocketResponse] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def _next_fault(self) -> FaultT | None:
        return self._faults.popleft() if self._faults else None

    @asynccontextmanager
    async def _handling(self) -> AsyncIterator[None]:
        """Track the running handler, so that closing the server cancels it."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _accept(
        self, request: web.Request, *, goodbye_on_close: bool = True
    ) -> web.WebSocketResponse:
        """The upgraded socket. With ``goodbye_on_close`` closing the server closes it
        with 1001 before cancelling its handler (as a server going down does); without,
        the handler is only cancelled."""
        from aiohttp import web

        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        if goodbye_on_close:
            self._sockets.add(ws)
        return ws

    def _forget(self, ws: web.WebSocketResponse) -> None:
        """The socket's handler is done with it."""
        self._sockets.discard(ws)

    def _track_task(self, task: asyncio.Task[Any]) -> None:
        """A task working for a connection (besides its handler), cancelled on close."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _before_cleanup(self) -> None:
        for ws in list(self._sockets):
            await ws.close(code=1001, message=b"server shutting down")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ScriptedFaultServer(WebSocketServer[FaultT]):
    """A text-to-speech server: its key, the seconds of tone a character is, the faults
    ``script``ed for the next connections, and what it accepted and refused."""

    def __init__(
        self,
        *,
        api_key: str | None,
        seconds_per_char: float,
        faults: Iterable[FaultT],
        port: int,
    ) -> None:
        super().__init__(faults=faults, port=port)
        self.api_key = api_key
        self.seconds_per_char = seconds_per_char
        self.refused = 0
        """How many handshakes were refused."""

    def script(self, *faults: FaultT) -> None:
        """Faults for the next connections, one each (then they behave)."""
        self._faults.extend(faults)
