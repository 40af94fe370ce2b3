"""SDP offer/answer for one audio stream (RFC 4566 format, RFC 3264 model).

``parse_offer(body)`` reads what the caller offers: where its RTP goes (``c=``/``m=``),
the payload types it can send (static 0 PCMU and 8 PCMA, any ``a=rtpmap``),
``telephone-event`` for keys (RFC 4733), and the direction (``sendrecv``/``sendonly``/
``recvonly``/``inactive``; a ``c=0.0.0.0`` from an RFC 2543 phone means hold too).
``negotiate(offer)`` picks the codec (the caller's order: the first of PCMU/PCMA it lists)
or raises ``NotAcceptable`` (the 488). ``answer_sdp`` writes our answer: the chosen codec,
telephone-event when offered, and the direction that mirrors the offer (``sendonly`` is
answered ``recvonly``: we were put on hold).

References: RFC 4566 https://www.rfc-editor.org/rfc/rfc4566 (lines), RFC 3264
https://www.rfc-editor.org/rfc/rfc3264 (§6 answering, §8.4 hold), RFC 3551 (static
payload types 0 and 8), RFC 4733 (telephone-event).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Direction",
    "MediaOffer",
    "Negotiated",
    "NotAcceptable",
    "answer_sdp",
    "negotiate",
    "parse_offer",
]

Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
_DIRECTIONS: tuple[Direction, ...] = ("sendrecv", "sendonly", "recvonly", "inactive")
_STATIC = {0: "PCMU", 8: "PCMA"}
_MIRROR: dict[Direction, Direction] = {
    "sendrecv": "sendrecv",
    "sendonly": "recvonly",
    "recvonly": "sendonly",
    "inactive": "inactive",
}


class NotAcceptable(ValueError):
    """The offer cannot be answered (no audio stream, no G.711, unreadable): 488."""


@dataclass(frozen=True, slots=True)
class MediaOffer:
    """The caller's audio stream, as offered."""

    host: str
    port: int
    payload_types: tuple[int, ...]
    """In the caller's order of preference."""
    codecs: dict[int, str] = field(default_factory=dict)
    """Payload type -> encoding name (upper case), static ones filled in."""
    dtmf_payload_type: int | None = None
    direction: Direction = "sendrecv"
    ptime: int | None = None
    session_id: str = ""
    """The ``o=`` session id: a re-INVITE with the same one and version repeats the offer."""
    session_version: str = ""
    media_lines: tuple[str, ...] = ()
    """Every ``m=`` line offered, in order: the answer has as many (§6)."""
    audio_index: int = 0
    """Which of them is the audio stream we take."""

    @property
    def on_hold(self) -> bool:
        """The caller stops listening (``sendonly``/``inactive``, or a ``0.0.0.0`` address)."""
        return self.direction in ("sendonly", "inactive") or self.host == "0.0.0.0"


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What the answer agrees to."""

    codec: str
    """``"PCMU"`` or ``"PCMA"``."""
    payload_type: int
    dtmf_payload_type: int | None
    remote_host: str
    remote_port: int
    direction: Direction
    """Our direction in the answer."""
    ptime: int = 20
    """What we send (the media side sends 20 ms packets whatever the caller prefers)."""
    media_lines: tuple[str, ...] = ()
    audio_index: int = 0

    @property
    def held(self) -> bool:
        """We must not send audio (the caller put us on hold)."""
        return self.direction in ("recvonly", "inactive")


def parse_offer(body: bytes) -> MediaOffer:
    """The first audio stream of an SDP body; ``NotAcceptable`` when there is none."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotAcceptable("SDP is not UTF-8") from exc
    session_host = ""
    session_direction: Direction = "sendrecv"
    session_id = session_version = ""
    media: dict[str, object] | None = None
    audio: dict[str, object] | None = None
    lines: list[str] = []
    audio_index = 0
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) < 2 or line[1] != "=":
            continue
        kind, value = line[0], line[2:].strip()
        if kind == "m":
            # the first audio stream is ours; the others are refused (port 0, §6)
            media = {"m": value, "rtpmap": {}, "fmtp": {}}
            lines.append(value)
            if audio is None and value.startswith("audio "):
                audio = media
                audio_index = len(lines) - 1
        elif kind == "o":
            fields = value.split()
            if len(fields) >= 3:
                session_id, session_version = fields[1], fields[2]
        elif kind == "c":
            host = _connection_host(value)
            if media is None:
                session_host = host
            else:
                media["c"] = host
        elif kind == "a":
            name, _, rest = value.partition(":")
            target = media if media is not None else None
            if name in _DIRECTIONS:
                if target is None:
                    session_direction = name
                else:
                    target["direction"] = name
            elif target is not None and name == "rtpmap":
                pt, _, encoding = rest.partition(" ")
                if pt.isdigit():
                    rtpmap = target["rtpmap"]
                    assert isinstance(rtpmap, dict)
                    rtpmap[int(pt)] = encoding.split("/")[0].strip().upper()
            elif target is not None and name == "ptime" and rest.strip().isdigit():
                target["ptime"] = int(rest.strip())
    if audio is None:
        raise NotAcceptable("no audio stream offered")
    fields = str(audio["m"]).split()
    if len(fields) < 4 or not fields[1].split("/")[0].isdigit():
        raise NotAcceptable("bad m= line")
    port = int(fields[1].split("/")[0])
    if not fields[2].upper().startswith("RTP/AVP"):
        raise NotAcceptable(f"transport {fields[2]} (only RTP/AVP)")
    pts = tuple(int(f) for f in fields[3:] if f.isdigit() and int(f) < 128)
    rtpmap = audio["rtpmap"]
    assert isinstance(rtpmap, dict)
    codecs = {pt: rtpmap.get(pt, _STATIC.get(pt, "")) for pt in pts}
    dtmf = next((pt for pt in pts if codecs[pt] == "TELEPHONE-EVENT"), None)
    host = str(audio.get("c") or session_host)
    if not host or not 0 <= port <= 65535:
        raise NotAcceptable("no connection address")
    direction = audio.get("direction", session_direction)
    ptime = audio.get("ptime")
    return MediaOffer(
        host=host,
        port=port,
        payload_types=pts,
        codecs=codecs,
        dtmf_payload_type=dtmf,
        direction=direction,  # type: ignore[arg-type]
        ptime=ptime if isinstance(ptime, int) else None,
        session_id=session_id,
        session_version=session_version,
        media_lines=tuple(lines),
        audio_index=audio_index,
    )


def _connection_host(value: str) -> str:
    fields = value.split()
    if len(fields) != 3 or fields[0] != "IN" or fields[1] not in ("IP4", "IP6"):
        raise NotAcceptable(f"bad c= line {value!r}")
    return fields[2].split("/")[0]  # a multicast TTL suffix is not ours to keep


def negotiate(offer: MediaOffer) -> Negotiated:
    """Choose the caller's first G.711 codec; ``NotAcceptable`` without one."""
    if offer.port == 0:
        raise NotAcceptable("the audio stream is refused (port 0)")
    for pt in offer.payload_types:
        codec = offer.codecs.get(pt, "")
        if codec in ("PCMU", "PCMA"):
            direction = _MIRROR[offer.direction]
            if offer.host == "0.0.0.0" and direction == "sendrecv":
                direction = "recvonly"
            return Negotiated(
                codec=codec,
                payload_type=pt,
                dtmf_payload_type=offer.dtmf_payload_type,
                remote_host=offer.host,
                remote_port=offer.port,
                direction=direction,
                media_lines=offer.media_lines,
                audio_index=offer.audio_index,
            )
    raise NotAcceptable("no PCMU or PCMA offered")


def answer_sdp(
    negotiated: Negotiated,
    *,
    host: str,
    port: int,
    session_id: int,
    version: int,
) -> bytes:
    """Our SDP answer: one audio stream at ``host:port``."""
    family = "IP6" if ":" in host else "IP4"
    pts = [negotiated.payload_type]
    lines = [
        "v=0",
        f"o=rejoinder {session_id} {version} IN {family} {host}",
        "s=rejoinder",
        f"c=IN {family} {host}",
        "t=0 0",
    ]
    if negotiated.dtmf_payload_type is not None:
        pts.append(negotiated.dtmf_payload_type)
    offered = negotiated.media_lines or ("audio",)
    for index, line in enumerate(offered):
        if index != negotiated.audio_index:
            # a stream we refuse: port 0, its kind, transport and a format kept (§6)
            fields = [*line.split(), "0", "RTP/AVP", "0"]  # (a short line padded)
            lines.append(f"m={fields[0]} 0 {fields[2]} {fields[3]}")
            continue
        lines.append(f"m=audio {port} RTP/AVP {' '.join(map(str, pts))}")
        lines.append(f"a=rtpmap:{negotiated.payload_type} {negotiated.codec}/8000")
        if negotiated.dtmf_payload_type is not None:
            lines.append(f"a=rtpmap:{negotiated.dtmf_payload_type} telephone-event/8000")
            lines.append(f"a=fmtp:{negotiated.dtmf_payload_type} 0-16")
        lines.append(f"a=ptime:{negotiated.ptime}")
        lines.append(f"a={negotiated.direction}")
    return ("\r\n".join(lines) + "\r\n").encode("ascii")
