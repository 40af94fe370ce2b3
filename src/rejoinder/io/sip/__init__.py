"""SIP trunks direct: answer calls from a SIP trunk (Twilio or Telnyx SIP, any PBX) with
RTP media, no media-stream provider in between (``rejoinder serve --sip 0.0.0.0:5060``).

``SipEndpoint`` listens on UDP; ``SipOptions`` says whom it answers (``allow_from``,
loopback only by default), with which credentials (digest, optional) and at which
address it is reached (``public_host``). Each answered call's ``Connection`` carries a
``SipLine`` (``conn.line``) for transfers (REFER) and keys (RFC 4733).

The signalling is our own small sans-I/O core, in layers that each take bytes or
messages and ``now`` and return what to send: ``message`` (RFC 3261 parse/serialize),
``sdp`` (RFC 3264/4566 offer/answer), ``digest`` (RFC 7616/2617), ``transactions``
(timers G/H/J/E/F), ``dialog`` and ``core`` (the UAS); only ``endpoint`` touches a
socket. The RTP half (``rtp``, ``jitter``, ``rfc4733``, ``rtp_playback``, ``ports``, ``media``)
turns the negotiated stream into the session's microphone and speaker.

Why not a library (PyPI, checked 2026-12): pyVoIP (https://pypi.org/project/pyVoIP/) is
a threaded softphone that registers with a server and runs its own RTP threads: a client
more than a trunk-facing server, and no asyncio. aiosip
(https://pypi.org/project/aiosip/) last released 0.2.0 in 2017 and has no SDP; its fork
aiovoip says "use at your own risk". aiosipua (https://pypi.org/project/aiosipua/) is a
young (0.x) asyncio UAS for voice backends; a dependency that young for the part that
faces the internet is a risk of its own, and our protocol cores stay without sockets,
tested on chosen instants and fuzzed like our other wire formats. PJSIP's pjsua2 has
no official wheels (community ones exist: https://pypi.org/project/pjsua2-python/,
CPython 3.8-3.12), is GPL-2.0 or commercial (this package is Apache-2.0), and owns its
threads, media clock and sound devices. A UAS that answers a trunk's INVITEs is a few
hundred lines of well-specified state machines.
"""

from __future__ import annotations

from .core import SipCore
from .digest import DigestAuthority
from .endpoint import MediaCall, OpenMedia, SipEndpoint, SipLine
from .message import SipMessage, SipParseError, parse
from .options import LOOPBACK_ONLY, SipOptions
from .sdp import MediaOffer, Negotiated, NotAcceptable, negotiate, parse_offer
from .transactions import Timers

__all__ = [
    "LOOPBACK_ONLY",
    "DigestAuthority",
    "MediaCall",
    "MediaOffer",
    "Negotiated",
    "NotAcceptable",
    "OpenMedia",
    "SipCore",
    "SipEndpoint",
    "SipLine",
    "SipMessage",
    "SipOptions",
    "SipParseError",
    "Timers",
    "negotiate",
    "parse",
    "parse_offer",
]
