"""The WebRTC transport (extra ``webrtc``: aiortc and PyAV): ``POST /api/offer``.

One peer connection per client. Its microphone track becomes the session's audio input
(resampled with soxr), the agent's voice goes out on a track paced in real time, and a data
channel carries the client protocol (``docs/protocol.md``): the same JSON events as the
WebSocket transport, and the client's ``played`` reports, which make ``speaking`` true to
what the listener hears.

Modules: ``signalling`` (the route and the server that owns the peers), ``peer`` (one
connection, its bounded waits and teardown), ``media`` (the two tracks), ``datachannel``
(the protocol over the channel), ``options``, ``ice_config`` (the ICE servers clients
get: STUN/TURN URLs, TURN credentials minted from a shared secret, the command-line
arguments that set them; docs/webrtc.md). Importing this package needs no extra; the
names below that need one import it on first use and, when it is missing, raise
``WebRTCUnavailable`` saying what to install::

    from rejoinder.io.webrtc import add_webrtc_routes, available
    if available():
        add_webrtc_routes(app, entrypoint)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._deps import INSTALL_HINT, WebRTCUnavailable, available
from .ice_config import (
    IceConfig,
    add_ice_arguments,
    ice_config_from_args,
    webrtc_options_from_args,
)
from .options import IceServer, WebRTCOptions

if TYPE_CHECKING:
    from .signalling import ICE_PATH, OFFER_PATH, WebRTCServer, add_webrtc_routes

__all__ = [
    "ICE_PATH",
    "INSTALL_HINT",
    "OFFER_PATH",
    "IceConfig",
    "IceServer",
    "WebRTCOptions",
    "WebRTCServer",
    "WebRTCUnavailable",
    "add_ice_arguments",
    "add_webrtc_routes",
    "available",
    "ice_config_from_args",
    "webrtc_options_from_args",
]

_LAZY = {"ICE_PATH", "OFFER_PATH", "WebRTCServer", "add_webrtc_routes"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import signalling

        return getattr(signalling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
