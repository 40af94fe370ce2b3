"""RTP packets (RFC 3550 §5.1): the header read and written, CSRCs, extensions and
padding skipped, junk reported (never raised), and the sender's numbering."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.rtp import BadPacket, RtpPacket, RtpSender, build_rtp, parse_rtp, seq_delta


def test_a_packet_round_trips() -> None:
    packet = RtpPacket(
        payload_type=8,
        sequence=65535,
        timestamp=0xFFFFFFF0,
        ssrc=0xDEADBEEF,
        payload=b"\xd5" * 160,
        marker=True,
    )
    data = build_rtp(packet)
    assert len(data) == 12 + 160
    assert data[0] == 0x80 and data[1] == 0x80 | 8
    assert parse_rtp(data) == packet


def test_csrcs_extension_and_padding_are_skipped() -> None:
    header = struct.pack("!BBHII", 0x80 | 0x20 | 0x10 | 2, 0, 7, 1234, 99)
    csrcs = struct.pack("!II", 1, 2)
    extension = struct.pack("!HH", 0xBEDE, 2) + b"\x01" * 8
    payload = b"\xff" * 160
    padding = b"\x00\x00\x00\x04"
    packet = parse_rtp(header + csrcs + extension + payload + padding)
    assert isinstance(packet, RtpPacket)
    assert packet.payload == payload
    assert packet.csrcs == (1, 2)
    assert (packet.sequence, packet.timestamp, packet.ssrc, packet.payload_type) == (7, 1234, 99, 0)


def test_junk_is_reported_not_raised() -> None:
    ok = build_rtp(RtpPacket(0, 1, 2, 3, b"\xff" * 10))
    cases = {
        b"": "shorter than an RTP header",
        b"\x40" + ok[1:]: "not RTP version 2",
        bytes([0x8F]) + ok[1:12]: "truncated CSRC list",
        bytes([0x90]) + ok[1:12]: "truncated header extension",
        bytes([0x90]) + ok[1:12] + struct.pack("!HH", 0, 9): "truncated header extension",
        bytes([0xA0]) + ok[1:-1] + b"\x00": "bad padding",
        bytes([0xA0]) + ok[1:-1] + b"\xff": "bad padding",
        b"\x80\xc8" + ok[2:]: "RTCP on the RTP port",  # a sender report, rtcp-mux
    }
    for data, reason in cases.items():
        assert parse_rtp(data) == BadPacket(reason), data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_datagram_parses_without_raising(data: bytes) -> None:
    result = parse_rtp(data)
    assert isinstance(result, RtpPacket | BadPacket)
    if isinstance(result, RtpPacket):
        assert len(result.payload) <= len(data) - 12


@given(
    st.integers(0, 127),
    st.integers(0, 65535),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=200),
    st.booleans(),
)
def test_build_then_parse_is_the_identity(
    pt: int, seq: int, ts: int, ssrc: int, payload: bytes, marker: bool
) -> None:
    packet = RtpPacket(pt, seq, ts, ssrc, payload, marker)
    parsed = parse_rtp(build_rtp(packet))
    if 192 <= (pt | (0x80 if marker else 0)) <= 223:
        assert isinstance(parsed, BadPacket)  # reads as RTCP: we never send those types
    else:
        assert parsed == packet


def test_sequence_arithmetic_wraps() -> None:
    assert seq_delta(0, 65535) == 1
    assert seq_delta(65535, 0) == -1
    assert seq_delta(100, 50) == 50
    assert seq_delta(32767, 0) == 32767
    assert seq_delta(32768, 0) == -32768


def test_the_sender_numbers_its_packets() -> None:
    sender = RtpSender(0, ssrc=42)
    first = parse_rtp(sender.packet(b"a", timestamp=2**32 + 5, marker=True))
    second = parse_rtp(sender.packet(b"b", timestamp=2**32 + 165, payload_type=101))
    assert isinstance(first, RtpPacket) and isinstance(second, RtpPacket)
    assert first.ssrc == second.ssrc == 42
    assert seq_delta(second.sequence, first.sequence) == 1
    assert (first.timestamp, second.timestamp) == (5, 165)  # wrapped at 2^32
    assert first.marker and not second.marker
    assert (first.payload_type, second.payload_type) == (0, 101)
    assert sender.packets_sent == 2
    # The clock: 8000 ticks a second from the origin.
    assert sender.timestamp_at(1.0) - sender.timestamp_at(0.0) == 8000
    # Random SSRCs and starting points (RFC 3550 §5.1).
    assert len({RtpSender(0).ssrc for _ in range(8)}) > 1
