"""A loopback server for ElevenLabs' stream-input WebSocket, deterministic and scriptable.

It listens on 127.0.0.1 (a free port) and speaks the documented protocol of
``/v1/text-to-speech/{voice_id}/stream-input`` (see ``providers.elevenlabs.tts``): the
query carries ``model_id`` and ``output_format`` (``pcm_<rate>``); the key comes in the
``xi-api-key`` header or as ``xi_api_key`` in the first message, whose text must be a
single space; ``{"text": "... "}`` pieces are buffered until the buffer reaches the next
length of the ``chunk_length_schedule`` (default 120, 160, 250, 290), a ``flush``, or the
closing ``{"text": ""}``, which voices the rest, sends ``{"isFinal": true}`` and closes.

Each character of a generation is ``seconds_per_char`` of a tone; a generation is sent
as audio messages of ``chars_per_message`` characters (so a word can be cut between two),
each with its ``alignment`` relative to its own audio, as the service sends it::

    async with ElevenLabsServer(api_key="k") as server:
        tts = elevenlabs.TTS(voice_id="v", api_key="k", base_url=server.base_url)
        ...
        [connection] = server.connections
        assert connection.words == [...]  # (word, start, end) in seconds of the stream

Faults, one per connection in order (``script(...)``): ``Refuse(status)`` answers the
handshake with an HTTP error; ``Cut(after=n)`` drops the TCP connection after n audio
messages; ``SendError(after=n)`` sends an error message and closes with its code;
``Garbage(after=n)`` sends a text that is not JSON; ``Stall(after=n)`` stops answering.
A wrong key gets a 401 (header) or a close 1008 (first message); a message that is not
JSON or not a valid client message is closed with 1008 and a reason, and 20 s without a
message (``inactivity_timeout``) closes with 1008 too. ``aiohttp`` is imported on start.
"""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._tone import json_number, tone_for
from ._ws_faults import AudioFaults, Cut, Refuse, Stall
from ._ws_server import ScriptedFaultServer

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["Connection", "Cut", "ElevenLabsServer", "Garbage", "Refuse", "SendError", "Stall"]

DEFAULT_SCHEDULE = (120, 160, 250, 290)
_RATES = frozenset({8000, 16000, 22050, 24000, 32000, 44100, 48000})
_CLIENT_FIELDS = frozenset(
    {"text", "voice_settings", "generation_config", "xi_api_key", "authorization"}
    | {"flush", "try_trigger_generation", "pronunciation_dictionary_locators"}
)


@dataclass(frozen=True, slots=True)
class SendError:
    """After ``after`` audio messages, send ``{"message", "error", "code"}`` and close."""

    after: int = 0
    message: str = "This request exceeds your quota."
    error: str = "quota_exceeded"
    code: int = 1008


@dataclass(frozen=True, slots=True)
class Garbage:
    """After ``after`` audio messages, send ``data`` (not JSON) and go on."""

    after: int = 0
    data: str = '{"audio": "AAAA", "isFinal": fal'


Fault: TypeAlias = Refuse | Cut | SendError | Garbage | Stall


@dataclass(slots=True)
class Connection:
    """What one connection carried."""

    voice_id: str
    query: dict[str, str]
    headers: dict[str, str]
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Every client message, as parsed."""
    generations: list[str] = field(default_factory=list)
    """The text of each generation, in order."""
    words: list[tuple[str, float, float]] = field(default_factory=list)
    """Each word voiced: (word, start, end) in seconds from the start of the audio."""
    audio_seconds: float = 0.0
    audio_messages: int = 0
    closed_with: tuple[int, str] | None = None

    @property
    def text(self) -> str:
        """All the text sent after the first message."""
        return "".join(str(m.get("text", "")) for m in self.messages[1:])


class _Closed(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


class ElevenLabsServer(ScriptedFaultServer[Fault]):
    """ElevenLabs' stream-input WebSocket on 127.0.0.1, for ``elevenlabs.TTS``::

        async with ElevenLabsServer(api_key="k") as server:
            tts = elevenlabs.TTS(voice_id="v", api_key="k", base_url=server.base_url)

    Text is buffered by the ``chunk_length_schedule`` as the service does, and voiced as
    a tone of ``seconds_per_char`` per character, in messages carrying their character
    alignment; ``server.connections`` records what each connection was sent.

    Args:
        api_key: the key a client must send (``None``: any).
        seconds_per_char: audio per character of text.
        chars_per_message: characters voiced per audio message.
        message_delay: seconds (loop time) before each audio message.
        inactivity_timeout: seconds without a message before the connection is closed.
        faults: one per connection, in order.
        port: the port to listen on (0: a free one).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        seconds_per_char: float = 0.05,
        chars_per_message: int = 10,
        message_delay: float = 0.0,
        inactivity_timeout: float = 20.0,
        faults: tuple[Fault, ...] = (),
        port: int = 0,
    ) -> None:
        super().__init__(
            api_key=api_key, seconds_per_char=seconds_per_char, faults=faults, port=port
        )
        self.chars_per_message = chars_per_message
        self.message_delay = message_delay
        """Seconds before each audio message (loop time)."""
        self.inactivity_timeout = inactivity_timeout
        self.connections: list[Connection] = []
        """Every connection that passed the handshake, in order."""

    @property
    def base_url(self) -> str:
        """``ws://127.0.0.1:<port>/v1``."""
        return f"ws://127.0.0.1:{self.port}/v1"

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/text-to-speech/{voice_id}/stream-input", self._handle)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        async with self._handling():
            fault = self._next_fault()
            if isinstance(fault, Refuse):
                self.refused += 1
                return _error(fault.status, "service_unavailable", fault.message, fault.headers())
            key = request.headers.get("xi-api-key")
            if self.api_key is not None and key is not None and key != self.api_key:
                self.refused += 1
                return _error(401, "invalid_api_key", "Invalid API key")
            rate = _rate(request.query.get("output_format", "mp3_44100_128"))
            if rate is None or "model_id" not in request.query:
                return _error(400, "invalid_request", "output_format must be pcm_<rate>")
            ws = await self._accept(request)
            connection = Connection(
                request.match_info["voice_id"], dict(request.query), dict(request.headers)
            )
            self.connections.append(connection)
            try:
                await _Session(self, ws, connection, rate, fault, key is None, request).run()
            except _Closed as closed:
                connection.closed_with = (closed.code, closed.reason)
                await ws.close(code=closed.code, message=closed.reason.encode())
            finally:
                self._forget(ws)
            return ws


def _rate(output_format: str) -> int | None:
    kind, _, rate = output_format.partition("_")
    if kind != "pcm" or not rate.isdigit() or int(rate) not in _RATES:
        return None
    return int(rate)


def _error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    from aiohttp import web

    body = {"detail": {"status": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers)


class _Session:
    """One connection's conversation: buffering, generating, faults."""

    def __init__(
        self,
        server: ElevenLabsServer,
        ws: web.WebSocketResponse,
        connection: Connection,
        rate: int,
        fault: Fault | None,
        key_in_message: bool,
        request: web.Request,
    ) -> None:
        self._server, self._ws, self._c = server, ws, connection
        self._rate, self._key_in_message = rate, key_in_message
        self._faults = AudioFaults(fault, request)
        self._buffer = ""
        self._schedule: list[int] = list(DEFAULT_SCHEDULE)
        self._generation = 0
        self._word = ""
        self._word_start = self._word_end = 0.0

    async def run(self) -> None:
        from aiohttp import WSMsgType

        while True:
            try:
                async with asyncio.timeout(self._server.inactivity_timeout):
                    message = await self._ws.receive()
            except TimeoutError:
                raise _Closed(
                    1008,
                    f"Have not received new text for {self._server.inactivity_timeout:g} "
                    "seconds. Closing the connection.",
                ) from None
            if message.type != WSMsgType.TEXT:
                return  # the client closed (or went away)
            try:
                data = json.loads(message.data)
            except ValueError:
                raise _Closed(1008, "Invalid message: not valid JSON") from None
            if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                raise _Closed(1008, "Invalid message: 'text' must be a string")
            if unknown := sorted(set(data) - _CLIENT_FIELDS):
                raise _Closed(1008, f"Invalid message: unexpected field {unknown[0]!r}")
            self._c.messages.append(data)
            if len(self._c.messages) == 1:
                self._configure(data)
                continue
            if data["text"] == "":
                await self._generate()
                self._finish_word()
                if not self._faults.stalled:
                    await self._ws.send_str(json.dumps({"isFinal": True}))
                    raise _Closed(1000, "")
                continue
            if data["text"] != " ":  # a lone space keeps the connection open (or flushes)
                self._buffer += data["text"]
            threshold = self._schedule[min(self._generation, len(self._schedule) - 1)]
            if data.get("flush") or len(self._buffer) >= threshold:
                await self._generate()

    def _configure(self, first: dict[str, Any]) -> None:
        if first["text"] != " ":
            raise _Closed(1008, "Invalid message: the first message's text must be ' '")
        key = self._server.api_key
        if self._key_in_message and key is not None and first.get("xi_api_key") != key:
            raise _Closed(1008, "Invalid API key")
        schedule = (first.get("generation_config") or {}).get("chunk_length_schedule")
        if schedule is not None:
            if not (isinstance(schedule, list) and all(isinstance(n, int) for n in schedule)):
                raise _Closed(1008, "Invalid message: chunk_length_schedule")
            self._schedule = schedule or list(DEFAULT_SCHEDULE)

    async def _generate(self) -> None:
        text, self._buffer = self._buffer, ""
        if not text.strip():
            return
        self._generation += 1
        self._c.generations.append(text)
        step = self._server.chars_per_message
        for start in range(0, len(text), step):
            await self._send_audio(text[start : start + step])

    async def _send_audio(self, chars: str) -> None:
        c = self._c
        if self._faults.stalled:
            return
        fault = self._faults.due(c.audio_messages)
        if isinstance(fault, Cut):
            raise _Closed(1006, "cut")
        if isinstance(fault, Stall):
            return
        if isinstance(fault, SendError):
            error = {"message": fault.message, "error": fault.error, "code": fault.code}
            await self._ws.send_str(json.dumps(error))
            raise _Closed(fault.code, fault.message)
        if isinstance(fault, Garbage):
            await self._ws.send_str(fault.data)
        if self._server.message_delay:
            await asyncio.sleep(self._server.message_delay)
        pcm, per_char = tone_for(chars, self._server.seconds_per_char, self._rate)
        starts = [json_number(i * per_char * 1000) for i in range(len(chars))]
        alignment = {
            "chars": list(chars),
            "charStartTimesMs": starts,
            "charsDurationsMs": [json_number(per_char * 1000)] * len(chars),
        }
        for i, char in enumerate(chars):  # the server's own account of the words
            at = c.audio_seconds + i * per_char
            if char.strip():
                if not self._word:
                    self._word_start = at
                self._word += char
                self._word_end = at + per_char
            else:
                self._finish_word()
        message = {
            "audio": base64.b64encode(pcm).decode("ascii"),
            "isFinal": None,
            "normalizedAlignment": alignment,
            "alignment": alignment,
        }
        await self._ws.send_str(json.dumps(message))
        c.audio_messages += 1
        c.audio_seconds += per_char * len(chars)

    def _finish_word(self) -> None:
        if self._word:
            self._c.words.append((self._word, self._word_start, self._word_end))
            self._word = ""
