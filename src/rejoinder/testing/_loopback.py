"""The part every loopback provider server shares: an aiohttp server on 127.0.0.1 at a
free port (or a given one), started and stopped with ``async with``. ``aiohttp`` is
imported on start, so importing a server module stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from aiohttp import web


class LoopbackServer:
    def __init__(self, *, port: int = 0) -> None:
        """``port``: listen there instead of on a free port; a test that saw a client fail
        to connect to a port starts the server on it to let a retry succeed."""
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._requested_port = port

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server is not running")
        return self._port

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give a client: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def _before_cleanup(self) -> None:
        """Cut open connections and stop handlers before the runner is cleaned up."""

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application()
        self._add_routes(app)
        # handler_cancellation: a handler stops when its client goes away.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._requested_port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        await self._before_cleanup()
        await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
