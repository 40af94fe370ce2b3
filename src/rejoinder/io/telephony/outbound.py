"""Outbound calls: place a call through a provider and put the agent on it once answered.

    call = await dial("+15551234567", from_="+15557654321", control=TwilioCalls(...),
                      service=service)          # the app's TelephonyService
    if await call.answered():                   # False: busy, no answer, failed
        ...                                     # call.connection is the agent's
    status = await call.ended()                 # "completed", "busy", "no-answer", ...

``dial`` registers an ``OutboundCall`` with the service, then asks the provider (a
``carriers.base.Dialing``) to place the call with three URLs of ours, each naming the
call by a random key: the status callback (``/twilio/status``, ``/telnyx/events``,
``/plivo/status``: ``STATUS_PATHS``), the media socket (Twilio's TwiML ``<Connect><Stream>``
with ``<Parameter>``s, Telnyx's ``stream_url`` query, Plivo's answer ``<Stream>`` URL) and,
for Plivo, the answer webhook. The stream brings back the key and a one-time token
(``OUTBOUND_PARAMETER``, ``TOKEN_PARAMETER``): only that stream, once, becomes the call's
``connection``, and the entry point sees ``direction=outbound``, ``to``, ``from`` and the
caller's ``parameters`` in ``conn.call.parameters``.

Status callbacks (authenticated by the service) move ``status`` forward only
(``carriers.base.STATUS_ORDER``): a duplicate or a late one changes nothing. Who answered
(the provider's answering-machine detection) becomes ``answered_by`` and, once the call's
session is running, ``session.push_answered_by(..., source="provider")``: an answer known
before the session started waits for it (``Connection.when_ready``).

Bounded: a call still unanswered ``ring_timeout + answer_margin`` seconds after it was
placed is hung up and ends as ``no-answer``; an answered call whose stream never comes is
hung up after ``stream_timeout``; once the agent is done the call is hung up (Telnyx
keeps a call whose stream ended), and a call whose provider never reports its end after a
hang-up ends on our side ``end_timeout`` later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from .carriers.base import (
    FINAL_STATUSES,
    STATUS_ORDER,
    AnsweredKind,
    CallStatus,
    CarrierError,
    Dialing,
    DialRequest,
    StatusUpdate,
)
from .twilio_webhook import TOKEN_PARAMETER, stream_url_for, webhook_url_for

if TYPE_CHECKING:
    from ..connection import Connection
    from .service import TelephonyService

__all__ = [
    "OUTBOUND_PARAMETER",
    "STATUS_PATHS",
    "CallEvent",
    "OutboundCall",
    "OutboundCalls",
    "dial",
]

logger = logging.getLogger("rejoinder.io.telephony.outbound")

OUTBOUND_PARAMETER = "rejoinder_outbound"
"""The custom parameter (Twilio) or query field (Telnyx, Plivo) naming the outbound call."""
CALL_QUERY = "call"
"""The query field naming the outbound call in our status and answer webhook URLs."""

STATUS_PATHS: Mapping[str, str] = {
    "twilio": "/twilio/status",
    "telnyx": "/telnyx/events",
    "plivo": "/plivo/status",
}


@dataclass(frozen=True, slots=True)
class CallEvent:
    """Something a placed call went through: a status, or who answered."""

    at: float
    status: CallStatus | None
    answered_by: AnsweredKind | None = None
    beep: bool = False
    detail: str = ""
    briefed: bool = False
    """The provider finished speaking a briefing to the call (a warm transfer's person)."""


class OutboundCall:
    """A call placed by ``dial`` (see the module docstring)."""

    def __init__(
        self,
        key: str,
        *,
        to: str,
        from_: str,
        control: Dialing,
        parameters: Mapping[str, str],
        stream_timeout: float = 10.0,
        end_timeout: float = 10.0,
        streams: bool = True,
    ) -> None:
        self.key = key
        self.streams = streams
        """False for a call that never streams to the agent (a warm transfer's person):
        no stream is awaited once answered, and none is accepted."""
        self.to = to
        self.from_ = from_
        self.control = control
        self.provider = control.provider
        self.call_id: str | None = None
        """The provider's id (Plivo: the request's, then the call's once a callback names it)."""
        self.status: CallStatus = "queued"
        self.answered_by: AnsweredKind | None = None
        self.beep = False
        self._answered_detail = ""
        self.connection: Connection | None = None
        self.events: list[CallEvent] = []
        self.parameters = {
            **parameters,
            "direction": "outbound",
            "to": to,
            "from": from_,
            OUTBOUND_PARAMETER: key,
        }
        """What the entry point finds in ``conn.call.parameters``."""
        self.stream_token = secrets.token_urlsafe(16)
        self.stream_timeout = stream_timeout
        self.end_timeout = end_timeout
        self._answered = asyncio.Event()
        self._ended = asyncio.Event()
        self._claimed = False
        self._listeners: list[Callable[[CallEvent], None]] = []
        self._timers: list[asyncio.TimerHandle] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ waiting

    async def answered(self) -> bool:
        """Wait until the call is answered (True) or ended without an answer (False)."""
        answered = asyncio.ensure_future(self._answered.wait())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait((answered, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
            ended.cancel()
        return self._answered.is_set()

    async def ended(self) -> CallStatus:
        """Wait until the call ended; its final status."""
        await self._ended.wait()
        return self.status

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    def on_event(self, listener: Callable[[CallEvent], None]) -> None:
        """Call ``listener`` with every ``CallEvent`` from now on."""
        self._listeners.append(listener)

    async def hangup(self) -> None:
        """Hang the call up (if it is not over); the provider then reports its end."""
        if self.done or self.call_id is None:
            return
        await self.control.hangup(self.call_id)
        self._later(self.end_timeout, self._end_locally, "completed", "no end reported")

    # ----------------------------------------------------- from callbacks

    def apply(self, update: StatusUpdate, now: float) -> bool:
        """One status callback; whether it changed anything. A status never moves back."""
        if update.call_id and (self.call_id is None or self.provider == "plivo"):
            self.call_id = update.call_id  # Plivo names the call (CallUUID) only in callbacks
        changed = False
        kind, beep = update.answered_by, self.beep or update.beep
        if kind is not None and not self.done and (kind, beep) != (self.answered_by, self.beep):
            self.answered_by, self.beep = kind, beep
            self._answered_detail = update.detail
            changed = True
            self._emit(CallEvent(now, None, kind, beep, update.detail))
            self._tell_session(kind, beep, update.detail)
        if update.briefed and not self.done:
            changed = True
            self._emit(CallEvent(now, None, detail=update.detail, briefed=True))
        status = update.status
        if status is not None and STATUS_ORDER[status] > STATUS_ORDER[self.status]:
            self._move(status, now, update.detail)
            changed = True
        return changed

    def _move(self, status: CallStatus, now: float, detail: str) -> None:
        self.status = status
        self._emit(CallEvent(now, status, detail=detail))
        logger.info("call %s to %s: %s %s", self.key, self.to, status, detail)
        if status == "answered":
            self._answered.set()
            if self.streams:
                self._later(self.stream_timeout, self._no_stream)
        if status in FINAL_STATUSES:
            self._ended.set()
            for timer in self._timers:
                timer.cancel()
            conn = self.connection
            if conn is not None:
                conn.client_left("call ended")  # a no-op when the stream said so first

    def _emit(self, event: CallEvent) -> None:
        self.events.append(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("a call event listener failed")

    # ------------------------------------------------------- media stream

    def claim(self, token: str, call_id: str) -> str | None:
        """The stream's ``start`` for this call: None to accept it, else why not."""
        if not self.streams:
            return "this call does not stream to the agent"
        if self._claimed:
            return "the outbound call's stream was already attached"
        if not hmac.compare_digest(self.stream_token.encode(), token.encode()):
            return "bad outbound stream token"
        if self.call_id is not None and self.provider != "plivo" and call_id != self.call_id:
            return "the stream is for another call"
        if self.done:
            return "the outbound call is over"
        self._claimed = True
        return None

    def attach(self, conn: Connection) -> None:
        """The call's stream started: the agent's connection."""
        self.connection = conn
        if conn.call is not None:
            params = {**conn.call.parameters, **self.parameters}
            params.pop(TOKEN_PARAMETER, None)
            conn.call = dataclasses.replace(conn.call, parameters=params)
        conn.session_observers.append(self._session_attached)

    def _session_attached(self, session: Any) -> None:
        for event in self.events:
            logger.info("call %s: %s", self.key, event.status or f"answered by {event.answered_by}")
        if self.answered_by is not None:
            self._tell_session(self.answered_by, self.beep, self._answered_detail)

    def _tell_session(self, kind: AnsweredKind, beep: bool, detail: str) -> None:
        conn = self.connection
        if conn is None or conn.session is None:
            return  # ``_session_attached`` tells it

        def tell(session: Any) -> None:
            session.push_answered_by(kind, source="provider", beep=beep, detail=detail)

        conn.when_ready(tell)  # a session not yet started cannot take the event

    def agent_done(self) -> None:
        """The entry point returned: hang up what is left of the call."""
        if not self.done:
            self._spawn(self._hangup_quietly())

    # -------------------------------------------------------------- timers

    def watch_ringing(self, seconds: float) -> None:
        self._later(seconds, self._ring_timeout)

    def _ring_timeout(self) -> None:
        if self.status in ("queued", "initiated", "ringing"):
            logger.warning("call %s to %s: no answer in time, hanging up", self.key, self.to)
            self._spawn(self._hangup_quietly())
            self._end_locally("no-answer", "ring timeout")

    def _no_stream(self) -> None:
        if self.connection is None and not self.done:
            logger.warning("call %s: answered, but its media stream never came", self.key)
            self._spawn(self._hangup_quietly())

    def _end_locally(self, status: CallStatus, detail: str) -> None:
        if not self.done:
            self._move(status, asyncio.get_running_loop().time(), detail)

    async def _hangup_quietly(self) -> None:
        try:
            if self.call_id is not None:  # (even once ended on our side: the ring timeout)
                await self.control.hangup(self.call_id)
                self._later(self.end_timeout, self._end_locally, "completed", "no end reported")
        except CarrierError as exc:
            logger.warning("call %s: %s", self.key, exc)
            self._end_locally("completed", "hang-up failed")

    def _later(self, seconds: float, callback: Callable[..., None], *args: Any) -> None:
        self._timers.append(asyncio.get_running_loop().call_later(seconds, callback, *args))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for task in self._tasks:
            task.cancel()


class OutboundCalls:
    """The outbound calls a service knows, by key (bounded: the oldest finished go first)."""

    def __init__(self, max_entries: int = 1000) -> None:
        self.max_entries = max_entries
        self._calls: OrderedDict[str, OutboundCall] = OrderedDict()
        self._unknown_logged: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call: OutboundCall) -> None:
        self._calls[call.key] = call
        while len(self._calls) > self.max_entries:
            oldest = next((k for k, c in self._calls.items() if c.done), None)
            if oldest is None:
                break
            del self._calls[oldest]

    def get(self, key: str | None) -> OutboundCall | None:
        return self._calls.get(key) if key else None

    def unknown(self, provider: str, key: str | None) -> None:
        """A callback for a call we do not know: logged once per key."""
        name = f"{provider}:{key}"
        if name not in self._unknown_logged:
            self._unknown_logged[name] = None
            if len(self._unknown_logged) > 1000:
                self._unknown_logged.popitem(last=False)
            logger.warning("%s status callback for an unknown call %r", provider, key)

    def close(self) -> None:
        for call in self._calls.values():
            call.close()


async def dial(
    to: str,
    *,
    from_: str,
    control: Dialing,
    service: TelephonyService,
    public_url: str | None = None,
    machine_detection: bool = True,
    ring_timeout: float = 30.0,
    answer_margin: float = 5.0,
    stream_timeout: float = 10.0,
    end_timeout: float = 10.0,
    parameters: Mapping[str, str] | None = None,
) -> OutboundCall:
    """Place a call to ``to`` from ``from_`` and return its handle (see the module
    docstring). ``public_url``: the server's public base URL (default: the service's
    ``options.public_url``); the provider reaches our webhooks and media socket there.
    Raises ``ValueError`` for a setup that could not work (no public URL, the provider's
    routes not served, no secret to authenticate its callbacks) and ``CarrierError`` when
    the provider refuses the call (the handle, never returned, is then ``failed``)."""
    provider = control.provider
    configured = service.options.public_url
    public = public_url or configured
    if not public:
        raise ValueError("dialing out needs the server's public URL (public_url)")
    if configured and public.rstrip("/") != configured.rstrip("/"):
        # the callbacks' signatures are checked against the service's public URL
        raise ValueError(f"public_url {public!r} is not the service's {configured!r}")
    if provider not in service.providers:
        raise ValueError(f"the service does not serve {provider}'s routes")
    missing = service.secrets.missing_for(provider)
    if missing:
        raise ValueError(f"{provider} status callbacks cannot be authenticated: set {missing}")
    if not ring_timeout > 0:
        raise ValueError("ring_timeout must be positive")
    key = secrets.token_urlsafe(12)
    call = OutboundCall(
        key,
        to=to,
        from_=from_,
        control=control,
        parameters=dict(parameters or {}),
        stream_timeout=stream_timeout,
        end_timeout=end_timeout,
    )
    token = call.stream_token
    query = urlencode({CALL_QUERY: key})
    stream = stream_url_for(public, public, f"/{provider}")
    stream_parameters: dict[str, str] = {}
    if provider == "twilio":
        stream_parameters = {
            OUTBOUND_PARAMETER: key,
            TOKEN_PARAMETER: token,
            "direction": "outbound",
            "To": to,
            "From": from_,
        }
    else:
        stream += "?" + urlencode({OUTBOUND_PARAMETER: key, TOKEN_PARAMETER: token})
    request = DialRequest(
        to=to,
        from_=from_,
        status_url=webhook_url_for(public, public, STATUS_PATHS[provider]) + "?" + query,
        stream_url=stream,
        stream_parameters=stream_parameters,
        answer_url=webhook_url_for(public, public, "/plivo/answer") + "?" + query,
        ring_timeout=ring_timeout,
        machine_detection=machine_detection,
    )
    service.outbound.add(call)  # before dialing: the first callback may beat the answer
    loop = asyncio.get_running_loop()
    try:
        placed = await control.dial(request)
    except BaseException:
        call._end_locally("failed", "the provider refused the call")
        raise
    if call.call_id is None:  # (a Plivo callback may have named the call already)
        call.call_id = placed.call_id
    call._emit(CallEvent(loop.time(), None, detail=f"placed {placed.call_id}"))
    call.watch_ringing(ring_timeout + answer_margin)
    return call
