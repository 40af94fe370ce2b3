"""The phone providers on the ASGI host: ``TelephonyService``'s webhooks and media sockets
as Starlette routes."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import HttpAnswer, first_values, run_socket

if TYPE_CHECKING:
    from ..telephony import Dialect, TelephonyOptions
    from ..telephony.service import Answer, TelephonyService

from .http import response
from .sockets import AsgiFrames, deny, remote

__all__ = ["MAX_BODY_BYTES", "telephony_routes", "telephony_service"]

MAX_BODY_BYTES = 1024 * 1024
"""Largest webhook body read (aiohttp's default ``client_max_size``); larger: 413."""


def telephony_service(
    entrypoint: Entrypoint,
    gate: SessionGate[Connection],
    providers: Sequence[str],
    options: TelephonyOptions | None,
    public_url: str | None,
    twilio_auth_token: str | None,
) -> TelephonyService:
    from ..telephony import TelephonyOptions
    from ..telephony.service import TelephonyService

    opts = options or TelephonyOptions()
    if public_url is not None:
        opts = dataclasses.replace(opts, public_url=public_url)
    if twilio_auth_token is not None:
        opts = dataclasses.replace(opts, twilio_auth_token=twilio_auth_token)
    return TelephonyService(entrypoint, gate=gate, providers=providers, options=opts)


def telephony_routes(service: TelephonyService) -> list[BaseRoute]:
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
    from ..telephony.service import WebhookRequest
    from ..telephony.twilio_webhook import malformed_request_url

    async def route(request: Request) -> Response:
        url = str(request.url)
        if malformed_request_url(url) is not None:  # the sender's Host header
            return response(HttpAnswer.text("malformed Host header", status=400))
        method = "GET" if request.method == "HEAD" else request.method
        form: list[tuple[str, str]] | None = None
        body: bytes | None = b""
        if request.method == "POST":
            body = await _body(request)
            if body is None:
                return response(HttpAnswer.text("request body too large", status=413))
            form = _form_fields(request.headers.get("content-type", ""), body)
        webhook = WebhookRequest(
            method=request.method,
            url=url,
            query=request.query_params.multi_items(),
            form=form,
            signature=request.headers.get("x-twilio-signature", ""),
            remote=remote(request),
            body=body or b"",
            headers=dict(request.headers),
        )
        return response(answers[method](webhook))

    return route


def _media_route(
    service: TelephonyService, dialect: Dialect
) -> Callable[[WebSocket], Awaitable[None]]:
    max_frame_bytes = service.options.max_frame_bytes

    async def route(ws: WebSocket) -> None:
        with service.gate.admit() as admission:
            if admission is None:
                await deny(ws, service.media_refusal())
                return
            await ws.accept()
            query = first_values(ws.query_params.multi_items())
            _peer, binding = service.media_socket(dialect, remote=remote(ws), query=query)
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
