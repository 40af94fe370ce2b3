"""RTP packets (RFC 3550 §5.1): parse what arrives, build what we send.

A packet is a 12-byte fixed header (version 2, padding and extension flags, the CSRC
count, the marker bit, the payload type, a 16-bit sequence number, a 32-bit timestamp on
the media clock, the sender's SSRC), then 0-15 CSRC identifiers, an optional header
extension (a 16-bit profile word and a 16-bit length in 32-bit words, RFC 3550 §5.3.1),
the payload, and, with the padding flag, padding whose last byte says how long it is.

``parse_rtp`` never raises: anything that is not a well-formed version-2 packet comes
back as a ``BadPacket`` naming the problem, so the receive path can drop it and log once
per kind. RTCP sharing the port (RFC 5761 ``rtcp-mux``: its packet types 192-223 read
as the marker bit and payload types 64-95) is told apart, never taken for audio.

``RtpSender`` numbers what we send: one random SSRC, a random initial sequence number
and timestamp (RFC 3550 §5.1: they must not be predictable), the sequence number
incremented by one per packet and wrapping at 2^16, the timestamp on the 8 kHz clock
wrapping at 2^32.

References: RFC 3550 https://www.rfc-editor.org/rfc/rfc3550 (§5.1 header, §5.3.1
extension, §A.1 sequence arithmetic), RFC 3551 https://www.rfc-editor.org/rfc/rfc3551
(payload types 0 and 8, 20 ms packets, the marker bit at a talkspurt's start), RFC 5761
https://www.rfc-editor.org/rfc/rfc5761 §4 (telling RTCP from RTP on one port).
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass

__all__ = [
    "BadPacket",
    "RtpPacket",
    "RtpSender",
    "build_rtp",
    "parse_rtp",
    "seq_delta",
]

_HEADER = struct.Struct("!BBHII")
HEADER_SIZE = _HEADER.size  # 12
_SEQ_MOD = 1 << 16
_TS_MOD = 1 << 32


@dataclass(frozen=True, slots=True)
class RtpPacket:
    """One RTP packet, header fields decoded (CSRCs, extension and padding skipped)."""

    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes
    marker: bool = False
    csrcs: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BadPacket:
    """A datagram that is not usable RTP, and why (a short, fixed phrase: a log key)."""

    reason: str


def parse_rtp(data: bytes) -> RtpPacket | BadPacket:
    """Decode one datagram. Never raises."""
    if len(data) < HEADER_SIZE:
        return BadPacket("shorter than an RTP header")
    first, second, sequence, timestamp, ssrc = _HEADER.unpack_from(data)
    if first >> 6 != 2:
        return BadPacket("not RTP version 2")
    if 192 <= second <= 223:  # RTCP packet types 192-223 land here (RFC 5761 §4)
        return BadPacket("RTCP on the RTP port")
    padded, extended, csrc_count = bool(first & 0x20), bool(first & 0x10), first & 0x0F
    offset = HEADER_SIZE + 4 * csrc_count
    if len(data) < offset:
        return BadPacket("truncated CSRC list")
    csrcs = struct.unpack_from(f"!{csrc_count}I", data, HEADER_SIZE) if csrc_count else ()
    if extended:
        if len(data) < offset + 4:
            return BadPacket("truncated header extension")
        (words,) = struct.unpack_from("!H", data, offset + 2)
        offset += 4 + 4 * words
        if len(data) < offset:
            return BadPacket("truncated header extension")
    end = len(data)
    if padded:
        pad = data[-1]
        if pad == 0 or end - pad < offset:
            return BadPacket("bad padding")
        end -= pad
    return RtpPacket(
        payload_type=second & 0x7F,
        sequence=sequence,
        timestamp=timestamp,
        ssrc=ssrc,
        payload=bytes(data[offset:end]),
        marker=bool(second & 0x80),
        csrcs=tuple(csrcs),
    )


def build_rtp(packet: RtpPacket) -> bytes:
    """Encode ``packet`` (no padding, no extension). Raises ``ValueError`` on fields out
    of range: a bug of ours, never the far end's."""
    if not 0 <= packet.payload_type <= 127:
        raise ValueError(f"payload type {packet.payload_type} out of range")
    if len(packet.csrcs) > 15:
        raise ValueError("at most 15 CSRCs")
    first = 0x80 | len(packet.csrcs)
    second = packet.payload_type | (0x80 if packet.marker else 0)
    header = _HEADER.pack(
        first,
        second,
        packet.sequence % _SEQ_MOD,
        packet.timestamp % _TS_MOD,
        packet.ssrc % _TS_MOD,
    )
    csrcs = struct.pack(f"!{len(packet.csrcs)}I", *packet.csrcs) if packet.csrcs else b""
    return header + csrcs + packet.payload


def seq_delta(later: int, earlier: int) -> int:
    """``later - earlier`` on the 16-bit sequence circle, in [-32768, 32767]."""
    return (later - earlier + 0x8000) % _SEQ_MOD - 0x8000


class RtpSender:
    """Numbers the packets of one outgoing stream (one SSRC).

    ``timestamp_at(t)`` is the media clock at loop time ``t`` (``clock_rate`` ticks a
    second from a random origin): a talkspurt starts at the clock's reading, so the
    timestamps of two talkspurts are as far apart as the silence between them."""

    def __init__(
        self,
        payload_type: int,
        *,
        clock_rate: int = 8000,
        origin: float = 0.0,
        ssrc: int | None = None,
    ) -> None:
        self.payload_type = payload_type
        self.clock_rate = clock_rate
        self.ssrc = secrets.randbits(32) if ssrc is None else ssrc
        self._sequence = secrets.randbits(16)
        self._timestamp_origin = secrets.randbits(32)
        self._origin = origin
        self.packets_sent = 0
        self.octets_sent = 0

    def timestamp_at(self, t: float) -> int:
        """The media clock at loop time ``t``, not wrapped (``build_rtp`` wraps it)."""
        return self._timestamp_origin + round((t - self._origin) * self.clock_rate)

    def packet(
        self,
        payload: bytes,
        *,
        timestamp: int,
        marker: bool = False,
        payload_type: int | None = None,
    ) -> bytes:
        """The next packet of the stream (its sequence number is used up)."""
        data = build_rtp(
            RtpPacket(
                payload_type=self.payload_type if payload_type is None else payload_type,
                sequence=self._sequence,
                timestamp=timestamp,
                ssrc=self.ssrc,
                payload=payload,
                marker=marker,
            )
        )
        self._sequence = (self._sequence + 1) % _SEQ_MOD
        self.packets_sent += 1
        self.octets_sent += len(payload)
        return data
