"""Twilio's Calls resource: place, transfer and hang up calls; read status callbacks.

- Place: ``POST /2010-04-01/Accounts/{AccountSid}/Calls.json`` (form: ``To``, ``From``,
  ``Twiml``, ``StatusCallback`` with ``StatusCallbackEvent`` initiated, ringing,
  answered, completed; ``Timeout``; ``MachineDetection=DetectMessageEnd`` with
  ``AsyncAmd=true`` and ``AsyncAmdStatusCallback``), answered 201 with the call's ``sid``
  (https://www.twilio.com/docs/voice/api/call-resource#create-a-call-resource,
  https://www.twilio.com/docs/voice/answering-machine-detection).
- Transfer: update the live call with new TwiML, ``<Dial>`` to the number or ``<Sip>``
  URI (https://www.twilio.com/docs/voice/api/call-resource#update-a-call-resource,
  https://www.twilio.com/docs/voice/twiml/dial, https://www.twilio.com/docs/voice/twiml/sip);
  hang up: update with ``Status=completed``.
- Auth: HTTP basic with the Account SID and auth token, or an API key SID and secret
  (https://www.twilio.com/docs/iam/api-keys). Errors are JSON ``{code, message, status}``.
- Status callbacks are form posts (``CallSid``, ``CallStatus``: queued, initiated,
  ringing, in-progress, completed, busy, no-answer, failed, canceled); the async AMD
  callback carries ``AnsweredBy`` (human, machine_start, machine_end_beep,
  machine_end_silence, machine_end_other, fax, unknown), signed like every webhook
  (``twilio_webhook``).

- Warm transfer: the person's call is created with inline TwiML that ``<Say>``s the
  briefing, then ``<Dial><Conference startConferenceOnEnter endConferenceOnExit>`` a room
  named for this transfer, with ``MachineDetection=Enable`` (async) so a voicemail is
  never joined; once a person answered, the caller's call is updated with TwiML
  ``<Dial><Conference startConferenceOnEnter="false">`` of the same room, which ends its
  ``<Connect><Stream>`` (the caller waits in the room until the briefed person enters)
  (https://www.twilio.com/docs/voice/twiml/conference, https://www.twilio.com/docs/voice/twiml/say,
  https://www.twilio.com/docs/voice/answering-machine-detection).

Retried past a 429 or an unreachable API: everything; past a 5xx: hang-ups only (placing
or transferring twice would ring twice).
"""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from ..twilio_webhook import twiml_connect_stream
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

__all__ = ["TWILIO_API", "TwilioCalls", "conference_twiml", "transfer_twiml"]

TWILIO_API = "https://api.twilio.com"

_STATUSES: Mapping[str, CallStatus] = {
    "queued": "queued",
    "initiated": "initiated",
    "ringing": "ringing",
    "in-progress": "answered",
    "completed": "completed",
    "busy": "busy",
    "no-answer": "no-answer",
    "failed": "failed",
    "canceled": "canceled",
}
_ANSWERED_BY: Mapping[str, AnsweredKind] = {
    "human": "human",
    "machine_start": "machine",
    "machine_end_beep": "machine",
    "machine_end_silence": "machine",
    "machine_end_other": "machine",
    "fax": "machine",
    "unknown": "unknown",
}


class TwilioCalls:
    """One Twilio account's calls (a ``carriers.base.Dialing``)."""

    provider = "twilio"

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        *,
        api_key: str | None = None,
        base_url: str = TWILIO_API,
        policy: HttpPolicy | None = None,
    ) -> None:
        if not account_sid or not auth_token:
            raise ValueError("Twilio needs the account SID and the auth token (or API secret)")
        self.account_sid = account_sid
        user = api_key or account_sid
        basic = base64.b64encode(f"{user}:{auth_token}".encode()).decode("ascii")
        self.http = RestClient(
            "twilio",
            base_url,
            headers={"Authorization": f"Basic {basic}"},
            read_error=_error,
            policy=policy,
        )

    def _calls(self, sid: str | None = None) -> str:
        base = f"/2010-04-01/Accounts/{self.account_sid}/Calls"
        return f"{base}/{sid}.json" if sid else f"{base}.json"

    async def dial(self, request: DialRequest) -> PlacedCall:
        form: dict[str, str | list[str]] = {
            "To": request.to,
            "From": request.from_,
            "Twiml": twiml_connect_stream(request.stream_url, request.stream_parameters),
            "StatusCallback": request.status_url,
            "StatusCallbackMethod": "POST",
            "StatusCallbackEvent": ["initiated", "ringing", "answered", "completed"],
            "Timeout": str(max(5, min(600, round(request.ring_timeout)))),
        }
        if request.machine_detection:
            form["MachineDetection"] = "DetectMessageEnd"
            form["AsyncAmd"] = "true"
            form["AsyncAmdStatusCallback"] = request.status_url
            form["AsyncAmdStatusCallbackMethod"] = "POST"
        body = await self.http.request(
            "POST", self._calls(), form=form, idempotent=False, what=f"call {request.to}"
        )
        return _placed(body, request.to)

    briefs_inline = True
    """The briefing is the person's TwiML (``<Say>`` before the conference)."""

    async def call_person(self, request: PersonCall) -> PlacedCall:
        status_url = request.status_url
        form: dict[str, str | list[str]] = {
            "To": request.to,
            "From": request.from_,
            "Twiml": conference_twiml(request.room, say=request.summary, starts=True),
            "StatusCallback": status_url,
            "StatusCallbackMethod": "POST",
            "StatusCallbackEvent": ["initiated", "ringing", "answered", "completed"],
            "Timeout": str(max(5, min(600, round(request.ring_timeout)))),
            "MachineDetection": "Enable",
            "AsyncAmd": "true",
            "AsyncAmdStatusCallback": status_url,
            "AsyncAmdStatusCallbackMethod": "POST",
        }
        body = await self.http.request(
            "POST", self._calls(), form=form, idempotent=False, what=f"call {request.to}"
        )
        return _placed(body, request.to)

    async def brief(self, person_call_id: str, summary: str) -> None:
        """Nothing to do: the person's TwiML says the briefing."""

    async def join(
        self, caller_call_id: str, person_call_id: str, room: str, room_url: str
    ) -> None:
        await self.http.request(
            "POST",
            self._calls(caller_call_id),
            form={"Twiml": conference_twiml(room, starts=False)},
            idempotent=False,
            what=f"move call {caller_call_id} to the conference",
        )

    async def transfer(self, call_id: str, target: str) -> None:
        await self.http.request(
            "POST",
            self._calls(call_id),
            form={"Twiml": transfer_twiml(target)},
            idempotent=False,
            what=f"transfer call {call_id}",
        )

    async def hangup(self, call_id: str) -> None:
        await self.http.request(
            "POST",
            self._calls(call_id),
            form={"Status": "completed"},
            idempotent=True,
            what=f"hang up call {call_id}",
        )

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        fields = form or {}
        sid = fields.get("CallSid") or None
        answered_by = fields.get("AnsweredBy")
        if answered_by:
            return StatusUpdate(
                sid,
                answered_by=_ANSWERED_BY.get(answered_by, "unknown"),
                beep=answered_by == "machine_end_beep",
                detail=answered_by[:40],
            )
        said = fields.get("CallStatus", "")
        status = _STATUSES.get(said)
        if status is None:
            return None
        return StatusUpdate(sid, status, detail=said)

    async def aclose(self) -> None:
        await self.http.aclose()


def transfer_twiml(target: str) -> str:
    """``<Response><Dial>`` to an E.164 number, or to a ``sip:`` URI with ``<Sip>``."""
    response = ET.Element("Response")
    dial = ET.SubElement(response, "Dial")
    if target.lower().startswith(("sip:", "sips:")):
        ET.SubElement(dial, "Sip").text = target
    else:
        ET.SubElement(dial, "Number").text = target
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(response, encoding="unicode")


def conference_twiml(room: str, *, say: str = "", starts: bool) -> str:
    """``<Response>`` [``<Say>``] ``<Dial><Conference>`` ``room``: ``starts`` for the
    briefed person (the conference starts when they enter), not for the caller, who
    waits in the room until then. Either leaving ends it."""
    response = ET.Element("Response")
    if say:
        ET.SubElement(response, "Say").text = say
    dial = ET.SubElement(response, "Dial")
    conference = ET.SubElement(
        dial,
        "Conference",
        startConferenceOnEnter="true" if starts else "false",
        endConferenceOnExit="true",
        beep="false",
    )
    conference.text = room
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(response, encoding="unicode")


def _placed(body: Any, to: str) -> PlacedCall:
    sid = body.get("sid") if isinstance(body, dict) else None
    if not isinstance(sid, str) or not sid:
        raise CarrierError(f"twilio: the call to {to} was answered without a sid")
    return PlacedCall("twilio", sid)


def _error(body: Any) -> tuple[str | None, str]:
    if isinstance(body, dict):
        code = body.get("code")
        return (str(code) if code is not None else None, str(body.get("message", ""))[:300])
    return None, str(body or "")[:300]
