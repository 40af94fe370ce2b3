"""Phone calls: Twilio, Telnyx and Plivo media streams straight to the agent.

A provider streams the call's audio over a WebSocket; the agent's voice goes back on the
same socket, with *marks* whose echoes say what the caller has heard (``marks``). One
framework-free core serves every provider (``stream.MediaStreamPeer``); each provider is
a small table of its messages (``dialects``). ``routes`` mounts the webhooks and media
sockets on an aiohttp app (``create_app(..., telephony=...)`` and
``rejoinder serve --telephony twilio`` do it for you); ``twilio_webhook`` holds the
signature check and the TwiML.
"""

from __future__ import annotations

from .dialects import DIALECTS, PLIVO, TELNYX, TWILIO, CallInfo, Dialect
from .line import PhoneLine, TransferFailed
from .marks import MarkedPlayback
from .routes import PROVIDERS, add_telephony_routes
from .stream import MediaStreamPeer, TelephonyOptions

__all__ = [
    "DIALECTS",
    "PLIVO",
    "PROVIDERS",
    "TELNYX",
    "TWILIO",
    "CallInfo",
    "Dialect",
    "MarkedPlayback",
    "MediaStreamPeer",
    "PhoneLine",
    "TelephonyOptions",
    "TransferFailed",
    "add_telephony_routes",
]
