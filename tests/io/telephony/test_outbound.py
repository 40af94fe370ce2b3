"""Outbound calls end to end on 127.0.0.1, in real time, for each provider: ``dial`` asks
the fake carrier's REST API for a call; the carrier posts signed status callbacks, opens
the media stream when answered and posts its AMD result; the agent greets and the callee
hears it; the callee hangs up and the handle ends ``completed``. Busy and unanswered
calls end with their status, a call that never answers is hung up at the ring timeout."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from rejoinder.io.telephony.outbound import dial
from rejoinder.testing.carriers import CallOutcome

from ._rig import GREETING, SECONDS_PER_CHAR, rig

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

PROVIDERS = ["twilio", "telnyx", "plivo"]
TO, FROM = "+15551230000", "+15557650000"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_answered_call_hears_the_greeting_and_ends_completed(provider: str) -> None:
    async with rig(provider, CallOutcome("human")) as r:
        call = await dial(
            TO,
            from_=FROM,
            control=r.control,
            service=r.service,
            public_url=r.public_url,
            parameters={"campaign": "flu-shots"},
        )
        assert await asyncio.wait_for(call.answered(), 5)
        fake = r.carrier.calls[0]
        greeting = len(GREETING) * SECONDS_PER_CHAR
        await r.carrier.until(
            lambda: fake.stream is not None and fake.stream.heard_seconds() >= greeting - 0.05,
            10,
        )
        assert fake.stream.audible()
        assert call.connection is r.conns[0]
        r.carrier.callee_hangs_up(fake)
        assert await asyncio.wait_for(call.ended(), 5) == "completed"

    conn = r.conns[0]
    assert conn.call is not None and conn.call.provider == provider
    params = conn.call.parameters
    assert params["direction"] == "outbound" and params["to"] == TO and params["from"] == FROM
    assert params["campaign"] == "flu-shots" and "rejoinder_token" not in params
    assert call.call_id is not None and conn.call.call_id == call.call_id
    # statuses in order, forward only; who answered reached the session
    order = [e.status for e in call.events if e.status is not None]
    assert order[-1] == "completed" and "answered" in order
    assert order.index("answered") < order.index("completed")
    assert call.answered_by == "human"
    assert [e.answered_by for e in r.answered_by] == ["human"]
    assert r.answered_by[0].source == "provider"
    # every callback the carrier posted was accepted
    assert fake.callback_answers and set(fake.callback_answers) == {200}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_machine_with_a_beep_reaches_the_session(provider: str) -> None:
    async with rig(provider, CallOutcome("machine", talk_seconds=0.4)) as r:
        call = await dial(
            TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
        )
        assert await asyncio.wait_for(call.ended(), 8) == "completed"
    assert call.answered_by == "machine"
    kinds = [(e.answered_by, e.beep) for e in r.answered_by]
    assert kinds and kinds[-1] == ("machine", provider != "plivo")  # Plivo reports no beep


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_who_answered_reaches_a_session_served_after_it_was_known(provider: str) -> None:
    """The AMD result may come before the entry point serves its session: it waits for
    the session to start, and is not lost on one that has not started yet."""
    known = asyncio.Event()
    async with rig(provider, CallOutcome("machine", talk_seconds=0.4), serve_after=known) as r:
        call = await dial(
            TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
        )
        await r.carrier.until(lambda: call.answered_by is not None and bool(r.conns), 5)
        known.set()
        await r.carrier.until(lambda: bool(r.answered_by), 5)
        r.carrier.callee_hangs_up(r.carrier.calls[0])
        await asyncio.wait_for(call.ended(), 5)
    # (Telnyx may say it twice: the machine, then its greeting's end with the beep)
    assert r.answered_by
    assert {(e.answered_by, e.source) for e in r.answered_by} == {("machine", "provider")}


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("answer", ["busy", "no-answer"])
async def test_busy_and_unanswered_calls_end_with_their_status(provider: str, answer: str) -> None:
    async with rig(provider, CallOutcome(answer)) as r:  # type: ignore[arg-type]
        call = await dial(
            TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
        )
        assert not await asyncio.wait_for(call.answered(), 5)
        assert await call.ended() == answer
        assert call.connection is None and not r.conns


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_call_that_never_answers_is_hung_up_at_the_ring_timeout(provider: str) -> None:
    async with rig(provider, CallOutcome("silent")) as r:
        loop = asyncio.get_running_loop()
        began = loop.time()
        call = await dial(
            TO,
            from_=FROM,
            control=r.control,
            service=r.service,
            public_url=r.public_url,
            ring_timeout=0.3,
            answer_margin=0.1,
        )
        assert await asyncio.wait_for(call.ended(), 5) == "no-answer"
        assert 0.35 <= loop.time() - began < 1.5
        fake = r.carrier.calls[0]
        await r.carrier.until(lambda: fake.over.is_set(), 5)
        assert r.carrier.hangups == [fake.id] and fake.hung_up_by_api
        assert call.status == "no-answer"  # the carrier's late "canceled" changed nothing


async def test_dial_refuses_a_public_url_the_service_does_not_check_callbacks_against() -> None:
    async with rig("twilio") as r:
        r.service.options = dataclasses.replace(r.service.options, public_url=r.public_url)
        with pytest.raises(ValueError, match="not the service's"):
            await dial(
                TO,
                from_=FROM,
                control=r.control,
                service=r.service,
                public_url="https://elsewhere.example",
            )
        r.service.options = dataclasses.replace(r.service.options, public_url=None)
        with pytest.raises(ValueError, match="public URL"):
            await dial(TO, from_=FROM, control=r.control, service=r.service)
        assert r.carrier.requests == []
