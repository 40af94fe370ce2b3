"""A loopback server for OpenAI's audio endpoints, scripted reply by reply.

It listens on 127.0.0.1 (a free port) and speaks the documented wire protocols:

* ``POST /v1/audio/transcriptions``: ``multipart/form-data`` with a ``file`` part and a
  ``model`` field (plus ``language``, ``prompt``, ``response_format``, ``stream``). It
  answers ``{"text": ...}``, or, when the request has ``stream=true`` and the model is
  not ``whisper-1``, a ``text/event-stream`` of ``transcript.text.delta`` events and a
  final ``transcript.text.done``.
* ``POST /v1/audio/speech``: a JSON body with ``model``, ``voice`` and ``input``; it
  answers the scripted raw PCM (24 kHz 16-bit mono for ``response_format: "pcm"``),
  chunked, in writes of ``chunk_size`` bytes (odd by default, so samples are split
  across reads)::

    async with OpenAIAudioServer(speech=[SpeechReply(tone(1.0))]) as server:
        tts = openai.TTS(base_url=server.base_url, api_key="test")
        ...
        assert server.speech_requests[0]["input"] == "Hello"

Each endpoint has its own queue; a reply is a ``TranscriptReply`` / ``SpeechReply``, an
``ErrorReply`` (from ``openai_chat_server``: an HTTP error with OpenAI's error JSON,
optionally ``Retry-After``), or ``CutConnection`` (closed before the headers). Failing N
times first is ``[ErrorReply(503)] * n + [good reply]``; a cut mid-body is
``SpeechReply(..., cut_after=bytes)`` or ``TranscriptReply(..., cut_after=events)``.
Requests that are malformed get a 400 as OpenAI would send, and with ``api_key`` set a
request without ``Authorization: Bearer <api_key>`` gets a 401. ``aiohttp`` is imported
when the server starts.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import wave
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from ._loopback import LoopbackServer
from .openai_chat_server import CutConnection, ErrorReply, _error_response

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "CutConnection",
    "ErrorReply",
    "OpenAIAudioServer",
    "SpeechReply",
    "TranscriptReply",
    "TranscriptionRequest",
    "tone",
]

SPEECH_FORMATS = frozenset({"mp3", "opus", "aac", "flac", "wav", "pcm"})


def tone(seconds: float, *, sample_rate: int = 24000, frequency: float = 440.0) -> bytes:
    """A sine tone as 16-bit little-endian mono PCM."""
    count = round(seconds * sample_rate)
    samples = (
        int(8000 * math.sin(2 * math.pi * frequency * index / sample_rate))
        for index in range(count)
    )
    return b"".join(sample.to_bytes(2, "little", signed=True) for sample in samples)


@dataclass(frozen=True, slots=True)
class TranscriptReply:
    """A transcript: JSON ``{"text": text}``, or streamed when the request asks for it."""

    text: str
    deltas: Sequence[str] | None = None
    """The streamed pieces (default: ``text`` split after each space)."""
    chunk_delay: float = 0.0
    """Seconds before each streamed event."""
    cut_after: int | None = None
    """Streamed: close the connection after this many delta events (no ``done``)."""

    def pieces(self) -> list[str]:
        if self.deltas is not None:
            return list(self.deltas)
        words = self.text.split(" ")
        return [word + " " for word in words[:-1]] + [words[-1]]


@dataclass(frozen=True, slots=True)
class SpeechReply:
    """Audio bytes sent as the body, in writes of ``chunk_size`` bytes."""

    pcm: bytes
    chunk_size: int = 4801
    chunk_delay: float = 0.0
    """Seconds before each write."""
    cut_after: int | None = None
    """Close the connection once this many bytes were sent."""
    content_type: str = "audio/pcm"


@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    """What a transcription request carried."""

    fields: dict[str, str]
    """The form fields other than ``file``."""
    filename: str
    audio: bytes
    """The ``file`` part as sent."""
    sample_rate: int
    num_channels: int
    sample_width: int
    num_frames: int
    """From the WAV header (0 when the file was not a WAV)."""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.num_frames / self.sample_rate if self.sample_rate else 0.0


TranscriptionAnswer: TypeAlias = TranscriptReply | ErrorReply | CutConnection
SpeechAnswer: TypeAlias = SpeechReply | ErrorReply | CutConnection


class OpenAIAudioServer(LoopbackServer):
    """Serves ``/v1/audio/transcriptions`` and ``/v1/audio/speech`` on 127.0.0.1.

    ``transcripts`` and ``speech`` are the queues of replies, one per request (more with
    ``add_transcripts`` / ``add_speech``); a request finding its queue empty gets a 500.
    """

    def __init__(
        self,
        *,
        transcripts: Iterable[TranscriptionAnswer] = (),
        speech: Iterable[SpeechAnswer] = (),
        api_key: str | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(port=port)
        self._transcripts: deque[TranscriptionAnswer] = deque(transcripts)
        self._speech: deque[SpeechAnswer] = deque(speech)
        self._api_key = api_key
        self.transcription_requests: list[TranscriptionRequest] = []
        """Every well-formed transcription request, in arrival order."""
        self.speech_requests: list[dict[str, Any]] = []
        """The JSON body of every well-formed speech request."""
        self.speech_headers: list[dict[str, str]] = []
        self._handlers: set[asyncio.Task[Any]] = set()

    @property
    def url(self) -> str:
        """Same as ``base_url``: ``http://127.0.0.1:<port>/v1``."""
        return self.base_url

    def add_transcripts(self, *replies: TranscriptionAnswer) -> None:
        self._transcripts.extend(replies)

    def add_speech(self, *replies: SpeechAnswer) -> None:
        self._speech.extend(replies)

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/transcriptions", self._tracked(self._transcribe))
        app.router.add_post("/v1/audio/speech", self._tracked(self._speak))

    async def _before_cleanup(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    def _tracked(self, handler: Any) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            task = asyncio.current_task()
            if task is not None:
                self._handlers.add(task)
            try:
                response: web.StreamResponse = await handler(request)
                return response
            finally:
                if task is not None:
                    self._handlers.discard(task)

        return handle

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self._api_key is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self._api_key}":
            return None
        return _error_response(
            ErrorReply(401, "Incorrect API key provided.", code="invalid_api_key")
        )

    # -- transcriptions ---------------------------------------------------------------------

    async def _transcribe(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        if request.content_type != "multipart/form-data":
            return _bad_request("The request must be multipart/form-data.")
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return _bad_request("Missing required parameter: 'file'.", param="file")
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        if not fields.get("model"):
            return _bad_request("Missing required parameter: 'model'.", param="model")
        audio = upload.file.read()
        rate = channels = width = frames = 0
        try:
            with wave.open(io.BytesIO(audio), "rb") as wav:
                rate, channels = wav.getframerate(), wav.getnchannels()
                width, frames = wav.getsampwidth(), wav.getnframes()
        except (wave.Error, EOFError):
            if upload.filename.lower().endswith(".wav"):
                return _bad_request("The audio file could not be decoded.", param="file")
        self.transcription_requests.append(
            TranscriptionRequest(
                fields=fields,
                filename=upload.filename,
                audio=audio,
                sample_rate=rate,
                num_channels=channels,
                sample_width=width,
                num_frames=frames,
                headers=dict(request.headers),
            )
        )
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        reply = (
            self._transcripts.popleft()
            if self._transcripts
            else ErrorReply(500, "OpenAIAudioServer: no scripted transcript left", "server_error")
        )
        if isinstance(reply, CutConnection):
            _cut(request)
        if isinstance(reply, ErrorReply):
            return _error_response(reply)

        streamed = fields.get("stream") == "true" and fields["model"] != "whisper-1"
        if not streamed:
            if fields.get("response_format") == "text":
                return web.Response(text=reply.text, content_type="text/plain")
            return web.json_response({"text": reply.text, "usage": {"type": "duration"}})
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        await response.prepare(request)
        for index, piece in enumerate(reply.pieces()):
            if reply.cut_after is not None and index >= reply.cut_after:
                _cut(request)
            await _pause(reply.chunk_delay)
            await response.write(_event({"type": "transcript.text.delta", "delta": piece}))
        if reply.cut_after is not None:
            _cut(request)
        await _pause(reply.chunk_delay)
        await response.write(_event({"type": "transcript.text.done", "text": reply.text}))
        await response.write_eof()
        return response

    # -- speech -----------------------------------------------------------------------------

    async def _speak(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        try:
            body: object = json.loads(await request.read())
        except ValueError:
            return _bad_request("We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _bad_request("The body must be a JSON object.")
        for name in ("model", "input", "voice"):
            if not body.get(name):
                return _bad_request(f"Missing required parameter: '{name}'.", param=name)
        if not isinstance(body["input"], str) or len(body["input"]) > 4096:
            return _bad_request("'input' must be a string of at most 4096 characters.", "input")
        if body.get("response_format", "mp3") not in SPEECH_FORMATS:
            return _bad_request("Invalid value for 'response_format'.", param="response_format")
        self.speech_requests.append(body)
        self.speech_headers.append(dict(request.headers))
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        reply = (
            self._speech.popleft()
            if self._speech
            else ErrorReply(500, "OpenAIAudioServer: no scripted speech left", "server_error")
        )
        if isinstance(reply, CutConnection):
            _cut(request)
        if isinstance(reply, ErrorReply):
            return _error_response(reply)

        response = web.StreamResponse(headers={"Content-Type": reply.content_type})
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0
        size = max(1, reply.chunk_size)
        while sent < len(reply.pcm):
            end = min(sent + size, len(reply.pcm))
            if reply.cut_after is not None:
                if sent >= reply.cut_after:
                    _cut(request)
                end = min(end, reply.cut_after)
            await _pause(reply.chunk_delay)
            await response.write(reply.pcm[sent:end])
            sent = end
            for _ in range(4):  # let the client read this write before the next
                await asyncio.sleep(0)
        if reply.cut_after is not None:
            _cut(request)
        await response.write_eof()
        return response


def _cut(request: web.Request) -> NoReturn:
    """Close the TCP connection and stop the handler (aiohttp drops it quietly)."""
    if request.transport is not None:
        request.transport.close()
    raise asyncio.CancelledError


async def _pause(seconds: float) -> None:
    if seconds > 0:
        await asyncio.sleep(seconds)


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def _bad_request(message: str, param: str | None = None) -> web.Response:
    from aiohttp import web

    return web.json_response(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": None,
            }
        },
        status=400,
    )
