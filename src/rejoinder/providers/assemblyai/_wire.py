"""AssemblyAI's Universal-Streaming wire: the request URL, opening the socket (the upgrade
and the ``Begin`` message, with the retry policy), the audio encoding and chunking, the
client messages and the server messages the client acts on. What an utterance makes of
them is ``stt.py``'s business (which also cites the documentation pages). In short:

* the client opens ``wss://streaming.assemblyai.com/v3/ws?speech_model=...&sample_rate=16000
  &encoding=pcm_s16le&format_turns=true`` (and the turn settings
  ``end_of_turn_confidence_threshold``, ``min_end_of_turn_silence_when_confident``,
  ``max_turn_silence`` when given) with the header ``Authorization: <key>``; the server
  answers ``Begin`` (the session's id);
* audio goes up as binary frames of raw PCM, each 50 to 1000 ms long (``~50 ms`` is the
  advice), at about real time; ``{"type": "ForceEndpoint"}`` ends the current turn at
  once, ``{"type": "UpdateConfiguration", ...}`` changes the turn settings mid-session,
  ``{"type": "Terminate"}`` ends the session (in-flight turns, ``Termination``, close 1000);
* the server sends ``Turn`` messages: ``turn_order``, ``transcript`` (the turn's final
  words), ``words`` (each with ``text``, ``start``/``end`` in ms of audio, ``confidence``,
  ``word_is_final``), ``end_of_turn`` and ``end_of_turn_confidence`` (its turn model's
  probability that the speaker finished), and with ``format_turns`` one more message at
  the end of each turn with ``turn_is_formatted`` (punctuated and cased);
* a failure is an ``{"type": "Error", "error_code", "error"}`` message and a close with
  that code: 1008 unauthorized (key, balance, concurrency), 3005 a server error, 3006 an
  invalid message, 3007 audio chunks of the wrong length or sent too fast, 3008 the
  session's three hours are over, 3009 too many concurrent sessions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ...models.stt import STTError, Transcript
from .._retry import RetryPolicy, retry_after, transient_status

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler

logger = logging.getLogger("rejoinder.providers.assemblyai")

DEFAULT_BASE_URL = "wss://streaming.assemblyai.com/v3"

FORCE_ENDPOINT = json.dumps({"type": "ForceEndpoint"})
TERMINATE = json.dumps({"type": "Terminate"})

MIN_CHUNK_SECONDS = 0.05
MAX_CHUNK_SECONDS = 1.0
"""The server takes audio messages of 50 to 1000 ms (else it closes with 3007)."""

TURN_SETTINGS = (
    "end_of_turn_confidence_threshold",
    "min_end_of_turn_silence_when_confident",
    "max_turn_silence",
)
"""The query parameters ``UpdateConfiguration`` may change during a session."""

# Close codes that say the request or the audio itself is wrong: trying again will not
# help. 1008 is an unauthorized connection (key, balance); 3006 an invalid message; 3007
# audio chunks of the wrong size or sent faster than real time.
FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 3006, 3007})

QueryValue = str | int | float | bool | Sequence[str]


def api_key_from(api_key: str | None) -> str | None:
    """The key given, else ``$ASSEMBLYAI_API_KEY``; None when neither is set (or empty)."""
    key = api_key if api_key is not None else os.environ.get("ASSEMBLYAI_API_KEY")
    return key or None


def base_url_from(base_url: str | None) -> str:
    """The URL given, else ``$ASSEMBLYAI_BASE_URL``, else the cloud API (the EU one is
    ``wss://streaming.eu.assemblyai.com/v3``). An ``http(s)://`` root becomes ``ws(s)://``."""
    url = (base_url or os.environ.get("ASSEMBLYAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    if url.startswith("http://") or url.startswith("https://"):
        url = "ws" + url[4:]
    return url


def _query_value(value: QueryValue) -> str:
    if isinstance(value, bool):  # the API spells booleans in lower case
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(list(value))  # keyterms_prompt: a JSON array of strings


def streaming_url(base_url: str, params: Mapping[str, QueryValue | None]) -> str:
    """``<base_url>/ws?...`` with the parameters that are set (None is left out)."""
    query = {name: _query_value(value) for name, value in params.items() if value is not None}
    return f"{base_url}/ws?{urlencode(query)}"


def turn_settings(
    threshold: float | None, min_silence: int | None, max_silence: int | None
) -> dict[str, float | int]:
    """The turn settings given (None: not given), checked, by their query names."""
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ValueError(f"end_of_turn_confidence_threshold must be 0 to 1, got {threshold}")
    for name, value in zip(TURN_SETTINGS[1:], (min_silence, max_silence), strict=True):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be a whole number of milliseconds, got {value!r}")
        if value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
    given = zip(TURN_SETTINGS, (threshold, min_silence, max_silence), strict=True)
    return {name: value for name, value in given if value is not None}


@dataclass(frozen=True, slots=True)
class UpdateConfiguration:
    """New turn settings for the open session, queued in order with the audio."""

    settings: dict[str, float | int]

    def message(self) -> str:
        return json.dumps({"type": "UpdateConfiguration", **self.settings})


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    end: float
    """Stream time (seconds of audio sent on this connection) the word ends at."""
    confidence: float | None


@dataclass(frozen=True, slots=True)
class Turn:
    """One ``Turn`` message: the turn so far (a partial) or at its end."""

    order: int
    transcript: str
    """The turn's finalized words (formatted when ``formatted``)."""
    words: tuple[Word, ...]
    """Every word so far, the last ones perhaps not final yet."""
    end_of_turn: bool
    formatted: bool
    end_of_turn_confidence: float | None

    def text(self) -> str:
        """What was heard of the turn: every word so far (the transcript at its end)."""
        if self.end_of_turn or not self.words:
            return self.transcript
        return " ".join(word.text for word in self.words if word.text)


def text_of(turns: Iterable[Turn]) -> str:
    """What was heard of these turns, in order."""
    return " ".join(text for text in (turn.text() for turn in turns) if text)


def transcript_of(turns: Sequence[Turn]) -> Transcript:
    """An utterance's ``Transcript`` from its turns in order: the words' confidences, and
    the last turn's ``end_of_turn_confidence`` as ``end_of_turn_probability``."""
    text = text_of(turns)
    if not text:
        return Transcript("")
    words = [word for turn in turns for word in turn.words]
    known = [word.confidence for word in words if word.confidence is not None]
    return Transcript(
        text,
        confidence=sum(known) / len(known) if known else None,
        last_word_confidence=words[-1].confidence if words else None,
        end_of_turn_probability=turns[-1].end_of_turn_confidence,
    )


@dataclass(frozen=True, slots=True)
class Begin:
    session_id: str


@dataclass(frozen=True, slots=True)
class Termination:
    audio_seconds: float | None


@dataclass(frozen=True, slots=True)
class ServerError:
    """``{"type": "Error", "error_code": ..., "error": ...}``, sent before an error close."""

    code: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Other:
    """A message the client does not act on (SpeechStarted, LLMGatewayResponse, ...)."""

    type: str


Message = Turn | Begin | Termination | ServerError | Other


def parse(text: str) -> Message:
    """Decode one text frame. Raises ``ValueError`` when it is not a JSON object or a
    ``Turn`` lacks what it must carry; the caller logs and ignores it."""
    data: object = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    kind = data.get("type")
    if kind == "Turn":
        return _turn(data)
    if kind == "Begin":
        return Begin(str(data.get("id", "")))
    if kind == "Termination":
        return Termination(_number(data.get("audio_duration_seconds")))
    if kind == "Error" or (kind is None and "error" in data):
        code = data.get("error_code")
        message = data.get("error")
        return ServerError(
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            str(message) if message else json.dumps(data)[:200],
        )
    return Other(kind if isinstance(kind, str) else repr(kind))


def _turn(data: dict[str, Any]) -> Turn:
    order, transcript, words = data.get("turn_order"), data.get("transcript"), data.get("words")
    if not isinstance(order, int) or isinstance(order, bool):
        raise ValueError("Turn without an integer turn_order")
    if not isinstance(transcript, str):
        raise ValueError("Turn transcript is not a string")
    if not isinstance(words, list):
        raise ValueError("Turn words is not a list")
    confidence = data.get("end_of_turn_confidence")
    return Turn(
        order=order,
        transcript=transcript.strip(),
        words=tuple(_word(word) for word in words),
        end_of_turn=data.get("end_of_turn") is True,
        formatted=data.get("turn_is_formatted") is True,
        end_of_turn_confidence=_probability(confidence),
    )


def _word(data: object) -> Word:
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise ValueError("Turn word without text")
    end = _number(data.get("end"))
    if end is None:
        raise ValueError("Turn word end is not a number")
    return Word(data["text"].strip(), end / 1000.0, _probability(data.get("confidence")))


def _number(value: object) -> float | None:
    """A finite number the server sent, or None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _probability(value: object) -> float | None:
    """A probability the server sent, or None when it is missing or not one."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return None


def pcm_s16le(
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


class Chunker:
    """Cuts the audio of a connection into messages of ``chunk`` bytes: the server refuses
    messages under 50 ms (and over 1000 ms). ``tail`` pads what is left to one chunk of
    silence, so an utterance's last words go out before ``ForceEndpoint``."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self._pending = bytearray()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def push(self, pcm: bytes) -> list[bytes]:
        self._pending += pcm
        cut = len(self._pending) - len(self._pending) % self.chunk
        if cut == 0:
            return []
        ready = bytes(self._pending[:cut])
        del self._pending[:cut]
        return [ready[at : at + self.chunk] for at in range(0, cut, self.chunk)]

    def tail(self) -> bytes:
        if not self._pending:
            return b""
        padded = bytes(self._pending) + bytes(self.chunk - len(self._pending))
        self._pending.clear()
        return padded


class _Refused(Exception):
    def __init__(self, message: str, *, retryable: bool, wait: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.wait = wait


class Connector:
    """Opens streaming sessions: the upgrade and the server's ``Begin``, one try bounded by
    ``timeout``, retried after transient failures (unreachable, HTTP 429/5xx, a session
    closed before it began with a code that is not fatal) as ``policy`` allows. 401/403,
    other refusals, 1008 and timeouts are not retried: the key, the query or the limit is
    wrong."""

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
        self._headers = {"User-Agent": "rejoinder/0.1"}
        if api_key:
            self._headers["Authorization"] = api_key  # the key itself, no scheme
        self.timeout, self._close_timeout, self.policy = timeout, close_timeout, policy
        self._session = http_session
        self._owns_session = http_session is None
        self.retries = 0
        """How many times a connection attempt was retried so far."""
        self.session_id: str | None = None
        """The ``Begin`` message's id of the latest session."""

    @property
    def where(self) -> str:
        return self.url.split("?", 1)[0]  # for messages: the query is noise there

    async def connect(self, closing: Callable[[], bool]) -> aiohttp.ClientWebSocketResponse:
        """A socket whose session began, or ``STTError`` saying why there is none."""
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
                    "assemblyai: %s; retry %d of %d in %.2f s",
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
        where = self.where
        ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            async with asyncio.timeout(self.timeout):
                ws = await self._session.ws_connect(
                    self.url,
                    headers=self._headers,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self._close_timeout),
                )
                self.session_id = await self._began(ws)
                return ws
        except aiohttp.WSServerHandshakeError as exc:
            hint = " (check the API key)" if exc.status in (401, 403) else ""
            raise _Refused(
                f"AssemblyAI refused the connection to {where}: HTTP {exc.status}: "
                f"{exc.message}{hint}",
                retryable=transient_status(exc.status),
                wait=retry_after(exc.headers),
            ) from exc
        except TimeoutError as exc:
            await _close_quietly(ws, self._close_timeout)
            what = "connecting to" if ws is None else "waiting for the session to begin at"
            message = f"timed out {what} {where} (after {self.timeout:g} s)"
            raise _Refused(message, retryable=False) from exc
        except _Refused:
            await _close_quietly(ws, self._close_timeout)
            raise
        except (aiohttp.InvalidURL, aiohttp.ClientSSLError) as exc:
            raise _Refused(f"cannot connect to {where}: {exc}", retryable=False) from exc
        except (aiohttp.ClientError, OSError) as exc:
            await _close_quietly(ws, self._close_timeout)
            raise _Refused(f"cannot connect to {where}: {describe(exc)}", retryable=True) from exc

    async def _began(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Read until ``Begin``: the session is open. A session the server ends first
        (an ``Error`` message, a close) is refused, retryable unless its code is fatal."""
        import aiohttp

        error: ServerError | None = None
        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                try:
                    parsed = parse(message.data)
                except ValueError:
                    logger.warning("assemblyai: ignoring a malformed message before Begin")
                    continue
                if isinstance(parsed, Begin):
                    return parsed.session_id
                if isinstance(parsed, ServerError):
                    error = parsed
                continue
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING):
                code = message.data if isinstance(message.data, int) else ws.close_code
                reason = message.extra if isinstance(message.extra, str) else ""
            elif message.type == aiohttp.WSMsgType.CLOSED:
                code, reason = ws.close_code, ""
            else:
                continue
            if error is not None:
                code = error.code if error.code is not None else code
                reason = error.message
            raise _Refused(
                f"AssemblyAI ended the session at {self.where} before it began "
                f"({code}{' ' + reason if reason else ''})",
                retryable=code not in FATAL_CLOSE_CODES,
            )

    async def aclose(self) -> None:
        """Close the HTTP session this connector created (one passed in is left open)."""
        session, self._session = self._session, None
        if self._owns_session and session is not None and not session.closed:
            await session.close()


async def _close_quietly(ws: aiohttp.ClientWebSocketResponse | None, seconds: float) -> None:
    if ws is None:
        return
    try:
        async with asyncio.timeout(seconds):
            await ws.close()
    except Exception:  # it failed already: the first error is the one told
        logger.debug("assemblyai: closing a failed connection failed too", exc_info=True)


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
