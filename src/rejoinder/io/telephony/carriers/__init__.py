"""The phone providers' call-control REST APIs: placing calls, transferring and hanging
them up. ``base.CallControl`` is what the rest of rejoinder uses; each provider module
implements it, and ``base.Dialing`` (placing calls, reading status callbacks) too:
``twilio.TwilioCalls``, ``telnyx.TelnyxCalls``, ``plivo.PlivoCalls``. Their HTTP (bounded
retries, timeouts, errors) is shared in ``http``; aiohttp is imported on first use."""

from __future__ import annotations

from .base import (
    CallControl,
    CallStatus,
    CarrierError,
    Dialing,
    DialRequest,
    PlacedCall,
    StatusUpdate,
)
from .http import HttpPolicy
from .plivo import PlivoCalls
from .telnyx import TelnyxCalls
from .twilio import TwilioCalls

__all__ = [
    "CallControl",
    "CallStatus",
    "CarrierError",
    "DialRequest",
    "Dialing",
    "HttpPolicy",
    "PlacedCall",
    "PlivoCalls",
    "StatusUpdate",
    "TelnyxCalls",
    "TwilioCalls",
]
