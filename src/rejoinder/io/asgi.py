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

WebRTC is not served here: its signalling (``POST /api/offer``) and its media (UDP to the
process that holds the peer connection) stay on the aiohttp host (``create_app``), since
a request routed through an ASGI proxy cannot bring the UDP flow to the same replica.

Needs the ``asgi`` extra (``pip install 'rejoinder[asgi]'``: Starlette, and uvicorn with
``websockets`` to run it); ``import rejoinder.io`` does not import it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

try:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Route, WebSocketRoute
    from starlette.websockets import WebSocket, WebSocketDisconnect
except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
    raise ImportError(
        "rejoinder.io.asgi needs the asgi extra: pip install 'rejoinder[asgi]'"
    ) from exc

from .admission import SessionGate
from .connection import Connection, Entrypoint
from .hosting import (
    HttpAnswer,
    SocketBinding,
    first_values,
    health_answer,
    host_gate,
    metrics_answer,
    observed,
    refused_answer,
    run_socket,
)
from .protocol import CloseCode, ErrorCode
from .server_metrics import ServerMetrics
from .websocket import WebSocketOptions, WebSocketPeer, _run_agent

if TYPE_CHECKING:
    from .telephony import Dialect, TelephonyOptions
    from .telephony.service import Answer, TelephonyService

__all__ = ["MAX_BODY_BYTES", "AsgiFrames", "create_asgi_app"]

logger = logging.getLogger("rejoinder.io.asgi")

MAX_BODY_BYTES = 1024 * 1024
"""Largest webhook body read (aiohttp's default ``client_max_size``); larger: 413."""

_DENIAL = "websocket.http.response"
_TRY_AGAIN_LATER = 1013


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
) -> Starlette:
    """A Starlette application serving ``entrypoint`` (called once per connection), with
    ``create_app``'s options (less ``webrtc``). ``public_url`` and ``twilio_auth_token``
    set those fields of ``telephony_options`` (see ``TelephonyOptions``)."""
    gate = host_gate(max_sessions, gate)
    metrics = ServerMetrics(gate)
    entrypoint = observed(entrypoint, metrics)
    ws_options = websocket or WebSocketOptions()

    routes: list[BaseRoute] = [
        WebSocketRoute("/ws", _client_route(entrypoint, ws_options, gate)),
        Route("/healthz", _answering(lambda _: health_answer(gate))),
        Route("/metrics", _answering(lambda _: metrics_answer(metrics))),
    ]
    service = None
    if telephony:
        service = _telephony(
            entrypoint, gate, telephony, telephony_options, public_url, twilio_auth_token
        )
        routes += _telephony_routes(service)
    if page:
        routes += _page_routes()
    if inspect:
        routes += _inspect_routes(gate)
    app = Starlette(routes=routes)
    app.state.gate = gate
    app.state.metrics = metrics
    app.state.telephony = service
    return app


# ----------------------------------------------------------------- sockets


class AsgiFrames:
    """An accepted Starlette ``WebSocket`` as a ``FrameSocket`` (``hosting``). Frames over
    ``max_frame_bytes`` (UTF-8 bytes for text) close the socket with 1009 and no reason,
    as aiohttp's ``max_msg_size`` does."""

    def __init__(self, ws: WebSocket, *, max_frame_bytes: int, name: str) -> None:
        self._ws = ws
        self._max = max_frame_bytes
        self._name = name
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def receive(self) -> str | bytes | None:
        while True:
            try:
                message = await self._ws.receive()
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._closed = True
                return None
            if message["type"] == "websocket.disconnect":
                self._closed = True
                return None
            text = message.get("text")
            if text is not None:
                if _utf8_length_over(text, self._max):
                    await self._too_big("text")
                    return None
                return str(text)
            data = message.get("bytes")
            if data is not None:
                if len(data) > self._max:
                    await self._too_big("binary")
                    return None
                return bytes(data)

    async def _too_big(self, kind: str) -> None:
        logger.info("%s socket: %s frame over %d bytes; closing", self._name, kind, self._max)
        await self.close(int(CloseCode.MESSAGE_TOO_BIG), "")

    async def send_text(self, text: str) -> None:
        await self._send({"type": "websocket.send", "text": text})

    async def send_bytes(self, data: bytes) -> None:
        await self._send({"type": "websocket.send", "bytes": data})

    async def _send(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise ConnectionError("the socket is closed")
        try:
            await self._ws.send(message)
        except (WebSocketDisconnect, OSError) as exc:
            self._closed = True
            raise ConnectionError(f"the socket went away: {exc!r}") from exc

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._ws.close(code, reason)
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            logger.debug("%s socket: close failed: %r", self._name, exc)


def _utf8_length_over(text: str, limit: int) -> bool:
    if len(text) > limit:
        return True
    return len(text) * 4 > limit and len(text.encode()) > limit


async def _deny(ws: WebSocket, answer: HttpAnswer) -> None:
    """Refuse an upgrade with ``answer`` (HTTP 503 and the reason), or, on a server
    without the denial-response extension, with a close before accepting."""
    if _DENIAL in (ws.scope.get("extensions") or {}):
        await ws.send_denial_response(_response(answer))
        return
    logger.info("refusing a websocket (no denial-response support): %s", answer.body)
    await ws.close(_TRY_AGAIN_LATER, "the server cannot take a session now")


def _remote(conn: WebSocket | Request) -> str | None:
    return conn.client.host if conn.client is not None else None


def _client_socket(
    entrypoint: Entrypoint,
    opts: WebSocketOptions,
    run: Callable[[Entrypoint, Connection], Awaitable[None]],
    ws: WebSocket,
) -> tuple[WebSocketPeer, SocketBinding]:
    """One protocol v1 client: its peer, plugged into the socket loop as
    ``websocket.websocket_handler`` plugs it on aiohttp."""
    query = first_values(ws.query_params.multi_items())
    peer = WebSocketPeer(opts, remote=_remote(ws), query=query)

    def no_start() -> None:
        if peer.connection is None:
            peer.fail(CloseCode.START_TIMEOUT, ErrorCode.START_TIMEOUT, "no start message")

    binding = SocketBinding(
        outbox=peer.outbox,
        receive_text=peer.receive_text,
        receive_bytes=peer.receive_bytes,
        run_agent=lambda conn: _run_agent(run, entrypoint, conn, peer),
        no_start=no_start,
        left=peer.client_left,
        start_timeout=opts.start_timeout,
        close_timeout=opts.close_timeout,
        name="ws",
    )
    return peer, binding


def _client_route(
    entrypoint: Entrypoint, opts: WebSocketOptions, gate: SessionGate[Connection]
) -> Callable[[WebSocket], Awaitable[None]]:
    async def route(ws: WebSocket) -> None:
        with gate.admit() as admission:
            if admission is None:
                await _deny(ws, refused_answer(gate))
                return
            await ws.accept()
            _peer, binding = _client_socket(entrypoint, opts, gate.run, ws)
            frames = AsgiFrames(ws, max_frame_bytes=opts.max_frame_bytes, name=binding.name)
            await run_socket(frames, binding)

    return route


# --------------------------------------------------------------- telephony


def _telephony(
    entrypoint: Entrypoint,
    gate: SessionGate[Connection],
    providers: Sequence[str],
    options: TelephonyOptions | None,
    public_url: str | None,
    twilio_auth_token: str | None,
) -> TelephonyService:
    from .telephony import TelephonyOptions
    from .telephony.service import TelephonyService

    opts = options or TelephonyOptions()
    if public_url is not None:
        opts = dataclasses.replace(opts, public_url=public_url)
    if twilio_auth_token is not None:
        opts = dataclasses.replace(opts, twilio_auth_token=twilio_auth_token)
    return TelephonyService(entrypoint, gate=gate, providers=providers, options=opts)


def _telephony_routes(service: TelephonyService) -> list[BaseRoute]:
    routes: list[BaseRoute] = []
    by_path: dict[str, dict[str, Answer]] = {}
    for path, method, answer in service.webhooks():
        by_path.setdefault(path, {})[method] = answer
    for path, answers in by_path.items():
        routes.append(Route(path, _webhook_route(answers), methods=list(answers)))
    for path, dialect in service.media_paths().items():
        routes.append(WebSocketRoute(path, _media_route(service, dialect)))
    return routes


def _webhook_route(answers: dict[str, Answer]) -> Callable[[Request], Awaitable[Response]]:
    from .telephony.service import WebhookRequest

    async def route(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        form: list[tuple[str, str]] | None = None
        if request.method == "POST":
            body = await _body(request)
            if body is None:
                return _response(HttpAnswer.text("request body too large", status=413))
            form = _form_fields(request.headers.get("content-type", ""), body)
        webhook = WebhookRequest(
            method=request.method,
            url=str(request.url),
            query=request.query_params.multi_items(),
            form=form,
            signature=request.headers.get("x-twilio-signature", ""),
            remote=_remote(request),
        )
        return _response(answers[method](webhook))

    return route


def _media_route(
    service: TelephonyService, dialect: Dialect
) -> Callable[[WebSocket], Awaitable[None]]:
    max_frame_bytes = service.options.max_frame_bytes

    async def route(ws: WebSocket) -> None:
        with service.gate.admit() as admission:
            if admission is None:
                await _deny(ws, service.media_refusal())
                return
            await ws.accept()
            query = first_values(ws.query_params.multi_items())
            _peer, binding = service.media_socket(dialect, remote=_remote(ws), query=query)
            frames = AsgiFrames(ws, max_frame_bytes=max_frame_bytes, name=binding.name)
            await run_socket(frames, binding)

    return route


async def _body(request: Request) -> bytes | None:
    """The request's body, or ``None`` past ``MAX_BODY_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _form_fields(content_type: str, body: bytes) -> list[tuple[str, str]]:
    """A form-encoded body's fields, in order, decoded as aiohttp's ``request.post()``
    does; any other body (Twilio sends none) has no fields."""
    media_type, *params = (part.strip() for part in content_type.split(";"))
    if media_type.lower() != "application/x-www-form-urlencoded":
        return []
    charset = "utf-8"
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        text = body.rstrip().decode(charset)
        return parse_qsl(text, keep_blank_values=True, encoding=charset)
    except (LookupError, UnicodeDecodeError):
        return []


# ---------------------------------------------------------------- HTTP


def _response(answer: HttpAnswer) -> Response:
    headers = {**answer.headers, "content-type": answer.content_type}
    return Response(answer.body_bytes, status_code=answer.status, headers=headers)


def _answering(answer: Callable[[Request], HttpAnswer]) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return _response(answer(request))

    return route


def _page_routes() -> list[BaseRoute]:
    from .static import PAGE_FILES

    package = files("rejoinder.io.static")
    routes: list[BaseRoute] = []
    for path, (name, media_type) in PAGE_FILES.items():
        body = package.joinpath(name).read_bytes()
        headers = {"Cache-Control": "no-cache"}
        answer = HttpAnswer(200, body, f"{media_type}; charset=utf-8", headers)
        routes.append(Route(path, _answering(_constant(answer))))
    return routes


def _constant(answer: HttpAnswer) -> Callable[[Request], HttpAnswer]:
    return lambda _request: answer


def _inspect_routes(gate: SessionGate[Connection]) -> list[BaseRoute]:
    from ..session.timeline import json_safe
    from .inspect import _describe

    def sessions(_request: Request) -> HttpAnswer:
        return HttpAnswer.json({"sessions": [_describe(c) for c in gate.connections]})

    def timeline(request: Request) -> HttpAnswer:
        wanted = request.path_params["id"]
        conn = next(
            (c for c in gate.connections if c.session is not None and c.session.id == wanted),
            None,
        )
        if conn is None or conn.session is None:
            return HttpAnswer.json({"error": f"no live session {wanted!r}"}, status=404)
        try:
            since = float(request.query_params.get("since", "-inf"))
        except ValueError:
            return HttpAnswer.json({"error": "since must be a number"}, status=400)
        lines = [
            json.dumps(json_safe(e), separators=(",", ":"))
            for e in conn.session.timeline.entries()
            if e["t"] >= since
        ]
        return HttpAnswer(200, "\n".join(lines) + ("\n" if lines else ""), "application/x-ndjson")

    return [
        Route("/sessions", _answering(sessions)),
        Route("/sessions/{id}/timeline", _answering(timeline)),
    ]
