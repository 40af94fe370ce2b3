"""Serve the built example next to an agent, on one origin: the page and its bundle, and
the agent's ``/ws`` and ``/api/offer`` (the app ``rejoinder dev`` would serve, without its
own page)::

    (cd clients/react && npm run build:example)
    python clients/react/example/serve.py examples/voice_agent.py
    # then open http://127.0.0.1:8000/ and press Talk

tests/io/test_react_example_browser.py serves the example with ``add_example_routes``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aiohttp import web

DIST = Path(__file__).resolve().parent / "dist"


def add_example_routes(app: web.Application, dist: Path = DIST) -> None:
    """``GET /``: the example's page; ``GET /app.js``: its bundle (``npm run build:example``)."""

    async def page(_: web.Request) -> web.FileResponse:
        return web.FileResponse(dist / "index.html")

    async def bundle(_: web.Request) -> web.FileResponse:
        return web.FileResponse(dist / "app.js", headers={"Content-Type": "text/javascript"})

    app.router.add_get("/", page)
    app.router.add_get("/app.js", bundle)


def main() -> None:
    from rejoinder.discover import load_agent_file
    from rejoinder.io import create_app

    parser = argparse.ArgumentParser(description=__doc__.split("::")[0])
    parser.add_argument("file", help="the agent file (a .py file with an entrypoint)")
    parser.add_argument("--port", type=int, default=8000)
    options = parser.parse_args()
    if not (DIST / "app.js").exists():
        parser.error(f"{DIST / 'app.js'} is missing: npm run build:example in clients/react")
    agent = load_agent_file(options.file)
    app = create_app(agent.entrypoint, page=False)
    add_example_routes(app)

    async def prewarm(_: web.Application) -> None:
        await agent.run_prewarm()

    app.on_startup.append(prewarm)
    web.run_app(app, host="127.0.0.1", port=options.port)


if __name__ == "__main__":
    main()
