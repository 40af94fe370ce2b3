"""Every status callback route (and Twilio's voice webhook) refuses what its provider did
not sign: a bad, missing or stale signature, or a replay of an accepted request, gets 403
and the call's status stays as it was; an authentic callback for a call the server does
not know gets 404; a route whose provider's secret is not configured refuses everything
and ``dial`` refuses to place calls it could not follow."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import aiohttp
import pytest

from rejoinder.io.telephony.outbound import OutboundCall, dial
from rejoinder.io.telephony.service import WebhookSecrets
from rejoinder.io.telephony.signatures import plivo_v3_signature
from rejoinder.io.telephony.twilio_webhook import twilio_signature
from rejoinder.testing.carriers import FakeTelnyx

from ._rig import Rig, rig

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

PATHS = {"twilio": "/twilio/status", "telnyx": "/telnyx/events", "plivo": "/plivo/status"}
Request = tuple[dict[str, str] | bytes, dict[str, str]]


def ringing(r: Rig, url: str, call_id: str, *, stamp: int | None = None) -> Request:
    """A correctly signed 'ringing' (Telnyx: call.initiated) callback for ``url``."""
    if r.provider == "twilio":
        form = {"CallSid": call_id, "CallStatus": "ringing"}
        return form, {"X-Twilio-Signature": twilio_signature(r.carrier.auth_token, url, form)}
    if r.provider == "plivo":
        form = {"CallUUID": call_id, "CallStatus": "ringing"}
        nonce = str(time.time_ns())
        signature = plivo_v3_signature(r.carrier.auth_token, "POST", url, form, nonce)
        return form, {"X-Plivo-Signature-V3": signature, "X-Plivo-Signature-V3-Nonce": nonce}
    data = {"event_type": "call.initiated", "payload": {"call_control_id": call_id}}
    body = json.dumps({"data": data}).encode()
    carrier: FakeTelnyx = r.carrier
    return body, carrier.signed_headers(body, stamp)


async def post(url: str, request: Request) -> int:
    body, headers = request
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as got:
        return got.status


def registered(r: Rig) -> OutboundCall:
    call = OutboundCall(
        "k" + r.provider, to="+1555", from_="+1666", control=r.control, parameters={}
    )
    call.call_id = "CA1"
    r.service.outbound.add(call)
    return call


def tampered(request: Request) -> Request:
    body, headers = request
    if isinstance(body, bytes):
        return body.replace(b"initiated", b"answered"), headers
    return {**body, "CallStatus": "in-progress"}, headers


def unsigned(request: Request) -> Request:
    return request[0], {k: v for k, v in request[1].items() if k.lower() == "content-type"}


FORGERIES: dict[str, Callable[[Request], Request]] = {"tampered": tampered, "unsigned": unsigned}


@pytest.mark.parametrize("provider", ["twilio", "telnyx", "plivo"])
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
async def test_a_forged_callback_is_refused_and_changes_nothing(
    provider: str, forgery: str
) -> None:
    async with rig(provider) as r:
        call = registered(r)
        url = f"{r.public_url}{PATHS[provider]}?call={call.key}"
        assert await post(url, FORGERIES[forgery](ringing(r, url, "CA1"))) == 403
        assert call.status == "queued" and not call.events
        # the same request, signed: accepted (the check refuses forgeries, not callbacks)
        assert await post(url, ringing(r, url, "CA1")) == 200
        assert call.status in ("ringing", "initiated")


@pytest.mark.parametrize("provider", ["twilio", "telnyx", "plivo"])
async def test_a_replayed_callback_is_refused(provider: str) -> None:
    async with rig(provider) as r:
        call = registered(r)
        url = f"{r.public_url}{PATHS[provider]}?call={call.key}"
        request = ringing(r, url, "CA1")
        assert await post(url, request) == 200
        events = list(call.events)
        assert await post(url, request) == 403
        assert call.events == events


async def test_a_stale_telnyx_callback_is_refused() -> None:
    async with rig("telnyx") as r:
        call = registered(r)
        url = f"{r.public_url}/telnyx/events?call={call.key}"
        old = int(time.time()) - 600  # past Telnyx's 300 s tolerance
        assert await post(url, ringing(r, url, "CA1", stamp=old)) == 403
        assert call.status == "queued"


@pytest.mark.parametrize("provider", ["twilio", "telnyx", "plivo"])
async def test_an_authentic_callback_for_an_unknown_call_is_404(provider: str) -> None:
    async with rig(provider) as r:
        url = f"{r.public_url}{PATHS[provider]}?call=nobody"
        assert await post(url, ringing(r, url, "CA1")) == 404


@pytest.mark.parametrize("provider", ["twilio", "telnyx", "plivo"])
async def test_without_the_secret_callbacks_are_refused_and_dial_refuses(provider: str) -> None:
    async with rig(provider) as r:
        r.service.secrets = WebhookSecrets()
        call = registered(r)
        url = f"{r.public_url}{PATHS[provider]}?call={call.key}"
        assert await post(url, ringing(r, url, "CA1")) == 403
        missing = {"twilio": "TWILIO_AUTH_TOKEN", "telnyx": "TELNYX_PUBLIC_KEY"}
        with pytest.raises(ValueError, match=missing.get(provider, "PLIVO_AUTH_TOKEN")):
            await dial(
                "+1555",
                from_="+1666",
                control=r.control,
                service=r.service,
                public_url=r.public_url,
            )
        assert r.carrier.requests == []  # nothing was placed


async def test_plivo_answer_and_transfer_webhooks_are_checked_too() -> None:
    async with rig("plivo") as r:
        call = registered(r)
        for path in (f"/plivo/answer?call={call.key}", "/plivo/transfer?target=%2B1777"):
            url = r.public_url + path
            form, headers = ringing(r, url, "CA1")
            assert await post(url, (form, {})) == 403
            assert await post(url, (form, headers)) == 200
        assert call.status == "ringing"


async def test_a_replayed_twilio_voice_webhook_gets_no_second_stream_token() -> None:
    """Sent again, the signed voice webhook would hand out a fresh media-socket token for
    a call that is not ringing: the replay is refused."""
    async with rig("twilio") as r:
        url = f"{r.public_url}/twilio/twiml"
        form = {"CallSid": "CA9", "From": "+1555", "To": "+1666"}
        signed = (form, {"X-Twilio-Signature": twilio_signature(r.carrier.auth_token, url, form)})
        async with (
            aiohttp.ClientSession() as http,
            http.post(url, data=form, headers=signed[1]) as first,
        ):
            assert first.status == 200
            assert "<Stream" in await first.text()
        assert await post(url, signed) == 403
        # another call's webhook is its own: answered
        other = {**form, "CallSid": "CA10"}
        headers = {"X-Twilio-Signature": twilio_signature(r.carrier.auth_token, url, other)}
        assert await post(url, (other, headers)) == 200
