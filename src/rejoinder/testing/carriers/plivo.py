"""The fake Plivo: the Call API (``POST .../Call/``, transfers that fetch ``aleg_url``,
``DELETE`` of a call or of a request not answered yet), V3-signed callbacks (ring, answer,
machine detection, hang-up), and the media stream its answer URL's ``<Stream>`` names.
An answer XML that ``<Speak>``s and ``<Conference>``s (a warm transfer's person) is
spoken and put in the room; a transfer whose ``aleg_url`` answers a ``<Conference>``
moves the call to the room and ends its stream (``conferences``)."""

from __future__ import annotations

import secrets
import uuid
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ...io.telephony.signatures import plivo_v3_signature
from ._course import FakeCall, FakeCarrier, StreamCaller, basic_auth

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["FakePlivo"]


class FakePlivo(FakeCarrier):
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

        if basic_auth(request) != (self.auth_id, self.auth_token) or (
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
        room = ET.fromstring(xml).findtext("Conference")
        if room is not None:
            self._join(call, room.strip(), leaves_stream=True)
            return web.json_response(
                {"api_id": str(uuid.uuid4()), "message": "call transferred"}, status=202
            )
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
        root = ET.fromstring(xml) if status == 200 and xml else None
        stream = root.find("Stream") if root is not None else None
        room = root.findtext("Conference") if root is not None else None
        if stream is None and room is not None and root is not None:
            # a warm transfer's person: briefed by <Speak>, then in the conference
            call.said.extend((speak.text or "").strip() for speak in root.iter("Speak"))
            self._join(call, room.strip(), leaves_stream=False)
            return True
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
