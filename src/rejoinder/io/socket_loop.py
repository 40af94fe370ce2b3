"""The aiohttp side every transport shares: an aiohttp ``WebSocketResponse`` as the
``FrameSocket`` of the framework-free socket loop (``hosting.run_socket``), and
``respond``, which writes a framework-free ``HttpAnswer``.

Both the client protocol (``websocket.py``) and the phone media streams
(``telephony/routes.py``) run one ``run_socket`` per connection over ``AiohttpFrames``,
with a ``SocketBinding``: the peer's entry points and what to do when the client never
starts or leaves. The ASGI host (``asgi/``) runs the same loop over an ASGI socket.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSMsgType, web

from .hosting import HttpAnswer

__all__ = ["AiohttpFrames", "respond"]

logger = logging.getLogger("rejoinder.io")

_CLOSING = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED)

CLOSE_HANDSHAKE_TIMEOUT = 2.0
"""How long a socket this side closes waits for the client's close frame before it drops
the connection."""


class AiohttpFrames:
    """A prepared ``web.WebSocketResponse`` as a ``FrameSocket``. aiohttp answers pings
    and sends heartbeats itself, and closes with 1009 on a frame over ``max_msg_size``.

    Closing is done by whichever task holds the socket's read. aiohttp, asked to close
    while another task waits in ``receive``, closes the TCP connection right after its
    close frame, without waiting for the client's. A client still sending (a microphone
    streams all the time) then writes into a closed socket, gets a reset, and a browser
    reports 1006, a dropped connection, before it has read the 1000 ahead of it: the SDK
    then reconnects to a session that has ended. So ``close`` interrupts a waiting
    ``receive`` and lets the reader close: aiohttp then reads on until the client's close
    frame (at most ``CLOSE_HANDSHAKE_TIMEOUT``) before it closes the connection.

    The interruption is a cancellation of the reader's task, taken back (``uncancel``)
    where it lands, inside ``receive``: a wrapper task per frame would do the same at a
    cost on every microphone frame."""

    def __init__(self, ws: web.WebSocketResponse, name: str) -> None:
        self._ws = ws
        self._name = name
        self._reader: asyncio.Task[object] | None = None
        """The task suspended in ``ws.receive`` (None: nobody waits to read)."""
        self._close_asked: tuple[int, str] | None = None
        self._reader_closed: asyncio.Future[None] | None = None

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def receive(self) -> str | bytes | None:
        while True:
            if self._close_asked is not None:
                await self._close_by_reader()
                return None
            self._reader = asyncio.current_task()
            try:
                msg = await self._ws.receive()
            except asyncio.CancelledError:
                if not self._interrupted_by_close():
                    raise
                continue
            finally:
                self._reader = None
            if msg.type == WSMsgType.TEXT:
                return str(msg.data)
            if msg.type == WSMsgType.BINARY:
                return bytes(msg.data)
            if msg.type == WSMsgType.ERROR:
                logger.info("%s socket: %r", self._name, self._ws.exception())
                return None
            if msg.type in _CLOSING:
                return None

    async def send_text(self, text: str) -> None:
        await self._ws.send_str(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._ws.send_bytes(data)

    async def close(self, code: int, reason: str) -> None:
        reader = self._reader
        if reader is None or reader is asyncio.current_task() or self._close_asked:
            await self._close(code, reason)  # nobody waits to read: close from here
            return
        self._close_asked = (code, reason)
        self._reader_closed = asyncio.get_running_loop().create_future()
        reader.cancel()
        await self._reader_closed

    def _interrupted_by_close(self) -> bool:
        """The reader's task was cancelled: by ``close`` alone (take it back, the reader
        closes), or by someone else as well (it goes on)."""
        task = asyncio.current_task()
        if self._close_asked is None or task is None:
            return False
        return task.uncancel() == 0

    async def _close_by_reader(self) -> None:
        assert self._close_asked is not None
        try:
            await self._close(*self._close_asked)
        finally:
            if self._reader_closed is not None and not self._reader_closed.done():
                self._reader_closed.set_result(None)

    async def _close(self, code: int, reason: str) -> None:
        try:
            async with asyncio.timeout(CLOSE_HANDSHAKE_TIMEOUT):
                await self._ws.close(code=code, message=reason.encode())
        except TimeoutError:  # aiohttp closed the connection when it was cancelled
            logger.debug(
                "%s socket: no close frame back within %.1f s", self._name, CLOSE_HANDSHAKE_TIMEOUT
            )


def respond(answer: HttpAnswer) -> web.Response:
    """A framework-free ``HttpAnswer`` as an aiohttp response."""
    if isinstance(answer.body, str):
        return web.Response(
            text=answer.body,
            status=answer.status,
            content_type=answer.media_type,
            charset="utf-8",
            headers=dict(answer.headers),
        )
    headers = {**answer.headers, "Content-Type": answer.media_type}
    return web.Response(body=answer.body, status=answer.status, headers=headers)
