"""SDP offer/answer (``rejoinder.io.sip.sdp``): codec choice in the caller's order,
telephone-event, hold in both of its spellings, and the offers that get a 488."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.sdp import NotAcceptable, answer_sdp, negotiate, parse_offer


def offer(media: str = "m=audio 4000 RTP/AVP 8 0 101", *extra: str, c: str = "10.0.0.1") -> bytes:
    lines = ["v=0", "o=- 1 7 IN IP4 x", "s=-", f"c=IN IP4 {c}", "t=0 0", media, *extra]
    return ("\r\n".join(lines) + "\r\n").encode()


def test_the_callers_first_g711_is_chosen_with_telephone_event() -> None:
    parsed = parse_offer(
        offer("m=audio 4000 RTP/AVP 18 8 0 101", "a=rtpmap:101 telephone-event/8000")
    )
    chosen = negotiate(parsed)
    assert (chosen.codec, chosen.payload_type, chosen.dtmf_payload_type) == ("PCMA", 8, 101)
    assert (chosen.remote_host, chosen.remote_port) == ("10.0.0.1", 4000)
    assert chosen.direction == "sendrecv" and not chosen.held
    text = answer_sdp(chosen, host="192.0.2.7", port=30000, session_id=5, version=2).decode()
    assert "m=audio 30000 RTP/AVP 8 101\r\n" in text
    assert "c=IN IP4 192.0.2.7" in text and "o=rejoinder 5 2 IN IP4 192.0.2.7" in text
    assert "a=rtpmap:101 telephone-event/8000" in text and "a=sendrecv" in text


def test_a_dynamic_pcmu_payload_type_and_no_dtmf() -> None:
    chosen = negotiate(parse_offer(offer("m=audio 4000 RTP/AVP 96", "a=rtpmap:96 pcmu/8000")))
    assert (chosen.codec, chosen.payload_type, chosen.dtmf_payload_type) == ("PCMU", 96, None)
    assert (
        "telephone-event"
        not in answer_sdp(chosen, host="h", port=1, session_id=1, version=1).decode()
    )


@pytest.mark.parametrize(
    ("extra", "c", "ours", "held"),
    [
        ("a=sendonly", "10.0.0.1", "recvonly", True),
        ("a=inactive", "10.0.0.1", "inactive", True),
        ("a=recvonly", "10.0.0.1", "sendonly", False),
        ("a=sendrecv", "0.0.0.0", "recvonly", True),  # RFC 2543 hold
    ],
)
def test_hold_is_mirrored_in_the_answer(extra: str, c: str, ours: str, held: bool) -> None:
    parsed = parse_offer(offer("m=audio 4000 RTP/AVP 0", extra, c=c))
    assert parsed.on_hold is (ours in ("recvonly", "inactive"))
    chosen = negotiate(parsed)
    assert chosen.direction == ours and chosen.held is held
    assert f"a={ours}" in answer_sdp(chosen, host="h", port=1, session_id=1, version=1).decode()


def test_a_session_level_direction_applies_to_the_stream() -> None:
    body = b"v=0\r\nc=IN IP4 1.2.3.4\r\na=sendonly\r\nm=audio 5 RTP/AVP 0\r\n"
    assert negotiate(parse_offer(body)).direction == "recvonly"


@pytest.mark.parametrize(
    "body",
    [
        offer("m=audio 4000 RTP/AVP 9 101", "a=rtpmap:9 G722/8000"),
        offer("m=video 4000 RTP/AVP 96"),
        offer("m=audio 0 RTP/AVP 0"),
        offer("m=audio 4000 RTP/SAVP 0"),
        b"v=0\r\nm=audio 4000 RTP/AVP 0\r\n",  # no address anywhere
        b"v=0\r\nc=IN ATM x\r\nm=audio 4000 RTP/AVP 0\r\n",
        b"\xff\xfe",
    ],
)
def test_offers_we_cannot_answer_are_not_acceptable(body: bytes) -> None:
    with pytest.raises(NotAcceptable):
        negotiate(parse_offer(body))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "v=0",
                "c=IN IP4 1.2.3.4",
                "c=IN IP6 ::1",
                "c=bad",
                "m=audio 4000 RTP/AVP 0 8",
                "m=audio x RTP/AVP 0",
                "m=audio 70000 RTP/AVP 0",
                "a=rtpmap:0 PCMU/8000",
                "a=rtpmap:x",
                "a=sendonly",
                "a=ptime:30",
                "m=video 5 RTP/AVP 0",
                "o=- 1",
                "junk",
            ]
        ),
        max_size=10,
    )
)
def test_any_offer_is_answered_or_not_acceptable(lines: list[str]) -> None:
    try:
        chosen = negotiate(parse_offer("\r\n".join(lines).encode()))
    except NotAcceptable:
        return
    assert chosen.codec in ("PCMU", "PCMA") and 0 < chosen.remote_port <= 65535


def test_streams_besides_the_audio_are_refused_with_port_zero_in_order() -> None:
    body = offer(
        "m=video 5000 RTP/AVP 96", "a=rtpmap:96 VP8/90000", "m=audio 4000 RTP/AVP 0",
        "m=audio 4002 RTP/AVP 8", "m=application 6000 UDP/BFCP *",
    )  # fmt: skip
    chosen = negotiate(parse_offer(body))
    assert (chosen.remote_port, chosen.codec) == (4000, "PCMU")
    text = answer_sdp(chosen, host="h", port=30000, session_id=1, version=1).decode()
    m_lines = [line for line in text.splitlines() if line.startswith("m=")]
    assert m_lines == [
        "m=video 0 RTP/AVP 96",
        "m=audio 30000 RTP/AVP 0",
        "m=audio 0 RTP/AVP 8",
        "m=application 0 UDP/BFCP *",
    ]
