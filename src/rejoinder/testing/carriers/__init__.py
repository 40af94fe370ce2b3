"""Fake phone carriers on 127.0.0.1: Twilio, Telnyx and Plivo as a placed call sees them.

Each is an aiohttp server that speaks the provider's call-control REST API (auth checked,
required fields checked, the documented JSON answers and errors) and, for each call
placed, plays the carrier: signed status callbacks in order (Twilio's HMAC-SHA1, Telnyx's
Ed25519 with a key pair made for the test, Plivo's V3), then — once answered — the media
stream to our server as the provider opens it (Twilio with ``FakePhoneCall`` from the
TwiML ``<Connect><Stream>`` it was given; Telnyx from ``stream_url``; Plivo from the
``<Stream>`` its answer URL returned), the answering-machine result, and at the end the
completion. Transfers and hang-ups are recorded.

    async with FakeTwilio(outcomes=[CallOutcome("human", talk_seconds=1.0)]) as twilio:
        control = TwilioCalls(twilio.account_sid, twilio.auth_token, base_url=twilio.base_url)
        ...                                    # dial; twilio.calls[0].stream.heard_seconds()

``CallOutcome`` scripts each call in turn: answered by a human or a machine (with the AMD
result), busy, no answer, never answering (``"silent"``: only a hang-up ends it), and
``fail_next(status, times)`` makes the next REST requests fail (a 500, a 429) to test
retries.
"""

from __future__ import annotations

from ._course import CallOutcome, FakeCall, FakeCarrier, StreamCaller
from .plivo import FakePlivo
from .telnyx import FakeTelnyx
from .twilio import FakeTwilio

__all__ = [
    "CallOutcome",
    "FakeCall",
    "FakeCarrier",
    "FakePlivo",
    "FakeTelnyx",
    "FakeTwilio",
    "StreamCaller",
]
