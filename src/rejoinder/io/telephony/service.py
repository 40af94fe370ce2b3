"""The framework-free half of the telephony routes: what each provider's webhook answers
and how each media socket is plugged into its ``MediaStreamPeer``, for every host.

``TelephonyService(entrypoint, gate=..., providers=..., options=...)`` holds one
application's phone setup (its ``AnnouncedStreams`` of one-time stream tokens among
them). A host (aiohttp: ``routes.py``; ASGI: ``rejoinder.io.asgi``) mounts:

- ``webhooks()``: ``(path, method, answer)`` for each webhook; the host turns its request
  into a ``WebhookRequest`` (the URL as requested, the query, the POST form, the
  signature header) and writes the ``HttpAnswer`` that ``answer(request)`` returns;
- ``media_paths()``: ``{path: dialect}`` of the media sockets. For each upgrade the host
  admits through the gate (``media_refusal()`` is the 503 otherwise), then runs
  ``hosting.run_socket`` with the binding ``media_socket(dialect, ...)`` gives.
"""

from __future__ import annotations

import asyncio
import logging
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..admission import SessionGate
from ..connection import Connection, Entrypoint
from ..hosting import HttpAnswer, SocketBinding, refused_answer
from ..protocol import CloseCode
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

__all__ = ["Runner", "TelephonyService", "WebhookRequest"]

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
    ) -> None:
        self.options = opts = options or TelephonyOptions()
        unknown = sorted(set(providers) - set(DIALECTS))
        if unknown:
            raise ValueError(f"unknown telephony provider {unknown}; choose from {list(DIALECTS)}")
        if opts.public_url is not None:  # a bad one fails here, not in every webhook
            stream_url_for("http://localhost/", opts.public_url)
        self.providers = tuple(dict.fromkeys(providers))
        self.entrypoint = entrypoint
        self.gate = gate
        self.announced = AnnouncedStreams()

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
        token = opts.twilio_auth_token
        if token is not None:
            url = webhook_url_for(request.url, opts.public_url)
            signed: dict[str, list[str]] = {}
            for name, value in request.form or ():
                signed.setdefault(name, []).append(value)
            if not validate_twilio_signature(token, url, signed, request.signature):
                logger.warning("twilio webhook from %s: bad signature", request.remote)
                return HttpAnswer.text("invalid X-Twilio-Signature", status=403)
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
        ``<Hangup reason="busy">`` when full or draining."""
        with self.gate.admit() as admission:  # counted as refused in /metrics when full
            if admission is None:
                response = ET.Element("Response")
                ET.SubElement(response, "Hangup", reason="busy")
                return HttpAnswer.xml(_document(response))
        response = ET.Element("Response")
        stream = ET.SubElement(
            response,
            "Stream",
            bidirectional="true",
            keepCallAlive="true",
            audioTrack="inbound",
            contentType="audio/x-mulaw;rate=8000",
        )
        stream.text = stream_url_for(request.url, self.options.public_url, "/plivo")
        return HttpAnswer.xml(_document(response))

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
        admit = self._admit_twilio if dialect.name == "twilio" else None
        peer = MediaStreamPeer(dialect, opts, remote=remote, query=query, admit=admit)
        loop = asyncio.get_running_loop()
        entrypoint, run = self.entrypoint, self.gate.run

        def no_start() -> None:
            if peer.connection is None:
                logger.warning("%s stream from %s sent no start", dialect.name, remote)
                peer.client_left("no start message")

        binding = SocketBinding(
            outbox=peer.outbox,
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
        return peer, binding

    def _admit_twilio(self, call: CallInfo) -> str | None:
        if self.options.twilio_auth_token is None:
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


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _reject_busy() -> str:
    response = ET.Element("Response")
    ET.SubElement(response, "Reject", reason="busy")
    return _document(response)


def _document(element: ET.Element) -> str:
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(element, encoding="unicode")
