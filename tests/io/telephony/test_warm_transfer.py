"""Warm transfers end to end on 127.0.0.1, in real time, for each provider: the agent's
call (placed with ``dial`` on the fake carrier) asks ``conn.warm_transfer``; the caller
hears hold audio while the carrier calls the person (a second scripted call); a person
who answers is briefed with the summary and the two calls are joined (Twilio and Plivo: a
conference room; Telnyx: a bridge), which ends the caller's stream and the session
("transferred"). Busy, unanswered, voicemail and never-answered legs are hung up or end
by themselves, the hold audio stops, and the agent takes the caller back."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from rejoinder.io.telephony.line import TransferFailed
from rejoinder.io.telephony.outbound import OutboundCall, dial
from rejoinder.testing.carriers import CallOutcome, FakeCall

from ._rig import GREETING, Rig, rig

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

PROVIDERS = ["twilio", "telnyx", "plivo"]
TO, FROM = "+15551230000", "+15557650000"
PERSON = "+15559870000"
SUMMARY = "Caller Ana Ruiz wants to move her Tuesday appointment; she is verified."
# The greeting only brings the call to where a transfer starts (heard, listening): a quick
# voice (0.17 s of greeting, not 0.68 s) saves half a second of real time per test.
SECONDS_PER_CHAR = 0.005


@dataclasses.dataclass
class Caller:
    rig: Rig
    call: OutboundCall
    fake: FakeCall
    states: list[tuple[float, str]]
    closes: list[str]

    @property
    def session(self) -> Any:
        return self.rig.sessions[0]

    def audible_between(self, start: float, end: float) -> list[float]:
        return [at for at in self.fake.stream.audible_at() if start <= at <= end]


def _now() -> float:
    return asyncio.get_running_loop().time()


@asynccontextmanager
async def agent_on_call(provider: str, person: CallOutcome) -> AsyncIterator[Caller]:
    """The agent on an answered call whose greeting was heard, listening; the carrier's
    next call (the person's) goes as ``person`` says."""
    async with rig(provider, CallOutcome("human"), person, seconds_per_char=SECONDS_PER_CHAR) as r:
        # the person's leg reports to our webhooks at the public URL
        r.service.options = dataclasses.replace(r.service.options, public_url=r.public_url)
        call = await dial(
            TO, from_=FROM, control=r.control, service=r.service, public_url=r.public_url
        )
        assert await asyncio.wait_for(call.answered(), 5)
        fake = r.carrier.calls[0]
        await r.carrier.until(lambda: bool(r.sessions) and fake.stream is not None, 5)
        session = r.sessions[0]
        states: list[tuple[float, str]] = []
        closes: list[str] = []
        session.on("agent_state_changed", lambda e: states.append((_now(), e.new_state)))
        session.on("close", lambda e: closes.append(e.reason))
        greeting = len(GREETING) * SECONDS_PER_CHAR
        await r.carrier.until(
            lambda: (
                fake.stream.heard_seconds() >= greeting - 0.05
                and session.agent_state == "listening"
            ),
            10,
        )
        try:
            yield Caller(r, call, fake, states, closes)
        finally:  # the caller hangs up (if still there): nothing waits for the call's end
            for leg in r.carrier.calls:
                r.carrier.callee_hangs_up(leg)
            await r.carrier.until(lambda: all(leg.over.is_set() for leg in r.carrier.calls), 5)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_person_answers_is_briefed_and_joined_and_the_session_ends_transferred(
    provider: str,
) -> None:
    async with agent_on_call(provider, CallOutcome("human", ring_seconds=0.6)) as c:
        r = c.rig
        conn = r.conns[0]
        began = _now()
        handed = await asyncio.wait_for(
            conn.warm_transfer(PERSON, summary=SUMMARY, ring_timeout=5), 10
        )
        joined = _now()
        assert handed is True
        person = r.carrier.calls[1]
        # the person was called from our number and briefed with the summary
        assert (person.to, person.from_) == (PERSON, FROM)
        assert person.said == [SUMMARY]
        # the two legs were joined, the caller's after the person's answer
        if provider == "telnyx":
            assert r.carrier.bridges == [(c.fake.id, person.id)]
            briefing = [cmd for cmd in r.carrier.commands if cmd[1] == "speak"]
            assert [(cid, body["payload"]) for cid, _, body in briefing] == [(person.id, SUMMARY)]
        else:
            [(room, legs)] = r.carrier.conferences.items()
            assert legs == [person.id, c.fake.id] and room.startswith("rj-")
        # the caller's stream ends, and with it the session: "transferred"
        await r.carrier.until(lambda: c.fake.stream.closed and bool(c.closes), 5)
        assert c.closes == ["transferred"] and conn.left_reason == "transferred"
        # nobody hung up the joined calls
        assert r.carrier.hangups == [] and not c.call.done
        r.carrier.callee_hangs_up(c.fake)
        r.carrier.callee_hangs_up(person)

    # thinking from the transfer's start to the hand-over: never listening nor speaking
    during = [s for t, s in c.states if began <= t < joined]
    assert during == ["thinking"]
    # after it, at most what the session's close reports as it closes the obligation
    # (a "listening" there is the session's, once the caller is gone: see the report)
    after = [s for t, s in c.states if t >= joined]
    assert set(after) <= {"listening"} and len(after) <= 1
    # the caller heard hold audio while the person's phone rang
    held = c.audible_between(began + 0.1, joined)
    assert len(held) >= 3 and held[-1] - held[0] >= 0.3
    assert joined - began >= 0.6  # (the ring)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("answer", ["busy", "no-answer", "machine", "silent"])
async def test_nobody_answering_gives_the_caller_back_to_the_agent(
    provider: str, answer: str
) -> None:
    person_outcome = CallOutcome(answer, ring_seconds=0.4)  # type: ignore[arg-type]
    async with agent_on_call(provider, person_outcome) as c:
        r = c.rig
        conn, session = r.conns[0], c.session
        began = _now()
        ring_timeout = 0.6 if answer == "silent" else 5.0
        handed = await asyncio.wait_for(
            conn.warm_transfer(PERSON, summary=SUMMARY, ring_timeout=ring_timeout), 10
        )
        back = _now()
        assert handed is False
        person = r.carrier.calls[1]
        await r.carrier.until(lambda: person.over.is_set(), 5)
        if answer in ("machine", "silent"):  # we hung up the voicemail or the ringing
            assert r.carrier.hangups == [person.id] and person.hung_up_by_api
        else:  # the leg ended by itself
            assert r.carrier.hangups == []
        if answer == "silent":
            assert 0.6 <= back - began < 1.5
        # nothing was joined, the caller's call and session go on
        assert all(c.fake.id not in legs for legs in r.carrier.conferences.values())
        assert c.fake.conference is None and c.fake.bridged_with is None
        assert not c.fake.stream.closed and not c.closes and conn.left_reason is None
        # hold audio was heard while waiting, and it stopped
        assert c.audible_between(began + 0.1, back)
        with pytest.raises(TimeoutError):
            await r.carrier.until(lambda: bool(c.audible_between(back + 0.1, back + 10)), 0.4)
        # the agent is back: listening, then it speaks when asked to
        await r.carrier.until(lambda: session.agent_state == "listening", 5)
        said = _now()
        session.say("Sorry, nobody could take the call. How else can I help?")
        await r.carrier.until(lambda: bool(c.audible_between(said, said + 10)), 5)
        await r.carrier.until(lambda: "speaking" in [s for t, s in c.states if t >= said], 5)
        r.carrier.callee_hangs_up(c.fake)
        await r.carrier.until(lambda: bool(c.closes), 5)

    # thinking while the caller held, listening again only as the transfer gave up
    during = [(t, s) for t, s in c.states if began <= t]
    assert [s for _, s in during[:2]] == ["thinking", "listening"]
    assert [s for _, s in during[2:] if s != "thinking"][:2] == ["speaking", "listening"]
    assert during[1][0] >= back - 0.05 and back - began >= 0.4
    assert c.closes == ["call ended"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_persons_call_never_streams_and_screens_voicemail(provider: str) -> None:
    async with agent_on_call(provider, CallOutcome("busy", ring_seconds=0.1)) as c:
        r = c.rig
        assert not await r.conns[0].warm_transfer(PERSON, summary=SUMMARY, ring_timeout=5)
        request = r.carrier.calls[1].request
        if provider == "twilio":
            assert request["MachineDetection"] == "Enable" and request["AsyncAmd"] == "true"
            assert (
                "<Connect>" not in request["Twiml"] and f"<Say>{SUMMARY}</Say>" in request["Twiml"]
            )
        elif provider == "telnyx":
            assert "stream_url" not in request
            assert request["answering_machine_detection"] == "detect"
        else:
            assert request["machine_detection"] == "true"
            assert "/plivo/conference?" in request["answer_url"]
        # its callbacks came to the usual status route, signed, and were accepted
        assert set(r.carrier.calls[1].callback_answers) == {200}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_refused_call_to_the_person_is_a_transfer_failure(provider: str) -> None:
    async with agent_on_call(provider, CallOutcome("human")) as c:
        r = c.rig
        conn, session = r.conns[0], c.session
        r.carrier.fail_next(400)
        with pytest.raises(TransferFailed, match="HTTP 400"):
            await asyncio.wait_for(conn.warm_transfer(PERSON, summary=SUMMARY, ring_timeout=5), 5)
        assert len(r.carrier.calls) == 1  # no person's call was placed
        # a server without its public URL cannot receive the person's callbacks
        r.service.options = dataclasses.replace(r.service.options, public_url=None)
        with pytest.raises(TransferFailed, match="public URL"):
            await asyncio.wait_for(conn.warm_transfer(PERSON, summary=SUMMARY, ring_timeout=5), 5)
        await r.carrier.until(lambda: session.agent_state == "listening", 5)
        assert not c.fake.stream.closed and not c.closes


async def test_the_conference_webhook_is_signed_and_knows_its_rooms() -> None:
    import aiohttp

    from rejoinder.io.telephony.signatures import plivo_v3_signature

    async with agent_on_call("plivo", CallOutcome("human")) as c:
        r = c.rig
        r.service.warm_rooms.add("rj-known", SUMMARY)
        fields = {"CallUUID": "x", "CallStatus": "in-progress"}

        async def post(room: str, *, signed: bool, nonce: str = "1") -> tuple[int, str]:
            url = f"{r.public_url}/plivo/conference?room={room}"
            headers = {}
            if signed:
                signature = plivo_v3_signature(r.carrier.auth_token, "POST", url, fields, nonce)
                headers = {"X-Plivo-Signature-V3": signature, "X-Plivo-Signature-V3-Nonce": nonce}
            async with (
                aiohttp.ClientSession() as http,
                http.post(url, data=fields, headers=headers) as answer,
            ):
                return answer.status, await answer.text()

        assert (await post("rj-known", signed=False))[0] == 403
        assert (await post("rj-unknown", signed=True, nonce="2"))[0] == 404
        status, xml = await post("rj-known", signed=True, nonce="3")
        assert status == 200 and "<Speak>" not in xml  # the caller's leg: no briefing
        assert '<Conference startConferenceOnEnter="false"' in xml and ">rj-known<" in xml
