"""A loopback server for Deepgram's live transcription WebSocket, scripted utterance by
utterance.

It listens on 127.0.0.1 (a free port) at ``/v1/listen`` and speaks the documented
protocol: ``Authorization: Token <api_key>`` (else HTTP 401), the query parameters
(``encoding`` must be ``linear16`` with a ``sample_rate``, else HTTP 400, with the reason
in a ``dg-error`` header as Deepgram sends it), binary audio, and the ``KeepAlive``,
``Finalize`` and ``CloseStream`` control messages::

    async with DeepgramServer(api_key="k", transcripts=["Hello there."]) as server:
        stt = deepgram.STT(base_url=server.base_url, api_key="k")
        ...
        assert server.connections[0].query["model"] == "nova-3"

How it "hears", deterministically. A chunk of audio whose peak exceeds
``speech_threshold`` is speech; the first speech after silence starts an utterance and
takes the next scripted transcript (``""`` once they run out). One word of it is revealed
per ``word_ms`` of speech received, each time as an interim ``Results`` (with
``interim_results=true``); with ``segment_words`` set, every that many words are sent as
an ``is_final`` segment. The utterance ends with a final ``Results`` carrying all its
words not yet final: ``speech_final`` after ``endpointing`` ms of silent audio (the query
parameter, 10 by default as Deepgram's, ``false`` turns it off), or ``from_finalize``
when ``Finalize`` arrives (an empty ``from_finalize`` result when only silence came since
the last final). ``UtteranceEnd`` follows after ``utterance_end_ms`` of silence when asked
for; ``SpeechStarted`` with ``vad_events=true``. Times (``start``, ``duration``, words)
are in seconds of audio received on the connection. ``CloseStream`` finalizes, sends
``Metadata`` and closes with 1000; ``idle_timeout`` seconds without audio or KeepAlive
close with 1011 ``NET-0001``.

Faults, one ``Fault`` per connection in order (``None``: a healthy one): cut the TCP
connection, send an error message and a close frame, send raw (garbage) text frames, or
go mute (read on, answer nothing), each once ``after_bytes`` of audio arrived. ``refuse``
answers the next handshakes with an HTTP status instead. ``aiohttp`` is imported when the
server starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ._listen_stream import ListenConnection, ListenServer, ListenStream, is_loud, sample_count

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["DeepgramConnection", "DeepgramServer", "Fault"]

ENCODINGS = frozenset(
    {"linear16", "linear32", "flac", "alaw", "mulaw", "amr-nb", "amr-wb", "opus", "ogg-opus"}
    | {"speex", "g729"}
)


@dataclass(frozen=True, slots=True)
class Fault:
    """What goes wrong on one connection, once ``after_bytes`` of audio arrived."""

    action: Literal["drop", "close", "garbage", "mute"]
    after_bytes: int = 0
    close_code: int = 1011
    reason: str = "NET-0000"
    error: str | None = None
    """``close``: an error message sent before the close frame."""
    frames: tuple[str, ...] = ("{not json", '{"type": "Mystery"}', "[1, 2]")
    """``garbage``: the text frames sent (then the connection goes on normally)."""

    # ``mute``: from then on the connection still reads but answers nothing.


@dataclass(eq=False)
class DeepgramConnection(ListenConnection):
    """What one accepted connection received."""


@dataclass
class _Heard:
    """The utterance the connection is hearing."""

    words: list[str]
    start: float  # where the current segment (not yet final) begins
    speech: float = 0.0
    silence: float = 0.0
    final_words: int = 0  # words already sent in is_final segments
    revealed: int = 0


class DeepgramServer(ListenServer[Fault, DeepgramConnection]):
    """Deepgram's live transcription WebSocket on 127.0.0.1, for ``deepgram.STT``::

        async with DeepgramServer(api_key="k", transcripts=["Hello there."]) as server:
            stt = deepgram.STT(base_url=server.base_url, api_key="k")

    A chunk of audio louder than ``speech_threshold`` is speech; each utterance takes the
    next transcript, revealed a word per ``word_ms`` as interim results, and ends with a
    final result at ``Finalize`` or after the endpointing silence.

    Args:
        api_key: the key a client must send (``None``: any).
        transcripts: what each utterance is heard as, in order (more with
            ``add_transcripts``).
        word_ms: milliseconds of speech per word revealed.
        segment_words: send every that many words as an ``is_final`` segment.
        speech_threshold: the peak above which a chunk of audio is speech.
        idle_timeout: seconds without audio or KeepAlive before the stream is closed.
        faults: one per connection, in order (``None``: a healthy one).
        port: the port to listen on (0: a free one).
    """

    _root, _endpoint, _connection_type = "/v1", "/listen", DeepgramConnection

    def __init__(
        self,
        *,
        api_key: str | None = None,
        transcripts: Iterable[str] = (),
        word_ms: float = 100.0,
        segment_words: int | None = None,
        speech_threshold: int = 500,
        idle_timeout: float = 10.0,
        faults: Iterable[Fault | None] = (),
        port: int = 0,
    ) -> None:
        super().__init__(faults=faults, port=port)
        self._api_key = api_key
        self._transcripts: deque[str] = deque(transcripts)
        self.word_ms = word_ms
        self.segment_words = segment_words
        self.speech_threshold = speech_threshold
        self.idle_timeout = idle_timeout

    def add_transcripts(self, *transcripts: str) -> None:
        self._transcripts.extend(transcripts)

    async def _converse(
        self, ws: web.WebSocketResponse, request: web.Request, connection: DeepgramConnection
    ) -> None:
        stream = _Stream(self, ws, request, connection)
        stream.fault = self._next_fault()
        await stream.run()

    def _check(self, request: web.Request) -> web.Response | None:
        authorization = request.headers.get("Authorization", "")
        if self._api_key is not None and authorization != f"Token {self._api_key}":
            return _refusal(401, "INVALID_AUTH", "Invalid credentials.")
        if self._refusals:
            status, message = self._refusals.popleft()
            return _refusal(status, "TEST_REFUSAL", message)
        query = request.query
        encoding = query.get("encoding")
        if encoding is not None and encoding not in ENCODINGS:
            return _refusal(400, "Bad Request", f"Invalid query string: encoding {encoding!r}.")
        if encoding != "linear16":
            return _refusal(400, "Bad Request", "This test server decodes linear16 only.")
        try:
            if int(query.get("sample_rate", "")) <= 0 or int(query.get("channels", "1")) <= 0:
                raise ValueError
        except ValueError:
            return _refusal(400, "Bad Request", "sample_rate and channels must be positive.")
        return None

    def _next_transcript(self) -> str:
        return self._transcripts.popleft() if self._transcripts else ""


class _Stream(ListenStream[Fault, DeepgramConnection]):
    """One connection's exchange: reads audio and control messages, answers results."""

    def __init__(
        self,
        server: DeepgramServer,
        ws: web.WebSocketResponse,
        request: web.Request,
        connection: DeepgramConnection,
    ) -> None:
        super().__init__(ws, request, connection)
        self.server = server
        self.idle_timeout = server.idle_timeout
        query = connection.query
        self.rate = int(query["sample_rate"]) * int(query.get("channels", "1"))
        self.interim = query.get("interim_results") == "true"
        self.vad_events = query.get("vad_events") == "true"
        endpointing = query.get("endpointing", "10")
        self.endpointing = None if endpointing == "false" else float(endpointing) / 1000
        ends = query.get("utterance_end_ms")
        self.utterance_end = float(ends) / 1000 if ends else None
        self.time = 0.0  # seconds of audio received
        self.last_final_end = 0.0
        self.heard: _Heard | None = None
        self.last_word_end: float | None = None  # for UtteranceEnd, once final
        self.request_id = f"test-{id(connection):x}"

    async def _idle(self) -> None:
        await self._close(1011, "NET-0001")

    async def _control(self, control: dict[str, Any]) -> bool:
        kind = control.get("type")
        if kind == "Finalize":
            await self._final(from_finalize=True)
        elif kind == "CloseStream":
            await self._final(from_finalize=False)
            await self._send(
                {
                    "type": "Metadata",
                    "request_id": self.request_id,
                    "created": "2025-01-01T00:00:00.000Z",
                    "duration": round(self.time, 6),
                    "channels": int(self.connection.query.get("channels", "1")),
                }
            )
            await self._close(1000)
            return False
        return True

    async def _audio(self, data: bytes) -> bool:
        if not data:  # Deepgram takes an empty frame as the end of the stream
            await self._close(1000)
            return False
        if not await self._audio_arrived(data):
            return False
        seconds = sample_count(data) / self.rate
        loud = is_loud(data, self.server.speech_threshold)
        start, self.time = self.time, self.time + seconds
        if loud:
            await self._speech(start, seconds)
        elif self.heard is not None:
            self.heard.silence += seconds
            if self.endpointing is not None and self.heard.silence >= self.endpointing - 1e-9:
                await self._final(speech_final=True)
        ended = self.last_word_end
        gap = self.utterance_end
        if ended is not None and gap is not None and self.time - ended >= gap - 1e-9:
            await self._send({"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": ended})
            self.last_word_end = None
        return True

    async def _speech(self, start: float, seconds: float) -> None:
        heard = self.heard
        if heard is None:
            words = self.server._next_transcript().split()
            heard = self.heard = _Heard(words, start=self.last_final_end)
            self.last_word_end = None
            if self.vad_events:
                await self._send({"type": "SpeechStarted", "channel": [0], "timestamp": start})
        heard.speech += seconds
        heard.silence = 0.0
        revealed = min(len(heard.words), int(heard.speech * 1000 / self.server.word_ms + 1e-9))
        if revealed <= heard.revealed:
            return
        heard.revealed = revealed
        segment = self.server.segment_words
        if segment and revealed - heard.final_words >= segment:
            await self._results(heard.words[heard.final_words : revealed], is_final=True)
            heard.final_words = revealed
        elif self.interim:
            await self._results(heard.words[heard.final_words : revealed], is_final=False)

    async def _final(self, *, from_finalize: bool = False, speech_final: bool = False) -> None:
        """The utterance's remaining words as a final result, and the utterance ends."""
        heard, self.heard = self.heard, None
        if heard is None:
            if from_finalize and self.time > self.last_final_end + 1e-9:
                await self._results([], is_final=True, from_finalize=True)
            return
        words = heard.words[heard.final_words :]
        await self._results(
            words, is_final=True, speech_final=speech_final, from_finalize=from_finalize
        )
        if heard.words:
            self.last_word_end = self.time - heard.silence

    async def _results(
        self,
        words: list[str],
        *,
        is_final: bool,
        speech_final: bool = False,
        from_finalize: bool = False,
    ) -> None:
        start = self.last_final_end
        step = self.server.word_ms / 1000
        await self._send(
            {
                "type": "Results",
                "channel_index": [0, 1],
                "start": round(start, 6),
                "duration": round(self.time - start, 6),
                "is_final": is_final,
                "speech_final": speech_final,
                "from_finalize": from_finalize,
                "channel": {
                    "alternatives": [
                        {
                            "transcript": " ".join(words),
                            "confidence": 0.99 if words else 0.0,
                            "words": [
                                {
                                    "word": word.strip(".,!?").lower(),
                                    "punctuated_word": word,
                                    "start": round(start + index * step, 6),
                                    "end": round(start + (index + 1) * step, 6),
                                    "confidence": 0.99,
                                }
                                for index, word in enumerate(words)
                            ],
                        }
                    ]
                },
                "metadata": {"request_id": self.request_id, "model_info": {"name": "test"}},
            }
        )
        if is_final:
            self.last_final_end = self.time

    async def _close_fault(self, fault: Fault) -> None:
        if fault.error is not None:
            await self._send({"type": "Error", "description": fault.error, "variant": "test"})
        await self._close(fault.close_code, fault.reason)


def _refusal(status: int, code: str, message: str) -> web.Response:
    from aiohttp import web

    body = {"err_code": code, "err_msg": message, "request_id": "test-refused"}
    return web.json_response(
        body, status=status, headers={"dg-error": message, "dg-request-id": "test-refused"}
    )
