"""Telnyx Call Control v2: place, transfer and hang up calls; read its event webhooks.

- Place: ``POST /v2/calls`` (JSON: ``connection_id`` of the Call Control application,
  ``to``, ``from``, ``stream_url`` with ``stream_track`` both_tracks,
  ``stream_bidirectional_mode`` rtp and PCMU both ways, ``answering_machine_detection``
  detect_beep, ``webhook_url``, ``timeout_secs``), answered with ``data.call_control_id``
  (https://developers.telnyx.com/api-reference/call-commands/dial,
  https://developers.telnyx.com/docs/voice/programmable-voice/media-streaming).
- Transfer: ``POST /v2/calls/{call_control_id}/actions/transfer`` with ``to`` (a number
  or ``sip:`` URI); hang up: ``.../actions/hangup``
  (https://developers.telnyx.com/api-reference/call-commands/transfer-call,
  https://developers.telnyx.com/api-reference/call-commands/hangup-call). Both carry a
  ``command_id``: Telnyx ignores a command repeated with the same one on the same call,
  which makes them safe to retry after a 5xx.
- Auth: ``Authorization: Bearer <API key>``. Errors: ``{"errors": [{code, title, detail}]}``.
- Webhooks: JSON ``{"data": {"event_type", "payload": {"call_control_id", ...}}}``:
  ``call.initiated``, ``call.answered``, ``call.hangup`` (``hangup_cause``: user_busy,
  timeout, normal_clearing, originator_cancel, call_rejected, ...),
  ``call.machine.detection.ended`` (``result`` human, machine, not_sure),
  ``call.machine.greeting.ended`` (beep_detected, ended, not_sure) and their premium
  forms (https://developers.telnyx.com/docs/voice/programmable-voice/answering-machine-detection),
  signed with Ed25519 (``signatures.py``).

- Warm transfer: the person is dialled without a stream (``answering_machine_detection``
  detect); once answered, ``.../actions/speak`` says the briefing (``call.speak.ended``
  reports its end), then ``.../actions/bridge`` on the caller's call with the person's
  ``call_control_id`` joins them, which ends the caller's media stream
  (https://developers.telnyx.com/api-reference/call-commands/speak-text,
  https://developers.telnyx.com/api-reference/call-commands/bridge-calls).

Retried past a 429 or an unreachable API: everything; past a 5xx: the commands (they
carry a ``command_id``), never the dial.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

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

__all__ = ["TELNYX_API", "TelnyxCalls"]

TELNYX_API = "https://api.telnyx.com"

_HANGUP_CAUSES: Mapping[str, CallStatus] = {
    "user_busy": "busy",
    "call_rejected": "busy",
    "timeout": "no-answer",
    "no_answer": "no-answer",
    "originator_cancel": "canceled",
    "normal_clearing": "completed",
    "time_limit": "completed",
}
_DETECTED: Mapping[str, AnsweredKind] = {
    "human": "human",
    "human_residence": "human",
    "human_business": "human",
    "machine": "machine",
    "fax_detected": "machine",
    "not_sure": "unknown",
    "silence": "unknown",
}


class TelnyxCalls:
    """One Telnyx Call Control application's calls (a ``carriers.base.Dialing``)."""

    provider = "telnyx"

    def __init__(
        self,
        api_key: str,
        connection_id: str,
        *,
        base_url: str = TELNYX_API,
        policy: HttpPolicy | None = None,
    ) -> None:
        if not api_key or not connection_id:
            raise ValueError("Telnyx needs the API key and the Call Control connection id")
        self.connection_id = connection_id
        self.http = RestClient(
            "telnyx",
            base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            read_error=_error,
            policy=policy,
        )

    async def dial(self, request: DialRequest) -> PlacedCall:
        body: dict[str, Any] = {
            "connection_id": self.connection_id,
            "to": request.to,
            "from": request.from_,
            "stream_url": request.stream_url,
            "stream_track": "both_tracks",
            "stream_codec": "PCMU",
            "stream_bidirectional_mode": "rtp",
            "stream_bidirectional_codec": "PCMU",
            "webhook_url": request.status_url,
            "webhook_url_method": "POST",
            "timeout_secs": max(5, min(600, round(request.ring_timeout))),
        }
        if request.machine_detection:
            body["answering_machine_detection"] = "detect_beep"
        return await self._place(body, request.to)

    async def _place(self, body: dict[str, Any], to: str) -> PlacedCall:
        answer = await self.http.request(
            "POST", "/v2/calls", json_body=body, idempotent=False, what=f"call {to}"
        )
        data = answer.get("data") if isinstance(answer, dict) else None
        call_id = data.get("call_control_id") if isinstance(data, dict) else None
        if not isinstance(call_id, str) or not call_id:
            raise CarrierError(f"telnyx: the call to {to} came without call_control_id")
        return PlacedCall("telnyx", call_id)

    briefs_inline = False
    """The briefing is a ``speak`` command once the person answered."""
    voice = "female"
    language = "en-US"

    async def call_person(self, request: PersonCall) -> PlacedCall:
        body: dict[str, Any] = {
            "connection_id": self.connection_id,
            "to": request.to,
            "from": request.from_,
            "webhook_url": request.status_url,
            "webhook_url_method": "POST",
            "timeout_secs": max(5, min(600, round(request.ring_timeout))),
            "answering_machine_detection": "detect",
        }
        return await self._place(body, request.to)

    async def brief(self, person_call_id: str, summary: str) -> None:
        body = {"payload": summary, "voice": self.voice, "language": self.language}
        await self._command(person_call_id, "speak", body)

    async def join(
        self, caller_call_id: str, person_call_id: str, room: str, room_url: str
    ) -> None:
        await self._command(caller_call_id, "bridge", {"call_control_id": person_call_id})

    async def _command(self, call_id: str, action: str, body: dict[str, Any]) -> None:
        body = {**body, "command_id": str(uuid.uuid4())}  # the same one on every retry
        await self.http.request(
            "POST",
            f"/v2/calls/{call_id}/actions/{action}",
            json_body=body,
            idempotent=True,
            what=f"{action} call {call_id}",
        )

    async def transfer(self, call_id: str, target: str) -> None:
        await self._command(call_id, "transfer", {"to": target})

    async def hangup(self, call_id: str) -> None:
        await self._command(call_id, "hangup", {})

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        try:
            message = json.loads(body)
        except ValueError:
            return None
        data = message.get("data") if isinstance(message, dict) else None
        if not isinstance(data, dict):
            return None
        event = data.get("event_type")
        payload = data.get("payload")
        if not isinstance(event, str) or not isinstance(payload, dict):
            return None
        call_id = payload.get("call_control_id")
        call_id = call_id if isinstance(call_id, str) and call_id else None
        if event == "call.initiated":
            return StatusUpdate(call_id, "initiated", detail=event)
        if event == "call.answered":
            return StatusUpdate(call_id, "answered", detail=event)
        if event == "call.speak.ended":
            return StatusUpdate(call_id, briefed=True, detail=event)
        if event == "call.hangup":
            cause = str(payload.get("hangup_cause", ""))[:40]
            return StatusUpdate(call_id, _HANGUP_CAUSES.get(cause, "failed"), detail=cause)
        result = str(payload.get("result", ""))[:40]
        if event in ("call.machine.detection.ended", "call.machine.premium.detection.ended"):
            kind = _DETECTED.get(result, "unknown")
            return StatusUpdate(call_id, answered_by=kind, detail=result)
        if event in ("call.machine.greeting.ended", "call.machine.premium.greeting.ended"):
            beep = result == "beep_detected"
            return StatusUpdate(call_id, answered_by="machine", beep=beep, detail=result)
        return StatusUpdate(call_id, detail=event[:60])  # streaming.started and the like

    async def aclose(self) -> None:
        await self.http.aclose()


def _error(body: Any) -> tuple[str | None, str]:
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0]
        code = first.get("code")
        said = " ".join(str(first.get(k, "")) for k in ("title", "detail")).strip()
        return (str(code) if code is not None else None, said[:300])
    return None, str(body or "")[:300]
