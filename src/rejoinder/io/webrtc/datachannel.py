"""The client's data channel: protocol v1 JSON both ways (``rejoinder.io.protocol``).

Server → client: every protocol message the ``Connection`` sends (``ready``, states,
transcripts, tools, metrics, errors, ``clear``), one text message each. Client → server:
``played`` reports and typed ``text``; junk gets an ``error`` message back, never a crash.
Audio never travels here (it has the media tracks), so a binary message is an error too.

A client that leaves more than ``max_buffered`` bytes unread is dropped as too slow: the
channel is closed, which ends the session like any other departure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..protocol import (
    ClientMessage,
    ErrorCode,
    ErrorMessage,
    ProtocolError,
    ServerMessage,
    encode,
    parse_client_message,
)
from . import _deps

_deps.require()

from aiortc import RTCDataChannel  # noqa: E402  # after the check that names the extra

logger = logging.getLogger("rejoinder.io.webrtc")


class ClientChannel:
    """Typed messages over one ``RTCDataChannel``. ``closed`` is set once it closed."""

    def __init__(
        self,
        channel: RTCDataChannel,
        on_message: Callable[[ClientMessage], None],
        *,
        max_buffered: int = 1 << 20,
    ) -> None:
        self.channel = channel
        self._on_message = on_message
        self._max_buffered = max_buffered
        self.closed = asyncio.Event()
        self.errors_sent = 0
        channel.on("message", self._received)
        channel.on("close", self.closed.set)
        if channel.readyState in ("closing", "closed"):
            self.closed.set()

    def send(self, message: ServerMessage) -> None:
        """Queue one message (never raises; dropped once the channel is closed)."""
        if self.closed.is_set() or self.channel.readyState != "open":
            return
        if self.channel.bufferedAmount > self._max_buffered:
            logger.warning(
                "the client left %d bytes of its data channel unread; dropping it",
                self.channel.bufferedAmount,
            )
            self.close()
            return
        self.channel.send(encode(message))

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.channel.close()

    def _received(self, data: str | bytes) -> None:
        if isinstance(data, bytes):
            self._error(
                ErrorCode.INVALID_MESSAGE,
                "binary messages are not used on the data channel (audio has its track)",
            )
            return
        try:
            message = parse_client_message(data)
        except ProtocolError as exc:
            self._error(exc.code, exc.message)
            return
        try:
            self._on_message(message)
        except Exception:  # a bug behind one message must not end the peer's channel
            logger.exception("handling a %s message failed", message.type)
            self._error(ErrorCode.INTERNAL, f"the server failed to handle {message.type!r}")

    def _error(self, code: str, message: str) -> None:
        self.errors_sent += 1
        self.send(ErrorMessage(code=code, message=message))
