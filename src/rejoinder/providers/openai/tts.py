"""Text to speech over OpenAI's speech endpoint, ``POST /v1/audio/speech``.

The wire protocol, as documented in the API reference ("Create speech",
https://platform.openai.com/docs/api-reference/audio/createSpeech, now at
https://developers.openai.com/api/reference/resources/audio/subresources/speech/methods/create)
and the text-to-speech guide (https://platform.openai.com/docs/guides/text-to-speech):
a JSON body with ``model`` (``gpt-4o-mini-tts``, ``tts-1``, ``tts-1-hd``), ``voice``
(``alloy``, ``ash``, ``coral``, ...), ``input`` (up to 4096 characters), optionally
``instructions`` (not for the tts-1 models) and ``speed``, and ``response_format``. With
``"pcm"`` the body is raw 24 kHz, 16-bit, mono, little-endian samples, sent as they are
generated (chunked), so playback starts with the first bytes.

``synthesize`` yields 20 ms ``AudioFrame``s as the body arrives (a sample split across
two reads is joined up). A failure before the first frame (cannot connect, connection
cut, HTTP 429/5xx) is tried again as ``max_retries`` and the backoff allow; once a frame
was yielded nothing is retried, and a connection lost mid-body ends the iteration with a
``TTSError`` (retryable) rather than a hang: reads are bounded by ``Timeout.read``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from ... import models
from ...models.tts import TTSError, WordTiming
from .._retry import RetryPolicy
from .._timeout import Timeout
from ._http import Failure, HTTPClient, error_message_from_body, read_some

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["SAMPLE_RATE", "TTS"]

SAMPLE_RATE = 24000
"""The rate of the ``pcm`` format, fixed by the API."""


class TTS(HTTPClient, models.TTS):
    """OpenAI speech: ``openai.TTS(model="gpt-4o-mini-tts", voice="alloy")``."""

    _name = "openai.TTS"

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini-tts",
        voice: str = "alloy",
        instructions: str | None = None,
        speed: float | None = None,
        frame_ms: int = 20,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: Timeout | float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        http_session: aiohttp.ClientSession | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        """
        Args:
            model: ``gpt-4o-mini-tts``, ``tts-1``, ``tts-1-hd``, or what a compatible
                server knows.
            voice: a built-in voice name (``alloy``, ``ash``, ``coral``, ``sage``, ...).
            instructions: how to speak (tone, accent, pace); not for the tts-1 models.
            speed: 0.25 to 4.0; ``None`` leaves the server's default (1.0).
            frame_ms: the length of the frames yielded, in milliseconds.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``.
            base_url: the API root, up to but excluding ``/audio/speech``; defaults to
                ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
            timeout: a ``Timeout`` (connect 10 s, read 60 s by default), or seconds for both.
            extra_headers: added to every request.
            extra_body: added to every request body.
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
            max_retries: how many times a transient failure before the first frame is
                tried again (0: never), as in ``openai.LLM``.
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
        """
        if frame_ms <= 0:
            raise ValueError(f"frame_ms must be positive, got {frame_ms}")
        if speed is not None and not 0.25 <= speed <= 4.0:
            raise ValueError(f"speed must be between 0.25 and 4.0, got {speed}")
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        HTTPClient.__init__(self, api_key, base_url, timeout, extra_headers, http_session, retry)
        models.TTS.__init__(self, sample_rate=SAMPLE_RATE, num_channels=1)
        self._model = model
        self._voice = voice
        self._instructions = instructions
        self._speed = speed
        self._frame_bytes = SAMPLE_RATE * frame_ms // 1000 * 2
        self._extra_body = dict(extra_body or {})

    @property
    def model(self) -> str:
        return self._model

    @property
    def voice(self) -> str:
        return self._voice

    def __repr__(self) -> str:
        return f"openai.TTS(model={self._model!r}, voice={self._voice!r})"

    def build_request(self, text: str) -> dict[str, Any]:
        """The JSON body ``synthesize`` POSTs for ``text``."""
        body: dict[str, Any] = {
            "model": self._model,
            "voice": self._voice,
            "input": text,
            "response_format": "pcm",
        }
        if self._instructions:
            body["instructions"] = self._instructions
        if self._speed is not None:
            body["speed"] = self._speed
        body.update(self._extra_body)
        return body

    def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        return self._synthesize(self.build_request(text))

    async def _synthesize(self, body: dict[str, Any]) -> AsyncIterator[AudioFrame | WordTiming]:
        if not str(body.get("input", "")).strip():
            return
        from ...models.audio import AudioFrame

        try:
            payload = json.dumps(body).encode()
        except (TypeError, ValueError) as exc:
            raise TTSError(f"the request body is not JSON-serializable: {exc}") from exc
        url = f"{self._base_url}/audio/speech"
        headers = self._headers(**{"Content-Type": "application/json", "Accept": "audio/pcm"})
        retries = 0
        delivered = False
        while True:
            response: aiohttp.ClientResponse | None = None
            try:
                response = await self._post(url, payload, headers)
                if response.content_type in ("application/json", "text/html", "text/plain"):
                    message = error_message_from_body(await read_some(response))
                    raise Failure(
                        f"{url} answered {response.content_type} instead of audio: {message}",
                        retryable=False,
                    )
                pending = b""
                while True:
                    try:
                        piece = await response.content.readany()
                    except Exception as exc:
                        raise self._read_failure(exc, url) from exc
                    if not piece:
                        break
                    pending += piece
                    cut = len(pending) - len(pending) % self._frame_bytes
                    for start in range(0, cut, self._frame_bytes):
                        delivered = True
                        yield AudioFrame.from_pcm(
                            pending[start : start + self._frame_bytes], SAMPLE_RATE
                        )
                    pending = pending[cut:]
                tail = pending[: len(pending) - len(pending) % 2]  # an odd last byte is noise
                if tail:
                    yield AudioFrame.from_pcm(tail, SAMPLE_RATE)
                return
            except Failure as failure:
                if delivered:
                    raise TTSError(str(failure), retryable=failure.retryable) from failure
                wait = await self._next_wait(failure, retries)
                if isinstance(wait, str):
                    message = f"{failure} ({wait})" if wait else str(failure)
                    raise TTSError(message, retryable=failure.retryable) from failure
                retries += 1
                if await self._backoff(wait):
                    message = f"{failure} (not retried: {self._name} was closed)"
                    raise TTSError(message) from failure
            finally:
                if response is not None:
                    response.close()
