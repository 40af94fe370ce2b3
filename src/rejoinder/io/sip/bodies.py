"""What the bodies of a call's requests say: the INVITE's SDP offer, a key sent as INFO,
a transfer NOTIFY's sipfrag. Each returns a value or a clear refusal, never raises
anything else (they read what callers send).

References: RFC 3264 (offer in the INVITE), RFC 3515 §2.4.5 (message/sipfrag in NOTIFY),
RFC 4733 §3.2 (event codes 10-15 for * # A-D, as INFO dtmf-relay bodies number them).
"""

from __future__ import annotations

from .dialog import Address
from .message import SipMessage
from .sdp import MediaOffer, NotAcceptable, parse_offer

__all__ = ["info_key", "media_of", "offer_of", "sipfrag_status"]


def offer_of(invite: SipMessage) -> MediaOffer:
    """The INVITE's SDP offer; ``NotAcceptable`` without one (an offerless INVITE is not
    supported) or when it cannot be read."""
    kind = (invite.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    if not invite.body or kind != "application/sdp":
        raise NotAcceptable("an INVITE without an SDP offer is not supported")
    return parse_offer(invite.body)


def media_of(sdp: bytes) -> Address:
    """Where an SDP (our own answer) puts its audio."""
    offer = parse_offer(sdp)
    return offer.host, offer.port


_KEYS = "0123456789*#ABCD"


def info_key(info: SipMessage) -> str | None:
    """The key an INFO carries (``application/dtmf-relay``'s ``Signal=``, or
    ``application/dtmf``), or None for any other body."""
    kind = (info.get("Content-Type") or "").split(";", 1)[0].strip().lower()
    text = info.body.decode("utf-8", "replace")
    if kind == "application/dtmf-relay":
        fields = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition("=") for line in text.splitlines())
        )
        signal = fields.get("signal", "")
    elif kind == "application/dtmf":
        signal = text.strip()
    else:
        return None
    if signal in ("10", "11", "12", "13", "14", "15"):  # event codes for * # A-D (RFC 4733)
        return _KEYS[int(signal)]
    signal = signal.upper()
    return signal if len(signal) == 1 and signal in _KEYS else None


def sipfrag_status(body: bytes) -> int | None:
    """The status code of a ``message/sipfrag`` body (``SIP/2.0 200 OK``), or None."""
    first = body.decode("utf-8", "replace").strip().split("\n", 1)[0].split()
    if len(first) >= 2 and first[0] == "SIP/2.0" and first[1].isdigit():
        return int(first[1])
    return None
