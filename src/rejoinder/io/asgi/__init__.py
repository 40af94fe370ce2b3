"""The ASGI host: the transports of ``create_app`` as a Starlette application, for uvicorn,
Ray Serve (whose FastAPI ingress runs on Starlette) or any ASGI server.

``create_asgi_app(entrypoint)`` serves the same framework-free cores as the aiohttp app,
through the same ``hosting.run_socket`` loop, with nothing re-implemented:

- ``GET /ws``: the client protocol (``WebSocketPeer``, ``docs/protocol.md``): the same
  messages, close codes and reasons, start timeout, close timeout and bounded ``Outbox``;
- the phone providers named in ``telephony`` (``telephony.service.TelephonyService``):
  ``POST|GET /twilio/twiml`` with Twilio's signature check and one-time stream tokens,
  ``POST /plivo/answer``, and the media sockets ``/twilio``, ``/telnyx``, ``/plivo``
  (``MediaStreamPeer``, marks and clears included);
- ``GET /healthz`` (``"draining"`` with 503 once the gate drains), ``GET /metrics`` (the
  app's own Prometheus registry), ``GET /`` (the browser page, WebSocket mode) and, with
  ``inspect=True``, ``GET /sessions`` and ``GET /sessions/{id}/timeline``.

Admission goes through one ``SessionGate`` (``app.state.gate``; the metrics are
``app.state.metrics``): over ``max_sessions`` live sessions, or while draining, a
WebSocket upgrade gets HTTP 503 with the reason, as on aiohttp, when the server supports
the ASGI WebSocket denial response (uvicorn does); otherwise the upgrade is refused with a
close before accepting (uvicorn would answer 403). Drain with ``app.state.gate.drain(s)``
from your server's shutdown hook.

What the ASGI server does rather than the app: WebSocket pings (uvicorn's
``ws_ping_interval``/``ws_ping_timeout``, not ``WebSocketOptions.heartbeat``). Frames over
``max_frame_bytes`` are closed with 1009 by this host, as aiohttp does; keep the server's
own limit (uvicorn's ``ws_max_size``, 16 MiB by default) above it.

Resuming (``resume_grace``, 30 s by default; 0 turns it off) works as on aiohttp (see
``rejoinder.io.resume``), for the WebSocket transport: a socket that drops without the
client's close 1000 leaves its session waiting for the client, and its request is held
until the session is resumed or ends, so a server that counts requests as load (Ray
Serve) still counts it. The registry (``app.state.resume``) closes, ending the sessions
that wait, when the gate starts draining or at the lifespan's shutdown. (uvicorn waits for
open requests before that shutdown: drain the gate first, as a Ray replica does, or its
shutdown waits up to ``resume_grace`` for them.) It is per process: a token only resumes on the
process (the Ray replica) that issued it; elsewhere it is refused (``resume_failed``).

WebRTC is not served here: its signalling (``POST /api/offer``) and its media (UDP to the
process that holds the peer connection) stay on the aiohttp host (``create_app``), since
a request routed through an ASGI proxy cannot bring the UDP flow to the same replica.

Needs the ``asgi`` extra (``pip install 'rejoinder[asgi]'``: Starlette, and uvicorn with
``websockets`` to run it); ``import rejoinder.io`` does not import it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ... import _extras
from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import health_answer, host_gate, metrics_answer, observed, resume_registry
from ..resume import DEFAULT_GRACE
from ..server_metrics import ServerMetrics
from ..websocket import WebSocketOptions

if TYPE_CHECKING:
    from ..telephony import TelephonyOptions

with _extras.needed("asgi", "rejoinder.io.asgi"):  # .http and the others import it too
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute, Route, WebSocketRoute

    from .http import answering, inspect_routes, page_routes
    from .phone import telephony_routes, telephony_service
    from .sockets import AsgiFrames, client_route

__all__ = ["AsgiFrames", "create_asgi_app"]


def create_asgi_app(
    entrypoint: Entrypoint,
    *,
    max_sessions: int | None = None,
    websocket: WebSocketOptions | None = None,
    page: bool = True,
    gate: SessionGate[Connection] | None = None,
    telephony: Sequence[str] = (),
    telephony_options: TelephonyOptions | None = None,
    public_url: str | None = None,
    twilio_auth_token: str | None = None,
    inspect: bool = False,
    metrics_labels: Mapping[str, str] | None = None,
    resume_grace: float = DEFAULT_GRACE,
) -> Starlette:
    """A Starlette application serving ``entrypoint`` (called once per connection), with
    ``create_app``'s options (less ``webrtc``). ``public_url`` and ``twilio_auth_token``
    set those fields of ``telephony_options`` (see ``TelephonyOptions``); ``metrics_labels``
    are constant labels on every ``/metrics`` sample; ``resume_grace``: seconds a session
    whose client dropped waits for it to resume (0: it ends at once)."""
    gate = host_gate(max_sessions, gate)
    resume = resume_registry(resume_grace, gate)
    metrics = ServerMetrics(gate, labels=metrics_labels, resume=resume)
    entrypoint = observed(entrypoint, metrics)
    ws_options = websocket or WebSocketOptions()

    routes: list[BaseRoute] = [
        WebSocketRoute("/ws", client_route(entrypoint, ws_options, gate, resume)),
        Route("/healthz", answering(lambda _: health_answer(gate, resume))),
        Route("/metrics", answering(lambda _: metrics_answer(metrics))),
    ]
    service = None
    if telephony:
        service = telephony_service(
            entrypoint, gate, telephony, telephony_options, public_url, twilio_auth_token
        )
        routes += telephony_routes(service)
    if page:
        routes += page_routes()
    if inspect:
        routes += inspect_routes(gate)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if resume is not None:
            resume.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gate = gate
    app.state.resume = resume
    app.state.metrics = metrics
    app.state.telephony = service
    return app
