"""WebRTC signalling: ``POST /api/offer`` (SDP offer in, SDP answer out), one peer each,
and ``GET /api/ice``: the ICE servers a client's peer connection should use.

Request body: ``{"sdp": "<offer>", "type": "offer"}``; response: ``{"sdp": "<answer>",
"type": "answer"}``. A body that is not such an offer gets HTTP 400 with ``{"error":
...}``; an offer without an audio section or a data channel too (the data channel carries
the protocol, and the agent's playback truth with it). A server that is closing answers
503. All ICE candidates are in the answer (no trickle), so one round trip is the whole
signalling.

``GET /api/ice`` answers ``{"ice_servers": [{"urls": [...], "username": ..., "credential":
...}], "ice_transport_policy": "all" | "relay", "ttl": seconds}`` (``WebRTCOptions.ice``;
an empty list when none is configured; ``ttl`` only for minted TURN credentials), never
cached: a client asks before each offer, since it must create its peer connection with
them and its offer carries every candidate they gave it. Each answer mints new TURN
credentials when the server has a TURN secret (``ice_config``).

``WebRTCServer`` owns the peers its offers created: each runs as a task of its own after
the answer went out, and ``aclose()`` closes them all. ``add_webrtc_routes(app, ...)``
mounts the route and closes the peers when the application shuts down.

Resuming (with a ``ResumeRegistry``): an offer to ``/api/offer?resume=TOKEN`` is the
client of a session that dropped coming back; its peer takes the session over once it is
connected. An unknown, used or expired token gets HTTP 410 with ``{"error": ...,
"code": "resume_failed"}``. A token an earlier offer is still connecting with is taken
from it: only the token's holder has it, and it gave that attempt up (the earlier peer
closes). 409 remains for the instant between the two.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from typing import Any

from aiohttp import web

from ..connection import Entrypoint
from ..protocol import ErrorCode
from ..resume import ResumeRegistry
from . import _deps
from .options import WebRTCOptions

_deps.require()

from .peer import OfferError, Runner, WebRTCPeer  # noqa: E402  # after the extra's check

logger = logging.getLogger("rejoinder.io.webrtc")

OFFER_PATH = "/api/offer"
"""The route that takes an SDP offer and answers it (POST)."""
ICE_PATH = "/api/ice"
"""The route that gives a client the ICE servers for its next offer (GET)."""


def _error(status: int, message: str, code: str | None = None) -> web.Response:
    body = {"error": message} if code is None else {"error": message, "code": code}
    return web.json_response(body, status=status)


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
        resume: ResumeRegistry | None = None,
    ) -> None:
        self.entrypoint = entrypoint
        self.options = options or WebRTCOptions()
        self._run = run
        self.resume = resume
        """Where sessions wait for their client after a drop (None: resuming off)."""
        self._peers: dict[WebRTCPeer, asyncio.Task[None]] = {}
        self._resuming: dict[str, WebRTCPeer] = {}
        """The peer of each token an offer claimed, until it took the session over."""
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
        return [web.post(OFFER_PATH, self.handle_offer), web.get(ICE_PATH, self.handle_ice)]

    async def handle_ice(self, request: web.Request) -> web.Response:
        """``GET /api/ice``: the ICE servers for one new peer connection (fresh TURN
        credentials each time, under a random user id: no session exists yet)."""
        ice = self.options.ice
        if ice is None:
            body: dict[str, Any] = {"ice_servers": [], "ice_transport_policy": "all"}
        else:
            body = ice.for_client(f"client_{secrets.token_hex(6)}").as_json()
        return web.json_response(body, headers={"Cache-Control": "no-store"})

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
        query = dict(request.query)
        token = query.pop("resume", None)
        conn = None
        if token is not None:
            registry = self.resume
            if registry is not None and registry.busy(token):
                await self._supersede(token, registry)
            if registry is not None and registry.busy(token):
                return _error(
                    409, "another offer is resuming this session", ErrorCode.RESUME_FAILED
                )
            conn = registry.claim(token) if registry is not None else None
            if conn is None:
                why = (
                    "this server does not resume sessions"
                    if registry is None
                    else "no session to resume with this token (unknown, used or expired)"
                )
                return _error(410, f"{why}: start anew", ErrorCode.RESUME_FAILED)
        peer = WebRTCPeer(
            self.options, remote=request.remote, query=query, resume=self.resume, resuming=conn
        )
        try:
            answer = await peer.answer(sdp)
        except OfferError as exc:
            await self._give_up(peer, token)
            return _error(400, str(exc))
        except TimeoutError as exc:
            await self._give_up(peer, token)
            return _error(500, str(exc))
        except BaseException:  # the request was cancelled, or aiortc failed: no peer left
            await asyncio.shield(self._give_up(peer, token))
            raise
        if conn is not None and token is not None and self.resume is not None:
            work = peer.resume(conn, token, self.resume)
            self._resuming[token] = peer  # (until its task ends: busy() says if it took over)
        else:
            work = peer.run(self.entrypoint, self._run)
        task = asyncio.create_task(work, name=f"rejoinder-webrtc-{request.remote}")
        self._peers[peer] = task
        task.add_done_callback(lambda _: self._forget(peer, token))
        # One step for the task: a runner that counts sessions takes the place admitted
        # for this request before the request ends.
        await asyncio.sleep(0)
        return web.json_response({"sdp": answer, "type": "answer"})

    def _forget(self, peer: WebRTCPeer, token: str | None) -> None:
        self._peers.pop(peer, None)
        if token is not None and self._resuming.get(token) is peer:
            del self._resuming[token]

    async def _supersede(self, token: str, registry: ResumeRegistry) -> None:
        """A newer offer names a token an earlier one is still connecting with: only the
        token's holder has it, and it gave that attempt up (a client retries when its
        connection does not come up), so the earlier peer closes and its claim goes."""
        earlier = self._resuming.pop(token, None)
        if earlier is None:
            return
        logger.info("a newer offer resumes with the token of %s: that one is given up", earlier)
        await earlier.close(end_session=False)
        registry.unclaim(token)

    async def _give_up(self, peer: WebRTCPeer, token: str | None) -> None:
        """An offer that cannot be answered: its peer closes (and a token it claimed
        works again)."""
        await peer.close(end_session=False)
        if token is not None and self.resume is not None:
            self.resume.unclaim(token)

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
    resume: ResumeRegistry | None = None,
) -> WebRTCServer:
    """Mount ``POST /api/offer`` and ``GET /api/ice`` on ``app``; the peers are closed when
    ``app`` shuts down.
    ``resume``: where sessions wait for their client after a drop (None: resuming off)."""
    server = WebRTCServer(entrypoint, options, run=run, resume=resume)
    app.add_routes(server.routes())

    async def shutdown(_: web.Application) -> None:
        await server.aclose()

    app.on_shutdown.append(shutdown)
    return server
