"""The framework-free half of the telephony routes: what each provider's webhook answers
and how each media socket is plugged into its ``MediaStreamPeer``, for every host.

``TelephonyService(entrypoint, gate=..., providers=..., options=...)`` holds one
application's phone setup (its ``AnnouncedStreams`` of one-time stream tokens among
them). A host (aiohttp: ``routes.py``; ASGI: ``rejoinder.io.asgi``) mounts:

- ``webhooks()``: ``(path, method, answer)`` for each webhook; the host turns its request
  into a ``WebhookRequest`` (the URL as requested, the query, the POST form, the raw
  body, the headers) and writes the ``HttpAnswer`` that ``answer(request)`` returns;
- ``media_paths()``: ``{path: dialect}`` of the media sockets. For each upgrade the host
  admits through the gate (``media_refusal()`` is the 503 otherwise), then runs
  ``hosting.run_socket`` with the binding ``media_socket(dialect, ...)`` gives.

Outbound calls (``outbound.dial``) are registered in ``outbound`` (an ``OutboundCalls``);
their status callbacks come to ``/twilio/status``, ``/telnyx/events`` and
``/plivo/status`` (``outbound.STATUS_PATHS``), their media stream to the provider's socket
with the call's key and one-time token, which attaches it to the call.

Every webhook of a provider whose secret is set (``WebhookSecrets``: Twilio's auth token,
Telnyx's public key, Plivo's auth token) must be signed (``signatures.verify_webhook``):
a bad, missing or stale signature, or a replay of an accepted one, gets 403 and changes
nothing. Status callbacks are refused outright when their provider's secret is unset.
"""

from __future__ import annotations

import asyncio
import logging
import time
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlencode

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import HttpAnswer, SocketBinding, refused_answer
from ..protocol import CloseCode
from .carriers.base import CallControl
from .carriers.plivo import conference_xml
from .dialects import DIALECTS, CallInfo, Dialect
from .line_control import CONFERENCE_PATH, LineControl, WarmRooms
from .outbound import CALL_QUERY, OUTBOUND_PARAMETER, STATUS_PATHS, OutboundCall, OutboundCalls
from .signatures import ReplayGuard, verify_webhook
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

__all__ = ["Runner", "TelephonyService", "WebhookRequest", "WebhookSecrets"]

logger = logging.getLogger("rejoinder.io.telephony")

Runner = Callable[[Entrypoint, Connection], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """A provider's webhook request, as every host reads it."""

    method: str
    url: str
    """The full URL as requested: scheme, ``Host``, path and query string."""
    query: Sequence[tuple[str, str]]
    """The query string's fields, in order."""
    form: Sequence[tuple[str, str]] | None
    """A POST's form fields, in order (their text values); ``None`` for any other method."""
    signature: str = ""
    """``X-Twilio-Signature`` (empty when absent)."""
    remote: str | None = None
    body: bytes = b""
    """The raw body as received (Telnyx signs these very bytes)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The request's headers (names in any case; the signature checks need several)."""


@dataclass(frozen=True, slots=True)
class WebhookSecrets:
    """What authenticates each provider's webhooks (``None``: not configured)."""

    twilio_auth_token: str | None = field(default=None, repr=False)
    telnyx_public_key: str | None = field(default=None, repr=False)
    """Base64, as the Telnyx portal shows it (``TELNYX_PUBLIC_KEY``)."""
    plivo_auth_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, options: TelephonyOptions) -> WebhookSecrets:
        """The secrets ``TelephonyOptions`` holds (Twilio's; the others when it has them)."""
        return cls(
            twilio_auth_token=options.twilio_auth_token,
            telnyx_public_key=getattr(options, "telnyx_public_key", None),
            plivo_auth_token=getattr(options, "plivo_auth_token", None),
        )

    def secret(self, provider: str) -> str | None:
        return {
            "twilio": self.twilio_auth_token,
            "telnyx": self.telnyx_public_key,
            "plivo": self.plivo_auth_token,
        }.get(provider)

    def missing_for(self, provider: str) -> str | None:
        """The environment variable naming the missing secret, or None."""
        if self.secret(provider):
            return None
        return {"telnyx": "TELNYX_PUBLIC_KEY"}.get(provider, f"{provider.upper()}_AUTH_TOKEN")


Answer = Callable[[WebhookRequest], HttpAnswer]


class TelephonyService:
    """One application's phone providers (see the module docstring)."""

    def __init__(
        self,
        entrypoint: Entrypoint,
        *,
        gate: SessionGate[Connection],
        providers: Sequence[str] = ("twilio",),
        options: TelephonyOptions | None = None,
        secrets: WebhookSecrets | None = None,
        controls: Mapping[str, CallControl] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = opts = options or TelephonyOptions()
        self.secrets = secrets or WebhookSecrets.from_options(opts)
        self.controls: dict[str, CallControl] = dict(controls or {})
        """Each provider's call control (REST), for the lines of the calls it streams in;
        an outbound call's line uses the control that placed it."""
        self.clock = clock
        """Unix time, for Telnyx's signed timestamps and the replay window."""
        self.replays = ReplayGuard(window=3600.0)
        self.outbound = OutboundCalls()
        unknown = sorted(set(providers) - set(DIALECTS))
        if unknown:
            raise ValueError(f"unknown telephony provider {unknown}; choose from {list(DIALECTS)}")
        if opts.public_url is not None:  # a bad one fails here, not in every webhook
            stream_url_for("http://localhost/", opts.public_url)
        self.providers = tuple(dict.fromkeys(providers))
        self.entrypoint = entrypoint
        self.gate = gate
        self.announced = AnnouncedStreams()
        self.warm_rooms = WarmRooms()
        """Each warm transfer's conference room and briefing (Plivo's conference XML)."""

    # ------------------------------------------------------------- routes

    def webhooks(self) -> list[tuple[str, Literal["GET", "POST"], Answer]]:
        """``(path, method, answer)`` of every webhook, in mounting order."""
        routes: list[tuple[str, Literal["GET", "POST"], Answer]] = []
        for name in self.providers:
            if name == "twilio":
                routes.append(("/twilio/twiml", "POST", self.twilio_webhook))
                routes.append(("/twilio/twiml", "GET", self.twilio_webhook))
            elif name == "plivo":
                routes.append(("/plivo/answer", "POST", self.plivo_answer))
                routes.append(("/plivo/transfer", "POST", self.plivo_transfer))
                routes.append((CONFERENCE_PATH, "POST", self.plivo_conference))
            routes.append((STATUS_PATHS[name], "POST", self._status_route(name)))
        return routes

    def media_paths(self) -> dict[str, Dialect]:
        """The media sockets: path -> the provider's dialect."""
        return {f"/{name}": DIALECTS[name] for name in self.providers}

    # ----------------------------------------------------------- webhooks

    def twilio_webhook(self, request: WebhookRequest) -> HttpAnswer:
        """Twilio's voice webhook: ``<Connect><Stream>`` to ``/twilio``, ``<Reject
        reason="busy">`` when full or draining, 403 on a bad signature (with an auth
        token), and with it a one-time token for the media socket."""
        opts = self.options
        # A number's voice URL may be set to POST (the default) or GET: Twilio signs the
        # form's parameters, or only the URL, whose query then holds them.
        fields = request.form if request.form is not None else request.query
        params = dict(fields)  # the last of each
        token = self.secrets.twilio_auth_token
        if token is not None:
            url = webhook_url_for(request.url, opts.public_url)
            signed: dict[str, list[str]] = {}
            for name, value in request.form or ():
                signed.setdefault(name, []).append(value)
            if not validate_twilio_signature(token, url, signed, request.signature):
                logger.warning("twilio webhook from %s: bad signature", request.remote)
                return HttpAnswer.text("invalid X-Twilio-Signature", status=403)
            # Each call's webhook is signed once: sent again, it would be a way to get a
            # fresh media-socket token for a call that is not ringing.
            if not self.replays.admit(f"twilio-voice:{request.signature}", self.clock()):
                logger.warning("twilio webhook from %s refused: a replay", request.remote)
                return HttpAnswer.text("webhook refused: a replay", status=403)
        with self.gate.admit() as admission:  # counted as refused in /metrics when full
            if admission is None:
                return HttpAnswer.xml(_reject_busy())
        # (what XML cannot carry is left out: the call is answered all the same)
        stream_params = {k: params[k] for k in ("From", "To") if xml_can_carry(params.get(k))}
        call_sid = params.get("CallSid", "")
        if token is not None:
            if not call_sid:
                return HttpAnswer.text("CallSid missing", status=400)
            stream_params[TOKEN_PARAMETER] = self.announced.announce(call_sid, _loop_time())
        url = stream_url_for(request.url, opts.public_url, "/twilio")
        return HttpAnswer.xml(twiml_connect_stream(url, stream_params))

    def plivo_answer(self, request: WebhookRequest) -> HttpAnswer:
        """Plivo's answer URL: a bidirectional μ-law ``<Stream>`` to ``/plivo``, or
        ``<Hangup reason="busy">`` when full or draining. For an outbound call (``?call=``
        names it) the answer is its status too, and the stream carries its key and token."""
        refused = self._refuse_unsigned("plivo", request, "/plivo/answer", required=False)
        if refused is not None:
            return refused
        outbound: OutboundCall | None = None
        key = _query_value(request, CALL_QUERY)
        if key is not None:
            outbound = self.outbound.get(key)
            if outbound is None:
                self.outbound.unknown("plivo", key)
                return HttpAnswer.text("unknown call", status=404)
            update = outbound.control.read_status(dict(request.form or ()), request.body)
            if update is not None:
                outbound.apply(update, _loop_time())
        with self.gate.admit() as admission:  # counted as refused in /metrics when full
            if admission is None:
                response = ET.Element("Response")
                ET.SubElement(response, "Hangup", reason="busy")
                return HttpAnswer.xml(_document(response))
        stream_url = stream_url_for(request.url, self.options.public_url, "/plivo")
        if outbound is not None:
            fields = {OUTBOUND_PARAMETER: outbound.key, TOKEN_PARAMETER: outbound.stream_token}
            stream_url += "?" + urlencode(fields)
        response = ET.Element("Response")
        stream = ET.SubElement(
            response,
            "Stream",
            bidirectional="true",
            keepCallAlive="true",
            audioTrack="inbound",
            contentType="audio/x-mulaw;rate=8000",
        )
        stream.text = stream_url
        return HttpAnswer.xml(_document(response))

    def plivo_transfer(self, request: WebhookRequest) -> HttpAnswer:
        """Where a Plivo transfer sends the call (``PlivoCalls.transfer``'s ``aleg_url``):
        ``<Dial>`` to ``?target=``, a number or a SIP URI (``<User>``)."""
        refused = self._refuse_unsigned("plivo", request, "/plivo/transfer", required=True)
        if refused is not None:
            return refused
        target = _query_value(request, "target")
        if not target or not xml_can_carry(target):
            return HttpAnswer.text("target missing", status=400)
        response = ET.Element("Response")
        dial = ET.SubElement(response, "Dial")
        sip = target.lower().startswith(("sip:", "sips:"))
        ET.SubElement(dial, "User" if sip else "Number").text = target
        return HttpAnswer.xml(_document(response))

    def plivo_conference(self, request: WebhookRequest) -> HttpAnswer:
        """A warm transfer's conference on Plivo (``?room=``): the person's answer URL
        (``&call=`` names their leg, whose status this is too) speaks the briefing first
        and starts the conference; the caller's transfer URL just joins it."""
        refused = self._refuse_unsigned("plivo", request, CONFERENCE_PATH, required=True)
        if refused is not None:
            return refused
        room = _query_value(request, "room")
        summary = self.warm_rooms.summary(room)
        if room is None or summary is None:
            return HttpAnswer.text("unknown room", status=404)
        key = _query_value(request, CALL_QUERY)
        if key is None:
            return HttpAnswer.xml(conference_xml(room, starts=False))
        person = self.outbound.get(key)
        if person is None:
            self.outbound.unknown("plivo", key)
            return HttpAnswer.text("unknown call", status=404)
        update = person.control.read_status(dict(request.form or ()), request.body)
        if update is not None:
            person.apply(update, _loop_time())
        return HttpAnswer.xml(conference_xml(room, speak=summary, starts=True))

    def _status_route(self, provider: str) -> Answer:
        def answer(request: WebhookRequest) -> HttpAnswer:
            return self.status_callback(provider, request)

        return answer

    def status_callback(self, provider: str, request: WebhookRequest) -> HttpAnswer:
        """A provider's status callback (or AMD result) for an outbound call: 403 unless
        signed (and not a replay), 404 for a call we do not know, else 200 (a duplicate or
        a status that would move backwards is acknowledged and changes nothing)."""
        refused = self._refuse_unsigned(provider, request, STATUS_PATHS[provider], required=True)
        if refused is not None:
            return refused
        key = _query_value(request, CALL_QUERY)
        call = self.outbound.get(key)
        if call is None:
            self.outbound.unknown(provider, key)
            return HttpAnswer.text("unknown call", status=404)
        update = call.control.read_status(dict(request.form or ()), request.body)
        if update is None:
            return HttpAnswer.text("not a status callback", status=400)
        call.apply(update, _loop_time())
        return HttpAnswer.text("ok")

    def _refuse_unsigned(
        self,
        provider: Literal["twilio", "telnyx", "plivo"] | str,
        request: WebhookRequest,
        path: str,
        *,
        required: bool,
    ) -> HttpAnswer | None:
        """None when the request is authentic (or, not ``required``, no secret is set)."""
        secret = self.secrets.secret(provider)
        if secret is None:
            if not required:
                return None
            logger.warning("%s %s refused: no secret configured to check it", provider, path)
            return HttpAnswer.text(f"set {self.secrets.missing_for(provider)}", status=403)
        signed: dict[str, list[str]] = {}
        for name, value in request.form or ():
            signed.setdefault(name, []).append(value)
        verdict = verify_webhook(
            _provider_name(provider),
            secret=secret,
            headers=request.headers,
            url=webhook_url_for(request.url, self.options.public_url, path),
            method=request.method,
            params=signed,
            raw_body=request.body,
            now=self.clock(),
            guard=self.replays,
        )
        if verdict:
            return None
        logger.warning("%s %s from %s refused: %s", provider, path, request.remote, verdict.reason)
        return HttpAnswer.text(f"webhook refused: {verdict.reason}", status=403)

    # ------------------------------------------------------- media sockets

    def media_refusal(self) -> HttpAnswer:
        """The 503 a media socket gets when the gate refuses it."""
        return refused_answer(self.gate, "the server cannot take a call now", retry_after=False)

    def media_socket(
        self, dialect: Dialect, *, remote: str | None, query: Mapping[str, str]
    ) -> tuple[MediaStreamPeer, SocketBinding]:
        """A new call's peer, and how the socket loop drives it (call it with the
        request's admission held: the entry point runs in ``gate.run``)."""
        opts = self.options
        matched: list[OutboundCall] = []
        control = LineControl(dialect.name, self.controls.get(dialect.name), service=self)

        def admit(call: CallInfo) -> str | None:
            key = query.get(OUTBOUND_PARAMETER) or call.parameters.get(OUTBOUND_PARAMETER)
            if key:
                outbound = self.outbound.get(key)
                if outbound is None or outbound.provider != dialect.name:
                    return "not an outbound call of this server"
                token = query.get(TOKEN_PARAMETER) or call.parameters.get(TOKEN_PARAMETER, "")
                refusal = outbound.claim(token, call.call_id)
                if refusal is None:
                    matched.append(outbound)
                    control.chosen = outbound.control
                    control.our_number = outbound.from_
                return refusal
            return self._admit_twilio(call) if dialect.name == "twilio" else None

        peer = MediaStreamPeer(
            dialect, opts, remote=remote, query=query, admit=admit, control=control
        )
        loop = asyncio.get_running_loop()
        entrypoint, run = self.entrypoint, self.gate.run

        async def run_agent(conn: Connection) -> None:
            outbound = matched[0] if matched else None
            if outbound is not None:
                outbound.attach(conn)
            try:
                await _run_call(run, entrypoint, conn, peer)
            finally:
                if outbound is not None and not control.transferred:
                    outbound.agent_done()  # (a transferred call goes on without us)

        def no_start() -> None:
            if peer.connection is None:
                logger.warning("%s stream from %s sent no start", dialect.name, remote)
                peer.client_left("no start message")

        binding = SocketBinding(
            outbox=peer.outbox,
            receive_text=lambda text: peer.receive_text(text, loop.time()),
            receive_bytes=peer.receive_bytes,
            run_agent=run_agent,
            no_start=no_start,
            # a no-op after a stop: its reason ("call ended") stands
            left=lambda: peer.client_left("connection lost"),
            start_timeout=opts.start_timeout,
            close_timeout=opts.close_timeout,
            name=f"{dialect.name}-call",
        )
        return peer, binding

    def _admit_twilio(self, call: CallInfo) -> str | None:
        if self.secrets.twilio_auth_token is None:
            return None
        token = call.parameters.get(TOKEN_PARAMETER, "")
        if self.announced.claim(call.call_id, token, _loop_time()):
            return None
        return "stream not announced by an accepted webhook"


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


def _query_value(request: WebhookRequest, name: str) -> str | None:
    for key, value in request.query:
        if key == name:
            return value
    return None


def _provider_name(provider: str) -> Literal["twilio", "telnyx", "plivo"]:
    if provider == "telnyx":
        return "telnyx"
    if provider == "plivo":
        return "plivo"
    return "twilio"


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _reject_busy() -> str:
    response = ET.Element("Response")
    ET.SubElement(response, "Reject", reason="busy")
    return _document(response)


def _document(element: ET.Element) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(element, encoding="unicode")
