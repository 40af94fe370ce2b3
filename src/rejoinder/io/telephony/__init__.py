"""Phone calls: Twilio, Telnyx and Plivo media streams straight to the agent, calls the
agent places, and what a phone line can do besides carry audio.

A provider streams the call's audio over a WebSocket; the agent's voice goes back on the
same socket, with *marks* whose echoes say what the caller has heard (``marks``). One
framework-free core serves every provider (``stream.MediaStreamPeer``); each provider is
a small table of its messages (``dialects``). ``routes`` mounts the webhooks and media
sockets on an aiohttp app (``create_app(..., telephony=...)`` and
``rejoinder serve --telephony twilio`` do it for you); ``service`` decides what each
webhook answers, ``twilio_webhook`` and ``signatures`` check who sent it.

Beyond the audio: ``carriers`` speak each provider's call-control REST API (placing,
transferring, hanging up calls); ``outbound.dial`` places a call and follows it through
its status callbacks; ``media_line.MediaStreamLine`` is a media stream's ``PhoneLine``
(``conn.line``: keys pressed as in-band tones, transfers through the carrier);
``keypad_tones`` writes and reads DTMF. SIP trunks without a provider in between are
``rejoinder.io.sip``.
"""

from __future__ import annotations

from .carriers import CallControl, CarrierError
from .carriers.plivo import PlivoCalls
from .carriers.telnyx import TelnyxCalls
from .carriers.twilio import TwilioCalls
from .dialects import DIALECTS, PLIVO, TELNYX, TWILIO, CallInfo, Dialect
from .line import PhoneLine, TransferFailed, WarmTransferLine
from .marks import MarkedPlayback
from .media_line import DTMFInterrupted, MediaStreamLine
from .outbound import OutboundCall, dial
from .routes import PROVIDERS, TELEPHONY, add_telephony_routes
from .service import WebhookSecrets
from .stream import MediaStreamPeer, TelephonyOptions

__all__ = [
    "DIALECTS",
    "PLIVO",
    "PROVIDERS",
    "TELEPHONY",
    "TELNYX",
    "TWILIO",
    "CallControl",
    "CallInfo",
    "CarrierError",
    "DTMFInterrupted",
    "Dialect",
    "MarkedPlayback",
    "MediaStreamLine",
    "MediaStreamPeer",
    "OutboundCall",
    "PhoneLine",
    "PlivoCalls",
    "TelephonyOptions",
    "TelnyxCalls",
    "TransferFailed",
    "TwilioCalls",
    "WarmTransferLine",
    "WebhookSecrets",
    "add_telephony_routes",
    "dial",
]
