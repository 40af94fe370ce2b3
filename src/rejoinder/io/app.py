"""The aiohttp application that serves an agent: one entry point, every transport.

``create_app(entrypoint)`` mounts:

- ``GET /ws``: the WebSocket transport (``rejoinder.io.websocket``, ``docs/protocol.md``);
- ``GET /healthz``: ``{"status": "ok", "sessions": N}``.

The page (``GET /``), WebRTC signalling (``POST /api/offer``, extra ``webrtc``), admission
and draining are mounted in ``_mount_more`` below.
"""

from __future__ import annotations

from aiohttp import web

from .connection import Connection, Entrypoint
from .websocket import WebSocketOptions, websocket_handler

__all__ = ["LIVE_SESSIONS", "create_app"]

LIVE_SESSIONS: web.AppKey[set[Connection]] = web.AppKey("rejoinder.live_sessions", set)
"""App key: the set of ``Connection``s whose entry point is running."""


def create_app(
    entrypoint: Entrypoint,
    *,
    max_sessions: int | None = None,
    websocket: WebSocketOptions | None = None,
) -> web.Application:
    """An application serving ``entrypoint`` (called once per client connection).

    ``max_sessions``: WebSocket upgrades beyond this many live sessions get HTTP 503.
    """
    if max_sessions is not None and max_sessions < 1:
        raise ValueError("max_sessions must be at least 1")
    app = web.Application()
    live: set[Connection] = set()
    app[LIVE_SESSIONS] = live

    async def run(entry: Entrypoint, conn: Connection) -> None:
        live.add(conn)
        try:
            await entry(conn)
        finally:
            live.discard(conn)

    ws_handler = websocket_handler(entrypoint, websocket, run=run)

    async def ws_route(request: web.Request) -> web.StreamResponse:
        if max_sessions is not None and len(live) >= max_sessions:
            return web.Response(status=503, text="the server is full; try again later\n")
        return await ws_handler(request)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": len(live)})

    app.router.add_get("/ws", ws_route)
    app.router.add_get("/healthz", healthz)
    _mount_more(app, entrypoint)
    return app


def _mount_more(app: web.Application, entrypoint: Entrypoint) -> None:
    """Routes beyond the WebSocket transport: the page (``GET /``) and WebRTC
    signalling (``POST /api/offer``, only when the ``webrtc`` extra is installed)."""
