"""The ASGI sockets: a Starlette ``WebSocket`` as the socket loop's ``FrameSocket``, the
refused upgrade, and the client protocol's route (``GET /ws``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import HttpAnswer, SocketBinding, first_values, refused_answer, run_socket
from ..protocol import CloseCode
from ..websocket import WebSocketOptions, WebSocketPeer
from ..websocket import client_socket as shared_client_socket
from .http import response

__all__ = ["AsgiFrames", "client_route", "deny", "remote"]

logger = logging.getLogger("rejoinder.io.asgi")

_DENIAL = "websocket.http.response"
_TRY_AGAIN_LATER = 1013


class AsgiFrames:
    """An accepted Starlette ``WebSocket`` as a ``FrameSocket`` (``hosting``). Frames over
    ``max_frame_bytes`` (UTF-8 bytes for text) close the socket with 1009 and no reason,
    as aiohttp's ``max_msg_size`` does."""

    def __init__(self, ws: WebSocket, *, max_frame_bytes: int, name: str) -> None:
        self._ws = ws
        self._max = max_frame_bytes
        self._name = name
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def receive(self) -> str | bytes | None:
        while True:
            try:
                message = await self._ws.receive()
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._closed = True
                return None
            if message["type"] == "websocket.disconnect":
                self._closed = True
                return None
            text = message.get("text")
            if text is not None:
                if _utf8_length_over(text, self._max):
                    await self._too_big("text")
                    return None
                return str(text)
            data = message.get("bytes")
            if data is not None:
                if len(data) > self._max:
                    await self._too_big("binary")
                    return None
                return bytes(data)

    async def _too_big(self, kind: str) -> None:
        logger.info("%s socket: %s frame over %d bytes; closing", self._name, kind, self._max)
        await self.close(int(CloseCode.MESSAGE_TOO_BIG), "")

    async def send_text(self, text: str) -> None:
        await self._send({"type": "websocket.send", "text": text})

    async def send_bytes(self, data: bytes) -> None:
        await self._send({"type": "websocket.send", "bytes": data})

    async def _send(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise ConnectionError("the socket is closed")
        try:
            await self._ws.send(message)
        except (WebSocketDisconnect, OSError) as exc:
            self._closed = True
            raise ConnectionError(f"the socket went away: {exc!r}") from exc

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._ws.close(code, reason)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            logger.debug("%s socket: close failed: %r", self._name, exc)


def _utf8_length_over(text: str, limit: int) -> bool:
    if len(text) > limit:
        return True
    return len(text) * 4 > limit and len(text.encode()) > limit


async def deny(ws: WebSocket, answer: HttpAnswer) -> None:
    """Refuse an upgrade with ``answer`` (HTTP 503 and the reason), or, on a server
    without the denial-response extension, with a close before accepting."""
    if _DENIAL in (ws.scope.get("extensions") or {}):
        await ws.send_denial_response(response(answer))
        return
    logger.info("refusing a websocket (no denial-response support): %s", answer.body)
    await ws.close(_TRY_AGAIN_LATER, "the server cannot take a session now")


def remote(conn: WebSocket | Request) -> str | None:
    return conn.client.host if conn.client is not None else None


def client_socket(
    entrypoint: Entrypoint,
    opts: WebSocketOptions,
    run: Callable[[Entrypoint, Connection], Awaitable[None]],
    ws: WebSocket,
) -> tuple[WebSocketPeer, SocketBinding]:
    """One protocol v1 client, wired as ``websocket.client_socket`` wires it on aiohttp."""
    query = first_values(ws.query_params.multi_items())
    return shared_client_socket(entrypoint, opts, run, remote=remote(ws), query=query)


def client_route(
    entrypoint: Entrypoint, opts: WebSocketOptions, gate: SessionGate[Connection]
) -> Callable[[WebSocket], Awaitable[None]]:
    async def route(ws: WebSocket) -> None:
        with gate.admit() as admission:
            if admission is None:
                await deny(ws, refused_answer(gate))
                return
            await ws.accept()
            _peer, binding = client_socket(entrypoint, opts, gate.run, ws)
            frames = AsgiFrames(ws, max_frame_bytes=opts.max_frame_bytes, name=binding.name)
            await run_socket(frames, binding)

    return route
