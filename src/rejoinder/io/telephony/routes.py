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
was accepted: the TwiML carries a one-time token back as a custom parameter.
"""

from __future__ import annotations

import asyncio
import logging
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..protocol import CloseCode
from ..socket_loop import serve_socket
from .dialects import DIALECTS, CallInfo, Dialect
from .stream import MediaStreamPeer, TelephonyOptions
from .twilio_webhook import (
    TOKEN_PARAMETER,
    AnnouncedStreams,
    stream_url_for,
    twiml_connect_stream,
    validate_twilio_signature,
    webhook_url_for,
    xml_can_carry,
)

__all__ = ["PROVIDERS", "add_telephony_routes"]

logger = logging.getLogger("rejoinder.io.telephony")

PROVIDERS = tuple(DIALECTS)
"""Provider names ``add_telephony_routes`` (and ``serve --telephony``) accept."""

Runner = Callable[[Entrypoint, Connection], Awaitable[None]]


def add_telephony_routes(
    app: web.Application,
    entrypoint: Entrypoint,
    *,
    gate: SessionGate[Connection],
    providers: Sequence[str] = ("twilio",),
    options: TelephonyOptions | None = None,
) -> None:
    opts = options or TelephonyOptions()
    unknown = sorted(set(providers) - set(DIALECTS))
    if unknown:
        raise ValueError(f"unknown telephony provider {unknown}; choose from {list(DIALECTS)}")
    if opts.public_url is not None:  # a bad one fails here, not in every webhook
        stream_url_for("http://localhost/", opts.public_url)
    for name in dict.fromkeys(providers):
        if name == "twilio":
            _twilio(app, entrypoint, gate, opts)
        else:
            app.router.add_get(
                f"/{name}", _media_route(entrypoint, DIALECTS[name], gate, opts, admit=None)
            )
        if name == "plivo":
            app.router.add_post("/plivo/answer", _plivo_answer(gate, opts))


def _twilio(
    app: web.Application,
    entrypoint: Entrypoint,
    gate: SessionGate[Connection],
    opts: TelephonyOptions,
) -> None:
    announced = AnnouncedStreams()
    loop_time = _loop_time

    async def webhook(request: web.Request) -> web.Response:
        # A number's voice URL may be set to POST (the default) or GET: Twilio signs the
        # form's parameters, or only the URL, whose query then holds them.
        form = await request.post() if request.method == "POST" else None
        fields = form if form is not None else request.query
        params = {k: v for k, v in fields.items() if isinstance(v, str)}  # the last of each
        token = opts.twilio_auth_token
        if token is not None:
            url = webhook_url_for(str(request.url), opts.public_url)
            signature = request.headers.get("X-Twilio-Signature", "")
            signed = (
                {k: [v for v in form.getall(k) if isinstance(v, str)] for k in form}
                if form is not None
                else {}
            )
            if not validate_twilio_signature(token, url, signed, signature):
                logger.warning("twilio webhook from %s: bad signature", request.remote)
                return web.Response(status=403, text="invalid X-Twilio-Signature")
        with gate.admit() as admission:  # counted as refused in /metrics when full
            if admission is None:
                return _xml(_reject_busy())
        # (what XML cannot carry is left out: the call is answered all the same)
        stream_params = {k: params[k] for k in ("From", "To") if xml_can_carry(params.get(k))}
        call_sid = params.get("CallSid", "")
        if token is not None:
            if not call_sid:
                return web.Response(status=400, text="CallSid missing")
            stream_params[TOKEN_PARAMETER] = announced.announce(call_sid, loop_time())
        url = stream_url_for(str(request.url), opts.public_url, "/twilio")
        return _xml(twiml_connect_stream(url, stream_params))

    def admit(call: CallInfo) -> str | None:
        if opts.twilio_auth_token is None:
            return None
        token = call.parameters.get(TOKEN_PARAMETER, "")
        if announced.claim(call.call_id, token, loop_time()):
            return None
        return "stream not announced by an accepted webhook"

    app.router.add_post("/twilio/twiml", webhook)
    app.router.add_get("/twilio/twiml", webhook)
    app.router.add_get("/twilio", _media_route(entrypoint, DIALECTS["twilio"], gate, opts, admit))


def _plivo_answer(
    gate: SessionGate[Connection], opts: TelephonyOptions
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        with gate.admit() as admission:  # counted as refused in /metrics when full
            if admission is None:
                response = ET.Element("Response")
                ET.SubElement(response, "Hangup", reason="busy")
                return _xml(_document(response))
        response = ET.Element("Response")
        stream = ET.SubElement(
            response,
            "Stream",
            bidirectional="true",
            keepCallAlive="true",
            audioTrack="inbound",
            contentType="audio/x-mulaw;rate=8000",
        )
        stream.text = stream_url_for(str(request.url), opts.public_url, "/plivo")
        return _xml(_document(response))

    return answer


def _media_route(
    entrypoint: Entrypoint,
    dialect: Dialect,
    gate: SessionGate[Connection],
    opts: TelephonyOptions,
    admit: Callable[[CallInfo], str | None] | None,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def route(request: web.Request) -> web.StreamResponse:
        with gate.admit() as admission:
            if admission is None:
                reason = gate.refusal() or "the server cannot take a call now"
                return web.json_response({"error": reason}, status=503)
            return await _serve_stream(request, entrypoint, dialect, opts, gate.run, admit)

    return route


async def _serve_stream(
    request: web.Request,
    entrypoint: Entrypoint,
    dialect: Dialect,
    opts: TelephonyOptions,
    run: Runner,
    admit: Callable[[CallInfo], str | None] | None,
) -> web.StreamResponse:
    ws = web.WebSocketResponse(heartbeat=opts.heartbeat, max_msg_size=opts.max_frame_bytes)
    await ws.prepare(request)
    peer = MediaStreamPeer(
        dialect, opts, remote=request.remote, query=dict(request.query), admit=admit
    )
    loop = asyncio.get_running_loop()

    def no_start() -> None:
        if peer.connection is None:
            logger.warning("%s stream from %s sent no start", dialect.name, request.remote)
            peer.client_left("no start message")

    await serve_socket(
        ws,
        peer.outbox,
        receive_text=lambda text: peer.receive_text(text, loop.time()),
        receive_bytes=peer.receive_bytes,
        run_agent=lambda conn: _run_call(run, entrypoint, conn, peer),
        no_start=no_start,
        # a no-op after a stop: its reason ("call ended") stands
        left=lambda: peer.client_left("connection lost"),
        start_timeout=opts.start_timeout,
        close_timeout=opts.close_timeout,
        name=f"{dialect.name}-call",
    )
    return ws


async def _run_call(
    run: Runner, entrypoint: Entrypoint, conn: Connection, peer: MediaStreamPeer
) -> None:
    try:
        await run(entrypoint, conn)
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("the entry point failed for %s", conn.id)
    # Closing the socket ends a <Connect><Stream> call (no TwiML follows it): the agent
    # hung up, or its session ended.
    peer.outbox.close(CloseCode.NORMAL, "session ended")  # the first close asked for wins


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _reject_busy() -> str:
    response = ET.Element("Response")
    ET.SubElement(response, "Reject", reason="busy")
    return _document(response)


def _document(element: ET.Element) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(element, encoding="unicode")


def _xml(body: str) -> web.Response:
    return web.Response(text=body, content_type="application/xml", charset="utf-8")
