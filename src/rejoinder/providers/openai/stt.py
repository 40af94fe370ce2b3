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

import asyncio
import io
import wave
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import models
from ...models.stt import STTError
from .._retry import RetryPolicy, log_retry, retry_after, transient_status
from .._timeout import Timeout
from . import _json
from ._auth import api_key_from, base_url_from
from ._convert import error_message_from_body
from ._stream import SSEDecoder

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["STT", "frames_to_wav"]

_USER_AGENT = "rejoinder/0.1"
_MAX_ERROR_BODY_BYTES = 64 * 1024
_MAX_JSON_BODY_BYTES = 4 * 1024 * 1024


class _Failure(Exception):
    """One try failed: ``message`` for the caller, whether a retry may help, and the
    wait the server asked for."""

    def __init__(
        self, message: str, *, retryable: bool, timed_out: bool = False, wait: float | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.timed_out = timed_out
        self.wait = wait


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


class _HTTPClient:
    """What the OpenAI audio clients share: the session, headers, timeouts, the retry
    loop and turning aiohttp's exceptions into clear messages."""

    _name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout: Timeout | float | None,
        extra_headers: Mapping[str, str] | None,
        http_session: aiohttp.ClientSession | None,
        max_retries: int,
        retry_backoff: float,
        retry_backoff_cap: float,
    ) -> None:
        self._retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        self.retries = 0
        """How many times this client retried a request so far."""
        self._api_key = api_key_from(api_key)
        self._base_url = base_url_from(base_url).rstrip("/")
        self._timeout = Timeout.of(timeout)
        self._extra_headers = dict(extra_headers or {})
        self._session = http_session
        self._owns_session = http_session is None

    @property
    def base_url(self) -> str:
        return self._base_url

    async def aclose(self) -> None:
        """Close the HTTP session this client created (a session passed in is left open)."""
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            if not session.closed:
                await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            import aiohttp

            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self, **more: str) -> dict[str, str]:
        headers = {"User-Agent": _USER_AGENT, **more}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._extra_headers)
        return headers

    def _client_timeout(self) -> aiohttp.ClientTimeout:
        import aiohttp

        return aiohttp.ClientTimeout(
            total=self._timeout.total,
            connect=self._timeout.connect,
            sock_connect=self._timeout.connect,
            sock_read=self._timeout.read,
        )

    async def _next_wait(self, failure: _Failure, retries: int) -> float | str:
        """The wait before the next try, or why there is none ("" to re-raise as is)."""
        if failure.timed_out or not failure.retryable:
            return ""
        wait = self._retry.next_wait(retries, failure.wait)
        if not isinstance(wait, str):
            log_retry(self._name, str(failure), retries + 1, self._retry, wait)
            self.retries += 1
        return wait

    async def _post(
        self, url: str, data: Any, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse:
        """POST and check the status: an error status becomes a ``_Failure``."""
        try:
            response = await self._get_session().post(
                url, data=data, headers=dict(headers), timeout=self._client_timeout()
            )
        except Exception as exc:
            raise self._request_failure(exc, url) from exc
        if response.status >= 300:
            try:
                wait = retry_after(response.headers)
                message = error_message_from_body(await _read_some(response))
                reason = f" {response.reason}" if response.reason else ""
                raise _Failure(
                    f"{url} returned HTTP {response.status}{reason}: {message}",
                    retryable=transient_status(response.status),
                    wait=wait,
                )
            finally:
                response.close()
        return response

    def _request_failure(self, exc: Exception, url: str) -> _Failure:
        import aiohttp

        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return _Failure(
                f"timed out connecting to {url} (after {self._timeout.connect}s)",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return _Failure(
                f"timed out waiting for {url} to respond (no answer for {self._timeout.read}s)",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, TimeoutError):
            return _Failure(
                f"timed out waiting for {url} (total limit {self._timeout.total}s)",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return _Failure(f"TLS error connecting to {url}: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ClientConnectorError):
            if isinstance(exc.os_error, ConnectionRefusedError):
                reason = "connection refused"
            else:
                reason = exc.os_error.strerror or str(exc.os_error) or str(exc)
            return _Failure(f"cannot connect to {url}: {reason}", retryable=True)
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return _Failure(f"{url} closed the connection before responding", retryable=True)
        if isinstance(exc, aiohttp.InvalidURL | ValueError):
            return _Failure(f"invalid request URL {url!r}: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ClientError | OSError):
            return _Failure(f"request to {url} failed: {_describe(exc)}", retryable=True)
        return _Failure(f"request to {url} failed: {_describe(exc)}", retryable=False)

    def _read_failure(self, exc: Exception, url: str) -> _Failure:
        import aiohttp

        if isinstance(exc, aiohttp.ServerTimeoutError):
            return _Failure(
                f"timed out reading the response from {url} (no data for {self._timeout.read}s)",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, TimeoutError):
            return _Failure(
                f"timed out reading the response from {url} (total limit {self._timeout.total}s)",
                retryable=True,
                timed_out=True,
            )
        if isinstance(exc, aiohttp.ClientError | OSError):
            return _Failure(
                f"connection lost mid-response from {url}: {_describe(exc)}", retryable=True
            )
        return _Failure(
            f"reading the response from {url} failed: {_describe(exc)}", retryable=False
        )


class STT(_HTTPClient, models.STT):
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
            max_retries, retry_backoff, retry_backoff_cap: the retry policy for transient
                failures (cannot connect, connection cut, HTTP 429 or 5xx), as in
                ``openai.LLM``.
        """
        super().__init__(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            extra_headers=extra_headers,
            http_session=http_session,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            retry_backoff_cap=retry_backoff_cap,
        )
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
            except _Failure as failure:
                wait = await self._next_wait(failure, retries)
                if isinstance(wait, str):
                    message = f"{failure} ({wait})" if wait else str(failure)
                    raise STTError(message, retryable=failure.retryable) from failure
                retries += 1
                await asyncio.sleep(wait)

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
                raise _Failure(
                    f"{url} answered a body that is not JSON: {error_message_from_body(body)}",
                    retryable=False,
                ) from exc
            text = data.get("text") if isinstance(data, dict) else None
            if not isinstance(text, str):
                raise _Failure(
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
                raise _Failure(f"{url} answered more than 4 MiB", retryable=False)

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
                raise _Failure(
                    f"malformed event stream from {url}: {exc}", retryable=False
                ) from exc
            for event in events:
                if event.strip() == "[DONE]":
                    return "".join(deltas).strip()
                try:
                    data = _json.loads(event)
                except ValueError as exc:
                    raise _Failure(
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
                    raise _Failure(
                        f"{url} reported an error mid-stream: {message}", retryable=False
                    )
            if not piece:
                raise _Failure(
                    f"{url} ended the event stream before transcript.text.done", retryable=True
                )


async def _read_some(response: aiohttp.ClientResponse) -> bytes:
    """Read up to 64 KiB of a body, never raising."""
    data = bytearray()
    try:
        while len(data) < _MAX_ERROR_BODY_BYTES:
            piece = await response.content.readany()
            if not piece:
                break
            data += piece
    except Exception:
        pass
    return bytes(data[:_MAX_ERROR_BODY_BYTES])


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
