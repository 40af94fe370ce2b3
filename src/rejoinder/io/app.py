"""The aiohttp application that serves an agent: one entry point, every transport.

``create_app(entrypoint)`` mounts:

- ``GET /``: the browser page (``rejoinder.io.static``);
- ``GET /ws``: the WebSocket transport (``rejoinder.io.websocket``, ``docs/protocol.md``);
- ``POST /api/offer``: WebRTC signalling (``rejoinder.io.webrtc``), when the ``webrtc``
  extra is installed;
- the phone providers' webhooks and media sockets named in ``telephony`` (e.g.
  ``POST /twilio/twiml`` and ``GET /twilio``; ``rejoinder.io.telephony``);
- ``GET /healthz``: ``{"status": "ok", "sessions": N, "max_sessions": M}`` (HTTP 200), or
  ``"status": "draining"`` with HTTP 503 once the server is shutting down, so a load
  balancer stops sending clients (live sessions by transport are in ``/metrics``);
- ``GET /metrics``: the app's Prometheus metrics (``rejoinder.io.server_metrics``:
  sessions, turns, latencies, errors), from a registry of its own (``app[METRICS]``).

Admission goes through one ``SessionGate`` (``app[GATE]``): over ``max_sessions`` live
sessions, or while draining, the WebSocket upgrade and the WebRTC offer get HTTP 503 with
the reason. ``rejoinder serve`` drains it on SIGTERM (``rejoinder.devserver``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .admission import SessionGate
from .connection import Connection, Entrypoint
from .server_metrics import CONTENT_TYPE, ServerMetrics
from .websocket import WebSocketOptions, websocket_handler

if TYPE_CHECKING:
    from ..session import AgentSession
    from .telephony import TelephonyOptions

__all__ = ["GATE", "METRICS", "WEBRTC", "create_app", "webrtc_unavailable"]

logger = logging.getLogger("rejoinder.io.app")

GATE: web.AppKey[SessionGate[Connection]] = web.AppKey("rejoinder.gate", SessionGate)
"""App key: the ``SessionGate`` every transport's sessions go through."""
WEBRTC: web.AppKey[Any] = web.AppKey("rejoinder.webrtc", object)
"""App key: the ``WebRTCServer`` answering ``POST /api/offer``, or ``None``."""
METRICS: web.AppKey[ServerMetrics] = web.AppKey("rejoinder.metrics", ServerMetrics)
"""App key: the app's ``ServerMetrics`` (its own Prometheus registry)."""


def webrtc_unavailable() -> str | None:
    """Why ``POST /api/offer`` cannot be served here (the extra to install), or ``None``."""
    from .webrtc import INSTALL_HINT, available

    return None if available() else f"not installed ({INSTALL_HINT})"


async def _close_session(conn: Connection) -> None:
    """End a live connection from the server side: its session closes, ``serve`` returns
    and the transport closes the socket or peer connection."""
    if conn.session is not None:
        await conn.session.aclose()
    else:
        conn.client_left()


def create_app(
    entrypoint: Entrypoint,
    *,
    max_sessions: int | None = None,
    websocket: WebSocketOptions | None = None,
    webrtc: Any = None,
    page: bool = True,
    gate: SessionGate[Connection] | None = None,
    telephony: Sequence[str] = (),
    telephony_options: TelephonyOptions | None = None,
    inspect: bool = False,
) -> web.Application:
    """An application serving ``entrypoint`` (called once per client connection).

    ``max_sessions``: sessions beyond this many live ones are refused with HTTP 503 (or
    give a ``gate`` of your own, e.g. to drain it). ``webrtc``: ``None`` mounts
    ``POST /api/offer`` when the extra is installed, ``False`` never, a
    ``rejoinder.io.webrtc.WebRTCOptions`` always (with those options). ``page``: serve
    the browser page at ``GET /``. ``telephony``: phone providers to serve (``"twilio"``,
    ``"telnyx"``, ``"plivo"``), with ``telephony_options``. ``inspect``: mount
    ``GET /sessions`` (what each live session owes, and its timeline; see
    ``rejoinder.io.inspect``).
    """
    if gate is None:
        gate = SessionGate(max_sessions=max_sessions, close=_close_session)
    elif max_sessions is not None:
        raise ValueError("give max_sessions to the gate, not to create_app as well")
    if gate.close is None:
        gate.close = _close_session
    app = web.Application()
    app[GATE] = gate
    app[METRICS] = server_metrics = ServerMetrics(gate)
    entrypoint = _observed(entrypoint, server_metrics)

    ws_handler = websocket_handler(entrypoint, websocket, run=gate.run)

    async def ws_route(request: web.Request) -> web.StreamResponse:
        with gate.admit() as admission:
            if admission is None:
                return _refused(gate)
            return await ws_handler(request)

    app.router.add_get("/ws", ws_route)
    app[WEBRTC] = _mount_webrtc(app, entrypoint, gate, webrtc)
    if telephony:
        from .telephony import add_telephony_routes

        add_telephony_routes(
            app, entrypoint, gate=gate, providers=telephony, options=telephony_options
        )
    if page:
        from .static import page_routes

        app.add_routes(page_routes())

    async def healthz(_request: web.Request) -> web.Response:
        body = {"status": gate.status, "sessions": gate.live, "max_sessions": gate.max_sessions}
        return web.json_response(body, status=503 if gate.draining else 200)

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=server_metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    if inspect:
        from .inspect import add_inspect_routes

        add_inspect_routes(app, gate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def _observed(entrypoint: Entrypoint, metrics: ServerMetrics) -> Entrypoint:
    """``entrypoint``, with the session its connection serves watched by ``metrics``
    (every transport calls it inside ``gate.run``)."""

    async def observed(conn: Connection) -> None:
        detach: list[Callable[[], None]] = []

        def observe(session: AgentSession[Any]) -> None:
            detach.append(metrics.observe(session))

        conn.session_observers.append(observe)
        try:
            await entrypoint(conn)
        finally:
            for stop in detach:  # the session closed, unless serve() never returned
                stop()
            with contextlib.suppress(ValueError):
                conn.session_observers.remove(observe)

    return observed


def _refused(gate: SessionGate[Connection]) -> web.Response:
    reason = gate.refusal() or "the server cannot take a session now"
    return web.json_response({"error": reason}, status=503, headers={"Retry-After": "5"})


def _mount_webrtc(
    app: web.Application, entrypoint: Entrypoint, gate: SessionGate[Connection], webrtc: Any
) -> Any:
    if webrtc is False:
        return None
    from . import webrtc as rtc

    if webrtc is None and not rtc.available():
        return None
    options = webrtc if isinstance(webrtc, rtc.WebRTCOptions) else rtc.WebRTCOptions()
    server = rtc.WebRTCServer(entrypoint, options, run=gate.run)
    # The answer goes out before the peer connects and its session starts: the place
    # admitted for the offer is held until then.
    linger = options.connect_timeout + options.data_channel_timeout

    async def offer_route(request: web.Request) -> web.StreamResponse:
        with gate.admit(linger=linger) as admission:
            if admission is None:
                return _refused(gate)
            return await server.handle_offer(request)

    async def shutdown(_: web.Application) -> None:
        await server.aclose()

    app.router.add_post(rtc.OFFER_PATH, offer_route)
    app.on_shutdown.append(shutdown)
    return server
