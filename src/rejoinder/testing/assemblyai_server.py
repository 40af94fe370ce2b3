"""A loopback server for AssemblyAI's Universal-Streaming WebSocket, scripted turn by turn.

It listens on 127.0.0.1 (a free port) at ``/v3/ws`` and speaks the documented protocol
(``rejoinder.providers.assemblyai.stt`` cites the pages): ``Authorization: <api_key>``
(else HTTP 401), the query (``sample_rate`` must be a positive integer and ``encoding``
``pcm_s16le``, else HTTP 400), ``Begin`` on connect, binary audio in messages of 50 to
1000 ms (else an ``Error`` and a close with 3007), and the ``ForceEndpoint``,
``UpdateConfiguration``, ``KeepAlive`` and ``Terminate`` messages (any other is an
``Error`` and a close with 3006)::

    async with AssemblyAIServer(api_key="k", transcripts=["Hello there."]) as server:
        stt = assemblyai.STT(base_url=server.base_url, api_key="k")
        ...
        assert server.connections[0].control_types() == ["ForceEndpoint", "Terminate"]

How it "hears", deterministically. A chunk of audio whose peak exceeds
``speech_threshold`` is speech; the first speech after a turn ended starts a turn and
takes the next scripted transcript (a ``Said``, or a plain string with the server's
``end_of_turn_confidence``; ``""``, or none left, is a noise: no turn, no message). One
word is revealed per ``word_ms`` of speech, each time as a partial ``Turn`` (the words so
far, lower case without punctuation, the last one not final; ``transcript`` the final
ones). The turn ends with a ``Turn`` carrying all its words and ``end_of_turn: true``, and,
with ``format_turns=true``, one more with ``turn_is_formatted: true`` and the scripted text
as written: when ``ForceEndpoint`` arrives; or by the turn model, after
``min_end_of_turn_silence_when_confident`` ms of silent audio (400 by default) when the
transcript's ``end_of_turn_confidence`` reaches ``end_of_turn_confidence_threshold`` (0.4),
else after ``max_turn_silence`` ms (1280). ``ForceEndpoint`` with no turn in progress is not
answered. Times (word ``start``/``end``) are in milliseconds of audio received on the
connection. ``Terminate`` ends the turn in progress, sends ``Termination`` and closes
with 1000.

Faults, one ``Fault`` per connection in order (``None``: a healthy one), each once
``after_bytes`` of audio arrived: cut the TCP connection, send an ``Error`` message and
close with its code, send raw (garbage) text frames, or go mute (stall: read on, answer
nothing). ``refuse`` answers the next handshakes with an HTTP status instead;
``end_sessions`` accepts the next upgrades and closes them with a code before ``Begin``.
``aiohttp`` is imported when the server starts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._listen_stream import ListenConnection, ListenServer, ListenStream, is_loud

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["AssemblyAIConnection", "AssemblyAIServer", "Fault", "Said"]

_PUNCTUATION = '.,!?;:"()'
_CONTROLS = frozenset({"ForceEndpoint", "UpdateConfiguration", "KeepAlive", "Terminate"})
_TURN_SETTINGS = {
    "end_of_turn_confidence_threshold": 0.4,
    "min_end_of_turn_silence_when_confident": 400.0,
    "max_turn_silence": 1280.0,
}


@dataclass(frozen=True, slots=True)
class Said:
    """One scripted turn: its text as formatted, and what the turn model makes of it."""

    text: str
    end_of_turn_confidence: float = 0.8
    """The turn model's probability that the turn ended, sent when it ends."""
    word_confidence: float = 0.95


@dataclass(frozen=True, slots=True)
class Fault:
    """What goes wrong on one connection, once ``after_bytes`` of audio arrived."""

    action: Literal["drop", "close", "garbage", "mute"]
    after_bytes: int = 0
    close_code: int = 3005
    reason: str = "Session Cancelled: An error occurred"
    """``close``: the ``Error`` message's text and the close frame's reason."""
    frames: tuple[str, ...] = (
        "{not json",
        '{"type": "Mystery"}',
        "[1, 2]",
        '{"type": "Turn", "turn_order": "first", "words": []}',
    )
    """``garbage``: the text frames sent (then the connection goes on normally)."""

    # ``mute``: from then on the connection still reads but answers nothing.


@dataclass(eq=False)
class AssemblyAIConnection(ListenConnection):
    """What one accepted connection received."""

    chunk_seconds: list[float] = field(default_factory=list)
    """The length of every audio message, in seconds."""

    def turns(self) -> list[dict[str, Any]]:
        """The ``Turn`` messages sent."""
        return [message for message in self.sent if message.get("type") == "Turn"]


@dataclass
class _Heard:
    """The turn the connection is hearing."""

    said: Said
    words: list[str]  # as formatted
    start: float  # stream time the speech began
    speech: float = 0.0
    silence: float = 0.0
    revealed: int = 0


class AssemblyAIServer(ListenServer[Fault, AssemblyAIConnection]):
    """AssemblyAI's Universal-Streaming WebSocket on 127.0.0.1, for ``assemblyai.STT``::

        async with AssemblyAIServer(api_key="k", transcripts=["Hello there."]) as server:
            stt = assemblyai.STT(base_url=server.base_url, api_key="k")

    A chunk of audio louder than ``speech_threshold`` is speech; each utterance takes the
    next transcript, revealed a word per ``word_ms`` as partial turns, and ends at a
    ``ForceEndpoint`` or by the turn model's silences, as the service's does.

    Args:
        api_key: the key a client must send (``None``: any).
        transcripts: what each utterance is heard as, in order (a ``Said`` to set the
            turn model's confidence).
        end_of_turn_confidence: the turn model's confidence for a plain string.
        word_ms: milliseconds of speech per word revealed.
        speech_threshold: the peak above which a chunk of audio is speech.
        faults: one per connection, in order (``None``: a healthy one).
        port: the port to listen on (0: a free one).
    """

    _root, _endpoint, _connection_type = "/v3", "/ws", AssemblyAIConnection

    def __init__(
        self,
        *,
        api_key: str | None = None,
        transcripts: Iterable[str | Said] = (),
        end_of_turn_confidence: float = 0.8,
        word_ms: float = 100.0,
        speech_threshold: int = 500,
        faults: Iterable[Fault | None] = (),
        port: int = 0,
    ) -> None:
        super().__init__(faults=faults, port=port)
        self._api_key = api_key
        self.end_of_turn_confidence = end_of_turn_confidence
        self._transcripts: deque[Said] = deque()
        self.add_transcripts(*transcripts)
        self.word_ms = word_ms
        self.speech_threshold = speech_threshold
        self._session_ends: deque[tuple[int, str]] = deque()
        # ``refused`` also has the code of every session ended before ``Begin``.

    def add_transcripts(self, *transcripts: str | Said) -> None:
        for said in transcripts:
            if isinstance(said, str):
                said = Said(said, self.end_of_turn_confidence)
            self._transcripts.append(said)

    def end_sessions(self, code: int, reason: str, times: int = 1) -> None:
        """Accept the next ``times`` upgrades, then send an ``Error`` and close with
        ``code`` before ``Begin`` (1008 for a bad key, 3009 for too many sessions)."""
        self._session_ends.extend([(code, reason)] * times)

    async def _converse(
        self, ws: web.WebSocketResponse, request: web.Request, connection: AssemblyAIConnection
    ) -> None:
        stream = _Stream(self, ws, request, connection)
        if self._session_ends:
            code, reason = self._session_ends.popleft()
            self.refused.append(code)
            await stream.fail(code, reason)
        else:
            stream.fault = self._next_fault()
            await stream.run()

    def _check(self, request: web.Request) -> web.Response | None:
        if self._api_key is not None and request.headers.get("Authorization") != self._api_key:
            return _refusal(401, "Invalid API key")
        if self._refusals:
            return _refusal(*self._refusals.popleft())
        query = request.query
        if query.get("encoding", "pcm_s16le") != "pcm_s16le":
            return _refusal(400, "This test server decodes pcm_s16le only.")
        try:
            if int(query.get("sample_rate", "")) <= 0:
                raise ValueError
        except ValueError:
            return _refusal(400, "sample_rate must be a positive integer.")
        return None

    def _next_said(self) -> Said | None:
        said = self._transcripts.popleft() if self._transcripts else None
        return said if said is not None and said.text.split() else None


class _Stream(ListenStream[Fault, AssemblyAIConnection]):
    """One connection's exchange: reads audio and client messages, answers turns."""

    def __init__(
        self,
        server: AssemblyAIServer,
        ws: web.WebSocketResponse,
        request: web.Request,
        connection: AssemblyAIConnection,
    ) -> None:
        super().__init__(ws, request, connection)
        self.server = server
        query = connection.query
        self.rate = int(query["sample_rate"])
        self.format_turns = query.get("format_turns") == "true"
        self.settings = {
            name: float(query.get(name, default)) for name, default in _TURN_SETTINGS.items()
        }
        self.time = 0.0  # seconds of audio received
        self.began = time.monotonic()
        self.heard: _Heard | None = None
        self.turn_order = 0

    async def fail(self, code: int, reason: str) -> None:
        await self._send({"type": "Error", "error_code": code, "error": reason})
        await self._close(code, reason)

    async def _opening(self) -> None:
        await self._send(
            {"type": "Begin", "id": f"test-{id(self):x}", "expires_at": int(time.time()) + 10800}
        )

    async def _control(self, control: dict[str, Any]) -> bool:
        kind = control.get("type")
        if kind not in _CONTROLS:
            await self.fail(3006, f"Invalid Message Type: {str(kind)[:50]}")
            return False
        if kind == "ForceEndpoint":
            await self._end_turn()
        elif kind == "UpdateConfiguration":
            for name in _TURN_SETTINGS:
                if isinstance(control.get(name), int | float):
                    self.settings[name] = float(control[name])
        elif kind == "Terminate":
            await self._end_turn()
            await self._send(
                {
                    "type": "Termination",
                    "audio_duration_seconds": round(self.time),
                    "session_duration_seconds": round(time.monotonic() - self.began),
                }
            )
            await self._close(1000)
            return False
        return True

    async def _audio(self, data: bytes) -> bool:
        seconds = len(data) / 2 / self.rate
        self.connection.chunk_seconds.append(seconds)
        if not 0.05 - 1e-9 <= seconds <= 1.0 + 1e-9:
            self.connection.audio += data
            duration = round(seconds * 1000)
            await self.fail(3007, f"Input duration violation: {duration} ms. Expected 50-1000 ms")
            return False
        if not await self._audio_arrived(data):
            return False
        loud = is_loud(data, self.server.speech_threshold)
        start, self.time = self.time, self.time + seconds
        if loud:
            await self._speech(start, seconds)
        elif self.heard is not None:
            self.heard.silence += seconds
            await self._maybe_turn_model_ends()
        return True

    async def _speech(self, start: float, seconds: float) -> None:
        heard = self.heard
        if heard is None:
            said = self.server._next_said()
            if said is None:
                return  # a noise: no words, no turn
            heard = self.heard = _Heard(said, said.text.split(), start=start)
        heard.speech += seconds
        heard.silence = 0.0
        revealed = min(len(heard.words), int(heard.speech * 1000 / self.server.word_ms + 1e-9))
        if revealed > heard.revealed:
            heard.revealed = revealed
            await self._turn(heard, revealed, end_of_turn=False)

    async def _maybe_turn_model_ends(self) -> None:
        heard = self.heard
        if heard is None or heard.revealed == 0:
            return
        confident = (
            heard.said.end_of_turn_confidence >= self.settings["end_of_turn_confidence_threshold"]
        )
        wait = self.settings[
            "min_end_of_turn_silence_when_confident" if confident else "max_turn_silence"
        ]
        if heard.silence * 1000 >= wait - 1e-6:
            await self._end_turn()

    async def _end_turn(self) -> None:
        """The turn in progress ends with all its words (and is formatted, if asked)."""
        heard, self.heard = self.heard, None
        if heard is None:
            return
        await self._turn(heard, len(heard.words), end_of_turn=True)
        if self.format_turns:
            await self._turn(heard, len(heard.words), end_of_turn=True, formatted=True)
        self.turn_order += 1

    async def _turn(
        self, heard: _Heard, count: int, *, end_of_turn: bool, formatted: bool = False
    ) -> None:
        step = self.server.word_ms
        shown = heard.words[:count] if formatted else [_plain(word) for word in heard.words[:count]]
        final = count if end_of_turn else count - 1
        start_ms = heard.start * 1000
        await self._send(
            {
                "type": "Turn",
                "turn_order": self.turn_order,
                "turn_is_formatted": formatted,
                "end_of_turn": end_of_turn,
                "transcript": " ".join(shown[:final]),
                "end_of_turn_confidence": (
                    heard.said.end_of_turn_confidence if end_of_turn else 0.01
                ),
                "words": [
                    {
                        "start": round(start_ms + index * step),
                        "end": round(start_ms + (index + 1) * step),
                        "text": word,
                        "confidence": heard.said.word_confidence,
                        "word_is_final": index < final,
                    }
                    for index, word in enumerate(shown)
                ],
                "utterance": heard.said.text if end_of_turn and not formatted else "",
            }
        )

    async def _close_fault(self, fault: Fault) -> None:
        await self.fail(fault.close_code, fault.reason)


def _refusal(status: int, message: str) -> web.Response:
    from aiohttp import web

    return web.json_response({"error": message}, status=status)


def _plain(word: str) -> str:
    """A word as the unformatted transcript has it: lower case, no punctuation."""
    return word.strip(_PUNCTUATION).lower()
