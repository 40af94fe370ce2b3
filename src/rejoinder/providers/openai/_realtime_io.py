"""The OpenAI Realtime session's I/O: the WebSocket and the bytes that cross it.

Its one job is moving data between the session and the server: opening and closing the
WebSocket (and the aiohttp session it runs on), reading until a set-up event arrives,
the reader/writer pump of a live connection, and cutting microphone frames into
append-sized chunks of the session's audio format. What the messages mean is decided by the caller's
``dispatch``; ``aiohttp``, ``numpy`` and ``soxr`` are imported on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...models.realtime import ProviderError, RealtimeError, RealtimeEvent
from .. import _json
from .._audio_chunks import mono
from .._ws import close_of
from ._realtime_wire import PCM, AudioFormat, JSONObject, ServerError

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

logger = logging.getLogger("rejoinder.providers.openai.realtime")

CLOSE_TIMEOUT = 2.0

Dispatch = Callable[[str], RealtimeError | None]
"""Handles one server message; returns the fatal error it reported, if any."""


@dataclass(frozen=True, slots=True)
class Ended:
    """Why a connection's pump stopped."""

    reason: str
    fatal: bool = False


class Socket:
    """Opens and closes the WebSocket, and the aiohttp session it runs on."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self._url = url
        self._headers = dict(headers)
        self._http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def connect(self) -> aiohttp.ClientWebSocketResponse:
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        try:
            self.ws = await self._http.ws_connect(
                self._url,
                headers=self._headers,
                timeout=aiohttp.ClientWSTimeout(ws_close=1.0),
                max_msg_size=16 * 1024 * 1024,
            )
        except aiohttp.WSServerHandshakeError as exc:
            fatal = exc.status in (401, 403)
            raise RealtimeError(
                f"{self._url} refused the connection: HTTP {exc.status} {exc.message}".rstrip(),
                fatal=fatal,
                code=f"http_{exc.status}",
            ) from exc
        except aiohttp.InvalidURL as exc:
            raise RealtimeError(f"invalid Realtime URL {self._url!r}", fatal=True) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise RealtimeError(f"cannot connect to {self._url}: {exc}") from exc
        return self.ws

    async def close_ws(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None and not ws.closed:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await ws.close()

    async def close(self) -> None:
        await self.close_ws()
        http, self._http = self._http, None
        if http is not None and not http.closed:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await http.close()


# -- set-up ---------------------------------------------------------------------------------


async def read_until(
    ws: aiohttp.ClientWebSocketResponse, wanted: str, event_id: str | None, dispatch: Dispatch
) -> JSONObject:
    """Read until an event of type ``wanted``; events before it are handled normally."""
    import aiohttp

    while True:
        message = await ws.receive()
        if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            # Lost without a closing handshake: a cut connection, which ``start`` tries
            # again (``_retry`` reads the cause), as it does a cut before the upgrade.
            lost = ConnectionResetError(f"the connection was lost before {wanted}")
            raise RealtimeError(str(lost)) from lost
        if message.type != aiohttp.WSMsgType.TEXT:
            raise RealtimeError(_not_an_event(ws, message, wanted))
        try:
            event: object = _json.loads(message.data)
        except ValueError:  # malformed (or nested too deeply): dispatch reports it
            event = None
        if isinstance(event, dict) and event.get("type") == wanted:
            return event
        if isinstance(event, dict) and event.get("type") == "error":
            error = _setup_error(event, event_id)
            if error is not None:
                raise error
        fatal = dispatch(message.data)
        if fatal is not None:
            raise fatal


def _not_an_event(
    ws: aiohttp.ClientWebSocketResponse, message: aiohttp.WSMessage, wanted: str
) -> str:
    """What a frame that is not a text event, read during set-up, says happened."""
    import aiohttp

    if message.type == aiohttp.WSMsgType.BINARY:
        return (
            f"the server sent a binary frame before {wanted}, "
            "where the Realtime API sends JSON text events"
        )
    if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING):
        code, reason = close_of(ws, message)
        why = f": {reason}" if reason else ""
        return f"the server closed the connection before {wanted} (code {code}{why})"
    return f"the server sent an unexpected {message.type.name} frame before {wanted}"


def _setup_error(event: JSONObject, event_id: str | None) -> RealtimeError | None:
    """An ``error`` during set-up that must fail it: fatal, or a rejected session.update."""
    error = ServerError.parse(event)
    rejected = event_id is not None and error.event_id == event_id
    if not (error.fatal or rejected):
        return None
    what = "rejected the session configuration" if rejected else "refused the session"
    return RealtimeError(f"the server {what}: {error.message}", fatal=error.fatal, code=error.code)


# -- a live connection ----------------------------------------------------------------------


async def pump(
    ws: aiohttp.ClientWebSocketResponse | None,
    outbox: deque[JSONObject],
    wake: asyncio.Event,
    dispatch: Dispatch,
    emit: Callable[[RealtimeEvent], None],
) -> Ended:
    """Read and write on ``ws`` until the connection ends; say why it ended.

    ``outbox`` is sent in order (an event leaves it only once sent); ``wake`` is set
    whenever something is added to it.
    """
    if ws is None:
        return Ended("no connection")
    reader = asyncio.create_task(_read_loop(ws, dispatch, emit), name="openai-realtime-reader")
    writer = asyncio.create_task(_write_loop(ws, outbox, wake), name="openai-realtime-writer")
    try:
        done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, writer):
            task.cancel()
        await asyncio.gather(reader, writer, return_exceptions=True)
    finished = reader if reader in done else writer
    try:
        return finished.result()
    except Exception as exc:  # a bug here must end the session, not hang it
        logger.exception("the realtime connection loop failed")
        return Ended(f"internal error: {exc!r}", fatal=True)


async def _read_loop(
    ws: aiohttp.ClientWebSocketResponse, dispatch: Dispatch, emit: Callable[[RealtimeEvent], None]
) -> Ended:
    import aiohttp

    while True:
        message = await ws.receive()
        if message.type == aiohttp.WSMsgType.TEXT:
            fatal = dispatch(message.data)
            if fatal is not None:
                return Ended(str(fatal), fatal=True)
        elif message.type == aiohttp.WSMsgType.BINARY:
            emit(ProviderError(RealtimeError("the server sent a binary frame")))
        elif message.type == aiohttp.WSMsgType.ERROR:
            return Ended(f"the connection failed: {ws.exception() or message.data}")
        else:
            return Ended(f"the server closed the connection (code {ws.close_code})")


async def _write_loop(
    ws: aiohttp.ClientWebSocketResponse, outbox: deque[JSONObject], wake: asyncio.Event
) -> Ended:
    while True:
        while outbox:
            event = outbox[0]
            try:
                await ws.send_str(json.dumps(event))
            except Exception as exc:
                return Ended(f"sending to the server failed: {exc or type(exc).__name__}")
            outbox.popleft()
        wake.clear()
        await wake.wait()


# -- microphone -----------------------------------------------------------------------------


class MicChunker:
    """Microphone frames (any rate, any channel count) → 100 ms chunks in the session's
    wire format: 24 kHz mono PCM, or 8 kHz G.711 (800 bytes a chunk).

    Fixed-size appends keep the number of events (and their JSON overhead) low whatever
    frame size the microphone delivers. A frame already at the format's rate is not
    resampled (8 kHz phone audio goes straight to G.711).
    """

    def __init__(self, audio: AudioFormat = PCM) -> None:
        self.audio = audio
        self._resampler: Resampler | None = None
        self._pending = bytearray()
        self._chunk_bytes = audio.chunk_samples * (2 if audio.name == "pcm" else 1)

    def push(self, frame: AudioFrame) -> list[bytes]:
        from ...models.audio_utils import Resampler

        mixed = mono(frame)
        if self._resampler is None or self._resampler.in_rate != mixed.sample_rate:
            self._resampler = Resampler(mixed.sample_rate, self.audio.rate)
        out = self._resampler.push(mixed)
        if out is not None:
            self._pending += self.audio.encode(out.data)
        size = self._chunk_bytes
        chunks: list[bytes] = []
        while len(self._pending) >= size:
            chunks.append(bytes(self._pending[:size]))
            del self._pending[:size]
        return chunks

    def reset(self) -> None:
        self._resampler = None
        self._pending.clear()
