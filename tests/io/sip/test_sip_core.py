"""The SIP answering core (``rejoinder.io.sip.core.SipCore``) without a socket or a
clock: datagrams in at chosen instants, what it sends and reports out. Covers the
INVITE server transaction (100, the 200 repeated on Timer G until the ACK, Timer H
ending a call whose ACK never comes), CANCEL, BYE both ways, re-INVITE hold, OPTIONS,
REFER with its NOTIFYs, digest challenges, the allow-list, loops and rate limits."""

from __future__ import annotations

import ipaddress
from typing import Any

from rejoinder.io.sip.core import SipCore
from rejoinder.io.sip.digest import DigestAuthority
from rejoinder.io.sip.events import (
    CallCancelled,
    CallConfirmed,
    CallEnded,
    CallOffered,
    KeysPressed,
    MediaChanged,
    ReferAnswered,
    Send,
    TransferNotified,
)
from rejoinder.io.sip.message import SipMessage, parse
from rejoinder.io.sip.ratelimit import RateLimiter

from .test_sip_digest import credentials

PEER = ("127.0.0.1", 5070)
SDP = (
    "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    "m=audio 4000 RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n{direction}"
)


def core(**options: Any) -> SipCore:
    options.setdefault("allow_from", [ipaddress.ip_network("127.0.0.0/8")])
    return SipCore(port=5060, advertise=lambda peer: "127.0.0.1", **options)


def request(
    method: str,
    *,
    branch: str = "z9hG4bKinv1",
    cseq: int = 1,
    to_tag: str = "",
    call_id: str = "call-1",
    body: str = "",
    headers: str = "",
    cseq_method: str | None = None,
) -> bytes:
    to = "<sip:+15559998888@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
    kind = "Content-Type: application/sdp\r\n" if body else ""
    return (
        f"{method} sip:+15559998888@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:5070;branch={branch}\r\n"
        f"From: <sip:+15550001111@127.0.0.1>;tag=caller\r\nTo: {to}\r\n"
        f"Call-ID: {call_id}\r\nCSeq: {cseq} {cseq_method or method}\r\n"
        f"Contact: <sip:caller@127.0.0.1:5070>\r\nMax-Forwards: 70\r\n{headers}{kind}"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def invite(**kwargs: Any) -> bytes:
    return request("INVITE", body=SDP.format(direction="a=sendrecv\r\n"), **kwargs)


def sent(outputs: list[Any]) -> list[SipMessage]:
    return [parse(o.data) for o in outputs if isinstance(o, Send)]


def statuses(outputs: list[Any]) -> list[int | None]:
    return [m.status for m in sent(outputs)]


def answered(sip: SipCore) -> tuple[CallOffered, str]:
    """An INVITE accepted and acknowledged: the offer and our tag."""
    out = sip.receive(invite(), PEER, 0.0)
    offered = next(o for o in out if isinstance(o, CallOffered))
    ok = sent(sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 30000), 0.1))[0]
    sip.receive(request("ACK", branch="z9hG4bKack1", to_tag=ok.to_tag), PEER, 0.2)
    return offered, ok.to_tag


def test_an_invite_gets_100_then_our_200_repeated_on_timer_g_until_the_ack() -> None:
    sip = core()
    out = sip.receive(invite(), PEER, 0.0)
    assert statuses(out) == [100]
    offered = next(o for o in out if isinstance(o, CallOffered))
    assert offered.negotiated.codec == "PCMU" and offered.negotiated.dtmf_payload_type == 101
    assert offered.dialog.from_number == "+15550001111"
    ok = sent(sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 30000), 0.0))
    assert ok[0].status == 200 and b"m=audio 30000 RTP/AVP 0 101" in ok[0].body
    assert ok[0].get("Contact") == "<sip:rejoinder@127.0.0.1:5060>"
    again = sip.receive(invite(), PEER, 0.1)  # the caller's retransmission: absorbed
    assert statuses(again) == [200] and not [o for o in again if isinstance(o, CallOffered)]
    assert statuses(sip.poll(0.5)) == [200]  # Timer G: T1
    assert statuses(sip.poll(1.0)) == []
    assert statuses(sip.poll(1.5)) == [200]  # then 2·T1
    out = sip.receive(request("ACK", branch="z9hG4bKack", to_tag=ok[0].to_tag), PEER, 1.6)
    assert [type(o) for o in out] == [CallConfirmed]
    assert statuses(sip.poll(3.5)) == [] and statuses(sip.poll(10.0)) == []


def test_a_200_never_acknowledged_ends_the_call_with_a_bye() -> None:
    sip = core()
    out = sip.receive(invite(), PEER, 0.0)
    offered = next(o for o in out if isinstance(o, CallOffered))
    sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 30000), 0.0)
    resent = 0
    now = 0.0
    while now < 40.0:
        deadline = sip.deadline
        assert deadline is not None
        now = deadline
        out = sip.poll(now)
        if any(isinstance(o, CallEnded) for o in out):
            break
        resent += statuses(out).count(200)
    assert 31.9 <= now <= 32.1  # Timer H: 64·T1
    assert resent >= 8  # T1, 2T1, 4T1, then every T2
    assert [o.reason for o in out if isinstance(o, CallEnded)] == ["no ACK"]
    assert [m.method for m in sent(out)] == ["BYE"]


def test_cancel_before_the_answer_487s_the_invite() -> None:
    sip = core()
    out = sip.receive(invite(), PEER, 0.0)
    offered = next(o for o in out if isinstance(o, CallOffered))
    out = sip.receive(request("CANCEL", branch="z9hG4bKinv1"), PEER, 0.1)
    assert [(m.status, m.cseq[1]) for m in sent(out)] == [(200, "CANCEL"), (487, "INVITE")]
    assert [type(o) for o in out if not isinstance(o, Send)] == [CallCancelled]
    assert sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 1), 0.2) == []
    assert statuses(sip.receive(request("CANCEL", branch="z9hG4bKother"), PEER, 0.3)) == [481]
    ack = request("ACK", branch="z9hG4bKinv1", to_tag=sent(out)[1].to_tag)
    assert sip.receive(ack, PEER, 0.4) == []
    assert statuses(sip.poll(0.6)) == []  # the ACK stopped the 487's repeats


def test_bye_from_the_caller_ends_the_call_and_unknown_dialogs_get_481() -> None:
    sip = core()
    _, tag = answered(sip)
    out = sip.receive(request("BYE", branch="z9hG4bKbye", cseq=2, to_tag=tag), PEER, 1.0)
    assert statuses(out) == [200]
    assert [o.reason for o in out if isinstance(o, CallEnded)] == ["call ended"]
    assert statuses(
        sip.receive(request("BYE", branch="z9hG4bKbye", cseq=2, to_tag=tag), PEER, 1.1)
    ) == [200]
    stranger = request("BYE", branch="z9hG4bKb2", cseq=3, to_tag="nope")
    assert statuses(sip.receive(stranger, PEER, 1.2)) == [481]
    sip.poll(100.0)
    assert sip.dialogs == {}  # forgotten once its transactions are over


def test_our_bye_is_retransmitted_until_answered() -> None:
    sip = core()
    offered, _ = answered(sip)
    (bye,) = sent(sip.hangup(offered.dialog, 1.0))
    assert bye.method == "BYE" and bye.uri == "sip:caller@127.0.0.1:5070"
    assert bye.from_tag == offered.dialog.local_tag and bye.to_tag == "caller"
    assert [m.method for m in sent(sip.poll(1.5))] == ["BYE"]
    answer = f"SIP/2.0 200 OK\r\nVia: {bye.get('Via')}\r\nCSeq: {bye.get('CSeq')}\r\n\r\n"
    sip.receive(answer.encode(), PEER, 1.6)
    assert sent(sip.poll(2.5)) == [] and sip.hangup(offered.dialog, 3.0) == []


def test_hanging_up_before_the_ack_waits_for_it() -> None:
    sip = core()
    out = sip.receive(invite(), PEER, 0.0)
    offered = next(o for o in out if isinstance(o, CallOffered))
    (ok,) = sent(sip.accept(offered.dialog, offered.negotiated, ("127.0.0.1", 1), 0.0))
    assert sip.hangup(offered.dialog, 0.1) == []
    out = sip.receive(request("ACK", branch="z9hG4bKa", to_tag=ok.to_tag), PEER, 0.2)
    assert [m.method for m in sent(out)] == ["BYE"]


def test_a_reinvite_to_hold_and_back_is_answered_and_reported() -> None:
    sip = core()
    _, tag = answered(sip)
    hold = request(
        "INVITE",
        branch="z9hG4bKre1",
        cseq=2,
        to_tag=tag,
        body=SDP.format(direction="a=sendonly\r\n").replace(" 1 1 IN", " 1 2 IN"),
    )
    out = sip.receive(hold, PEER, 1.0)
    (ok,) = sent(out)
    assert ok.status == 200 and b"a=recvonly" in ok.body and b" 2 IN IP4" in ok.body
    (changed,) = [o for o in out if isinstance(o, MediaChanged)]
    assert changed.negotiated.held
    back = request(
        "INVITE",
        branch="z9hG4bKre2",
        cseq=3,
        to_tag=tag,
        body=SDP.format(direction="a=sendrecv\r\n").replace(" 1 1 IN", " 1 3 IN"),
    )
    out = sip.receive(back, PEER, 2.0)
    assert b"a=sendrecv" in sent(out)[0].body
    assert [o.negotiated.held for o in out if isinstance(o, MediaChanged)] == [False]
    stale = request(
        "INVITE", branch="z9hG4bKre3", cseq=2, to_tag=tag, body=SDP.format(direction="")
    )
    assert statuses(sip.receive(stale, PEER, 3.0)) == [500]  # an old CSeq


def test_options_and_methods_we_do_not_take() -> None:
    sip = core()
    out = sip.receive(request("OPTIONS", branch="z9hG4bKo"), PEER, 0.0)
    assert statuses(out) == [200] and "INVITE" in (sent(out)[0].get("Allow") or "")
    assert statuses(sip.receive(request("REGISTER", branch="z9hG4bKr"), PEER, 0.0)) == [405]
    assert statuses(sip.receive(request("FROB", branch="z9hG4bKf"), PEER, 0.0)) == [501]


def test_refusals_before_any_call() -> None:
    sip = core(allow_from=[ipaddress.ip_network("10.0.0.0/8")])
    assert statuses(sip.receive(invite(), PEER, 0.0)) == [403]
    sip = core()
    assert statuses(
        sip.receive(invite(headers="").replace(b"Max-Forwards: 70", b"Max-Forwards: 0"), PEER, 0.0)
    ) == [483]
    no_g711 = request(
        "INVITE",
        branch="z9hG4bKn",
        body=SDP.format(direction="").replace("RTP/AVP 0 101", "RTP/AVP 9"),
    )
    assert statuses(sip.receive(no_g711, PEER, 0.0)) == [488]
    broken = request("BYE", branch="z9hG4bKx", cseq_method="INVITE")
    assert statuses(sip.receive(broken, PEER, 0.0)) == [400]
    assert sip.receive(b"\x00\x01garbage", PEER, 0.0) == []
    assert sip.receive(b"\r\n\r\n", PEER, 0.0) == []  # keep-alive


def test_the_same_invite_by_another_path_is_a_loop() -> None:
    sip = core()
    sip.receive(invite(), PEER, 0.0)
    assert statuses(sip.receive(invite(branch="z9hG4bKother"), PEER, 0.1)) == [482]


def test_digest_challenge_then_the_call() -> None:
    authority = DigestAuthority(username="trunk", password="s3cret")
    sip = core(authority=authority)
    out = sip.receive(invite(), PEER, 0.0)
    (challenge,) = sent(out)
    assert challenge.status == 401 and len(challenge.get_all("WWW-Authenticate")) == 2
    header = credentials(challenge.get_all("WWW-Authenticate")[0], uri="sip:+15559998888@127.0.0.1")
    retry = invite(branch="z9hG4bKinv2", cseq=2, headers=f"Authorization: {header}\r\n")
    out = sip.receive(retry, PEER, 1.0)
    assert statuses(out) == [100] and any(isinstance(o, CallOffered) for o in out)
    replay = invite(
        branch="z9hG4bKinv3", cseq=3, call_id="call-2", headers=f"Authorization: {header}\r\n"
    )
    assert statuses(sip.receive(replay, PEER, 2.0)) == [401]


def test_a_transfer_reports_the_refer_answer_and_the_notified_outcome() -> None:
    sip = core()
    offered, tag = answered(sip)
    (refer,) = sent(sip.refer(offered.dialog, "sip:+15551234567@trunk", 1.0))
    assert refer.method == "REFER" and refer.get("Refer-To") == "<sip:+15551234567@trunk>"
    assert refer.get("Referred-By") == offered.dialog.contact
    assert [m.method for m in sent(sip.poll(1.5))] == ["REFER"]  # Timer E
    accepted = (
        f"SIP/2.0 202 Accepted\r\nVia: {refer.get('Via')}\r\nCSeq: {refer.get('CSeq')}\r\n\r\n"
    )
    out = sip.receive(accepted.encode(), PEER, 1.6)
    assert [o.status for o in out if isinstance(o, ReferAnswered)] == [202]
    notify = request(
        "NOTIFY",
        branch="z9hG4bKn1",
        cseq=2,
        to_tag=tag,
        headers="Event: refer\r\nSubscription-State: terminated;reason=noresource\r\n"
        "Content-Type: message/sipfrag\r\n",
        body="SIP/2.0 200 OK\r\n",
    )
    out = sip.receive(notify, PEER, 2.0)
    assert statuses(out) == [200]
    assert [(o.status, o.final) for o in out if isinstance(o, TransferNotified)] == [(200, True)]
    trying = notify.replace(b"z9hG4bKn1", b"z9hG4bKn2").replace(b"CSeq: 2", b"CSeq: 3")
    trying = trying.replace(b"SIP/2.0 200 OK\r\n", b"SIP/2.0 100 Trying\r\n").replace(
        b"terminated;reason=noresource", b"active"
    )
    out = sip.receive(trying.replace(b"Length: 16", b"Length: 20"), PEER, 2.1)
    assert [(o.status, o.final) for o in out if isinstance(o, TransferNotified)] == [(100, False)]


def test_a_refer_nobody_answers_times_out_as_408() -> None:
    sip = core()
    offered, _ = answered(sip)
    sip.refer(offered.dialog, "sip:x@y", 1.0)
    answers = [o.status for o in sip.poll(1.0 + 32.0) if isinstance(o, ReferAnswered)]
    assert answers == [408]


def test_a_flooding_source_is_cut_off() -> None:
    sip = core(rate_limit=RateLimiter(rate=10, burst=5))
    answers = [
        statuses(sip.receive(request("OPTIONS", branch=f"z9hG4bK{i}"), PEER, 0.0)) for i in range(8)
    ]
    assert answers == [[200]] * 5 + [[]] * 3
    assert statuses(sip.receive(request("OPTIONS", branch="z9hG4bKlater"), PEER, 1.0)) == [200]


def test_a_required_extension_is_refused_420() -> None:
    sip = core()
    out = sip.receive(invite(headers="Require: 100rel, timer\r\n"), PEER, 0.0)
    (refusal,) = sent(out)
    assert refusal.status == 420 and refusal.get_all("Unsupported") == ["100rel", "timer"]
    assert not [o for o in out if isinstance(o, CallOffered)]


def test_keys_sent_as_info_are_reported() -> None:
    sip = core()
    _, tag = answered(sip)
    relay = request(
        "INFO", branch="z9hG4bKi1", cseq=2, to_tag=tag, body="Signal=5\r\nDuration=160\r\n",
        headers="Content-Type: application/dtmf-relay\r\n",
    ).replace(b"Content-Type: application/sdp\r\n", b"")  # fmt: skip
    out = sip.receive(relay, PEER, 1.0)
    assert statuses(out) == [200]
    assert [o.key for o in out if isinstance(o, KeysPressed)] == ["5"]
    star = relay.replace(b"Signal=5", b"Signal=10").replace(b"z9hG4bKi1", b"z9hG4bKi2")
    star = star.replace(b"CSeq: 2", b"CSeq: 3").replace(b"Length: 24", b"Length: 25")
    assert [o.key for o in sip.receive(star, PEER, 1.1) if isinstance(o, KeysPressed)] == ["*"]
    other = request("INFO", branch="z9hG4bKi3", cseq=4, to_tag=tag, body="hello")
    assert statuses(sip.receive(other, PEER, 1.2)) == [415]
    keepalive = request("INFO", branch="z9hG4bKi4", cseq=5, to_tag=tag)
    assert statuses(sip.receive(keepalive, PEER, 1.3)) == [200]
    stranger = request("INFO", branch="z9hG4bKi5", cseq=6, to_tag="nope")
    assert statuses(sip.receive(stranger, PEER, 1.4)) == [481]
