"""Streaming text to speech over ElevenLabs' WebSocket, ``.../text-to-speech/{voice}/stream-input``.

The wire protocol, as documented in the API reference ("WebSocket",
https://elevenlabs.io/docs/api-reference/text-to-speech/v-1-text-to-speech-voice-id-stream-input,
also at https://elevenlabs.io/docs/api-reference/websocket), the guide "Generate audio in
real-time" (https://elevenlabs.io/docs/cookbooks/text-to-speech/websockets), the help
centre's "How can I keep the WebSocket open?" and the announcement of the custom
inactivity timeout (https://elevenlabs.io/blog/websocket-improvements-reliability-and-custom-timeout):

* the handshake is ``wss://api.elevenlabs.io/v1/text-to-speech/{voice_id}/stream-input``
  with the query ``model_id``, ``output_format`` (``pcm_16000``, ``pcm_22050``,
  ``pcm_24000``, ``pcm_44100``, ...: raw 16-bit little-endian mono samples),
  optionally ``language_code``, and the key in the ``xi-api-key`` header;
* the first message is ``{"text": " ", "voice_settings": {...}, "generation_config":
  {"chunk_length_schedule": [...]}}``; then ``{"text": "..."}`` pieces, each ending with
  a space; ``"flush": true`` makes the server voice what it holds at once (it otherwise
  waits until the buffered text reaches the next ``chunk_length_schedule`` length); and
  ``{"text": ""}`` ends the input (the server voices the rest, then closes);
* the server sends ``{"audio": <base64>, "isFinal": null, "alignment": {"chars": [...],
  "charStartTimesMs": [...], "charsDurationsMs": [...]}, "normalizedAlignment": {...}}``,
  the alignment's times relative to that message's audio (the SDK's ``Alignment`` type:
  "times are relative to the returned chunk"), then ``{"isFinal": true}``. An error is a
  message with ``error``/``message`` (and ``code``) or a close with a code: 1008 (policy
  violation: bad key, quota, bad message), 1011 (internal error);
* the server closes a connection that received nothing for 20 s (``inactivity_timeout``);
  a single space keeps it open (an empty text would end the input).

Words come from ``alignment`` (the text as sent), not ``normalizedAlignment`` (the text as
read out: "$5" becomes "five dollars"), since the session matches them to what was
written. A stream's text is sent as given: the session has already applied this engine's
``text_filter`` to the deltas (a ``SpeechText`` that holds back a half word or an open
markdown construct), so filtering again here would clean the text twice.

Reliability: a failed handshake (cannot connect, HTTP 429/5xx) or a connection lost before
the first audio is tried again as ``max_retries`` allows, the text so far re-sent; 401/403
fail at once (``TTSError``, not retryable). After audio was yielded nothing is retried: a
drop, an error message, a close with an error code, malformed JSON or base64 end the
iteration with a ``TTSError``. While the input is open the stream sends a keep-alive space
after ``KEEPALIVE_INTERVAL`` s without text, so a slow model does not trip the 20 s limit;
once it ended, a server silent for ``Timeout.read`` s fails the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from ...models.tts import TTSError
from .. import _ws
from .._audio_chunks import PCMCutter
from .._timeout import Timeout
from .._tts_stream import CLOSE_TIMEOUT, PumpedStream, WebSocketTTS, close_failure, parse_message
from ._wire import WordAligner, decode_audio

if TYPE_CHECKING:
    import aiohttp


__all__ = ["DEFAULT_BASE_URL", "KEEPALIVE_INTERVAL", "SAMPLE_RATES", "TTS", "Timeout"]

logger = logging.getLogger("rejoinder.providers.elevenlabs")

DEFAULT_BASE_URL = "wss://api.elevenlabs.io/v1"
SAMPLE_RATES = frozenset({8000, 16000, 22050, 24000, 32000, 44100, 48000})
"""The rates of the ``pcm_<rate>`` output formats."""
KEEPALIVE_INTERVAL = 10.0
"""Seconds without text before a keep-alive space: half the server's 20 s default."""
_REFUSALS = {**_ws.KEY_REFUSALS, 404: "no such voice"}


class TTS(WebSocketTTS):
    """ElevenLabs streaming speech: ``elevenlabs.TTS(voice_id="JBFqnCBsd6RMkjVDRZzb")``."""

    _name = "elevenlabs.TTS"
    _server = "ElevenLabs"
    _log = logger

    def __init__(
        self,
        *,
        voice_id: str,
        model: str = "eleven_flash_v2_5",
        sample_rate: int = 24000,
        api_key: str | None = None,
        base_url: str | None = None,
        voice_settings: Mapping[str, Any] | None = None,
        chunk_length_schedule: Sequence[int] | None = None,
        language_code: str | None = None,
        frame_ms: int = 20,
        timeout: Timeout | float | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """
        Args:
            voice_id: the voice (see ``GET /v1/voices``).
            model: ``eleven_flash_v2_5``, ``eleven_turbo_v2_5``, ``eleven_multilingual_v2``...
            sample_rate: the ``pcm_<rate>`` output format (``SAMPLE_RATES``).
            api_key: sent as ``xi-api-key``; defaults to ``$ELEVENLABS_API_KEY``.
            base_url: the API root, up to ``/text-to-speech``; defaults to
                ``$ELEVENLABS_BASE_URL``, then ``wss://api.elevenlabs.io/v1`` (``http``
                and ``https`` are taken as ``ws`` and ``wss``).
            voice_settings: ``stability``, ``similarity_boost``, ``style``, ``speed``...
            chunk_length_schedule: buffered characters before each generation (the
                server's default is 120, 160, 250, 290; each 50 to 500).
            language_code: ISO 639-1, for the models that take one.
            frame_ms: the length of the frames yielded, in milliseconds.
            timeout: a ``Timeout``: ``connect`` bounds the handshake, ``read`` the
                server's silence once the input ended (or seconds for both).
            max_retries: how many times a failed connect (or a connection lost before
                any audio) is tried again (0: never), as in ``openai.LLM``.
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
        """
        key = _ws.api_key_from(api_key, "ELEVENLABS_API_KEY")
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
            headers={"xi-api-key": key} if key else {},
            explanations=_REFUSALS,
        )
        if chunk_length_schedule is not None and not all(
            isinstance(n, int) and 50 <= n <= 500 for n in chunk_length_schedule
        ):
            raise ValueError("chunk_length_schedule takes integers from 50 to 500")
        self._base_url = _ws.ws_base_url(base_url, "ELEVENLABS_BASE_URL", DEFAULT_BASE_URL)
        self._voice_settings = dict(voice_settings) if voice_settings is not None else None
        self._schedule = list(chunk_length_schedule) if chunk_length_schedule else None
        self._language_code = language_code

    @property
    def url(self) -> str:
        """The WebSocket URL a stream connects to (it carries no secret)."""
        query: dict[str, str] = {
            "model_id": self.model,
            "output_format": f"pcm_{self.sample_rate}",
        }
        if self._language_code:
            query["language_code"] = self._language_code
        voice = quote(self.voice_id, safe="")
        return f"{self._base_url}/text-to-speech/{voice}/stream-input?{urlencode(query)}"

    def first_message(self) -> dict[str, Any]:
        """The message that opens every connection (the key travels in the header)."""
        message: dict[str, Any] = {"text": " "}
        if self._voice_settings is not None:
            message["voice_settings"] = dict(self._voice_settings)
        if self._schedule is not None:
            message["generation_config"] = {"chunk_length_schedule": list(self._schedule)}
        return message

    def stream(self) -> _Stream:
        return _Stream(self)

    def _whole(self, text: str) -> _Stream:
        stream = self.stream()
        stream.push_text(text)
        stream.end_input()
        return stream


class _Stream(PumpedStream):
    """One connection's worth of text in and audio out, run by ``PumpedStream``'s pump."""

    def __init__(self, tts: TTS) -> None:
        super().__init__(tts)
        self._tts = tts
        self._messages: list[dict[str, Any]] = []  # after the first, kept for a retry
        self._pending = ""  # text after the last space: a piece must end with one

    def push_text(self, text: str) -> None:
        if self._input_done:
            raise RuntimeError("push_text after end_input")
        self._pending += text
        cut = max(self._pending.rfind(c) for c in " \n\t")
        if cut >= 0:
            piece, self._pending = self._pending[: cut + 1], self._pending[cut + 1 :]
            self._send_text(piece)

    def flush(self) -> None:
        """Have the server voice all text so far now, however short (a pause in the text)."""
        if self._input_done:
            return
        piece, self._pending = self._pending, ""
        self._send_text(piece, flush=True)

    def end_input(self) -> None:
        if self._input_done:
            return
        piece, self._pending = self._pending, ""
        if piece.strip():
            self._send_text(piece, flush=True)
        self._messages.append({"text": ""})
        self._input_ended()

    def _send_text(self, piece: str, *, flush: bool = False) -> None:
        words = " ".join(piece.split())  # a single space between words and at the end
        if not words and not flush:
            return
        message: dict[str, Any] = {"text": f"{words} " if words else " "}
        if flush:
            message["flush"] = True
        self._messages.append(message)
        self._wake.set()

    # -- one try, on a connection of its own ---------------------------------------------

    async def _attempt(self) -> None:
        ws = await self._tts._dialer.open(self._tts.url)
        sender = asyncio.ensure_future(self._send_all(ws))
        try:
            await self._receive_all(ws)
        finally:
            sender.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await ws.close()
            with contextlib.suppress(BaseException):
                await sender

    async def _send_all(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            await ws.send_str(json.dumps(self._tts.first_message()))
            sent = 0
            while True:
                while sent < len(self._messages):
                    await ws.send_str(json.dumps(self._messages[sent]))
                    sent += 1
                if self._input_done:
                    return
                self._wake.clear()
                try:
                    async with asyncio.timeout(KEEPALIVE_INTERVAL):
                        await self._wake.wait()
                except TimeoutError:
                    await ws.send_str(json.dumps({"text": " "}))  # keep-alive
        except (ConnectionError, RuntimeError) as exc:
            # The socket went away: the reader sees the close and reports it.
            logger.debug("elevenlabs.TTS: sending stopped: %r", exc)

    async def _receive_all(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        import aiohttp

        from ...models.audio import AudioFrame

        rate = self._tts.sample_rate
        cutter, aligner = PCMCutter(self._tts._frame_bytes), WordAligner()
        received = 0  # bytes of audio so far: the offset of the next message's alignment
        while True:
            message = await self._receive(ws.receive)
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):  # fmt: skip
                raise close_failure("ElevenLabs", *_ws.close_of(ws, message))
            if message.type != aiohttp.WSMsgType.TEXT:
                raise TTSError(f"ElevenLabs sent an unexpected {message.type.name} message")
            data = parse_message("ElevenLabs", message.data)
            if (audio := decode_audio(data)) is not None:
                pcm, alignment = audio
                if alignment is not None:
                    for word in aligner.push(alignment, received / 2 / rate):
                        self._put(word)
                received += len(pcm)
                for frame in cutter.push(pcm):
                    self._put(AudioFrame.from_pcm(frame, rate))
            if data.get("isFinal") is True:
                for word in aligner.finish():
                    self._put(word)
                if tail := cutter.tail():
                    self._put(AudioFrame.from_pcm(tail, rate))
                return
