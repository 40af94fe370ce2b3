"""Gemini Live I/O pieces: opening a connection (``setup`` first, then waiting for
``setupComplete``), the writer that keeps client messages in order, reading frames until
the connection ends, and the microphone path (16 kHz chunks; our own activity detection
when the server's is off). What the messages mean is ``_live_protocol``'s business.
``aiohttp``, numpy and soxr are imported on first use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...models.realtime import RealtimeError
from .._audio_chunks import mono
from .._ws import close_quietly
from ._live_wire import INPUT_RATE, JSONObject, close_error, parse_message, redact

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import FrameRebuffer, Resampler
    from ...models.vad import VAD, VADStream

logger = logging.getLogger("rejoinder.providers.google.live")

MAX_FRAME_BYTES = 16 * 1024 * 1024
CHUNK_SAMPLES = INPUT_RATE // 10
"""100 ms of input audio per ``realtimeInput`` message."""


close_ws = close_quietly
"""Close without ever hanging: the session's name for ``_ws.close_quietly``."""


class SetupRefused(RealtimeError):
    """The service closed the connection before ``setupComplete``."""


@dataclass(frozen=True, slots=True)
class Ended:
    """Why a connection stopped: ``error`` when the service closed it with one."""

    reason: str
    error: RealtimeError | None = None


async def open_connection(
    http: aiohttp.ClientSession,
    url: str,
    setup: JSONObject,
    *,
    seed: Sequence[JSONObject] = (),
    connect_timeout: float,
    close_grace: float,
) -> aiohttp.ClientWebSocketResponse:
    """Connect, send ``setup`` and wait for ``setupComplete``, all within
    ``connect_timeout``; then send ``seed`` (a fresh session's history) before anything
    else. Raises ``RealtimeError``: fatal for a refused key or account; caused by an
    ``aiohttp`` connection error when trying again may work (``_retry``)."""
    import aiohttp

    shown = redact(url)
    ws: aiohttp.ClientWebSocketResponse | None = None
    try:
        async with asyncio.timeout(connect_timeout):
            ws = await http.ws_connect(
                url,
                timeout=aiohttp.ClientWSTimeout(ws_close=close_grace),
                max_msg_size=MAX_FRAME_BYTES,
            )
            await ws.send_str(json.dumps(setup))
            await _await_setup_complete(ws)
            for message in seed:
                await ws.send_str(json.dumps(message))
            return ws
    except TimeoutError:
        await close_ws(ws, close_grace)
        raise RealtimeError(
            f"Gemini Live did not complete the setup within {connect_timeout}s ({shown})"
        ) from None
    except aiohttp.WSServerHandshakeError as exc:
        raise RealtimeError(
            f"Gemini Live refused the connection to {shown}: HTTP {exc.status} {exc.message}",
            fatal=exc.status in (401, 403),  # a bad key, a forbidden project
            code=f"http_{exc.status}",
        ) from exc
    except RealtimeError:
        await close_ws(ws, close_grace)
        raise
    except (aiohttp.ClientError, OSError) as exc:
        await close_ws(ws, close_grace)
        raise RealtimeError(f"cannot connect to Gemini Live at {shown}: {exc!r}") from exc
    except BaseException:
        await close_ws(ws, close_grace)
        raise


async def _await_setup_complete(ws: aiohttp.ClientWebSocketResponse) -> None:
    import aiohttp

    while True:
        frame = await ws.receive()
        if frame.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            try:
                message = parse_message(frame.data)
            except ValueError as exc:
                logger.debug("Gemini Live: before setupComplete: %s", exc)
                continue
            if "setupComplete" in message:
                return
            logger.debug("Gemini Live: ignored %s before setupComplete", sorted(message))
            continue
        code = ws.close_code if frame.type != aiohttp.WSMsgType.CLOSE else frame.data
        reason = frame.extra if frame.type == aiohttp.WSMsgType.CLOSE else ""
        error = close_error(code, str(reason or ""), during_setup=True)
        refused = SetupRefused(str(error), fatal=error.fatal, code=error.code)
        if error.fatal:
            raise refused
        # An internal error, an overloaded service, a cut: a retry may find it well.
        raise refused from aiohttp.ClientConnectionError(str(error))


async def read_frames(
    ws: aiohttp.ClientWebSocketResponse, on_frame: Callable[[str | bytes], None]
) -> Ended:
    """Hand every message to ``on_frame`` until the connection ends; say how it ended."""
    import aiohttp

    while True:
        try:
            frame = await ws.receive()
        except (aiohttp.ClientError, OSError) as exc:
            return Ended(f"the connection failed: {exc!r}")
        if frame.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            on_frame(frame.data)
        elif frame.type == aiohttp.WSMsgType.CLOSE:
            code = frame.data if isinstance(frame.data, int) else ws.close_code
            error = close_error(code, str(frame.extra or ""), during_setup=False)
            if code == 1000:
                return Ended(f"the service closed the connection ({frame.extra or 'no reason'})")
            return Ended(str(error), error)
        elif frame.type == aiohttp.WSMsgType.ERROR:
            return Ended(f"the connection failed: {ws.exception() or frame.data}")
        else:
            return Ended(f"the connection was lost (WebSocket {frame.type.name.lower()})")


class Link:
    """One WebSocket and a writer task that sends queued messages in order, so the
    session's synchronous calls never wait on the network."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[tuple[JSONObject, str]] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="gemini-live-writer")

    def send(self, message: JSONObject) -> None:
        """Queue ``message``; written as JSON here, so a message that cannot be is the
        caller's error (``TypeError``/``ValueError``), not a writer that stops unseen."""
        self._queue.put_nowait((message, json.dumps(message)))

    def take_unsent(self) -> list[JSONObject]:
        """The messages not written yet (they can go to the next connection)."""
        unsent: list[JSONObject] = []
        while not self._queue.empty():
            unsent.append(self._queue.get_nowait()[0])
        return unsent

    async def _write(self) -> None:
        while True:
            _, text = await self._queue.get()
            try:
                await self.ws.send_str(text)
            except Exception as exc:  # the socket went away; the reader reports the loss
                logger.debug("Gemini Live: a send failed, the writer stops: %r", exc)
                return

    async def close(self, grace: float) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        await close_ws(self.ws, grace)


# -- the microphone -----------------------------------------------------------------------------


class MicInput:
    """Microphone frames at any rate and channel count → 100 ms chunks of 16 kHz mono
    PCM, as bytes for the wire and as frames for a VAD."""

    def __init__(self) -> None:
        self._resampler: Resampler | None = None
        self._rebuffer: FrameRebuffer | None = None

    def push(self, frame: AudioFrame) -> list[tuple[bytes, AudioFrame]]:
        from ...models.audio import AudioFrame
        from ...models.audio_utils import FrameRebuffer, Resampler

        frame = mono(frame)
        if self._resampler is None or self._resampler.in_rate != frame.sample_rate:
            self._resampler = Resampler(frame.sample_rate, INPUT_RATE)
        if self._rebuffer is None:
            self._rebuffer = FrameRebuffer(CHUNK_SAMPLES)
        resampled = self._resampler.push(frame)
        if resampled is None:
            return []
        chunks: list[tuple[bytes, AudioFrame]] = []
        for window in self._rebuffer.push(resampled.data):
            chunk = AudioFrame(window.copy(), INPUT_RATE)
            chunks.append((chunk.to_pcm(), chunk))
        return chunks

    def reset(self) -> None:
        self._resampler = None
        if self._rebuffer is not None:
            self._rebuffer.clear()


Step = bytes | Literal["start", "end"]


class ClientActivity:
    """Our turn detection, for a session whose server-side activity detection is off: a
    VAD over the 16 kHz input says when the user's activity starts and ends.

    Audio outside an activity is not part of any turn, so it is held back (the last
    ``preroll`` chunks) and sent after ``activityStart``: the VAD confirms speech only
    after some of it, and the onset must not be lost.
    """

    def __init__(self, vad: VAD, *, preroll: int = 3) -> None:
        self._vad = vad
        self._stream: VADStream = vad.stream()
        self._held: deque[bytes] = deque(maxlen=preroll)
        self.active = False

    def push(self, frame: AudioFrame, pcm: bytes) -> list[Step]:
        """What to send for one chunk, in order: audio bytes, ``"start"``, ``"end"``."""
        steps: list[Step] = []
        sent = False
        for event in self._stream.push(frame):
            if event.type == "start_of_speech" and not self.active:
                self.active = True
                steps.append("start")
                steps.extend(self._held)
                self._held.clear()
            elif event.type == "end_of_speech" and self.active:
                self.active = False
                steps.extend((pcm, "end"))  # the silence that ended it closes the activity
                sent = True
        if not sent:
            if self.active:
                steps.append(pcm)
            else:
                self._held.append(pcm)
        return steps

    def reset(self) -> None:
        """A new connection knows no activity of ours: start from silence."""
        self._stream = self._vad.stream()
        self._held.clear()
        self.active = False
