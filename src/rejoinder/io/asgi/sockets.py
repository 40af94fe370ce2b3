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
from ..resume import ResumeRegistry
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
        self.client_code: int | None = None
        """The code of the client's close frame as the server reports it; None: the socket
        ended without one reaching us (a broken connection, an unanswered ping)."""

    def said_goodbye(self) -> bool:
        """The client closed with 1000: it is done. Any other end is a drop, a close frame
        without a code included: uvicorn reports a broken connection as 1005 too, the
        code the ASGI spec gives a close frame without one, so the two cannot be told
        apart here (aiohttp can: there, a bare close is a goodbye as well)."""
        return self.client_code == CloseCode.NORMAL

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
                code = message.get("code")
                self.client_code = code if isinstance(code, int) else None
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
    *,
    resume: ResumeRegistry | None = None,
    goodbye: Callable[[], bool] | None = None,
) -> tuple[WebSocketPeer, SocketBinding]:
    """One protocol v1 client, wired as ``websocket.client_socket`` wires it on aiohttp."""
    query = first_values(ws.query_params.multi_items())
    return shared_client_socket(
        entrypoint, opts, run, remote=remote(ws), query=query, resume=resume, goodbye=goodbye
    )


def client_route(
    entrypoint: Entrypoint,
    opts: WebSocketOptions,
    gate: SessionGate[Connection],
    resume: ResumeRegistry | None = None,
) -> Callable[[WebSocket], Awaitable[None]]:
    """``GET /ws``. With ``resume``, a socket that drops leaves its session waiting for
    the client, and its request is held until the session is resumed or ends: a server
    that counts requests as load (Ray Serve's ``max_ongoing_requests``) still counts the
    session, which still runs here."""

    async def serve(ws: WebSocket) -> None:
        await ws.accept()
        frames = AsgiFrames(ws, max_frame_bytes=opts.max_frame_bytes, name="ws")
        goodbye = frames.said_goodbye if resume is not None else None
        peer, binding = client_socket(
            entrypoint, opts, gate.run, ws, resume=resume, goodbye=goodbye
        )
        await run_socket(frames, binding)
        conn = peer.connection
        if conn is not None and conn.detached:
            await conn.wait_attended()

    async def route(ws: WebSocket) -> None:
        if resume is not None and resume.knows(ws.query_params.get("resume")):
            await serve(ws)  # its session holds its place already
            return
        with gate.admit() as admission:
            if admission is None:
                await deny(ws, refused_answer(gate))
                return
            await serve(ws)

    return route
