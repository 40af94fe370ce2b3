"""The ``webrtc`` extra, checked on first use so that ``import rejoinder.io`` never needs it."""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "pip install 'rejoinder[webrtc]'"
MISSING = (
    "the WebRTC transport needs the 'webrtc' extra (aiortc and PyAV), which is not "
    f"installed: {INSTALL_HINT}"
)


class WebRTCUnavailable(RuntimeError):
    """The ``webrtc`` extra is not installed."""


def available() -> bool:
    """Whether aiortc and PyAV can be imported (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("aiortc", "av"))


def require() -> None:
    """Raise ``WebRTCUnavailable`` naming the extra to install when it is missing."""
    try:
        import aiortc  # noqa: F401
        import av  # noqa: F401
    except ImportError as exc:
        raise WebRTCUnavailable(MISSING) from exc
