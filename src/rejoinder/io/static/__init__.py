"""The browser page: its HTML, styles and scripts, and the client SDK it runs on.

``page_routes()`` gives the aiohttp routes that serve them: ``GET /`` (the page),
``GET /page.css``, its scripts (``page.js``, which draws what the client reports,
``strips.js`` and ``metrics.js``), its icon (``GET /favicon.svg``, and ``/favicon.ico``,
which browsers ask for on their own) and ``GET /rejoinder-client.js``: the TypeScript SDK
(``@rejoinder/client``, ``clients/js``) as one ES module, a copy of its
``dist/index.js`` that the build puts in this folder (``make demo`` or ``make js``). That
file is generated and not in git: when it is missing, its route answers 404 saying so, the
page shows the same words in its error banner, and ``page_routes()`` logs them once.

The page talks to ``GET /ws``, ``GET /api/ice`` and ``POST /api/offer`` relative to its
own URL, so an app that mounts these routes under a prefix serves a working page there
too. Nothing is loaded from the network: no fonts, no CDN.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "BUNDLE_MISSING",
    "BUNDLE_ROUTE",
    "CLIENT_BUNDLE",
    "PAGE_FILES",
    "client_bundle",
    "page_routes",
]

logger = logging.getLogger(__name__)

CLIENT_BUNDLE = "rejoinder-client.js"
"""The SDK's bundle in this package (generated: a copy of ``clients/js/dist/index.js``)."""

BUNDLE_ROUTE = "/" + CLIENT_BUNDLE
BUNDLE_MISSING = "the client bundle is missing: run make demo"
"""What the page's banner, the bundle's 404 and the log say when the bundle was not built."""

JAVASCRIPT = "text/javascript"

_SOURCES = {
    "/": ("index.html", "text/html"),
    "/page.css": ("page.css", "text/css"),
    "/page.js": ("page.js", JAVASCRIPT),
    "/strips.js": ("strips.js", JAVASCRIPT),
    "/metrics.js": ("metrics.js", JAVASCRIPT),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    "/favicon.ico": ("favicon.svg", "image/svg+xml"),
}


def client_bundle() -> bytes | None:
    """The SDK bundle's bytes, or ``None`` when it has not been built."""
    bundle = files(__name__).joinpath(CLIENT_BUNDLE)
    return bundle.read_bytes() if bundle.is_file() else None


PAGE_FILES = dict(_SOURCES)
"""Route path -> (file in this package, content type): the page's files, and the client
bundle when it was there at import (a host that serves these files as they are, read
once, must not fail on a bundle not built; ``page_routes()`` looks for it on each
request)."""
if client_bundle() is not None:
    PAGE_FILES[BUNDLE_ROUTE] = (CLIENT_BUNDLE, JAVASCRIPT)


def page_routes() -> list[web.RouteDef]:
    """``GET`` routes for the page, its scripts and the client bundle (the page's own
    files are read once, here; the bundle on each request, so a rebuild is served)."""
    from aiohttp import web

    package = files(__name__)
    routes: list[web.RouteDef] = []
    for path, (name, content_type) in _SOURCES.items():
        body = package.joinpath(name).read_bytes()
        routes.append(web.get(path, _handler(body, content_type)))
    if client_bundle() is None:
        logger.warning("%s (%s is not in %s)", BUNDLE_MISSING, CLIENT_BUNDLE, package)
    routes.append(web.get(BUNDLE_ROUTE, _serve_bundle))
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


async def _serve_bundle(_request: web.Request) -> web.StreamResponse:
    from aiohttp import web

    body = client_bundle()
    if body is None:
        return web.Response(status=404, text=BUNDLE_MISSING + "\n")
    return web.Response(
        body=body, content_type=JAVASCRIPT, charset="utf-8", headers={"Cache-Control": "no-cache"}
    )
