"""Transports and sinks.

Text sinks load eagerly; the transport names (``Connection``, ``ReportedPlayback``,
``create_app``, ``create_asgi_app``, ...) load their module (numpy, pydantic, aiohttp) on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .text import ConsoleTextOutput, MemoryTextOutput, TextOutput

if TYPE_CHECKING:
    from .app import create_app
    from .asgi import create_asgi_app
    from .connection import Connection, Entrypoint, PushAudioInput
    from .playback import ReportedPlayback
    from .protocol import CloseCode, ProtocolError

# name -> submodule that defines it
_EXPORTS = {
    "Connection": "connection",
    "Entrypoint": "connection",
    "PushAudioInput": "connection",
    "ReportedPlayback": "playback",
    "CloseCode": "protocol",
    "ProtocolError": "protocol",
    "create_app": "app",
    "create_asgi_app": "asgi",
}

__all__ = [
    "CloseCode",
    "Connection",
    "ConsoleTextOutput",
    "Entrypoint",
    "MemoryTextOutput",
    "ProtocolError",
    "PushAudioInput",
    "ReportedPlayback",
    "TextOutput",
    "create_app",
    "create_asgi_app",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
