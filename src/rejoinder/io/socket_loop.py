"""The aiohttp side every transport shares: an aiohttp ``WebSocketResponse`` as the
``FrameSocket`` of the framework-free socket loop (``hosting.run_socket``), and
``respond``, which writes a framework-free ``HttpAnswer``.

Both the client protocol (``websocket.py``) and the phone media streams
(``telephony/routes.py``) run one ``serve_socket`` per connection; each gives it its
peer's entry points and what to do when the client never starts or leaves. The ASGI host
(``asgi.py``) runs the same loop over an ASGI socket.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web

from .connection import Connection
from .hosting import HttpAnswer, SocketBinding, run_socket
from .outbox import Outbox

__all__ = ["AiohttpFrames", "respond", "serve_socket"]

logger = logging.getLogger("rejoinder.io")

_CLOSING = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED)


class AiohttpFrames:
    """A prepared ``web.WebSocketResponse`` as a ``FrameSocket``. aiohttp answers pings
    and sends heartbeats itself, and closes with 1009 on a frame over ``max_msg_size``."""

    def __init__(self, ws: web.WebSocketResponse, name: str) -> None:
        self._ws = ws
        self._name = name

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def receive(self) -> str | bytes | None:
        while True:
            msg = await self._ws.receive()
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
        await self._ws.close(code=code, message=reason.encode())


async def serve_socket(
    ws: web.WebSocketResponse,
    outbox: Outbox,
    *,
    receive_text: Callable[[str], Connection | None],
    receive_bytes: Callable[[bytes], None],
    run_agent: Callable[[Connection], Awaitable[None]],
    no_start: Callable[[], None],
    left: Callable[[], None],
    start_timeout: float,
    close_timeout: float,
    name: str,
) -> None:
    """Read ``ws`` until it closes (``hosting.run_socket``): text and binary frames go to
    the peer; the ``Connection`` a text frame returns (the client's start) gets
    ``run_agent``. Without one within ``start_timeout`` seconds, ``no_start()``. When the
    socket is done, ``left()``, then the agent gets ``close_timeout`` seconds to finish and
    the writer five, and the socket is closed."""
    binding = SocketBinding(
        outbox=outbox,
        receive_text=receive_text,
        receive_bytes=receive_bytes,
        run_agent=run_agent,
        no_start=no_start,
        left=left,
        start_timeout=start_timeout,
        close_timeout=close_timeout,
        name=name,
    )
    await run_socket(AiohttpFrames(ws, name), binding)


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
