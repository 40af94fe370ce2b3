"""The fake Telnyx: Call Control v2 (``POST /v2/calls``, ``.../actions/transfer`` and
``hangup`` with ``command_id`` repeats ignored), event webhooks signed with Ed25519 by a
key pair made for the test (``public_key`` is what ``TELNYX_PUBLIC_KEY`` should be), AMD
events, and the media stream opened on ``stream_url``. A call dialled without one (a warm
transfer's person) is answered without a stream; ``speak`` is recorded (``said``) and
followed by ``call.speak.started`` and ``call.speak.ended``; ``bridge`` joins two calls
(``bridges``) and ends the stream of the one that had one."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
import uuid
from typing import TYPE_CHECKING, Any

from ._course import FakeCall, FakeCarrier, StreamCaller

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["FakeTelnyx"]


class FakeTelnyx(FakeCarrier):
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
        self.bridges: list[tuple[str, str]] = []
        """``(call_control_id, the one it was bridged with)`` of every bridge."""
        self.speak_seconds = 0.05
        """How long a ``speak`` takes to say."""

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
        elif action == "speak":
            if not body.get("payload"):
                return web.json_response(self._error_body(422, "payload is required"), status=422)
            call.said.append(body["payload"])
            self._spawn_speech(call)
        elif action == "bridge":
            other = self.call(str(body.get("call_control_id", "")))
            if other is None or other.over.is_set() or other is call:
                problem = {"code": "90018", "title": "Call to bridge with is not active"}
                return web.json_response({"errors": [problem]}, status=422)
            call.bridged_with, other.bridged_with = other.id, call.id
            self.bridges.append((call.id, other.id))
            for leg in (call, other):
                if leg.stream is not None:
                    self._leave_later(leg)
        else:
            return web.json_response(self._error_body(422, f"unknown action {action}"), status=422)
        return web.json_response({"data": {"result": "ok"}})

    def _spawn_speech(self, call: FakeCall) -> None:
        async def speak() -> None:
            await self._event(call, "call.speak.started")
            await asyncio.sleep(self.speak_seconds)
            if not call.over.is_set():
                await self._event(call, "call.speak.ended", status="completed")

        task = asyncio.create_task(speak())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
        if not url:
            return True  # a call that does not stream (a warm transfer's person)
        if self._http is None:
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
