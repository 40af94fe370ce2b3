"""GPT-Live I/O pieces: opening a session on a WebSocket, the ordered writer, the
microphone encoder, and the output decoder of G.711 sessions (``FormatState``).
``aiohttp`` and numpy are imported on first use."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...models.realtime import ProviderError, RealtimeError
from .._audio_chunks import mono
from .._ws import close_quietly
from ._gpt_live_protocol import (
    SAMPLE_RATE,
    JSONObject,
    as_dict,
    as_str,
    describe_error,
    error_code,
    is_fatal,
    logger,
    parse_server_event,
)
from ._gpt_live_state import ConnectionState
from ._realtime_wire import PCM, AudioFormat

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import FrameRebuffer, Resampler

_MAX_FRAME_BYTES = 16 * 1024 * 1024


close_ws = close_quietly
"""Close without ever hanging: the session's name for ``_ws.close_quietly``."""


async def open_session(
    http: aiohttp.ClientSession,
    url: str,
    headers: Mapping[str, str],
    start: JSONObject,
    *,
    connect_timeout: float,
    close_grace: float,
) -> tuple[aiohttp.ClientWebSocketResponse, str | None]:
    """Connect, send ``session.start`` first (§4.1) and wait for ``session.started``, all
    within ``connect_timeout``. Returns the socket and the service's session id; raises
    ``RealtimeError`` (fatal for a bad key or a fatal error event, §3.3)."""
    import aiohttp

    ws: aiohttp.ClientWebSocketResponse | None = None
    try:
        async with asyncio.timeout(connect_timeout):
            ws = await http.ws_connect(
                url,
                headers=dict(headers),
                timeout=aiohttp.ClientWSTimeout(ws_close=close_grace),
                max_msg_size=_MAX_FRAME_BYTES,
            )
            await ws.send_str(json.dumps(start))
            return ws, await _await_started(ws)
    except TimeoutError:
        await close_ws(ws, close_grace)
        raise RealtimeError(
            f"GPT-Live did not start a session within {connect_timeout}s ({url})"
        ) from None
    except aiohttp.WSServerHandshakeError as exc:
        raise RealtimeError(
            f"GPT-Live refused the connection to {url}: HTTP {exc.status} {exc.message}",
            fatal=exc.status in (401, 403),  # a bad key or a forbidden account
            code="invalid_api_key" if exc.status == 401 else None,
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        await close_ws(ws, close_grace)
        raise RealtimeError(f"cannot connect to GPT-Live at {url}: {exc!r}") from exc
    except BaseException:
        await close_ws(ws, close_grace)
        raise


async def _await_started(ws: aiohttp.ClientWebSocketResponse) -> str | None:
    import aiohttp

    while True:
        message = await ws.receive()
        if message.type == aiohttp.WSMsgType.BINARY:
            continue
        if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            # Lost without a closing handshake: a cut connection, which ``start`` tries
            # again (``_retry`` reads the cause), as it does a cut before the upgrade.
            lost = ConnectionResetError(
                "the connection to GPT-Live was lost before the session started"
            )
            raise RealtimeError(str(lost)) from lost
        if message.type != aiohttp.WSMsgType.TEXT:
            raise RealtimeError("GPT-Live closed the connection before the session started")
        try:
            event = parse_server_event(message.data)
        except ValueError as exc:
            logger.debug("GPT-Live: before session.started: %s", exc)
            continue
        kind = event["type"]
        if kind == "session.started":
            return as_str(as_dict(event.get("session")).get("id"))
        if kind == "error":
            error = as_dict(event.get("error"))
            raise RealtimeError(
                f"GPT-Live refused the session: {describe_error(error)}",
                fatal=is_fatal(error),
                code=error_code(error),
            )
        if kind == "session.closed":
            reason = as_str(event.get("reason")) or "no reason given"
            raise RealtimeError(f"GPT-Live closed the session before it started ({reason})")
        logger.debug("GPT-Live: ignored %r before session.started", kind)


class Link:
    """One WebSocket with a writer task that sends queued client events in order, so the
    synchronous ``RealtimeSession`` methods never wait on the network."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._writer = asyncio.create_task(self._write(), name="gpt-live-writer")

    def send(self, event: JSONObject) -> None:
        self._queue.put_nowait(json.dumps(event))

    async def _write(self) -> None:
        while True:
            text = await self._queue.get()
            try:
                await self.ws.send_str(text)
            except Exception as exc:  # the socket went away; the reader reports the loss
                logger.debug("GPT-Live: send failed, the writer stops: %r", exc)
                return

    async def close(self, grace: float) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        await close_ws(self.ws, grace)


class InputAudio:
    """Microphone frames at any rate and channel count → base64 chunks of 100 ms of mono
    audio in the session's format (§1.4): 24 kHz PCM (4800 bytes), or 8 kHz G.711 (800
    bytes). Frames already at the format's rate are not resampled: 8 kHz phone audio is
    encoded to G.711 sample for sample."""

    def __init__(self, audio: AudioFormat = PCM) -> None:
        from ...models.audio_utils import FrameRebuffer

        self.audio = audio
        self._rebuffer: FrameRebuffer = FrameRebuffer(audio.chunk_samples)
        self._resampler: Resampler | None = None

    def push(self, frame: AudioFrame) -> tuple[list[str], int]:
        """The chunks ``frame`` completes, and how much audio it added, counted in 24 kHz
        samples (the user-turn tracker's clock) whatever the format's rate."""
        from ...models.audio_utils import Resampler

        frame = mono(frame)
        rate = self.audio.rate
        if self._resampler is None or self._resampler.in_rate != frame.sample_rate:
            self._resampler = Resampler(frame.sample_rate, rate)  # a no-op at the same rate
        resampled = self._resampler.push(frame)
        if resampled is None:
            return [], 0
        chunks = [
            base64.b64encode(self.audio.encode(window)).decode("ascii")
            for window in self._rebuffer.push(resampled.data)
        ]
        samples = resampled.samples_per_channel
        return chunks, samples if rate == SAMPLE_RATE else samples * SAMPLE_RATE // rate


class FormatState(ConnectionState):
    """A ``ConnectionState`` that reads output audio in the session's format: G.711 deltas
    decode to 8 kHz frames (a phone line plays them with no resampling), and the burst
    detector segments them at that rate. 24 kHz PCM is left to ``ConnectionState``.

    ``audio`` is asked at each delta: an ``"auto"`` format is only known at ``start``.
    """

    def __init__(self, *args: Any, audio: Callable[[], AudioFormat], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._audio_format = audio
        self._burst_options = (
            kwargs["burst_threshold"],
            kwargs["burst_end_silence"],
            kwargs["burst_pause_after"],
        )

    def _on_output_audio(self, delta: object) -> None:
        audio = self._audio_format()
        if not audio.g711:
            super()._on_output_audio(delta)
            return
        from ...models.bursts import BurstDetector

        if self._bursts.sample_rate != audio.rate:  # before the first delta
            threshold, end_silence, pause_after = self._burst_options
            self._bursts = BurstDetector(
                sample_rate=audio.rate,
                threshold=threshold,
                end_silence=end_silence,
                pause_after=pause_after,
            )
        try:
            if not isinstance(delta, str):
                raise ValueError("the delta is not a string")
            frame = audio.decode(base64.b64decode(delta, validate=True))
        except (binascii.Error, ValueError) as exc:
            self._emit(ProviderError(RealtimeError(f"GPT-Live sent unreadable audio: {exc}")))
            return
        for event in self._bursts.push(frame):
            self._emit(event)
