"""The error for a filter whose engine is not installed: it names what to install.

The engines come from the ``filters`` extra (``pywebrtc-audio``) and from ``pyrnnoise``,
which is installed without its dependencies (its own audio-file tooling pulls in
matplotlib and PyAV; the filter needs only the library and model its wheel ships).
"""

from __future__ import annotations

from .._extras import MissingExtra

__all__ = ["EXTRA", "PYRNNOISE", "PYWEBRTC_AUDIO", "missing"]

EXTRA = "filters"
PYWEBRTC_AUDIO = "pywebrtc-audio==0.2.0"
PYRNNOISE = "pyrnnoise==0.4.5"


def missing(what: str, module: str, install: str) -> MissingExtra:
    """``what needs MODULE, which is not installed: INSTALL``."""
    return MissingExtra(f"{what} needs {module}, which is not installed: {install}", extra=EXTRA)
