"""The aiohttp side every transport shares: an aiohttp ``WebSocketResponse`` as the
``FrameSocket`` of the framework-free socket loop (``hosting.run_socket``), and
``respond``, which writes a framework-free ``HttpAnswer``.

Both the client protocol (``websocket.py``) and the phone media streams
(``telephony/routes.py``) run one ``run_socket`` per connection over ``AiohttpFrames``,
with a ``SocketBinding``: the peer's entry points and what to do when the client never
starts or leaves. The ASGI host (``asgi/``) runs the same loop over an ASGI socket.
"""

from __future__ import annotations

import logging

from aiohttp import WSMsgType, web

from .hosting import HttpAnswer

__all__ = ["AiohttpFrames", "respond"]

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
