"""One Cartesia WebSocket shared by a TTS's streams, each speaking on its own context.

Cartesia multiplexes: every generation request names a ``context_id`` and every server
message carries it back, and the reference recommends many generations over one socket
(a new socket pays TCP and TLS again before the first audio). A reader task hands each
message to the inbox of the context it names. A message for a context no longer open
(audio of a cancelled reply still in flight) is dropped. What cannot be attributed ends
the connection for every open context: a close, a message that is not JSON, an error
without a context. Each context's inbox then gets the error, so no stream is left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from ...models.tts import TTSError
from .._tts_stream import CLOSE_TIMEOUT, Transient, close_failure, parse_message
from .._ws import close_of
from ._wire import server_error

if TYPE_CHECKING:
    import aiohttp

__all__ = ["CLOSE_TIMEOUT", "Connection", "Inbox"]

logger = logging.getLogger("rejoinder.providers.cartesia")

Inbox = asyncio.Queue[dict[str, Any] | TTSError]


class Connection:
    """An open WebSocket, its reader, and the contexts open on it."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._loop = asyncio.get_running_loop()
        self._inboxes: dict[str, Inbox] = {}
        self._send_lock = asyncio.Lock()
        self._ended: TTSError | None = None
        self._reader = asyncio.ensure_future(self._read())

    @property
    def usable(self) -> bool:
        """Open, and on the running loop (a TTS may outlive the loop it connected on)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return self._ended is None and not self._ws.closed and loop is self._loop

    @property
    def contexts(self) -> int:
        """How many contexts are open on it."""
        return len(self._inboxes)

    def open_context(self) -> tuple[str, Inbox]:
        """A new context id and the inbox its messages will arrive in."""
        if self._ended is not None:
            raise copy.copy(self._ended)
        context_id = str(uuid.uuid4())
        inbox: Inbox = asyncio.Queue()
        self._inboxes[context_id] = inbox
        return context_id, inbox

    def close_context(self, context_id: str) -> None:
        """No more messages for this context: later ones are dropped."""
        self._inboxes.pop(context_id, None)

    async def send(self, message: dict[str, Any]) -> None:
        """Send one message; a connection that cannot take it ends (``Transient``)."""
        import aiohttp

        if self._ended is not None:
            raise copy.copy(self._ended)
        try:
            async with self._send_lock:  # one frame at a time from several streams
                await self._ws.send_str(json.dumps(message))
        except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
            lost = Transient(f"Cartesia connection lost while sending: {exc!r}")
            self.end(lost)
            raise copy.copy(self._ended or lost) from exc

    async def cancel(self, context_id: str) -> None:
        """Ask the server to stop generating for a context still open here, if the
        connection stands; bounded, and never raises (the context is given up on)."""
        if self._inboxes.pop(context_id, None) is None or not self.usable:
            return
        with contextlib.suppress(TTSError, TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.send({"context_id": context_id, "cancel": True})

    def end(self, error: TTSError) -> None:
        """End the connection: every open context gets ``error`` and the socket closes."""
        if self._ended is not None:
            return
        self._ended = error
        inboxes, self._inboxes = list(self._inboxes.values()), {}
        for inbox in inboxes:
            inbox.put_nowait(copy.copy(error))  # one instance per stream that raises it
        if self._reader is not asyncio.current_task():
            self._reader.cancel()  # its cleanup closes the socket

    async def aclose(self) -> None:
        """End the connection (open contexts fail) and wait for the socket to close."""
        self.end(TTSError("the Cartesia connection was closed", retryable=True))
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(2 * CLOSE_TIMEOUT):
                await self._reader

    async def _read(self) -> None:
        import aiohttp

        closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                   aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)  # fmt: skip
        try:
            while True:
                message = await self._ws.receive()
                if message.type in closing:
                    if self._inboxes:
                        self.end(close_failure("Cartesia", *close_of(self._ws, message)))
                    else:  # idle (Cartesia closes a socket idle for 5 minutes): no loss
                        logger.debug("cartesia.TTS: connection closed (%s)", self._ws.close_code)
                        self.end(Transient("the Cartesia connection was closed"))
                    return
                if message.type != aiohttp.WSMsgType.TEXT:
                    self.end(TTSError(f"Cartesia sent an unexpected {message.type.name} message"))
                    return
                self._route(parse_message("Cartesia", message.data))
        except TTSError as error:  # a message that is not JSON: nothing can be trusted
            self.end(error)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must end the streams, not hang them
            logger.exception("cartesia.TTS: the connection's reader failed")
            self.end(TTSError(f"cartesia.TTS failed: {exc!r}"))
        finally:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self._ws.close()

    def _route(self, message: dict[str, Any]) -> None:
        context_id = message.get("context_id")
        inbox = self._inboxes.get(context_id) if isinstance(context_id, str) else None
        if inbox is not None:
            inbox.put_nowait(message)
        elif message.get("type") == "error" and context_id is None:
            self.end(server_error(message))  # about the connection, not one context
        else:
            logger.debug("cartesia.TTS: dropped a %r for a closed context", message.get("type"))
