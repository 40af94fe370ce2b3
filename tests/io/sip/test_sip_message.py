"""SIP message parsing and writing (``rejoinder.io.sip.message``): real-world shapes,
the answers RFC 3261 §8.2.6 asks for, and junk of every kind (hypothesis): a message or
a ``SipParseError``, never anything else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.message import (
    MAX_MESSAGE_BYTES,
    SipMessage,
    SipParseError,
    parse,
    parse_name_address,
    response_to,
    uri_user,
)

INVITE = (
    b"INVITE sip:+15559998888@10.0.0.5:5060 SIP/2.0\r\n"
    b"Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK776asdhds;rport\r\n"
    b"v: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bKproxy, SIP/2.0/UDP 10.0.0.8;branch=z9hG4bKx\r\n"
    b"Max-Forwards: 70\r\n"
    b'f: "Alice, A." <sip:+15550001111@trunk.example;user=phone>;tag=1928301774\r\n'
    b"t: <sip:+15559998888@10.0.0.5>\r\n"
    b"i: a84b4c76e66710@pc33.example\r\n"
    b"CSeq: 314159 INVITE\r\n"
    b"m: <sip:alice@10.0.0.1:5060>\r\n"
    b"Record-Route: <sip:p1.example;lr>, <sip:p2.example;lr>\r\n"
    b"Subject: a long\r\n  folded line\r\n"
    b"c: application/sdp\r\n"
    b"l: 4\r\n"
    b"\r\n"
    b"v=0\r\nextra"
)


def test_a_trunks_invite_with_compact_forms_lists_and_folding() -> None:
    message = parse(INVITE)
    assert message.is_request and message.method == "INVITE"
    assert message.uri == "sip:+15559998888@10.0.0.5:5060"
    assert message.call_id == "a84b4c76e66710@pc33.example"
    assert message.cseq == (314159, "INVITE")
    assert message.branch == "z9hG4bK776asdhds"
    assert len(message.get_all("Via")) == 3
    assert message.get_all("Record-Route") == ["<sip:p1.example;lr>", "<sip:p2.example;lr>"]
    assert message.from_tag == "1928301774" and message.to_tag == ""
    assert message.get("subject") == "a long folded line"
    assert message.body == b"v=0\r"  # Content-Length rules: the rest is not ours
    sender = parse_name_address(message.get("From") or "")
    assert sender.display == "Alice, A." and uri_user(sender.uri) == "+15550001111"


def test_a_response_copies_vias_from_call_id_cseq_and_tags_the_to() -> None:
    invite = parse(INVITE)
    ok = response_to(invite, 200, "OK", to_tag="abc", headers=[("Contact", "<sip:x@y>")])
    again = parse(ok.to_bytes())
    assert again.status == 200 and again.reason == "OK"
    assert again.get_all("Via") == invite.get_all("Via")
    assert again.get("From") == invite.get("From")
    assert again.to_tag == "abc"
    assert again.cseq == (314159, "INVITE")
    assert again.get_all("Record-Route") == invite.get_all("Record-Route")  # in a 2xx
    trying = parse(response_to(invite, 100, "Trying", to_tag="abc").to_bytes())
    assert trying.to_tag == ""  # a 100 carries no tag
    refusal = parse(response_to(invite, 486, "Busy Here", to_tag="abc").to_bytes())
    assert refusal.get("Record-Route") is None


def test_serialising_writes_the_body_length() -> None:
    message = SipMessage(method="OPTIONS", uri="sip:a@b", headers=[("Content-Length", "99")])
    message.body = b"xyz"
    assert b"Content-Length: 3\r\n\r\nxyz" in message.to_bytes()


@pytest.mark.parametrize(
    ("data", "kind", "answerable"),
    [
        (b"hello", "truncated", False),
        (b"\r\n\r\n", "empty", False),
        (b"INVITE sip:a@b HTTP/1.1\r\n\r\n", "version", False),
        (b"SIP/2.0 99 Nope\r\n\r\n", "start-line", False),
        (b"\xff\xfe INVITE\r\n\r\n", "encoding", False),
        (b"OPTIONS sip:a@b SIP/2.0\r\nVia: x\r\n\r\n", "missing-header", False),
        (
            b"OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>"
            b";tag=1\r\nTo: <sip:b@c>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\nContent-Length: 50"
            b"\r\n\r\nshort",
            "truncated",
            True,
        ),
        (
            b"BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\nFrom: <sip:a@b>"
            b";tag=1\r\nTo: <sip:b@c>\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\r\n",
            "cseq",
            True,
        ),
        (b"X" * (MAX_MESSAGE_BYTES + 1), "oversized", False),
    ],
)
def test_junk_is_a_parse_error_that_says_what_and_whether_to_answer(
    data: bytes, kind: str, answerable: bool
) -> None:
    with pytest.raises(SipParseError) as caught:
        parse(data)
    assert caught.value.kind == kind
    assert (caught.value.request is not None) == answerable


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_are_a_message_or_a_parse_error(data: bytes) -> None:
    try:
        message = parse(data)
    except SipParseError:
        return
    message.to_bytes()  # whatever parsed can be written back


_LINES = st.sampled_from(
    [
        "INVITE sip:a@b SIP/2.0",
        "SIP/2.0 200 OK",
        "Via: SIP/2.0/UDP h;branch=z9hG4bKx",
        "From: <sip:a@b>;tag=1",
        "To: <sip:b@c>",
        "Call-ID: 1",
        "CSeq: 1 INVITE",
        "CSeq: x",
        "Content-Length: 3",
        "Content-Length: -1",
        "l: 999999999",
        " folded",
        "Bad Header",
        ":",
        "",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=12), st.binary(max_size=20))
def test_near_messages_are_a_message_or_a_parse_error(lines: list[str], body: bytes) -> None:
    data = "\r\n".join(lines).encode() + b"\r\n\r\n" + body
    try:
        message = parse(data)
    except SipParseError as exc:
        error = exc
    else:
        message.to_bytes()
        _ = (message.cseq, message.branch, message.from_tag, message.to_tag)
        return
    assert error.kind
    if error.request is not None:  # answerable: a 400 can be written
        response_to(error.request, 400, "Bad Request", to_tag="t").to_bytes()
