"""AssemblyAI's Universal-Streaming wire: the request URL, the session's set-up (waiting for
``Begin``), the audio chunking, the client messages and the server messages the client
acts on. Opening the socket is ``.._ws``'s, the audio encoding ``.._audio_chunks``'s; what
an utterance makes of the messages is ``stt.py``'s business (which also cites the
documentation pages). In short:

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

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from ...models.stt import STTError, Transcript
from .._audio_chunks import PCMCutter
from .._ws import FATAL_CLOSE_CODES as _WEBSOCKET_FATAL_CLOSE_CODES
from .._ws import TryAgain, close_of

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger("rejoinder.providers.assemblyai")

DEFAULT_BASE_URL = "wss://streaming.assemblyai.com/v3"
"""The cloud API (the EU one is ``wss://streaming.eu.assemblyai.com/v3``)."""

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
# help. Besides the WebSocket ones (1008 is an unauthorized connection: key, balance):
# 3006 an invalid message; 3007 audio chunks of the wrong size or sent faster than real
# time.
FATAL_CLOSE_CODES = _WEBSOCKET_FATAL_CLOSE_CODES | {3006, 3007}

QueryValue = str | int | float | bool | Sequence[str]


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


class Chunker(PCMCutter):
    """Cuts the audio of a connection into messages of ``size`` bytes: the server refuses
    messages under 50 ms (and over 1000 ms). ``tail`` pads what is left to one chunk of
    silence, so an utterance's last words go out before ``ForceEndpoint``."""

    def tail(self) -> bytes:
        rest = super().tail()
        return rest + bytes(self.size - len(rest)) if rest else b""


async def began(ws: aiohttp.ClientWebSocketResponse, where: str) -> str:
    """Read until ``Begin``: the session is open; returns its id. A session the server
    ends first (an ``Error`` message, a close) is refused: ``TryAgain`` unless its code is
    fatal (then ``STTError``, not retryable)."""
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
        if message.type not in (
            aiohttp.WSMsgType.CLOSE,
            aiohttp.WSMsgType.CLOSING,
            aiohttp.WSMsgType.CLOSED,
        ):
            continue
        code, reason = close_of(ws, message)
        if error is not None:
            code = error.code if error.code is not None else code
            reason = error.message
        refused = (
            f"AssemblyAI ended the session at {where} before it began "
            f"({code}{' ' + reason if reason else ''})"
        )
        if code in FATAL_CLOSE_CODES:
            raise STTError(refused, retryable=False)
        raise TryAgain(refused)
