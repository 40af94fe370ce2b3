"""The ``webrtc`` extra, checked on first use so that ``import rejoinder.io`` never needs it."""

from __future__ import annotations

from ... import _extras

INSTALL_HINT = _extras.install_command("webrtc")
"""The pip command that installs the ``webrtc`` extra, for error messages."""


class WebRTCUnavailable(RuntimeError):
    """The ``webrtc`` extra is not installed."""


def available() -> bool:
    """Whether aiortc and PyAV can be imported (without importing them)."""
    return _extras.available("aiortc", "av")


def require() -> None:
    """Raise ``WebRTCUnavailable`` naming the extra to install when it is missing."""
    _extras.require("webrtc", "aiortc", "av", what="the WebRTC transport", error=WebRTCUnavailable)
