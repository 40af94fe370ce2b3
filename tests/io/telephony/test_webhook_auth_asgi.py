"""The ASGI host hands the status callbacks the raw body and the headers too: a Telnyx
event (Ed25519 over the exact bytes) and a Plivo V3-signed form are accepted through
Starlette under uvicorn, and the same requests unsigned or replayed are refused."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
from starlette.applications import Starlette

from rejoinder.io.admission import SessionGate
from rejoinder.io.asgi.phone import telephony_routes
from rejoinder.io.telephony.carriers import PlivoCalls, TelnyxCalls
from rejoinder.io.telephony.outbound import OutboundCall
from rejoinder.io.telephony.service import TelephonyService, WebhookSecrets
from rejoinder.io.telephony.signatures import plivo_v3_signature
from rejoinder.testing.carriers import FakeTelnyx

from ..test_asgi_server import uvicorn_serving

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]


async def never(_conn: object) -> None:
    raise AssertionError("no call streams here")


async def post(url: str, data: bytes | dict[str, str], headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers) as got:
        return got.status


async def test_signed_callbacks_pass_through_the_asgi_host_and_forgeries_do_not() -> None:
    telnyx = FakeTelnyx()  # (only its key pair is used: not started)
    plivo_token = "plivo-secret"
    service = TelephonyService(
        never,
        gate=SessionGate(None),
        providers=["telnyx", "plivo"],
        secrets=WebhookSecrets(telnyx_public_key=telnyx.public_key, plivo_auth_token=plivo_token),
    )
    calls = {
        "telnyx": OutboundCall(
            "kt", to="+1", from_="+2", control=TelnyxCalls("k", "c"), parameters={}
        ),
        "plivo": OutboundCall(
            "kp", to="+1", from_="+2", control=PlivoCalls("MA1", plivo_token), parameters={}
        ),
    }
    for call in calls.values():
        service.outbound.add(call)
    async with uvicorn_serving(Starlette(routes=telephony_routes(service))) as port:
        base = f"http://127.0.0.1:{port}"
        # Telnyx: the signature covers these very bytes (spacing and key order kept)
        body = json.dumps(
            {"data": {"event_type": "call.answered", "payload": {"call_control_id": "v3:1"}}},
            indent=1,
        ).encode()
        url = f"{base}/telnyx/events?call=kt"
        headers = telnyx.signed_headers(body)
        assert await post(url, body, {"Content-Type": "application/json"}) == 403
        assert calls["telnyx"].status == "queued"
        assert await post(url, body, headers) == 200
        assert calls["telnyx"].status == "answered"
        assert await post(url, body, headers) == 403  # replayed
        stale = telnyx.signed_headers(body, int(time.time()) - 900)
        assert await post(url, body, stale) == 403
        # Plivo: URL, form and nonce
        url = f"{base}/plivo/status?call=kp"
        form = {"CallUUID": "u1", "CallStatus": "ringing"}
        signature = plivo_v3_signature(plivo_token, "POST", url, form, "n1")
        signed = {"X-Plivo-Signature-V3": signature, "X-Plivo-Signature-V3-Nonce": "n1"}
        assert await post(url, form, {"X-Plivo-Signature-V3-Nonce": "n1"}) == 403
        assert await post(url, form, signed) == 200
        assert calls["plivo"].status == "ringing" and calls["plivo"].call_id == "u1"
        assert await post(url, form, signed) == 403  # replayed
    for call in calls.values():
        await call.control.aclose()
