"""Speech to text over OpenAI's transcription endpoint, ``POST /v1/audio/transcriptions``.

The wire protocol, as documented in the API reference ("Create transcription",
https://platform.openai.com/docs/api-reference/audio/createTranscription, now at
https://developers.openai.com/api/reference/resources/audio/subresources/transcriptions/methods/create)
and its streaming events page
(https://platform.openai.com/docs/api-reference/audio/transcript-text-delta-event):

* the request is ``multipart/form-data`` with the audio as the ``file`` part (we send a
  WAV made in memory) and the fields ``model`` (``gpt-4o-mini-transcribe``,
  ``gpt-4o-transcribe``, ``whisper-1``), ``response_format`` (``json``), and optionally
  ``language`` (ISO-639-1), ``prompt`` and ``stream``;
* without streaming the answer is JSON ``{"text": "..."}``;
* with ``stream=true`` (the gpt-4o transcribe models; ``whisper-1`` ignores it) the answer
  is a ``text/event-stream`` of ``{"type": "transcript.text.delta", "delta": "..."}``
  events ending with ``{"type": "transcript.text.done", "text": "..."}``.

``recognize`` returns the final text either way (the streamed deltas are accumulated,
and the ``done`` event's text wins when there is one). Interim transcripts while the user
speaks are not offered: this endpoint only hears an utterance once it is complete, so it
is a plain ``STT``, not a ``StreamingSTT``.

A request that fails before the transcript is complete because the server could not be
reached or cut the connection, or answered 429/5xx, is tried again as ``max_retries``
and the backoff allow (see ``_retry``); nothing was returned yet, so nothing is lost. A
timeout is not retried. ``aiohttp`` is imported on first use only.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ... import models
from ...models.stt import STTError
from .. import _json
from .._retry import RetryPolicy
from .._sse import SSEDecoder
from .._timeout import Timeout
from ._http import Failure, HTTPClient, error_message_from_body

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["STT", "frames_to_wav"]

_MAX_JSON_BODY_BYTES = 4 * 1024 * 1024


def frames_to_wav(frames: Sequence[AudioFrame]) -> bytes:
    """A 16-bit mono WAV file of ``frames`` at their sample rate (channels are averaged).

    Raises ``ValueError`` when the frames do not share one sample rate."""
    import numpy as np

    rate = frames[0].sample_rate
    parts = []
    for frame in frames:
        if frame.sample_rate != rate:
            raise ValueError(
                f"frames at different sample rates ({rate} and {frame.sample_rate} Hz)"
            )
        data = frame.data
        if frame.num_channels > 1:
            data = data.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
        parts.append(data)
    samples = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.astype("<i2", copy=False).tobytes())
    return out.getvalue()


class STT(HTTPClient, models.STT):
    """OpenAI transcription: ``openai.STT(model="gpt-4o-mini-transcribe")``.

    ``recognize(frames)`` sends the utterance as a mono 16-bit WAV at the frames' sample
    rate and returns the transcript.
    """

    _name = "openai.STT"

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini-transcribe",
        language: str | None = None,
        prompt: str | None = None,
        stream: bool = True,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: Timeout | float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_fields: Mapping[str, str] | None = None,
        http_session: aiohttp.ClientSession | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        """
        Args:
            model: ``gpt-4o-mini-transcribe``, ``gpt-4o-transcribe``, ``whisper-1``, or
                what a compatible server knows.
            language: the spoken language as ISO-639-1 (``"en"``); ``None`` lets the model
                detect it.
            prompt: text that guides the model's style or vocabulary.
            stream: ask for the streamed (SSE) answer; a server that answers plain JSON
                instead is understood too.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``
                (none is sent when neither is set).
            base_url: the API root, up to but excluding ``/audio/transcriptions``; defaults
                to ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
            timeout: a ``Timeout`` (connect 10 s, read 60 s by default), or seconds for both.
            extra_headers: added to every request.
            extra_fields: more form fields for every request (vendor options).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
            max_retries: how many times a transient failure (cannot connect, connection
                cut, HTTP 429 or 5xx) is tried again (0: never), as in ``openai.LLM``.
            retry_backoff: seconds before the first retry, doubling with each one (with
                jitter).
            retry_backoff_cap: the longest wait between two retries, in seconds.
        """
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        super().__init__(api_key, base_url, timeout, extra_headers, http_session, retry)
        self._model = model
        self._language = language
        self._prompt = prompt
        self._stream = stream
        self._extra_fields = dict(extra_fields or {})

    @property
    def model(self) -> str:
        return self._model

    def __repr__(self) -> str:
        return f"openai.STT(model={self._model!r}, base_url={self._base_url!r})"

    def build_fields(self) -> dict[str, str]:
        """The form fields ``recognize`` sends next to the ``file`` part."""
        fields = {"model": self._model, "response_format": "json"}
        if self._language:
            fields["language"] = self._language
        if self._prompt:
            fields["prompt"] = self._prompt
        if self._stream:
            fields["stream"] = "true"
        fields.update(self._extra_fields)
        return fields

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        if not frames or all(frame.samples_per_channel == 0 for frame in frames):
            return ""
        try:
            wav = frames_to_wav(frames)
        except ValueError as exc:
            raise STTError(f"cannot encode the utterance: {exc}") from exc
        fields = self.build_fields()
        url = f"{self._base_url}/audio/transcriptions"
        retries = 0
        while True:
            try:
                return await self._try(url, wav, fields)
            except Failure as failure:
                wait = await self._next_wait(failure, retries)
                if isinstance(wait, str):
                    message = f"{failure} ({wait})" if wait else str(failure)
                    raise STTError(message, retryable=failure.retryable) from failure
                retries += 1
                if await self._backoff(wait):
                    message = f"{failure} (not retried: {self._name} was closed)"
                    raise STTError(message) from failure

    async def _try(self, url: str, wav: bytes, fields: Mapping[str, str]) -> str:
        import aiohttp

        form = aiohttp.FormData()  # one per try: a FormData is consumed when sent
        for name, value in fields.items():
            form.add_field(name, value)
        form.add_field("file", wav, filename="audio.wav", content_type="audio/wav")
        response = await self._post(url, form, self._headers(Accept="application/json"))
        try:
            if response.content_type == "text/event-stream":
                return await self._read_events(response, url)
            body = await self._read_all(response, url)
            if response.content_type == "text/plain":
                return body.decode("utf-8", errors="replace").strip()
            try:
                data = _json.loads(body)
            except ValueError as exc:
                raise Failure(
                    f"{url} answered a body that is not JSON: {error_message_from_body(body)}",
                    retryable=False,
                ) from exc
            text = data.get("text") if isinstance(data, dict) else None
            if not isinstance(text, str):
                raise Failure(
                    f"{url} answered JSON without a text: {body[:200]!r}", retryable=False
                )
            return text.strip()
        finally:
            response.close()

    async def _read_all(self, response: aiohttp.ClientResponse, url: str) -> bytes:
        data = bytearray()
        while True:
            try:
                piece = await response.content.readany()
            except Exception as exc:
                raise self._read_failure(exc, url) from exc
            if not piece:
                return bytes(data)
            data += piece
            if len(data) > _MAX_JSON_BODY_BYTES:
                raise Failure(f"{url} answered more than 4 MiB", retryable=False)

    async def _read_events(self, response: aiohttp.ClientResponse, url: str) -> str:
        decoder = SSEDecoder()
        deltas: list[str] = []
        while True:
            try:
                piece = await response.content.readany()
            except Exception as exc:
                raise self._read_failure(exc, url) from exc
            try:
                events = decoder.feed(piece) if piece else decoder.flush()
            except ValueError as exc:
                raise Failure(f"malformed event stream from {url}: {exc}", retryable=False) from exc
            for event in events:
                if event.strip() == "[DONE]":
                    return "".join(deltas).strip()
                try:
                    data = _json.loads(event)
                except ValueError as exc:
                    raise Failure(
                        f"malformed event from {url}: {event[:200]!r}", retryable=False
                    ) from exc
                if not isinstance(data, dict):
                    continue
                kind = data.get("type")
                if kind == "transcript.text.delta" and isinstance(data.get("delta"), str):
                    deltas.append(data["delta"])
                elif kind == "transcript.text.done":
                    text = data.get("text")
                    return (text if isinstance(text, str) else "".join(deltas)).strip()
                elif kind == "error" or "error" in data:
                    message = error_message_from_body(_json.dumps(data).encode())
                    raise Failure(f"{url} reported an error mid-stream: {message}", retryable=False)
            if not piece:
                raise Failure(
                    f"{url} ended the event stream before transcript.text.done", retryable=True
                )
