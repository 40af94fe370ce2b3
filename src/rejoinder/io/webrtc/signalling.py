"""WebRTC signalling: ``POST /api/offer`` (SDP offer in, SDP answer out), one peer each.

Request body: ``{"sdp": "<offer>", "type": "offer"}``; response: ``{"sdp": "<answer>",
"type": "answer"}``. A body that is not such an offer gets HTTP 400 with ``{"error":
...}``; an offer without an audio section or a data channel too (the data channel carries
the protocol, and the agent's playback truth with it). A server that is closing answers
503. All ICE candidates are in the answer (no trickle), so one round trip is the whole
signalling.

``WebRTCServer`` owns the peers its offers created: each runs as a task of its own after
the answer went out, and ``aclose()`` closes them all. ``add_webrtc_routes(app, ...)``
mounts the route and closes the peers when the application shuts down.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from ..connection import Entrypoint
from . import _deps
from .options import WebRTCOptions

_deps.require()

from .peer import OfferError, Runner, WebRTCPeer  # noqa: E402  # after the extra's check

logger = logging.getLogger("rejoinder.io.webrtc")

OFFER_PATH = "/api/offer"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _parse_offer(body: bytes) -> str:
    """The offer's SDP from a request body (``ValueError`` with the reason otherwise)."""
    try:
        data: Any = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError('the body must be JSON: {"sdp": "...", "type": "offer"}') from None
    if not isinstance(data, dict):
        raise ValueError('the body must be a JSON object: {"sdp": "...", "type": "offer"}')
    if data.get("type") != "offer":
        raise ValueError('"type" must be "offer"')
    sdp = data.get("sdp")
    if not isinstance(sdp, str) or not sdp.startswith("v=0"):
        raise ValueError('"sdp" must be the offer\'s SDP text')
    return sdp


class WebRTCServer:
    """Answers offers for one entry point and owns the peers it creates."""

    def __init__(
        self,
        entrypoint: Entrypoint,
        options: WebRTCOptions | None = None,
        *,
        run: Runner | None = None,
    ) -> None:
        self.entrypoint = entrypoint
        self.options = options or WebRTCOptions()
        self._run = run
        self._peers: dict[WebRTCPeer, asyncio.Task[None]] = {}
        self.closing = False

    @property
    def peers(self) -> int:
        """Peers alive now (connecting or in a session)."""
        return len(self._peers)

    async def wait_idle(self) -> None:
        """Return once no peer is alive (each one's task ended)."""
        while self._peers:
            await asyncio.wait(list(self._peers.values()))

    def routes(self) -> list[web.RouteDef]:
        return [web.post(OFFER_PATH, self.handle_offer)]

    async def handle_offer(self, request: web.Request) -> web.Response:
        if self.closing:
            return _error(503, "the server is shutting down")
        if request.content_length is not None and (
            request.content_length > self.options.max_offer_bytes
        ):
            return _error(413, f"an offer is at most {self.options.max_offer_bytes} bytes")
        body = await request.read()  # bounded by the application's client_max_size too
        if len(body) > self.options.max_offer_bytes:
            return _error(413, f"an offer is at most {self.options.max_offer_bytes} bytes")
        try:
            sdp = _parse_offer(body)
        except ValueError as exc:
            return _error(400, str(exc))
        peer = WebRTCPeer(self.options, remote=request.remote, query=dict(request.query))
        try:
            answer = await peer.answer(sdp)
        except OfferError as exc:
            await peer.close()
            return _error(400, str(exc))
        except TimeoutError as exc:
            await peer.close()
            return _error(500, str(exc))
        except BaseException:  # the request was cancelled, or aiortc failed: no peer left
            await asyncio.shield(peer.close())
            raise
        task = asyncio.create_task(
            peer.run(self.entrypoint, self._run), name=f"rejoinder-webrtc-{request.remote}"
        )
        self._peers[peer] = task
        task.add_done_callback(lambda _: self._peers.pop(peer, None))
        # One step for the task: a runner that counts sessions takes the place admitted
        # for this request before the request ends.
        await asyncio.sleep(0)
        return web.json_response({"sdp": answer, "type": "answer"})

    async def aclose(self, grace: float = 10.0) -> None:
        """Refuse new offers, close every peer, and wait (bounded) for their tasks."""
        self.closing = True
        peers = dict(self._peers)
        for peer in peers:
            await peer.close()
        tasks = list(peers.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning("%d WebRTC session(s) did not stop within %.1f s", len(pending), grace)
            await asyncio.wait(pending, timeout=5.0)


def add_webrtc_routes(
    app: web.Application,
    entrypoint: Entrypoint,
    options: WebRTCOptions | None = None,
    *,
    run: Runner | None = None,
) -> WebRTCServer:
    """Mount ``POST /api/offer`` on ``app``; its peers are closed when ``app`` shuts down."""
    server = WebRTCServer(entrypoint, options, run=run)
    app.add_routes(server.routes())

    async def shutdown(_: web.Application) -> None:
        await server.aclose()

    app.on_shutdown.append(shutdown)
    return server
