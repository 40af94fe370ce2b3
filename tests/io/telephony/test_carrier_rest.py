"""Each provider's call control against its fake carrier on 127.0.0.1: what is retried and
how often (a 429 and an unreachable API always, a 5xx only for hang-ups and commands that
are safe to repeat, never more than the policy's attempts), the provider's errors as
``CarrierError``s, and cold transfers (the carrier records the target and, for Twilio and
Plivo, the TwiML or XML that carried it)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rejoinder.io.telephony.carriers import CarrierError, TelnyxCalls, TwilioCalls
from rejoinder.io.telephony.carriers.base import DialRequest
from rejoinder.io.telephony.carriers.twilio import transfer_twiml
from rejoinder.io.telephony.outbound import OutboundCall, dial
from rejoinder.testing.carriers import CallOutcome, FakeCall

from ._rig import FAST, Rig, rig

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

PROVIDERS = ["twilio", "telnyx", "plivo"]
TO, FROM = "+15551230000", "+15557650000"


async def answered_call(r: Rig) -> tuple[OutboundCall, FakeCall]:
    call = await dial(TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url)
    assert await asyncio.wait_for(call.answered(), 5)
    return call, r.carrier.calls[0]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_hang_up_is_retried_past_500s_within_bounds(provider: str) -> None:
    async with rig(provider, CallOutcome("human")) as r:
        call, fake = await answered_call(r)
        before = len(r.carrier.requests)
        r.carrier.fail_next(500, times=2)
        await call.hangup()
        assert len(r.carrier.requests) - before == 3  # two 500s, then it went through
        assert await asyncio.wait_for(call.ended(), 5) == "completed"
        assert fake.hung_up_by_api


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_retries_stop_at_the_policy_s_attempts(provider: str) -> None:
    async with rig(provider, CallOutcome("human")) as r:
        call, _ = await answered_call(r)
        before = len(r.carrier.requests)
        r.carrier.fail_next(503, times=5)
        with pytest.raises(CarrierError) as caught:
            await r.control.hangup(call.call_id)
        assert caught.value.status == 503 and provider in str(caught.value)
        assert len(r.carrier.requests) - before == FAST.attempts
        await r.control.hangup(call.call_id)  # the scripted failures are used up: it works
        assert await asyncio.wait_for(call.ended(), 5) == "completed"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_placing_a_call_is_not_retried_after_a_500_but_is_after_a_429(provider: str) -> None:
    async with rig(provider, CallOutcome("busy")) as r:
        r.carrier.fail_next(500)
        with pytest.raises(CarrierError) as caught:
            await dial(
                TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
            )
        assert caught.value.status == 500
        assert len(r.carrier.requests) == 1 and not r.carrier.calls  # one try, no call
        r.carrier.fail_next(429)
        call = await dial(
            TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
        )
        assert len(r.carrier.requests) == 3 and len(r.carrier.calls) == 1
        assert await asyncio.wait_for(call.ended(), 5) == "busy"


async def test_a_refused_request_names_the_provider_s_error() -> None:
    async with rig("twilio") as r:
        wrong = TwilioCalls(
            r.carrier.account_sid, "not-the-token", base_url=r.carrier.base_url, policy=FAST
        )
        request = DialRequest(
            TO, FROM, r.public_url + "/twilio/status", "ws://127.0.0.1/twilio", {}
        )
        with pytest.raises(CarrierError) as caught:
            await wrong.dial(request)
        await wrong.aclose()
        assert caught.value.status == 401 and caught.value.code == "20003"
    async with rig("telnyx") as r:
        control = TelnyxCalls(
            r.carrier.api_key, "another-connection", base_url=r.carrier.base_url, policy=FAST
        )
        with pytest.raises(CarrierError) as caught:
            await control.dial(DialRequest(TO, FROM, "http://x/", "ws://x/telnyx", {}))
        await control.aclose()
        assert caught.value.status == 422 and caught.value.code == "10015"


async def test_an_unreachable_api_is_retried_then_reported() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    control = TelnyxCalls("key", "conn", base_url=f"http://127.0.0.1:{port}", policy=FAST)
    with pytest.raises(CarrierError, match="cannot connect"):
        await control.hangup("v3:x")
    assert control.http.requests == FAST.attempts
    await control.aclose()


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("target", ["+15550001111", "sip:desk@example.com"])
async def test_a_cold_transfer_goes_through_the_provider(provider: str, target: str) -> None:
    async with rig(provider, CallOutcome("human")) as r:
        call, fake = await answered_call(r)
        await r.carrier.until(lambda: call.connection is not None, 5)
        await r.control.transfer(call.call_id, target)
        assert fake.transfers == [target]
        r.carrier.callee_hangs_up(fake)  # the talk with the transfer's target ends
        assert await asyncio.wait_for(call.ended(), 5) == "completed"
        if provider == "plivo":  # Plivo fetched our /plivo/transfer for the XML
            tag = "User" if target.startswith("sip:") else "Number"
            assert f"<Dial><{tag}>{target}</{tag}></Dial>" in r.carrier.transfer_xml[0]
        if provider == "twilio":  # the call was updated with <Dial> TwiML
            tag = "Sip" if target.startswith("sip:") else "Number"
            assert f"<Dial><{tag}>{target}</{tag}></Dial>" in r.carrier.transfer_twiml[0]
        if provider == "telnyx":  # a transfer command, with a command_id for retries
            [(call_id, action, body)] = r.carrier.commands
            assert (call_id, action, body["to"]) == (call.call_id, "transfer", target)
            assert body["command_id"]


def test_transfer_twiml_dials_numbers_and_sip_uris() -> None:
    assert "<Dial><Number>+15550001111</Number></Dial>" in transfer_twiml("+15550001111")
    assert "<Dial><Sip>sip:a@b.example</Sip></Dial>" in transfer_twiml("sip:a@b.example")
    assert "&lt;" in transfer_twiml("sip:<x>@b")  # escaped, never markup


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_agent_transfers_an_outbound_call_and_it_is_not_hung_up(provider: str) -> None:
    async with rig(provider, CallOutcome("human")) as r:
        call, fake = await answered_call(r)
        await r.carrier.until(lambda: bool(r.sessions), 5)
        conn = r.conns[0]
        assert conn.line is not None
        await conn.transfer("+15550001111")
        assert fake.transfers == ["+15550001111"]
        # the session ends ("transferred") and its stream closes; nothing hangs up the
        # call, which goes on with the transfer's target
        await r.carrier.until(lambda: fake.stream.closed, 5)
        with pytest.raises(TimeoutError):
            await r.carrier.until(lambda: len(r.carrier.requests) > 2, 0.3)
        assert not call.done and not fake.hung_up_by_api
        r.carrier.callee_hangs_up(fake)
        assert await asyncio.wait_for(call.ended(), 5) == "completed"
        assert len(r.carrier.requests) == 2  # the call and the transfer
