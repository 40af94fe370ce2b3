"""The SIP endpoint against SIPp (real SIP software) on 127.0.0.1, in real time.

Each test runs one of the UAC scenarios in ``scenarios/`` as a subprocess, bounded, and
checks both sides: SIPp's own verdict (its exit code and ``-trace_stat`` counts; the
scenarios check our responses' status lines and SDP with ``ereg check_it``) and what the
endpoint did (entry points run, sessions ended with the right reason, media opened and
closed). The call's RTP is a stand-in here (``_sip_support.StandInMedia``) that binds a
port and counts SIPp's packets; the RTP half is tested by its own helper's tests."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rejoinder.io.admission import SessionGate
from rejoinder.io.connection import Connection
from rejoinder.io.sip import SipLine
from rejoinder.io.sip.ports import NoFreePort
from rejoinder.io.telephony import TransferFailed

from ._sip_support import SIPP, Entry, MediaFactory, run_sipp, running_endpoint

pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(30),
    pytest.mark.skipif(SIPP is None, reason="SIPp not installed (apt-get install sip-tester)"),
]


async def test_a_basic_call_is_answered_carries_rtp_and_ends_on_the_callers_bye() -> None:
    entry, media = Entry(), MediaFactory()
    async with running_endpoint(entry, media=media) as (_, port):
        result = await run_sipp("basic.xml", port)
    assert result.returncode == 0, result.errors
    assert result.stats["SuccessfulCall(C)"] == "1"
    assert entry.ended == ["call ended"]
    (call,) = media.opened
    assert call.counter.packets >= 10  # 400 ms of SIPp's rtp_stream reached our port
    assert call.opened_with["codec"] == "PCMU" and call.opened_with["payload_type"] == 0
    assert call.opened_with["dtmf_payload_type"] == 101
    assert call.opened_with["from_number"] == "+15550001111"
    assert call.opened_with["to_number"] == "+15559998888"
    assert call.opened_with["parameters"] == {"Customer": "1"}
    assert call.closed
    conn = entry.conns[0]
    assert conn.transport == "sip" and conn.line is not None
    assert conn.call is not None and conn.call.provider == "sip"


async def test_a_cancel_before_the_answer_gets_487_and_nothing_runs() -> None:
    entry, media = Entry(), MediaFactory(delay=0.5)  # the media opens slowly: time to cancel
    async with running_endpoint(entry, media=media) as (_, port):
        result = await run_sipp("cancel.xml", port)
    assert result.returncode == 0, result.errors
    assert entry.conns == []
    assert [m.closed for m in media.opened] == [True]  # opened too late, closed at once


async def test_digest_auth_challenges_then_answers_the_right_credentials() -> None:
    entry = Entry()
    # MD5 only: SIPp answers the first challenge whatever its algorithm, and knows no
    # SHA-256 (the default offers SHA-256 first, as RFC 8760 asks; see SipOptions).
    auth = {"username": "trunk", "password": "s3cret", "digest_algorithms": ("MD5",)}
    async with running_endpoint(entry, **auth) as (_, port):
        result = await run_sipp("auth.xml", port, extra=("-au", "trunk", "-ap", "s3cret"))
        wrong = await run_sipp("auth.xml", port, seconds=2, extra=("-au", "trunk", "-ap", "guess"))
    assert result.returncode == 0, result.errors
    assert entry.ended[0] == "call ended"
    assert wrong.returncode != 0  # a wrong password is challenged again: no 200
    assert len(entry.conns) == 1


async def test_a_reinvite_puts_the_agent_on_hold_and_back() -> None:
    entry, media = Entry(), MediaFactory()
    async with running_endpoint(entry, media=media) as (_, port):
        result = await run_sipp("hold.xml", port)
    assert result.returncode == 0, result.errors
    (call,) = media.opened
    assert call.holds == [True, False]
    assert [update[2:4] for update in call.updates] == [(8, "PCMA"), (8, "PCMA")]
    assert entry.ended == ["call ended"]


async def test_options_keepalive_is_answered() -> None:
    async with running_endpoint(Entry()) as (_, port):
        result = await run_sipp("options.xml", port)
    assert result.returncode == 0, result.errors


async def test_a_caller_outside_the_allow_list_is_refused_403() -> None:
    entry = Entry()
    async with running_endpoint(entry, allow_from=("10.0.0.0/8",)) as (_, port):
        result = await run_sipp("forbidden.xml", port)
    assert result.returncode == 0, result.errors
    assert entry.conns == []


async def test_an_offer_without_g711_is_refused_488() -> None:
    entry = Entry()
    async with running_endpoint(entry) as (_, port):
        result = await run_sipp("not_acceptable.xml", port)
    assert result.returncode == 0, result.errors
    assert entry.conns == []


async def test_a_full_gate_answers_486_and_a_draining_one_503() -> None:
    entry = Entry()
    gate: SessionGate[Connection] = SessionGate(max_sessions=1)
    async with running_endpoint(entry, gate=gate) as (_, port):
        with gate.admit() as held:  # the one place is taken
            assert held is not None
            busy = await run_sipp("busy.xml", port)
        gate.stop_admitting()
        draining = await run_sipp("draining.xml", port)
    assert busy.returncode == 0, busy.errors
    assert draining.returncode == 0, draining.errors
    assert entry.conns == []


async def test_ten_calls_at_five_per_second_all_succeed() -> None:
    entry, media = Entry(), MediaFactory()
    async with running_endpoint(entry, media=media) as (_, port):
        result = await run_sipp("basic.xml", port, calls=10, rate=5, limit=10)
    assert result.returncode == 0, result.errors
    assert result.stats["TotalCallCreated"] == "10"
    assert result.stats["SuccessfulCall(C)"] == "10"
    assert result.stats["FailedCall(C)"] == "0"
    assert entry.ended == ["call ended"] * 10
    assert all(m.closed for m in media.opened) and len(media.opened) == 10


async def _transfer_when_answered(endpoint: Any, entry: Entry, target: str) -> None:
    async with asyncio.timeout(5):
        while not entry.conns:  # noqa: ASYNC110 - the call is answered by SIPp's run
            await asyncio.sleep(0.02)
    await endpoint.transfer(entry.conns[0], target)


async def test_a_transfer_refers_the_caller_and_ends_the_session_when_the_target_answers() -> None:
    entry = Entry()
    async with running_endpoint(entry) as (endpoint, port):
        result, _ = await asyncio.gather(
            run_sipp("transfer_ok.xml", port),
            _transfer_when_answered(endpoint, entry, "+15551234567"),
        )
    assert result.returncode == 0, result.errors  # REFER as expected, then our BYE
    assert entry.ended == ["transferred"]


async def test_a_failed_transfer_raises_and_keeps_the_call() -> None:
    entry = Entry()
    async with running_endpoint(entry) as (endpoint, port):
        sipp = asyncio.ensure_future(run_sipp("transfer_failed.xml", port))
        with pytest.raises(TransferFailed, match="486"):
            await _transfer_when_answered(endpoint, entry, "sip:+15551234567@127.0.0.1")
        assert entry.ended == []  # still with the agent
        result = await sipp
    assert result.returncode == 0, result.errors
    assert entry.ended == ["call ended"]  # the caller hung up later


async def test_the_agent_hanging_up_sends_our_bye() -> None:
    entry = Entry(hang_up_after=0.2)  # the entry point returns: the agent hung up
    async with running_endpoint(entry) as (_, port):
        result = await run_sipp("we_hang_up.xml", port)
    assert result.returncode == 0, result.errors
    assert entry.ended == [None]  # it left on its own, the caller did not


async def test_silent_media_and_closing_the_endpoint_send_our_bye() -> None:
    entry, media = Entry(), MediaFactory()
    async with running_endpoint(entry, media=media) as (_, port):
        sipp = asyncio.ensure_future(run_sipp("we_hang_up.xml", port))
        async with asyncio.timeout(5):
            while not entry.conns:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # the ACK is in
        on_dead = media.opened[0].on_dead
        assert on_dead is not None
        on_dead("no RTP for 60 s")
        dead = await sipp
        closing = asyncio.ensure_future(run_sipp("we_hang_up.xml", port))
        async with asyncio.timeout(5):
            while len(entry.conns) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    closed = await closing  # the endpoint closed with the call up: BYE
    assert dead.returncode == 0, dead.errors
    assert closed.returncode == 0, closed.errors
    assert entry.ended == ["no RTP for 60 s", "server closing"]


async def test_the_line_sends_keys_through_the_media() -> None:
    entry, media = Entry(hang_up_after=0.5), MediaFactory()
    async with running_endpoint(entry, media=media) as (_, port):
        sipp = asyncio.ensure_future(run_sipp("we_hang_up.xml", port))
        async with asyncio.timeout(5):
            while not entry.conns:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        line = entry.conns[0].line
        assert isinstance(line, SipLine) and line.call_id
        await line.send_dtmf("12#")
        result = await sipp
    assert result.returncode == 0, result.errors
    assert media.opened[0].keys == ["12#"]


async def test_no_free_rtp_port_answers_503_and_releases_the_place() -> None:
    entry = Entry()
    gate: SessionGate[Connection] = SessionGate(max_sessions=1)
    media = MediaFactory(fail=NoFreePort("no even port free in 10000-10010"))
    async with running_endpoint(entry, gate=gate, media=media) as (_, port):
        result = await run_sipp("draining.xml", port)  # a 503 with Retry-After
        assert gate.refusal() is None  # the place the call held is free again
    assert result.returncode == 0, result.errors
    assert entry.conns == []
