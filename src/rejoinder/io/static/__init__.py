"""The browser page: one static HTML file (its script inline), its styles, and the
AudioWorklet module it loads.

``page_routes()`` gives the aiohttp routes that serve them: ``GET /`` (the page),
``GET /page.css`` (its styles), ``GET /audio-worklet.js`` (the processors it loads) and
its icon (``GET /favicon.svg``, and ``/favicon.ico``, which browsers ask for on their own).
The page talks to ``GET /ws`` and ``POST /api/offer`` relative to its own URL, so an app
that mounts these routes under a prefix serves a working page there too. Nothing is
loaded from the network: no fonts, no CDN, no build step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["PAGE_FILES", "page_routes"]

PAGE_FILES = {
    "/": ("index.html", "text/html"),
    "/page.css": ("page.css", "text/css"),
    "/audio-worklet.js": ("audio-worklet.js", "text/javascript"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    "/favicon.ico": ("favicon.svg", "image/svg+xml"),
}
"""Route path -> (file in this package, content type)."""


def page_routes() -> list[web.RouteDef]:
    """``GET`` routes for the page and its worklet (the files are read once, here)."""
    from aiohttp import web

    package = files(__name__)
    routes: list[web.RouteDef] = []
    for path, (name, content_type) in PAGE_FILES.items():
        body = package.joinpath(name).read_bytes()
        routes.append(web.get(path, _handler(body, content_type)))
    return routes


def _handler(
    body: bytes, content_type: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    from aiohttp import web

    async def serve(_request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=body,
            content_type=content_type,
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    return serve
