"""The aiohttp side of the phone providers: webhooks that answer a call with "stream it
to us", and the media sockets, each feeding a framework-free ``MediaStreamPeer``.

``add_telephony_routes(app, entrypoint, providers=("twilio",))`` mounts, per provider:

- Twilio: ``POST /twilio/twiml`` (the number's voice webhook, or ``GET``: TwiML
  ``<Connect><Stream url="wss://<host>/twilio">``, or ``<Reject reason="busy">`` when the
  server is full or draining) and ``GET /twilio`` (the media socket).
- Telnyx: ``GET /telnyx`` (start it from Call Control with ``stream_url`` pointing here,
  ``stream_bidirectional_mode=rtp`` and codec PCMU or PCMA).
- Plivo: ``POST /plivo/answer`` (the answer URL: a bidirectional ``<Stream>`` of μ-law at
  8 kHz) and ``GET /plivo``.

With ``TelephonyOptions.twilio_auth_token`` set, a Twilio webhook without a valid
``X-Twilio-Signature`` gets 403, and the media socket accepts only a call whose webhook
was accepted: the TwiML carries a one-time token back as a custom parameter. Telnyx's and
Plivo's webhooks are checked the same way with their secrets (``service.WebhookSecrets``).
For outbound calls (``outbound.dial``) it also mounts the status callbacks:
``POST /twilio/status``, ``POST /telnyx/events``, ``POST /plivo/status`` (and Plivo's
``POST /plivo/transfer``). The service is kept in ``app[TELEPHONY]`` for ``dial``.

What each route answers and does is decided in ``service.TelephonyService`` (no aiohttp
there); this module only reads aiohttp requests into it and writes its answers back. The
ASGI host (``rejoinder.io.asgi``) mounts the same service.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiohttp import web

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import run_socket
from ..socket_loop import AiohttpFrames, respond
from .carriers.base import CallControl
from .dialects import DIALECTS, Dialect
from .service import Answer, TelephonyService, WebhookRequest, WebhookSecrets
from .stream import TelephonyOptions
from .twilio_webhook import malformed_request_url

__all__ = ["PROVIDERS", "TELEPHONY", "add_telephony_routes"]

logger = logging.getLogger("rejoinder.io.telephony")

PROVIDERS = tuple(DIALECTS)
"""Provider names ``add_telephony_routes`` (and ``serve --telephony``) accept."""

TELEPHONY: web.AppKey[TelephonyService] = web.AppKey("rejoinder.telephony", TelephonyService)
"""The app's ``TelephonyService`` (what ``outbound.dial`` places calls with)."""


def add_telephony_routes(
    app: web.Application,
    entrypoint: Entrypoint,
    *,
    gate: SessionGate[Connection],
    providers: Sequence[str] = ("twilio",),
    options: TelephonyOptions | None = None,
    secrets: WebhookSecrets | None = None,
    controls: Mapping[str, CallControl] | None = None,
) -> TelephonyService:
    """Mount the routes (see the module docstring); ``secrets`` authenticate the webhooks
    (default: from ``options``), ``controls`` are each provider's call control for the
    transfers of calls streamed in. Returns the service (also in ``app[TELEPHONY]``)."""
    service = TelephonyService(
        entrypoint,
        gate=gate,
        providers=providers,
        options=options,
        secrets=secrets,
        controls=controls,
    )
    app[TELEPHONY] = service
    for path, method, answer in service.webhooks():
        if method == "POST":
            app.router.add_post(path, _webhook_route(answer))
        else:
            app.router.add_get(path, _webhook_route(answer))
    for path, dialect in service.media_paths().items():
        app.router.add_get(path, _media_route(service, dialect))

    async def forget_calls(_: web.Application) -> None:
        service.outbound.close()

    app.on_shutdown.append(forget_calls)
    return service


def request_url(request: web.Request) -> str | None:
    """The URL the sender asked for, or None when its ``Host`` header makes none (a
    bracket, a port out of range: yarl raises): the sender's junk, answered with 400."""
    try:
        url = str(request.url)
        _ = request.url.port
    except ValueError:
        url = ""
    if not url or malformed_request_url(url) is not None:
        logger.info("webhook from %s: malformed Host header %r", request.remote, request.host)
        return None
    return url


def _webhook_route(answer: Answer) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def route(request: web.Request) -> web.Response:
        url = request_url(request)
        if url is None:
            return web.Response(status=400, text="malformed Host header")
        body = await request.read() if request.method == "POST" else b""
        form = await request.post() if request.method == "POST" else None  # (from the read)
        webhook = WebhookRequest(
            method=request.method,
            url=url,
            query=list(request.query.items()),
            form=None if form is None else [(k, v) for k, v in form.items() if isinstance(v, str)],
            signature=request.headers.get("X-Twilio-Signature", ""),
            remote=request.remote,
            body=body,
            headers=dict(request.headers),
        )
        return respond(answer(webhook))

    return route


def _media_route(
    service: TelephonyService, dialect: Dialect
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    opts = service.options

    async def route(request: web.Request) -> web.StreamResponse:
        with service.gate.admit() as admission:
            if admission is None:
                return respond(service.media_refusal())
            ws = web.WebSocketResponse(heartbeat=opts.heartbeat, max_msg_size=opts.max_frame_bytes)
            await ws.prepare(request)
            _peer, binding = service.media_socket(
                dialect, remote=request.remote, query=dict(request.query)
            )
            await run_socket(AiohttpFrames(ws, binding.name), binding)
            return ws

    return route
