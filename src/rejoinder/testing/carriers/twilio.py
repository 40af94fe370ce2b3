"""The fake Twilio: the Calls resource (``POST .../Calls.json``, updates for transfers and
hang-ups), status callbacks signed with ``X-Twilio-Signature``, the async AMD callback,
and the media stream opened with ``FakePhoneCall`` from the call's ``<Connect><Stream>``.
A call whose TwiML ``<Say>``s and ``<Dial><Conference>``s (a warm transfer's person) is
briefed and put in the room when answered; a live call updated with such TwiML moves to
the room and its stream ends (``conferences``)."""

from __future__ import annotations

import contextlib
import secrets
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from ...io.telephony.twilio_webhook import twilio_signature
from ..phone import FakePhoneCall
from ._course import FakeCall, FakeCarrier, basic_auth

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["FakeTwilio"]


class FakeTwilio(FakeCarrier):
    """Twilio's Calls resource and its status callbacks (see the module docstring)."""

    provider = "twilio"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.account_sid = "AC" + secrets.token_hex(16)
        self.auth_token = secrets.token_hex(16)
        self.transfer_twiml: list[str] = []
        """The TwiML of every transfer (a call updated with new TwiML), in order."""

    def _error_body(self, status: int, message: str) -> Any:
        return {"code": 20500 if status >= 500 else 20001, "message": message, "status": status}

    def _add_routes(self, app: web.Application) -> None:
        base = "/2010-04-01/Accounts/{account}/Calls"
        app.router.add_post(base + ".json", self._create)
        app.router.add_post(base + "/{sid}.json", self._update)

    def _refused(self, request: web.Request) -> web.Response | None:
        from aiohttp import web

        if basic_auth(request) != (self.account_sid, self.auth_token) or (
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
        if twiml and ET.fromstring(twiml).find("./Dial/Conference") is not None:
            self.transfer_twiml.append(twiml)
            room = ET.fromstring(twiml).findtext("./Dial/Conference") or ""
            self._join(call, room.strip(), leaves_stream=True)
        elif twiml:
            self.transfer_twiml.append(twiml)
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
        root = ET.fromstring(twiml) if twiml else None
        stream = root.find("./Connect/Stream") if root is not None else None
        room = root.findtext("./Dial/Conference") if root is not None else None
        if stream is None and room is not None and root is not None:
            # a warm transfer's person: briefed by <Say>, then in the conference
            call.said.extend((say.text or "").strip() for say in root.iter("Say"))
            self._join(call, room.strip(), leaves_stream=False)
            return True
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
