"""Fake phone carriers on 127.0.0.1: Twilio, Telnyx and Plivo as a placed call sees them.

Each is an aiohttp server that speaks the provider's call-control REST API (auth checked,
required fields checked, the documented JSON answers and errors) and, for each call
placed, plays the carrier: signed status callbacks in order (Twilio's HMAC-SHA1, Telnyx's
Ed25519 with a key pair made for the test, Plivo's V3), then — once answered — the media
stream to our server as the provider opens it (Twilio with ``FakePhoneCall`` from the
TwiML ``<Connect><Stream>`` it was given; Telnyx from ``stream_url``; Plivo from the
``<Stream>`` its answer URL returned), the answering-machine result, and at the end the
completion. Transfers and hang-ups are recorded.

    async with FakeTwilio(outcomes=[Outcome("human", talk_seconds=1.0)]) as twilio:
        control = TwilioCalls(twilio.account_sid, twilio.auth_token, base_url=twilio.base_url)
        ...                                    # dial; twilio.calls[0].stream.heard_seconds()

``Outcome`` scripts each call in turn: answered by a human or a machine (with the AMD
result), busy, no answer, never answering (``"silent"``: only a hang-up ends it), and
``fail_next(status, times)`` makes the next REST requests fail (a 500, a 429) to test
retries.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import time
import uuid
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ..io.telephony.signatures import plivo_v3_signature
from ..io.telephony.twilio_webhook import twilio_signature
from ..models import g711
from ._loopback import LoopbackServer
from .phone import FakePhoneCall

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

__all__ = ["FakeCall", "FakePlivo", "FakeTelnyx", "FakeTwilio", "Outcome", "StreamCaller"]

Answer = Literal["human", "machine", "busy", "no-answer", "silent"]
_SILENCE = g711.ulaw_encode(np.zeros(160, np.int16))


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the called party behaves."""

    answer: Answer = "human"
    ring_seconds: float = 0.05
    talk_seconds: float | None = None
    """Once the stream is up, the callee hangs up after this long (None: it waits for a
    hang-up from our side: the stream closed, a REST hang-up or a transfer)."""
    beep: bool = True
    """A machine's greeting ends with a beep (its AMD result says so)."""


@dataclass
class FakeCall:
    """One call the fake carrier placed."""

    id: str
    to: str
    from_: str
    outcome: Outcome
    request: dict[str, Any]
    statuses: list[str] = field(default_factory=list)
    """What was posted to our status callbacks (the provider's words), in order."""
    callback_answers: list[int] = field(default_factory=list)
    stream: Any = None
    """``FakePhoneCall`` (Twilio) or ``StreamCaller`` once the stream is up."""
    transfers: list[str] = field(default_factory=list)
    """The transfer targets and the XML/TwiML that carried them."""
    hung_up_by_api: bool = False
    over: asyncio.Event = field(default_factory=asyncio.Event)
    _hangup: asyncio.Event = field(default_factory=asyncio.Event)
    stream_up: asyncio.Event = field(default_factory=asyncio.Event)


class StreamCaller:
    """The called party on a Telnyx or Plivo media stream: a ``start``, silence every
    20 ms, marks (Plivo checkpoints) echoed once the audio before them has played in real
    time; what was heard is kept. ``hang_up`` sends ``stop`` and closes."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, provider: str, start: dict[str, Any]):
        self.ws, self.provider, self._start = ws, provider, start
        self.heard: list[np.ndarray[Any, np.dtype[np.int16]]] = []
        self.marks_echoed: list[str] = []
        self.clears = 0
        self._play_until = 0.0
        self._pending: list[tuple[asyncio.TimerHandle, str]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.closed_by_server = asyncio.Event()

    async def begin(self) -> None:
        if self.provider == "telnyx":
            await self.ws.send_json({"event": "connected", "version": "1.0.0"})
        await self.ws.send_json(self._start)
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._talk())]

    def heard_seconds(self) -> float:
        return sum(len(pcm) for pcm in self.heard) / 8000

    def audible(self) -> bool:
        return any(len(pcm) and int(np.abs(pcm).max()) > 200 for pcm in self.heard)

    async def _talk(self) -> None:
        payload = base64.b64encode(_SILENCE).decode("ascii")
        chunk = 0
        while not self.ws.closed:
            chunk += 1
            media = {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20)}
            media["payload"] = payload
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_json({"event": "media", "media": media})
            await asyncio.sleep(0.02)

    async def _read(self) -> None:
        import aiohttp

        loop = asyncio.get_running_loop()
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(msg.data)
            event = message.get("event")
            now = loop.time()
            if event in ("media", "playAudio"):
                pcm = g711.ulaw_decode(base64.b64decode(message["media"]["payload"]))
                self._play_until = max(now, self._play_until) + len(pcm) / 8000
                self.heard.append(pcm)
            elif event in ("mark", "checkpoint"):
                name = message["mark"]["name"] if event == "mark" else message["name"]
                delay = max(0.0, self._play_until - now)
                self._pending.append((loop.call_later(delay, self._echo, name), name))
            elif event in ("clear", "clearAudio"):
                self.clears += 1
                self._play_until = now
                pending = [name for handle, name in self._pending if not handle.cancelled()]
                for handle, _ in self._pending:
                    handle.cancel()
                self._pending = []
                if self.provider == "plivo":  # Plivo drops pending checkpoints
                    await self.ws.send_json({"event": "clearedAudio"})
                else:  # Telnyx echoes them at once
                    for name in pending:
                        self._echo(name)
        self.closed_by_server.set()

    def _echo(self, name: str) -> None:
        self.marks_echoed.append(name)
        message: dict[str, Any]
        if self.provider == "plivo":
            message = {"event": "playedStream", "name": name}
        else:
            message = {"event": "mark", "mark": {"name": name}}
        task = asyncio.ensure_future(self.ws.send_json(message))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def hang_up(self) -> None:
        if not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.ws.send_json({"event": "stop"})
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for handle, _ in self._pending:
            handle.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if not self.ws.closed:
            await self.ws.close()

    @property
    def closed(self) -> bool:
        return self.ws.closed


class _FakeCarrier(LoopbackServer):
    """What the three fakes share: the script, scripted failures, the call's course."""

    provider = ""

    def __init__(self, *, outcomes: list[Outcome] | None = None, max_call_seconds: float = 30.0):
        super().__init__()
        self.outcomes: deque[Outcome] = deque(outcomes or [])
        self.default_outcome = Outcome()
        self.max_call_seconds = max_call_seconds
        self.calls: list[FakeCall] = []
        self.requests: list[tuple[str, str]] = []
        """Every REST request, ``(method, path)``, failed ones too."""
        self.hangups: list[str] = []
        self._failures: deque[int] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._http: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` REST requests with ``status`` (and do nothing)."""
        self._failures.extend([status] * times)

    def callee_hangs_up(self, call: FakeCall) -> None:
        """The called party hangs up: the stream stops, then the call completes."""
        call._hangup.set()

    def call(self, call_id: str) -> FakeCall | None:
        return next((c for c in self.calls if c.id == call_id), None)

    async def until(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout):
            while not condition():  # noqa: ASYNC110 - conditions on calls and streams
                await asyncio.sleep(0.01)

    def _failure(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        self.requests.append((request.method, request.path))
        if not self._failures:
            return None
        status = self._failures.popleft()
        return web.json_response(self._error_body(status, "scripted failure"), status=status)

    def _error_body(self, status: int, message: str) -> Any:
        raise NotImplementedError

    def _place(self, to: str, from_: str, request: dict[str, Any], call_id: str) -> FakeCall:
        outcome = self.outcomes.popleft() if self.outcomes else self.default_outcome
        call = FakeCall(call_id, to, from_, outcome, request)
        self.calls.append(call)
        task = asyncio.create_task(self._course(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return call

    async def _course(self, call: FakeCall) -> None:
        """The call from ringing to its end; every wait bounded."""
        outcome = call.outcome
        try:
            await asyncio.sleep(0.01)  # after the REST answer, as a carrier does
            await self._progress(call, "initiated")
            await self._progress(call, "ringing")
            if outcome.answer == "silent":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(call._hangup.wait(), self.max_call_seconds)
                await self._progress(call, "canceled")
                return
            if await self._hung_up_within(call, outcome.ring_seconds):
                await self._progress(call, "canceled")
                return
            if outcome.answer in ("busy", "no-answer"):
                await self._progress(call, outcome.answer)
                return
            if not await self._answer(call):
                await self._progress(call, "failed")
                return
            call.stream_up.set()
            await self._detected(call)
            await self._talking(call)
            if call.stream is not None:
                await call.stream.hang_up()
            await self._progress(call, "completed")
        finally:
            if call.stream is not None:
                await call.stream.aclose()
            call.over.set()

    async def _hung_up_within(self, call: FakeCall, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(call._hangup.wait(), seconds)
        return call._hangup.is_set()

    async def _talking(self, call: FakeCall) -> None:
        """Until the callee hangs up, we close the stream, hang up or transfer."""
        stream = call.stream
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(call._hangup.wait())]
        if stream is not None:
            closed = getattr(stream, "closed_by_server", None)
            if closed is not None:
                waits.append(asyncio.ensure_future(closed.wait()))
            else:  # FakePhoneCall: its socket closes
                waits.append(asyncio.ensure_future(_closed(stream)))
        limit = call.outcome.talk_seconds or self.max_call_seconds
        try:
            await asyncio.wait(waits, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if call.transfers:  # the call goes on with the transfer's target, not with us
            await self._hung_up_within(call, limit)
            return
        # Telnyx keeps a call whose stream ended: its application hangs it up.
        telnyx_left = self.provider == "telnyx" and not call._hangup.is_set()
        if telnyx_left and stream is not None and stream.closed and not call.outcome.talk_seconds:
            await self._hung_up_within(call, 5.0)

    def _leave_for_transfer(self, call: FakeCall) -> None:
        """The call leaves the agent for the transfer's target: its stream ends; the call
        goes on until the callee hangs up (``callee_hangs_up``) or ``talk_seconds``."""
        if call.stream is not None:
            task = asyncio.create_task(call.stream.hang_up())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _hang_up(self, call: FakeCall, by_api: bool = True) -> None:
        call.hung_up_by_api = by_api
        self.hangups.append(call.id)
        call._hangup.set()

    async def _post(
        self,
        call: FakeCall,
        url: str,
        *,
        form: Mapping[str, str] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, str]:
        import aiohttp

        if self._http is None:
            self._http = aiohttp.ClientSession()
        try:
            async with self._http.post(
                url,
                data=dict(form) if form is not None else body,
                headers=dict(headers or {}),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as response:
                call.callback_answers.append(response.status)
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError):
            call.callback_answers.append(0)
            return 0, ""

    async def _before_cleanup(self) -> None:
        for call in self.calls:
            call._hangup.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    # each provider: its callbacks, its answer, its AMD
    async def _progress(self, call: FakeCall, status: str) -> None:
        raise NotImplementedError

    async def _answer(self, call: FakeCall) -> bool:
        raise NotImplementedError

    async def _detected(self, call: FakeCall) -> None:
        raise NotImplementedError


async def _closed(stream: FakePhoneCall) -> None:
    while not stream.closed:  # noqa: ASYNC110 - FakePhoneCall has no closed event
        await asyncio.sleep(0.02)


def _basic(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except ValueError:
        return None
    return user, password


# ------------------------------------------------------------------- Twilio


class FakeTwilio(_FakeCarrier):
    """Twilio's Calls resource and its status callbacks (see the module docstring)."""

    provider = "twilio"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.account_sid = "AC" + secrets.token_hex(16)
        self.auth_token = secrets.token_hex(16)

    def _error_body(self, status: int, message: str) -> Any:
        return {"code": 20500 if status >= 500 else 20001, "message": message, "status": status}

    def _add_routes(self, app: web.Application) -> None:
        base = "/2010-04-01/Accounts/{account}/Calls"
        app.router.add_post(base + ".json", self._create)
        app.router.add_post(base + "/{sid}.json", self._update)

    def _refused(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        if _basic(request) != (self.account_sid, self.auth_token) or (
            request.match_info["account"] != self.account_sid
        ):
            return web.json_response(
                self._error_body(401, "Authenticate") | {"code": 20003}, status=401
            )
        return self._failure(request)

    async def _create(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        form = await request.post()
        fields = {k: [str(v) for v in form.getall(k)] for k in set(form.keys())}
        one = {k: v[-1] for k, v in fields.items()}
        for name in ("To", "From"):
            if not one.get(name):
                body = {"code": 21201, "message": f"No '{name}' number is specified", "status": 400}
                return web.json_response(body, status=400)
        if not (one.get("Twiml") or one.get("Url") or one.get("ApplicationSid")):
            body = {
                "code": 21205,
                "message": "Url, Twiml or ApplicationSid is required",
                "status": 400,
            }
            return web.json_response(body, status=400)
        sid = "CA" + secrets.token_hex(16)
        call = self._place(
            one["To"],
            one["From"],
            {**one, "StatusCallbackEvent": fields.get("StatusCallbackEvent", [])},
            sid,
        )
        answer = {"sid": sid, "account_sid": self.account_sid, "to": call.to, "from": call.from_}
        return web.json_response(
            answer | {"status": "queued", "direction": "outbound-api"}, status=201
        )

    async def _update(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        call = self.call(request.match_info["sid"])
        if call is None:
            body = {"code": 20404, "message": "The requested resource was not found", "status": 404}
            return web.json_response(body, status=404)
        form = await request.post()
        twiml = str(form.get("Twiml", ""))
        if twiml:
            root = ET.fromstring(twiml)
            targets = [el.text or "" for el in root.iter() if el.tag in ("Number", "Sip")]
            call.transfers.extend(targets)
            self._leave_for_transfer(call)
        elif form.get("Status") in ("completed", "canceled"):
            self._hang_up(call)
        else:
            return web.json_response(self._error_body(400, "nothing to update"), status=400)
        return web.json_response({"sid": call.id, "status": "in-progress"})

    async def _status_callback(self, call: FakeCall, url: str, fields: dict[str, str]) -> None:
        fields = {"CallSid": call.id, "AccountSid": self.account_sid, **fields}
        signature = twilio_signature(self.auth_token, url, fields)
        await self._post(call, url, form=fields, headers={"X-Twilio-Signature": signature})

    async def _progress(self, call: FakeCall, status: str) -> None:
        twilio = {"answered": "in-progress"}.get(status, status)
        event = {"in-progress": "answered"}.get(twilio, twilio)
        final = twilio in ("completed", "busy", "no-answer", "failed", "canceled")
        wanted = call.request.get("StatusCallbackEvent", [])
        url = call.request.get("StatusCallback")
        if not url or ("completed" if final else event) not in wanted:
            return
        call.statuses.append(twilio)
        fields = {"CallStatus": twilio, "To": call.to, "From": call.from_}
        fields |= {"Direction": "outbound-api", "SequenceNumber": str(len(call.statuses) - 1)}
        await self._status_callback(call, url, fields)

    async def _answer(self, call: FakeCall) -> bool:
        await self._progress(call, "answered")
        twiml = call.request.get("Twiml", "")
        stream = ET.fromstring(twiml).find("./Connect/Stream") if twiml else None
        if stream is None:
            return False
        parameters = {p.get("name", ""): p.get("value", "") for p in stream.iter("Parameter")}
        stack = contextlib.AsyncExitStack()
        try:
            phone = await stack.enter_async_context(
                FakePhoneCall.connect(
                    stream.get("url", ""), parameters=parameters, call_sid=call.id
                )
            )
        except Exception:
            await stack.aclose()
            return False
        call.stream = _TwilioStream(phone, stack)
        return True

    async def _detected(self, call: FakeCall) -> None:
        url = call.request.get("AsyncAmdStatusCallback")
        if not url or not call.request.get("MachineDetection"):
            return
        answered_by = "human"
        if call.outcome.answer == "machine":
            answered_by = "machine_end_beep" if call.outcome.beep else "machine_end_silence"
        call.statuses.append(f"AnsweredBy={answered_by}")
        await self._status_callback(call, url, {"AnsweredBy": answered_by})


class _TwilioStream:
    """A ``FakePhoneCall`` with the course's interface (and the context it runs in)."""

    def __init__(self, phone: FakePhoneCall, stack: contextlib.AsyncExitStack) -> None:
        self.phone, self._stack = phone, stack

    def __getattr__(self, name: str) -> Any:
        return getattr(self.phone, name)

    @property
    def closed(self) -> bool:
        return self.phone.closed

    def audible(self) -> bool:
        return bool(self.phone.audible_at())

    async def hang_up(self) -> None:
        await self.phone.hang_up()

    async def aclose(self) -> None:
        await self._stack.aclose()


# ------------------------------------------------------------------- Telnyx


class FakeTelnyx(_FakeCarrier):
    """Telnyx Call Control v2 and its signed event webhooks (see the module docstring)."""

    provider = "telnyx"

    def __init__(self, **options: Any) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        super().__init__(**options)
        self.api_key = "KEY" + secrets.token_hex(16)
        self.connection_id = str(secrets.randbelow(10**18))
        self._key = Ed25519PrivateKey.generate()
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.public_key = base64.b64encode(raw).decode("ascii")
        """What ``TELNYX_PUBLIC_KEY`` is set to, to check this fake's webhooks."""
        self.commands: list[tuple[str, str, dict[str, Any]]] = []
        """``(call_control_id, action, body)`` of every command carried out."""

    def _error_body(self, status: int, message: str) -> Any:
        return {"errors": [{"code": str(10000 + status), "title": message, "detail": message}]}

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v2/calls", self._dial)
        app.router.add_post("/v2/calls/{id}/actions/{action}", self._action)

    def _refused(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            body = {"errors": [{"code": "10009", "title": "Authentication failed"}]}
            return web.json_response(body, status=401)
        return self._failure(request)

    async def _dial(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(self._error_body(400, "body is not JSON"), status=400)
        for name in ("connection_id", "to", "from"):
            if not isinstance(body.get(name), str) or not body[name]:
                problem = {
                    "code": "10015",
                    "title": "Invalid value",
                    "detail": f"{name} is required",
                }
                return web.json_response({"errors": [problem]}, status=422)
        if body["connection_id"] != self.connection_id:
            problem = {"code": "10015", "title": "Invalid connection_id"}
            return web.json_response({"errors": [problem]}, status=422)
        call_id = "v3:" + secrets.token_urlsafe(24)
        self._place(body["to"], body["from"], body, call_id)
        data: dict[str, Any] = {"call_control_id": call_id, "call_leg_id": str(uuid.uuid4())}
        data |= {"call_session_id": str(uuid.uuid4()), "is_alive": False, "record_type": "call"}
        return web.json_response({"data": data})

    async def _action(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        call = self.call(request.match_info["id"])
        action = request.match_info["action"]
        if call is None or call.over.is_set():
            problem = {"code": "90018", "title": "Call has already ended"}
            return web.json_response({"errors": [problem]}, status=422)
        body = await request.json()
        command = body.get("command_id")
        if command and any(
            c[2].get("command_id") == command for c in self.commands if c[0] == call.id
        ):
            return web.json_response({"data": {"result": "ok"}})  # a repeat: ignored
        self.commands.append((call.id, action, body))
        if action == "transfer":
            if not body.get("to"):
                return web.json_response(self._error_body(422, "to is required"), status=422)
            call.transfers.append(body["to"])
            self._leave_for_transfer(call)
        elif action == "hangup":
            self._hang_up(call)
        else:
            return web.json_response(self._error_body(422, f"unknown action {action}"), status=422)
        return web.json_response({"data": {"result": "ok"}})

    async def _event(self, call: FakeCall, event_type: str, **payload: Any) -> None:
        url = call.request.get("webhook_url")
        if not url:
            return
        payload = {
            "call_control_id": call.id,
            "connection_id": self.connection_id,
            "from": call.from_,
            "to": call.to,
            "direction": "outgoing",
            **payload,
        }
        data = {
            "record_type": "event",
            "event_type": event_type,
            "id": str(uuid.uuid4()),
            "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "payload": payload,
        }
        body = json.dumps({"data": data, "meta": {"attempt": 1, "delivered_to": url}}).encode()
        said = payload.get("hangup_cause") or payload.get("result")
        call.statuses.append(f"{event_type}:{said}" if said else event_type)
        await self._post(call, url, body=body, headers=self.signed_headers(body))

    def signed_headers(self, body: bytes, timestamp: int | None = None) -> dict[str, str]:
        """The headers Telnyx signs ``body`` with (``timestamp``: now by default)."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        signature = base64.b64encode(self._key.sign(stamp.encode() + b"|" + body)).decode()
        return {
            "Content-Type": "application/json",
            "telnyx-signature-ed25519": signature,
            "telnyx-timestamp": stamp,
        }

    async def _progress(self, call: FakeCall, status: str) -> None:
        if status == "initiated":
            await self._event(call, "call.initiated", state="bridging")
        elif status != "ringing":  # Telnyx reports no ringing
            cause = {
                "busy": "user_busy",
                "no-answer": "timeout",
                "canceled": "originator_cancel",
                "failed": "unspecified",
            }.get(status, "normal_clearing")
            await self._event(call, "call.hangup", hangup_cause=cause)

    async def _answer(self, call: FakeCall) -> bool:
        import aiohttp

        await self._event(call, "call.answered")
        url = call.request.get("stream_url")
        if not url or self._http is None:
            return False
        try:
            ws = await self._http.ws_connect(url)
        except aiohttp.ClientError:
            return False
        stream_id = str(uuid.uuid4())
        start = {
            "event": "start",
            "sequence_number": "1",
            "stream_id": stream_id,
            "start": {
                "call_control_id": call.id,
                "from": call.from_,
                "to": call.to,
                "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
            },
        }
        call.stream = StreamCaller(ws, "telnyx", start)
        await call.stream.begin()
        return True

    async def _detected(self, call: FakeCall) -> None:
        if call.request.get("answering_machine_detection") in (None, "disabled"):
            return
        machine = call.outcome.answer == "machine"
        await self._event(
            call, "call.machine.detection.ended", result="machine" if machine else "human"
        )
        if machine and call.outcome.beep:
            await self._event(call, "call.machine.greeting.ended", result="beep_detected")


# -------------------------------------------------------------------- Plivo


class FakePlivo(_FakeCarrier):
    """Plivo's Call API and its V3-signed callbacks (see the module docstring)."""

    provider = "plivo"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.auth_id = "MA" + secrets.token_hex(9).upper()
        self.auth_token = secrets.token_hex(20)
        self.transfer_xml: list[str] = []
        self._uuids: dict[str, str] = {}  # request_uuid -> call_uuid

    def _error_body(self, status: int, message: str) -> Any:
        return {"api_id": str(uuid.uuid4()), "error": message}

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/Account/{account}/Call/", self._make)
        app.router.add_post("/v1/Account/{account}/Call/{uuid}/", self._transfer)
        app.router.add_delete("/v1/Account/{account}/Call/{uuid}/", self._delete)
        app.router.add_delete("/v1/Account/{account}/Request/{uuid}/", self._delete)

    def _refused(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        if _basic(request) != (self.auth_id, self.auth_token) or (
            request.match_info["account"] != self.auth_id
        ):
            return web.json_response({"error": "authentication failed"}, status=401)
        return self._failure(request)

    async def _make(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(self._error_body(400, "invalid JSON"), status=400)
        for name in ("from", "to", "answer_url"):
            if not isinstance(body.get(name), str) or not body[name]:
                return web.json_response(self._error_body(400, f"{name} is required"), status=400)
        request_uuid = str(uuid.uuid4())
        call = self._place(body["to"], body["from"], body, str(uuid.uuid4()))
        self._uuids[request_uuid] = call.id
        call.request["request_uuid"] = request_uuid
        answer = {
            "api_id": str(uuid.uuid4()),
            "message": "call fired",
            "request_uuid": request_uuid,
        }
        return web.json_response(answer, status=201)

    def _find(self, some_uuid: str) -> FakeCall | None:
        return self.call(self._uuids.get(some_uuid, some_uuid))

    async def _transfer(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        call = self._find(request.match_info["uuid"])
        body = await request.json()
        if call is None or call.over.is_set():
            return web.json_response(self._error_body(404, "call not found"), status=404)
        if body.get("legs", "aleg") != "aleg" or not body.get("aleg_url"):
            return web.json_response(self._error_body(400, "aleg_url is required"), status=400)
        status, xml = await self._signed_post(
            call, body["aleg_url"], self._fields(call, "in-progress")
        )
        if status != 200:
            return web.json_response(
                self._error_body(400, f"aleg_url answered {status}"), status=400
            )
        self.transfer_xml.append(xml)
        call.transfers.extend(
            el.text or "" for el in ET.fromstring(xml).iter() if el.tag in ("Number", "User")
        )
        self._leave_for_transfer(call)
        return web.json_response(
            {"api_id": str(uuid.uuid4()), "message": "call transferred"}, status=202
        )

    async def _delete(self, request: web.Request) -> web.Response:
        from aiohttp import web

        refused = self._refused(request)
        if refused is not None:
            return refused
        call = self._find(request.match_info["uuid"])
        if call is None or call.over.is_set():
            return web.json_response(self._error_body(404, "call not found"), status=404)
        self._hang_up(call)
        return web.Response(status=204)

    def _fields(self, call: FakeCall, status: str) -> dict[str, str]:
        return {
            "CallUUID": call.id,
            "RequestUUID": call.request.get("request_uuid", ""),
            "From": call.from_,
            "To": call.to,
            "Direction": "outbound",
            "CallStatus": status,
        }

    async def _signed_post(
        self, call: FakeCall, url: str, fields: dict[str, str]
    ) -> tuple[int, str]:
        nonce = str(secrets.randbelow(10**20))
        signature = plivo_v3_signature(self.auth_token, "POST", url, fields, nonce)
        headers = {"X-Plivo-Signature-V3": signature, "X-Plivo-Signature-V3-Nonce": nonce}
        return await self._post(call, url, form=fields, headers=headers)

    async def _progress(self, call: FakeCall, status: str) -> None:
        if status == "initiated":
            return  # Plivo reports ringing, then the answer or the hang-up
        plivo = {"canceled": "cancel", "no-answer": "no-answer"}.get(status, status)
        url = call.request.get("ring_url" if status == "ringing" else "hangup_url")
        if not url:
            return
        call.statuses.append(plivo)
        fields = self._fields(call, plivo)
        if status != "ringing":
            fields["HangupCauseName"] = {"busy": "Busy Line", "no-answer": "No Answer"}.get(
                status, "Normal Hangup"
            )
        await self._signed_post(call, url, fields)

    async def _answer(self, call: FakeCall) -> bool:
        import aiohttp

        call.statuses.append("in-progress")
        status, xml = await self._signed_post(
            call, call.request["answer_url"], self._fields(call, "in-progress")
        )
        stream = ET.fromstring(xml).find("Stream") if status == 200 and xml else None
        if stream is None or not stream.text or self._http is None:
            return False
        try:
            ws = await self._http.ws_connect(stream.text.strip())
        except aiohttp.ClientError:
            return False
        start = {
            "event": "start",
            "sequenceNumber": 1,
            "start": {
                "callId": call.id,
                "streamId": str(uuid.uuid4()),
                "accountId": self.auth_id,
                "tracks": ["inbound"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
            },
        }
        query = parse_qs(urlsplit(stream.text.strip()).query)
        call.request["stream_query"] = {k: v[-1] for k, v in query.items()}
        call.stream = StreamCaller(ws, "plivo", start)
        await call.stream.begin()
        return True

    async def _detected(self, call: FakeCall) -> None:
        url = call.request.get("machine_detection_url")
        if not url or call.request.get("machine_detection") not in ("true", True, "hangup"):
            return
        machine = "true" if call.outcome.answer == "machine" else "false"
        call.statuses.append(f"Machine={machine}")
        await self._signed_post(call, url, self._fields(call, "in-progress") | {"Machine": machine})
