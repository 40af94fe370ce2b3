"""Plivo's Call API: place, transfer and hang up calls; read its callbacks.

- Place: ``POST /v1/Account/{auth_id}/Call/`` (JSON: ``from``, ``to``, ``answer_url`` —
  our answer webhook, which returns the ``<Stream>`` —, ``ring_url`` and ``hangup_url``
  for the status, ``ring_timeout``, ``machine_detection=true`` with
  ``machine_detection_url``), answered 201 with ``request_uuid``; the callbacks then name
  the call by ``CallUUID`` (https://www.plivo.com/docs/voice/api/call/make-a-call,
  https://www.plivo.com/docs/voice/concepts/machine-detection).
- Transfer: ``POST /v1/Account/{auth_id}/Call/{call_uuid}/`` with ``legs=aleg`` and
  ``aleg_url``, our ``/plivo/transfer`` answering ``<Dial>`` to the number or ``<User>``
  SIP URI (https://www.plivo.com/docs/voice/api/call/transfer-a-call,
  https://www.plivo.com/docs/voice/xml/dial). Hang up: ``DELETE .../Call/{call_uuid}/``;
  a call not answered yet (known only by its request) is cancelled with
  ``DELETE .../Request/{request_uuid}/``
  (https://www.plivo.com/docs/voice/api/call/hang-up-a-call).
- Warm transfer: the person's call answers on our ``/plivo/conference?room=...&call=...``
  with ``<Speak>`` the briefing then ``<Conference>`` the room (``machine_detection``
  on, so a voicemail is hung up, never joined); once a person answered, the caller's leg
  is transferred (``aleg_url``) to ``/plivo/conference?room=...``, the same
  ``<Conference>``, which ends its stream
  (https://www.plivo.com/docs/voice/xml/conference, https://www.plivo.com/docs/voice/xml/speak).
- Auth: HTTP basic with the Auth ID and auth token. Errors: JSON ``{"error": ...}``.
- Callbacks are form posts: ``CallStatus`` (ringing, in-progress, completed, busy,
  failed, timeout, no-answer, cancel), ``Machine`` (true/false) on the machine-detection
  URL, ``CallUUID`` and ``RequestUUID``; signed with V3 (``signatures.py``).

Retried past a 429 or an unreachable API: everything; past a 5xx: the hang-ups (DELETE).
"""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from .base import (
    AnsweredKind,
    CallStatus,
    CarrierError,
    DialRequest,
    PersonCall,
    PlacedCall,
    StatusUpdate,
)
from .http import HttpPolicy, RestClient

__all__ = ["PLIVO_API", "PlivoCalls", "conference_xml"]

PLIVO_API = "https://api.plivo.com"

_STATUSES: Mapping[str, CallStatus] = {
    "ringing": "ringing",
    "in-progress": "answered",
    "completed": "completed",
    "busy": "busy",
    "failed": "failed",
    "timeout": "no-answer",
    "no-answer": "no-answer",
    "cancel": "canceled",
    "canceled": "canceled",
}


class PlivoCalls:
    """One Plivo account's calls (a ``carriers.base.Dialing``).

    ``transfer_url``: our public ``/plivo/transfer`` webhook (the service serves it);
    without it ``transfer`` raises ``CarrierError``.
    """

    provider = "plivo"

    def __init__(
        self,
        auth_id: str,
        auth_token: str,
        *,
        transfer_url: str | None = None,
        base_url: str = PLIVO_API,
        policy: HttpPolicy | None = None,
    ) -> None:
        if not auth_id or not auth_token:
            raise ValueError("Plivo needs the Auth ID and the auth token")
        self.auth_id = auth_id
        self.transfer_url = transfer_url
        basic = base64.b64encode(f"{auth_id}:{auth_token}".encode()).decode("ascii")
        self.http = RestClient(
            "plivo",
            base_url,
            headers={"Authorization": f"Basic {basic}"},
            read_error=_error,
            policy=policy,
        )
        self._unanswered: set[str] = set()  # request_uuids no callback has named a call for

    def _path(self, kind: str, uuid: str | None = None) -> str:
        return f"/v1/Account/{self.auth_id}/{kind}/" + (f"{uuid}/" if uuid else "")

    async def dial(self, request: DialRequest) -> PlacedCall:
        if not request.answer_url:
            raise ValueError("a Plivo call needs our answer URL (DialRequest.answer_url)")
        body: dict[str, Any] = {
            "from": request.from_,
            "to": request.to,
            "answer_url": request.answer_url,
            "answer_method": "POST",
            "ring_url": request.status_url,
            "ring_method": "POST",
            "hangup_url": request.status_url,
            "hangup_method": "POST",
            "ring_timeout": max(5, min(600, round(request.ring_timeout))),
        }
        if request.machine_detection:
            body["machine_detection"] = "true"
            body["machine_detection_url"] = request.status_url
            body["machine_detection_method"] = "POST"
        return await self._place(body, request.to)

    async def _place(self, body: dict[str, Any], to: str) -> PlacedCall:
        answer = await self.http.request(
            "POST", self._path("Call"), json_body=body, idempotent=False, what=f"call {to}"
        )
        request_uuid = answer.get("request_uuid") if isinstance(answer, dict) else None
        if isinstance(request_uuid, list):  # one per destination; we dial one
            request_uuid = request_uuid[0] if request_uuid else None
        if not isinstance(request_uuid, str) or not request_uuid:
            raise CarrierError(f"plivo: the call to {to} came without request_uuid")
        self._unanswered.add(request_uuid)
        return PlacedCall("plivo", request_uuid)

    briefs_inline = True
    """The briefing is the person's answer XML (``<Speak>`` before the conference)."""

    async def call_person(self, request: PersonCall) -> PlacedCall:
        if not request.answer_url:
            raise ValueError("a Plivo person's call needs our answer URL (PersonCall.answer_url)")
        body: dict[str, Any] = {
            "from": request.from_,
            "to": request.to,
            "answer_url": request.answer_url,
            "answer_method": "POST",
            "ring_url": request.status_url,
            "ring_method": "POST",
            "hangup_url": request.status_url,
            "hangup_method": "POST",
            "ring_timeout": max(5, min(600, round(request.ring_timeout))),
            "machine_detection": "true",
            "machine_detection_url": request.status_url,
            "machine_detection_method": "POST",
        }
        return await self._place(body, request.to)

    async def brief(self, person_call_id: str, summary: str) -> None:
        """Nothing to do: the person's answer XML speaks the briefing."""

    async def join(
        self, caller_call_id: str, person_call_id: str, room: str, room_url: str
    ) -> None:
        await self.http.request(
            "POST",
            self._path("Call", caller_call_id),
            json_body={"legs": "aleg", "aleg_url": room_url, "aleg_method": "POST"},
            idempotent=False,
            what=f"move call {caller_call_id} to the conference",
        )

    async def transfer(self, call_id: str, target: str) -> None:
        if self.transfer_url is None:
            raise CarrierError("plivo: transfers need our public URL (transfer_url)")
        aleg_url = f"{self.transfer_url}?{urlencode({'target': target})}"
        await self.http.request(
            "POST",
            self._path("Call", call_id),
            json_body={"legs": "aleg", "aleg_url": aleg_url, "aleg_method": "POST"},
            idempotent=False,
            what=f"transfer call {call_id}",
        )

    async def hangup(self, call_id: str) -> None:
        kind = "Request" if call_id in self._unanswered else "Call"
        await self.http.request(
            "DELETE", self._path(kind, call_id), idempotent=True, what=f"hang up call {call_id}"
        )

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        fields = form or {}
        call_uuid = fields.get("CallUUID") or None
        if call_uuid is not None:
            self._unanswered.discard(fields.get("RequestUUID", ""))
        machine = fields.get("Machine")
        if machine is not None:
            kind: AnsweredKind = "machine" if machine.lower() == "true" else "human"
            return StatusUpdate(call_uuid, answered_by=kind, detail=f"Machine={machine[:8]}")
        said = fields.get("CallStatus", "")
        status = _STATUSES.get(said)
        if status is None:
            return None
        cause = fields.get("HangupCauseName", "")
        return StatusUpdate(call_uuid, status, detail=f"{said} {cause}".strip()[:80])

    async def aclose(self) -> None:
        await self.http.aclose()


def conference_xml(room: str, *, speak: str = "", starts: bool) -> str:
    """``<Response>`` [``<Speak>``] ``<Conference>`` ``room``: ``starts`` for the briefed
    person (the conference starts when they enter), not for the caller, who waits in the
    room until then. Either leaving ends it."""
    response = ET.Element("Response")
    if speak:
        ET.SubElement(response, "Speak").text = speak
    conference = ET.SubElement(
        response,
        "Conference",
        startConferenceOnEnter="true" if starts else "false",
        endConferenceOnExit="true",
        enterSound="",
        exitSound="",
    )
    conference.text = room
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(response, encoding="unicode")


def _error(body: Any) -> tuple[str | None, str]:
    if isinstance(body, dict):
        said = body.get("error") or body.get("message") or ""
        return None, str(said)[:300]
    return None, str(body or "")[:300]
