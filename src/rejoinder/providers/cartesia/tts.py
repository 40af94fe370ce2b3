"""Streaming text to speech over Cartesia's WebSocket, ``wss://api.cartesia.ai/tts/websocket``.

The wire protocol, as documented in the API reference ("Text to Speech (WebSocket)",
https://docs.cartesia.ai/api-reference/tts/websocket, with its versioned copies such as
https://docs.cartesia.ai/2024-11-13/api-reference/tts/websocket), the guides on contexts
(https://docs.cartesia.ai/api-reference/tts/working-with-web-sockets/contexts), on
buffering (https://docs.cartesia.ai/use-the-api/tts-websocket/buffering) and on flushing
(https://docs.cartesia.ai/2024-11-13/api-reference/tts/working-with-web-sockets/context-flushing-and-flush-i-ds),
the API conventions (https://docs.cartesia.ai/use-the-api/api-conventions), the errors
page (https://docs.cartesia.ai/use-the-api/api-errors) and the limits page
(https://docs.cartesia.ai/use-the-api/concurrency-limits-and-timeouts):

* the handshake carries the version in the ``Cartesia-Version`` header (or the
  ``cartesia_version`` query) and the key in ``X-API-Key`` (or the ``api_key`` query; the
  header keeps it out of URLs and logs); too many sockets or contexts is an HTTP 429;
* a generation request is ``{"model_id", "transcript", "voice": {"mode": "id", "id"},
  "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate"},
  "language", "context_id", "continue", "add_timestamps", "max_buffer_delay_ms",
  "generation_config"}``. Inputs on one context continue one utterance: transcripts are
  joined verbatim (so a piece keeps its spaces), every other field stays the same, and
  ``"continue": false`` with an empty transcript ends it. ``"flush": true`` with an empty
  transcript marks a boundary, answered with ``flush_done``. The server buffers streamed
  text up to ``max_buffer_delay_ms`` (default 3000) for better prosody;
* the server answers ``{"type": "chunk", "data": <base64 PCM>, "context_id"}``,
  ``{"type": "timestamps", "word_timestamps": {"words", "start", "end"}}`` (seconds from
  the start of the context's audio) and ``{"type": "done"}``; an error is ``{"type":
  "error", "status_code", "title", "message", "error_code", "context_id"}`` (``"error"``
  before API version 2026-03-01);
* ``{"context_id", "cancel": true}`` stops a context's generation;
* a socket idle for 5 minutes is closed by the server.

How a TTS uses it. All streams of one ``TTS`` share one WebSocket (the reference's advice:
many generations over one socket, one context per turn, a new context after an
interruption), opened by the first stream or by ``warm_up()`` and opened again when it
closed; each stream is one context. Its text is sent as it comes, cut after the last
whitespace (or a CJK clause mark) so no word is split between two inputs. Word timestamps
come back as Cartesia reads the words; they are placed on the words as written
(``_wire.WordMatcher``), so an interrupted reply keeps exactly the words that were heard,
punctuation included. Closing a stream before its end (an interruption) sends the cancel
for its context.

Reliability: a failed handshake (cannot connect, HTTP 429/5xx), a connection lost before
the stream's first audio, or an error message with status 429/5xx before it are tried
again on a new context as ``max_retries`` allows, the text so far re-sent; 401/403 and
other refusals fail at once (``TTSError``, not retryable). After audio was yielded nothing
is retried: a drop, an error message, malformed JSON or base64 end the iteration with a
``TTSError``. A message that cannot be attributed to a context (not JSON, an error without
a context) ends the shared connection for every stream on it; the next stream reconnects.
Once a stream's input ended, a server silent on it for ``Timeout.read`` s fails the stream
and drops the connection, which a silent server cannot be trusted with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...models.tts import TTSError
from .. import _ws
from .._audio_chunks import PCMCutter
from .._timeout import Timeout
from .._tts_stream import PumpedStream, Transient, WebSocketTTS
from ._connection import Connection, Inbox
from ._wire import WordMatcher, decode_chunk, parse_word_timestamps, server_error

if TYPE_CHECKING:
    import aiohttp


__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "SAMPLE_RATES", "TTS", "Timeout"]

logger = logging.getLogger("rejoinder.providers.cartesia")

DEFAULT_BASE_URL = "wss://api.cartesia.ai"
API_VERSION = "2025-04-16"
"""The ``Cartesia-Version`` this client was written against."""
SAMPLE_RATES = frozenset({8000, 16000, 22050, 24000, 44100, 48000})
"""The sample rates of the raw output format."""
_FLUSH = None  # in a stream's inputs: a flush boundary, not text
_BREAKS = " \n\t\r\u3000。！？，、；："
"""Where a piece of streamed text may end: whitespace, and the punctuation that ends a
clause in scripts written without spaces (else a Chinese reply would wait for its end)."""


class TTS(WebSocketTTS):
    """Cartesia streaming speech: ``cartesia.TTS(voice_id="<voice uuid>")``."""

    _name = "cartesia.TTS"
    _server = "Cartesia"
    _log = logger

    def __init__(
        self,
        *,
        voice_id: str,
        model: str = "sonic-3",
        sample_rate: int = 24000,
        language: str | None = "en",
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = API_VERSION,
        max_buffer_delay_ms: int | None = None,
        generation_config: Mapping[str, Any] | None = None,
        frame_ms: int = 20,
        timeout: Timeout | float | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """
        Args:
            voice_id: the voice (``GET /voices``), sent as ``{"mode": "id", "id": ...}``.
            model: ``sonic-3``, ``sonic-2``, ``sonic-turbo``...
            sample_rate: of the raw 16-bit PCM output (``SAMPLE_RATES``).
            language: ISO 639-1 code of the transcript; None leaves it out.
            api_key: sent as ``X-API-Key``; defaults to ``$CARTESIA_API_KEY``.
            base_url: the API root; defaults to ``$CARTESIA_BASE_URL``, then
                ``wss://api.cartesia.ai`` (``http`` and ``https`` are taken as ``ws`` and
                ``wss``).
            api_version: the ``Cartesia-Version`` header.
            max_buffer_delay_ms: how long the server may hold streamed text for better
                prosody, 0 to 5000 (None: the server's default, 3000). The session sends
                the model's text as it streams, which is what the server's buffering is for.
            generation_config: ``speed``, ``volume``, ``emotion`` (sonic-3).
            frame_ms: the length of the frames yielded, in milliseconds.
            timeout: a ``Timeout``: ``connect`` bounds the handshake, ``read`` the
                server's silence on a stream once its input ended (or seconds for both).
            max_retries: how many times a failed connect (or a stream's failure before
                any audio) is tried again (0: never), as in ``openai.LLM``.
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        self._api_key = _ws.api_key_from(api_key, "CARTESIA_API_KEY")
        headers = {"Cartesia-Version": api_version}
        if self._api_key:
            headers["X-API-Key"] = self._api_key
        super().__init__(
            voice_id=voice_id,
            model=model,
            sample_rate=sample_rate,
            sample_rates=SAMPLE_RATES,
            frame_ms=frame_ms,
            timeout=timeout,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            retry_backoff_cap=retry_backoff_cap,
            http_session=http_session,
            headers=headers,
            explanations=_ws.KEY_REFUSALS,
        )
        if max_buffer_delay_ms is not None and not (
            isinstance(max_buffer_delay_ms, int) and 0 <= max_buffer_delay_ms <= 5000
        ):
            raise ValueError(
                f"max_buffer_delay_ms takes an integer from 0 to 5000, got {max_buffer_delay_ms!r}"
            )
        self.language = language
        self._base_url = _ws.ws_base_url(base_url, "CARTESIA_BASE_URL", DEFAULT_BASE_URL)
        self._max_buffer_delay_ms = max_buffer_delay_ms
        self._generation_config = dict(generation_config) if generation_config else None
        self._connection: Connection | None = None
        self._connect_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self.connects = 0
        """How many WebSocket connections were opened."""

    @property
    def url(self) -> str:
        """The WebSocket URL (it carries no secret: key and version go in headers)."""
        return f"{self._base_url}/tts/websocket"

    def generation_request(
        self, context_id: str, transcript: str, *, more: bool, flush: bool = False
    ) -> dict[str, Any]:
        """One input of a context: ``more`` says whether more inputs follow."""
        message: dict[str, Any] = {
            "model_id": self.model,
            "transcript": transcript,
            "voice": {"mode": "id", "id": self.voice_id},
            "output_format": {
                "container": "raw",
                "encoding": "pcm_s16le",
                "sample_rate": self.sample_rate,
            },
            "context_id": context_id,
            "continue": more,
            "add_timestamps": True,
        }
        if self.language is not None:
            message["language"] = self.language
        if self._max_buffer_delay_ms is not None:
            message["max_buffer_delay_ms"] = self._max_buffer_delay_ms
        if self._generation_config is not None:
            message["generation_config"] = dict(self._generation_config)
        if flush:
            message["flush"] = True
        return message

    def stream(self) -> _Stream:
        return _Stream(self)

    def _whole(self, text: str) -> _Stream:
        stream = self.stream()
        stream._add(text)  # known whole: one input
        stream.end_input()
        return stream

    async def warm_up(self) -> None:
        """Open the shared connection now, so the first reply does not wait for the
        handshake (the reference's advice). Raises ``TTSError`` when it cannot."""
        await self._acquire()

    async def aclose(self) -> None:
        """Close the shared connection (a stream still on it fails) and the HTTP session
        this engine created (one passed in is left open). The engine can be used again:
        the next stream reconnects."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()
        await super().aclose()

    @property
    def _session(self) -> aiohttp.ClientSession | None:
        """The HTTP session the connections run on (None once ``aclose`` closed it)."""
        return self._dialer.session

    # -- the shared connection ------------------------------------------------------------

    async def _acquire(self) -> Connection:
        """The open shared connection, or a new one (one connect at a time)."""
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        loop = asyncio.get_running_loop()
        if self._connect_lock is None or self._connect_lock[0] is not loop:
            self._connect_lock = (loop, asyncio.Lock())
        async with self._connect_lock[1]:
            connection = self._connection
            if connection is not None and connection.usable:
                return connection
            if connection is not None and not connection.usable:
                self._connection = None
                with contextlib.suppress(RuntimeError):  # made on a loop now gone
                    await connection.aclose()
            self._connection = Connection(await self._dialer.open(self.url))
            self.connects += 1
            return self._connection

    def _abandon(self, connection: Connection, error: TTSError) -> None:
        """Drop a connection that cannot be trusted any more; the next stream reconnects."""
        connection.end(error)
        if self._connection is connection:
            self._connection = None


class _Stream(PumpedStream):
    """One context's worth of text in and audio out, run by ``PumpedStream``'s pump."""

    def __init__(self, tts: TTS) -> None:
        super().__init__(tts)
        self._tts = tts
        self._inputs: list[str | None] = []  # text pieces and flushes; kept for a retry
        self._pending = ""  # text after the last whitespace: the word may go on
        self.context_id: str | None = None
        """The context the stream speaks on now (a retry opens a new one)."""

    def push_text(self, text: str) -> None:
        if self._input_done:
            raise RuntimeError("push_text after end_input")
        self._pending += text
        cut = max(self._pending.rfind(c) for c in _BREAKS)
        if cut >= 0 and self._pending[: cut + 1].strip():
            piece, self._pending = self._pending[: cut + 1], self._pending[cut + 1 :]
            self._add(piece)

    def flush(self) -> None:
        """Send all text so far, however short, and mark a flush boundary."""
        if self._input_done or not (self._inputs or self._pending.strip()):
            return
        piece, self._pending = self._pending, ""
        if piece.strip():
            self._add(piece)
        self._inputs.append(_FLUSH)
        self._wake.set()

    def end_input(self) -> None:
        if self._input_done:
            return
        piece, self._pending = self._pending, ""
        if piece.strip():
            self._add(piece)
        self._input_ended()

    def _add(self, piece: str) -> None:
        if not any(item for item in self._inputs):  # the utterance starts with a word
            piece = piece.lstrip()
        self._inputs.append(piece)
        self._wake.set()

    # -- one try, on a context of its own ------------------------------------------------

    async def _attempt(self) -> None:
        connection = await self._tts._acquire()
        while not (self._inputs or self._input_done):  # connected early, text comes later
            self._wake.clear()
            await self._wake.wait()
        if not any(item for item in self._inputs):
            return  # the input ended with nothing to say
        if not connection.usable:  # it ended while the model was thinking
            connection = await self._tts._acquire()
        context_id, inbox = connection.open_context()
        self.context_id = context_id
        matcher = WordMatcher()
        sender = asyncio.ensure_future(self._send_all(connection, context_id, matcher))
        try:
            await self._receive_all(connection, context_id, inbox, matcher)
        finally:
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender
            # Stopped before the server ended the context (an interruption, a failure of
            # ours): ask it to stop generating. A no-op for a context already ended.
            await connection.cancel(context_id)

    async def _send_all(self, connection: Connection, context_id: str, words: WordMatcher) -> None:
        request = self._tts.generation_request
        try:
            sent = 0
            while True:
                while sent < len(self._inputs):
                    piece = self._inputs[sent]
                    if piece is _FLUSH:
                        await connection.send(request(context_id, "", more=True, flush=True))
                    elif piece:
                        words.add_text(piece)  # before the server can time it
                        await connection.send(request(context_id, piece, more=True))
                    sent += 1
                if self._input_done:
                    words.end_text()
                    await connection.send(request(context_id, "", more=False))
                    return
                self._wake.clear()
                await self._wake.wait()
        except TTSError as exc:
            # The connection went away: the reader hands its error to every context.
            logger.debug("cartesia.TTS: sending stopped: %r", exc)

    async def _receive_all(
        self, connection: Connection, context_id: str, inbox: Inbox, words: WordMatcher
    ) -> None:
        """Read the context's messages until ``done``. A failure raises; a context the
        server did not end (``done`` or ``error``) is left open for the caller to cancel."""
        from ...models.audio import AudioFrame

        def abandon(silent: str) -> None:  # a silent server cannot be trusted with others
            self._tts._abandon(connection, Transient(f"{silent} on another context"))

        rate = self._tts.sample_rate
        cutter = PCMCutter(self._tts._frame_bytes)
        while True:
            message = await self._receive(inbox.get, on_silence=abandon)
            if isinstance(message, TTSError):
                raise message
            if message.get("type") == "error" or "error" in message:
                connection.close_context(context_id)  # the server ended it
                raise server_error(message)
            if (pcm := decode_chunk(message)) is not None:
                for frame in cutter.push(pcm):
                    self._put(AudioFrame.from_pcm(frame, rate))
            if message.get("type") == "timestamps":
                for word, start, end in parse_word_timestamps(message.get("word_timestamps")):
                    for timing in words.push(word, start, end):
                        self._put(timing)
            if message.get("done") is True:
                connection.close_context(context_id)
                for timing in words.finish():
                    self._put(timing)
                if tail := cutter.tail():
                    self._put(AudioFrame.from_pcm(tail, rate))
                return
