"""The aiohttp application that serves an agent: one entry point, every transport.

``create_app(entrypoint)`` mounts:

- ``GET /``: the browser page (``rejoinder.io.static``);
- ``GET /ws``: the WebSocket transport (``rejoinder.io.websocket``, ``docs/protocol.md``);
- ``POST /api/offer``: WebRTC signalling (``rejoinder.io.webrtc``), and ``GET /api/ice``:
  the ICE servers (STUN/TURN, fresh credentials) a WebRTC client uses for its next offer,
  when the ``webrtc`` extra is installed;
- the phone providers' webhooks and media sockets named in ``telephony`` (e.g.
  ``POST /twilio/twiml`` and ``GET /twilio``; ``rejoinder.io.telephony``);
- ``GET /healthz``: ``{"status": "ok", "sessions": N, "max_sessions": M, "detached": D}``
  (HTTP 200; ``detached``: those of the N waiting for their client to resume), or
  ``"status": "draining"`` with HTTP 503 once the server is shutting down, so a load
  balancer stops sending clients (live sessions by transport are in ``/metrics``);
- ``GET /metrics``: the app's Prometheus metrics (``rejoinder.io.server_metrics``:
  sessions, turns, latencies, errors), from a registry of its own (``app[METRICS]``).

Admission goes through one ``SessionGate`` (``app[GATE]``): over ``max_sessions`` live
sessions, or while draining, the WebSocket upgrade and the WebRTC offer get HTTP 503 with
the reason. ``rejoinder serve`` drains it on SIGTERM (``rejoinder.devserver``).

Resuming (``resume_grace``, 30 s by default; 0 turns it off): a session whose client
dropped waits that long in the app's ``ResumeRegistry`` (``app[RESUME]``), shared by
both transports, for a connection that names its token (``rejoinder.io.resume``). A
request that names a live token in its URL (``?resume=TOKEN``) is admitted even when the
server is full or draining: its session is already counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .admission import SessionGate
from .connection import Connection, Entrypoint
from .hosting import (
    close_session,
    health_answer,
    host_gate,
    metrics_answer,
    observed,
    refused_answer,
    resume_registry,
)
from .resume import DEFAULT_GRACE
from .server_metrics import ServerMetrics
from .socket_loop import respond
from .websocket import WebSocketOptions, websocket_handler

if TYPE_CHECKING:
    from .resume import ResumeRegistry
    from .telephony import CallControl, TelephonyOptions

__all__ = ["GATE", "METRICS", "RESUME", "WEBRTC", "create_app", "webrtc_unavailable"]

logger = logging.getLogger("rejoinder.io.app")

GATE: web.AppKey[SessionGate[Connection]] = web.AppKey("rejoinder.gate", SessionGate)
"""App key: the ``SessionGate`` every transport's sessions go through."""
WEBRTC: web.AppKey[Any] = web.AppKey("rejoinder.webrtc", object)
"""App key: the ``WebRTCServer`` answering ``POST /api/offer``, or ``None``."""
METRICS: web.AppKey[ServerMetrics] = web.AppKey("rejoinder.metrics", ServerMetrics)
"""App key: the app's ``ServerMetrics`` (its own Prometheus registry)."""
RESUME: web.AppKey[Any] = web.AppKey("rejoinder.resume", object)
"""App key: the ``ResumeRegistry`` of sessions waiting for their client, or ``None``."""


def webrtc_unavailable() -> str | None:
    """Why ``POST /api/offer`` cannot be served here (the extra to install), or ``None``."""
    from .webrtc import INSTALL_HINT, available

    return None if available() else f"not installed ({INSTALL_HINT})"


_close_session = close_session  # (the name it had here)


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
    telephony_controls: Mapping[str, CallControl] | None = None,
    inspect: bool = False,
    metrics_labels: Mapping[str, str] | None = None,
    resume_grace: float = DEFAULT_GRACE,
) -> web.Application:
    """An application serving ``entrypoint`` (called once per client connection).

    ``max_sessions``: sessions beyond this many live ones are refused with HTTP 503 (or
    give a ``gate`` of your own, e.g. to drain it). ``webrtc``: ``None`` mounts
    ``POST /api/offer`` when the extra is installed, ``False`` never, a
    ``rejoinder.io.webrtc.WebRTCOptions`` always (with those options). ``page``: serve
    the browser page at ``GET /``. ``telephony``: phone providers to serve (``"twilio"``,
    ``"telnyx"``, ``"plivo"``), with ``telephony_options``; ``telephony_controls``: each
    provider's call control (``TwilioCalls``...), for transfers of the calls streamed in
    (``rejoinder.io.telephony.environment`` reads them from the environment). ``inspect``: mount
    ``GET /sessions`` (what each live session owes, and its timeline; see
    ``rejoinder.io.inspect``). ``metrics_labels``: constant labels on every ``/metrics``
    sample (``{"replica": ...}``). ``resume_grace``: seconds a session whose client
    dropped waits for it to resume (0: it ends at once; see ``rejoinder.io.resume``).
    """
    gate = host_gate(max_sessions, gate)
    resume = resume_registry(resume_grace, gate)
    app = web.Application()
    app[GATE] = gate
    app[RESUME] = resume
    app[METRICS] = server_metrics = ServerMetrics(gate, labels=metrics_labels, resume=resume)
    entrypoint = observed(entrypoint, server_metrics)

    ws_handler = websocket_handler(
        entrypoint, _with_ice(websocket, webrtc), run=gate.run, resume=resume
    )

    async def ws_route(request: web.Request) -> web.StreamResponse:
        if resume is not None and resume.knows(request.query.get("resume")):
            return await ws_handler(request)  # its session holds its place already
        with gate.admit() as admission:
            if admission is None:
                return _refused(gate)
            return await ws_handler(request)

    app.router.add_get("/ws", ws_route)
    if resume is not None:

        async def stop_resuming(_: web.Application) -> None:
            resume.close()

        app.on_shutdown.append(stop_resuming)
    app[WEBRTC] = _mount_webrtc(app, entrypoint, gate, webrtc, resume)
    if telephony:
        from .telephony import add_telephony_routes

        add_telephony_routes(
            app,
            entrypoint,
            gate=gate,
            providers=telephony,
            options=telephony_options,
            controls=telephony_controls,
        )
    if page:
        from .static import page_routes

        app.add_routes(page_routes())

    async def healthz(_request: web.Request) -> web.Response:
        return respond(health_answer(gate, resume))

    async def metrics(_request: web.Request) -> web.Response:
        return respond(metrics_answer(server_metrics))

    if inspect:
        from .inspect import add_inspect_routes

        add_inspect_routes(app, gate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    if gate.load is not None:
        app.cleanup_ctx.append(_sampling(gate))
    return app


def _sampling(gate: SessionGate[Connection]) -> Callable[[web.Application], AsyncIterator[None]]:
    """The gate's load gauge, sampled every ``SAMPLE_SECONDS`` while the app runs."""
    from .load import SAMPLE_SECONDS

    async def sample_forever() -> None:
        assert gate.load is not None
        while True:
            gate.load.sample(gate.live)
            await asyncio.sleep(SAMPLE_SECONDS)

    async def context(_app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(sample_forever(), name="rejoinder-load-gauge")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


def _with_ice(websocket: WebSocketOptions | None, webrtc: Any) -> WebSocketOptions | None:
    """The WebSocket's options carrying WebRTC's client ICE servers into its ``ready``
    too, unless they name their own: one place says which servers clients use."""
    from .webrtc.options import WebRTCOptions

    if not isinstance(webrtc, WebRTCOptions) or webrtc.ice is None:
        return websocket
    options = websocket or WebSocketOptions()
    return options if options.ice is not None else dataclasses.replace(options, ice=webrtc.ice)


def _refused(gate: SessionGate[Connection]) -> web.Response:
    return respond(refused_answer(gate))


def _mount_webrtc(
    app: web.Application,
    entrypoint: Entrypoint,
    gate: SessionGate[Connection],
    webrtc: Any,
    resume: ResumeRegistry | None,
) -> Any:
    if webrtc is False:
        return None
    from . import webrtc as rtc

    if webrtc is None and not rtc.available():
        return None
    options = webrtc if isinstance(webrtc, rtc.WebRTCOptions) else rtc.WebRTCOptions()
    server = rtc.WebRTCServer(entrypoint, options, run=gate.run, resume=resume)
    # The answer goes out before the peer connects and its session starts: the place
    # admitted for the offer is held until then.
    linger = options.connect_timeout + options.data_channel_timeout

    async def offer_route(request: web.Request) -> web.StreamResponse:
        if "resume" in request.query:
            return await server.handle_offer(request)  # its session holds its place
        with gate.admit(linger=linger) as admission:
            if admission is None:
                return _refused(gate)
            return await server.handle_offer(request)

    async def shutdown(_: web.Application) -> None:
        await server.aclose()

    app.router.add_post(rtc.OFFER_PATH, offer_route)
    # No admission: it makes nothing, and a client asks before every offer.
    app.router.add_get(rtc.ICE_PATH, server.handle_ice)
    app.on_shutdown.append(shutdown)
    return server
