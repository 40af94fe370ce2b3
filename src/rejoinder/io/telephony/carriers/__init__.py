"""The phone providers' call-control REST APIs: placing calls, transferring and hanging
them up. ``base.CallControl`` is what the rest of rejoinder uses; each provider module
implements it."""

from __future__ import annotations

from .base import CallControl, CallStatus, CarrierError, PlacedCall

__all__ = ["CallControl", "CallStatus", "CarrierError", "PlacedCall"]
