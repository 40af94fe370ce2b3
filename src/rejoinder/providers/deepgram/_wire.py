"""Deepgram's live transcription wire: the request URL, opening the socket (with the
retry policy), the audio encoding, the control messages and the server messages the
client acts on. What an utterance makes of them is ``stt.py``'s business (which also
cites the documentation pages)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ...models.stt import STTError
from .._retry import RetryPolicy, retry_after, transient_status

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

logger = logging.getLogger("rejoinder.providers.deepgram")

DEFAULT_BASE_URL = "wss://api.deepgram.com/v1"

# Sent as text frames: Deepgram mishandles control messages sent as binary.
KEEPALIVE = json.dumps({"type": "KeepAlive"})
FINALIZE = json.dumps({"type": "Finalize"})
CLOSE_STREAM = json.dumps({"type": "CloseStream"})

QueryValue = str | int | float | bool


def api_key_from(api_key: str | None) -> str | None:
    """The key given, else ``$DEEPGRAM_API_KEY``; None when neither is set (or empty)."""
    key = api_key if api_key is not None else os.environ.get("DEEPGRAM_API_KEY")
    return key or None


def base_url_from(base_url: str | None) -> str:
    """The URL given, else ``$DEEPGRAM_BASE_URL``, else the cloud API. An ``http(s)://``
    root is accepted for a self-hosted server and turned into ``ws(s)://``."""
    url = (base_url or os.environ.get("DEEPGRAM_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    if url.startswith("http://") or url.startswith("https://"):
        url = "ws" + url[4:]
    return url


def _query_value(value: QueryValue) -> str:
    # Deepgram spells booleans in lower case; Python's str(True) would be refused.
    return str(value).lower() if isinstance(value, bool) else str(value)


def listen_url(base_url: str, params: Mapping[str, QueryValue | None]) -> str:
    """``<base_url>/listen?...`` with the options that are set (None is left out)."""
    query = {name: _query_value(value) for name, value in params.items() if value is not None}
    return f"{base_url}/listen?{urlencode(query)}"


@dataclass(frozen=True, slots=True)
class Result:
    """One ``Results`` message, reduced to what a turn needs."""

    transcript: str
    is_final: bool
    speech_final: bool
    from_finalize: bool
    start: float
    """Stream time (seconds of audio sent on this connection) the result begins at."""
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True, slots=True)
class ServerError:
    """An error the server reported in a message (``{"type": "Error", ...}``)."""

    message: str


@dataclass(frozen=True, slots=True)
class Other:
    """A message the client does not act on (Metadata, SpeechStarted, UtteranceEnd, ...)."""

    type: str
    data: dict[str, Any]


Message = Result | ServerError | Other


def parse(text: str) -> Message:
    """Decode one text frame. Raises ``ValueError`` when it is not a JSON object or a
    ``Results`` message lacks what it must carry; the caller logs and ignores it."""
    data: object = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data.get("type")
    if kind == "Results":
        return _result(data)
    if kind == "Error" or (kind is None and ("err_code" in data or "err_msg" in data)):
        return ServerError(_error_text(data))
    return Other(kind if isinstance(kind, str) else repr(kind), data)


def _result(data: dict[str, Any]) -> Result:
    try:
        alternatives = data["channel"]["alternatives"]
        transcript = alternatives[0]["transcript"] if alternatives else ""
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"Results without channel.alternatives: {exc!r}") from exc
    if not isinstance(transcript, str):
        raise ValueError("Results transcript is not a string")
    start, duration = data.get("start", 0.0), data.get("duration", 0.0)
    if not isinstance(start, int | float) or not isinstance(duration, int | float):
        raise ValueError("Results start/duration are not numbers")
    return Result(
        transcript=transcript.strip(),
        is_final=data.get("is_final") is True,
        speech_final=data.get("speech_final") is True,
        from_finalize=data.get("from_finalize") is True,
        start=float(start),
        duration=float(duration),
    )


def _error_text(data: Mapping[str, Any]) -> str:
    parts = [
        str(data[name])
        for name in ("err_code", "variant", "description", "message", "err_msg")
        if data.get(name)
    ]
    return ": ".join(parts) or json.dumps(data)[:200]


def handshake_error_text(headers: Mapping[str, str] | None, fallback: str) -> str:
    """Why an upgrade was refused: Deepgram's ``dg-error`` header (the body says the same,
    but a WebSocket client never reads the body of a refused upgrade), else ``fallback``."""
    for key, value in (headers or {}).items():
        if key.lower() == "dg-error" and value:
            return value
    return fallback


def linear16(
    frame: AudioFrame, rate: int, resampler: Resampler | None
) -> tuple[bytes, Resampler | None]:
    """``frame`` as little-endian 16-bit mono at ``rate`` (channels averaged), and the
    streaming resampler to use for the next frame of the same utterance."""
    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

    if frame.num_channels > 1:
        mono = frame.data.reshape(-1, frame.num_channels).mean(axis=1)
        frame = AudioFrame(mono.astype(frame.data.dtype), frame.sample_rate)
    if frame.sample_rate == rate:
        return frame.to_pcm(), resampler
    if resampler is None or resampler.in_rate != frame.sample_rate:
        resampler = Resampler(frame.sample_rate, rate)
    resampled = resampler.push(frame)
    return (resampled.to_pcm() if resampled is not None else b""), resampler


class _Refused(Exception):
    def __init__(self, message: str, *, retryable: bool, wait: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.wait = wait


class Connector:
    """Opens ``/listen`` WebSockets: one try bounded by ``timeout``, retried after
    transient failures (unreachable, HTTP 429/5xx) as ``policy`` allows. 401/403, other
    refusals and timeouts are not retried: the key, the query or the limit is wrong."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        timeout: float,
        close_timeout: float,
        policy: RetryPolicy,
        http_session: aiohttp.ClientSession | None,
    ) -> None:
        self.url = url
        self._where = url.split("?", 1)[0]  # for messages: the query is noise there
        self._headers = {"User-Agent": "rejoinder/0.1"}
        if api_key:
            self._headers["Authorization"] = f"Token {api_key}"
        self.timeout, self._close_timeout, self.policy = timeout, close_timeout, policy
        self._session = http_session
        self._owns_session = http_session is None
        self.retries = 0
        """How many times a connection attempt was retried so far."""

    async def connect(self, closing: Callable[[], bool]) -> aiohttp.ClientWebSocketResponse:
        """A connected socket, or ``STTError`` saying why there is none."""
        retries = 0
        while True:
            try:
                return await self._try()
            except _Refused as failure:
                if not failure.retryable or closing():
                    raise STTError(str(failure), retryable=False) from failure
                wait = self.policy.next_wait(retries, failure.wait)
                if isinstance(wait, str):
                    message = f"{failure} ({wait})" if wait else str(failure)
                    raise STTError(message, retryable=True) from failure
                retries += 1
                self.retries += 1
                logger.warning(
                    "deepgram: %s; retry %d of %d in %.2f s",
                    failure,
                    retries,
                    self.policy.max_retries,
                    wait,
                )
                await asyncio.sleep(wait)

    async def _try(self) -> aiohttp.ClientWebSocketResponse:
        import aiohttp

        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession()
        where = self._where
        try:
            async with asyncio.timeout(self.timeout):
                return await self._session.ws_connect(
                    self.url,
                    headers=self._headers,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self._close_timeout),
                )
        except aiohttp.WSServerHandshakeError as exc:
            why = handshake_error_text(exc.headers, exc.message)
            hint = " (check the API key)" if exc.status in (401, 403) else ""
            raise _Refused(
                f"Deepgram refused the connection to {where}: HTTP {exc.status}: {why}{hint}",
                retryable=transient_status(exc.status),
                wait=retry_after(exc.headers),
            ) from exc
        except TimeoutError as exc:
            message = f"timed out connecting to {where} (after {self.timeout:g} s)"
            raise _Refused(message, retryable=False) from exc
        except (aiohttp.InvalidURL, aiohttp.ClientSSLError) as exc:
            raise _Refused(f"cannot connect to {where}: {exc}", retryable=False) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _Refused(f"cannot connect to {where}: {describe(exc)}", retryable=True) from exc

    async def aclose(self) -> None:
        """Close the HTTP session this connector created (one passed in is left open)."""
        session, self._session = self._session, None
        if self._owns_session and session is not None and not session.closed:
            await session.close()


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
