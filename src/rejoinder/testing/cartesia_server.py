"""A loopback server for Cartesia's TTS WebSocket, deterministic and scriptable.

It listens on 127.0.0.1 (a free port) and speaks the documented protocol of
``/tts/websocket`` (see ``providers.cartesia.tts``): the handshake needs a version
(``Cartesia-Version`` header or ``cartesia_version`` query) and, when the server has a key,
that key (``X-API-Key`` header or ``api_key`` query; a wrong one is an HTTP 401). Clients
send generation requests and ``{"context_id", "cancel": true}``; contexts are multiplexed
on one connection, each answered with ``chunk``, ``timestamps``, ``flush_done``, ``done``
and ``error`` messages naming it.

Text on a context is buffered as the service's managed buffering does: it is voiced at a
sentence end, after ``max_buffer_delay_ms`` (default 3000) without new input, at a
``flush``, at ``"continue": false`` (then ``done``), or at once with a delay of 0. Each
character is ``seconds_per_char`` of a tone, sent in chunks of ``chars_per_chunk``
characters; after each chunk a ``timestamps`` message reports the words it completed, in
seconds from the start of the context's audio, with their surrounding punctuation
stripped (as the reference's example reports "Hello", "world" for "Hello, world!")::

    async with CartesiaServer(api_key="k") as server:
        tts = cartesia.TTS(voice_id="v", api_key="k", base_url=server.base_url)
        ...
        [connection] = server.connections
        [context] = connection.contexts.values()
        assert context.words == [...]  # (word, start, end) as the server reported them

Faults, one per connection in order (``script(...)``), counted in chunks sent on the
connection: ``Refuse(status)`` answers the handshake with an HTTP error; ``Cut(after=n)``
drops the TCP connection; ``SendError(after=n)`` sends an error for the context being
voiced (the connection goes on); ``Garbage(after=n)`` sends a text that is not JSON;
``Stall(after=n)`` stops answering. A message that is not JSON gets an error without a
context; an invalid request, or one on a context that is done, gets an error for its
context. A connection idle for ``idle_timeout`` (5 minutes) is closed. ``aiohttp`` is
imported on start.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from ._tone import json_number, tone_for
from ._ws_faults import AudioFaults, Cut, Refuse, Stall
from ._ws_server import ScriptedFaultServer

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "CartesiaServer",
    "Connection",
    "Context",
    "Cut",
    "Garbage",
    "Refuse",
    "SendError",
    "Stall",
]

VERSIONS = frozenset({"2024-06-10", "2024-11-13", "2025-04-16", "2026-03-01"})
_STRUCTURED_ERRORS = "2026-03-01"  # from this version on, errors carry title/message/code
_RATES = frozenset({8000, 16000, 22050, 24000, 44100, 48000})
_FIELDS = frozenset(
    {"model_id", "transcript", "voice", "output_format", "context_id", "continue"}
    | {"add_timestamps", "add_phoneme_timestamps", "use_normalized_timestamps", "language"}
    | {"max_buffer_delay_ms", "flush", "duration", "speed", "generation_config"}
    | {"pronunciation_dict_id"}
)
_PER_INPUT = frozenset({"transcript", "continue", "duration", "flush"})
_SENTENCE_END = re.compile(r"[.!?]\s")
_EDGE_PUNCTUATION = "\"'()[]{}<>.,;:!?¿¡…-–—*_/\\`~"


@dataclass(frozen=True, slots=True)
class SendError:
    """Before chunk number ``after``, end the context being voiced with an error."""

    after: int = 0
    status_code: int = 500
    title: str = "Internal server error"
    message: str = "The generation failed."
    error_code: str | None = "internal_error"


@dataclass(frozen=True, slots=True)
class Garbage:
    """Before chunk number ``after``, send ``data`` and go on: by default not JSON; a
    ``<context_id>`` in it becomes the id of the context being voiced."""

    after: int = 0
    data: str = '{"type": "chunk", "data": "AAAA", "done": fal'


Fault: TypeAlias = Refuse | Cut | SendError | Garbage | Stall
_Words: TypeAlias = list[tuple[str, float, float]]


@dataclass(slots=True)
class Context:
    """What one context carried."""

    context_id: str
    transcript: str = ""
    """The transcripts of its inputs, joined as the service joins them (verbatim)."""
    generations: list[str] = field(default_factory=list)
    """The text of each generation, in order."""
    words: list[tuple[str, float, float]] = field(default_factory=list)
    """Each word reported: (word, start, end) in seconds from the context's start."""
    audio_seconds: float = 0.0
    chunks: int = 0
    flushes: int = 0
    ended: str | None = None
    """How it ended: "done", "cancelled" (while being voiced) or "error"; None while open."""


@dataclass(slots=True)
class Connection:
    """What one connection carried."""

    query: dict[str, str]
    headers: dict[str, str]
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Every client message, as parsed."""
    contexts: dict[str, Context] = field(default_factory=dict)
    """Each context, in the order they were opened."""
    cancelled: list[str] = field(default_factory=list)
    """The context of every cancel request, in order (one already done included)."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """Every error message sent."""
    chunks: int = 0
    closed_with: tuple[int, str] | None = None


class CartesiaServer(ScriptedFaultServer[Fault]):
    """Cartesia's TTS WebSocket on 127.0.0.1, for ``cartesia.TTS``::

        async with CartesiaServer(api_key="k") as server:
            tts = cartesia.TTS(voice_id="v", api_key="k", base_url=server.base_url)

    Each context's text is voiced as a tone of ``seconds_per_char`` per character, at a
    sentence end, a flush or the end of input, with ``timestamps`` for the words it
    completed; ``server.connections`` records what each connection was sent.

    Args:
        api_key: the key a client must send (``None``: any).
        seconds_per_char: audio per character of text.
        chars_per_chunk: characters voiced per ``chunk`` message.
        chunk_delay: seconds (loop time) before each chunk.
        idle_timeout: seconds without a message before the connection is closed.
        faults: one per connection, in order.
        port: the port to listen on (0: a free one).
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        seconds_per_char: float = 0.05,
        chars_per_chunk: int = 10,
        chunk_delay: float = 0.0,
        idle_timeout: float = 300.0,
        faults: tuple[Fault, ...] = (),
        port: int = 0,
    ) -> None:
        super().__init__(
            api_key=api_key, seconds_per_char=seconds_per_char, faults=faults, port=port
        )
        self.chars_per_chunk = chars_per_chunk
        self.chunk_delay = chunk_delay
        """Seconds before each chunk (loop time): a real-time pace for session tests."""
        self.idle_timeout = idle_timeout
        self.connections: list[Connection] = []
        """Every connection that passed the handshake, in order."""

    @property
    def base_url(self) -> str:
        """``ws://127.0.0.1:<port>``: the API root, as ``cartesia.TTS(base_url=...)`` takes it."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def open_sockets(self) -> int:
        """Connections still open on the server's side."""
        return len(self._sockets)

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_get("/tts/websocket", self._handle)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        async with self._handling():
            fault = self._next_fault()
            if isinstance(fault, Refuse):
                self.refused += 1
                return _refusal(fault.status, "service_unavailable", fault.message, fault.headers())
            version = request.query.get("cartesia_version") or request.headers.get(
                "Cartesia-Version"
            )
            if version not in VERSIONS:
                return _refusal(400, "invalid_version", f"Unknown Cartesia-Version {version!r}")
            key = request.query.get("api_key") or request.headers.get("X-API-Key")
            if self.api_key is not None and key != self.api_key:
                self.refused += 1
                return _refusal(401, "invalid_api_key", "Invalid API key")
            ws = await self._accept(request)
            connection = Connection(dict(request.query), dict(request.headers))
            self.connections.append(connection)
            session = _Session(self, ws, connection, fault, version, request)
            try:
                await session.run()
            finally:  # no await here: the handler is cancelled when the client goes away
                self._forget(ws)
                session.stop()
            return ws


def _refusal(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    from aiohttp import web

    body = {"error_code": code, "title": message, "message": message, "request_id": _id()}
    return web.json_response(body, status=status, headers=headers)


def _id() -> str:
    return str(uuid.uuid4())


class _Invalid(Exception):
    """A client message the service would answer with an error."""


class _ContextRun:
    """One context on the server: its fields, its buffered text and the task voicing it."""

    def __init__(self, record: Context, fields: dict[str, Any]) -> None:
        self.record, self.fields = record, fields
        self.buffer = ""
        self.work: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.closing = False  # "continue": false was received
        self.word = ""
        self.word_start = 0.0

    @property
    def rate(self) -> int:
        return int(self.fields["output_format"]["sample_rate"])

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _Session:
    """One connection's conversation: requests, contexts, faults."""

    def __init__(
        self,
        server: CartesiaServer,
        ws: web.WebSocketResponse,
        connection: Connection,
        fault: Fault | None,
        version: str,
        request: web.Request,
    ) -> None:
        self._server, self._ws, self._c = server, ws, connection
        self._faults = AudioFaults(fault, request)
        self._structured = version >= _STRUCTURED_ERRORS
        self._runs: dict[str, _ContextRun] = {}

    async def run(self) -> None:
        from aiohttp import WSMsgType

        while True:
            try:
                async with asyncio.timeout(self._server.idle_timeout):
                    message = await self._ws.receive()
            except TimeoutError:
                if any(run.task is not None and not run.task.done() for run in self._runs.values()):
                    continue  # still voicing: not idle
                self._c.closed_with = (1000, "idle timeout")
                await self._ws.close(code=1000, message=b"idle timeout")
                return
            if message.type != WSMsgType.TEXT:
                return  # the client closed (or went away, or was cut)
            try:
                data = json.loads(message.data)
            except ValueError:
                await self._error(None, 400, "Invalid message", "The message is not valid JSON.")
                continue
            if not isinstance(data, dict):
                await self._error(None, 400, "Invalid message", "A message is a JSON object.")
                continue
            self._c.messages.append(data)
            context_id = data.get("context_id")
            if not isinstance(context_id, str) or not context_id:
                await self._error(None, 400, "Invalid request", "context_id is required.")
                continue
            if data.get("cancel") is True:
                self._cancel(context_id)
                continue
            try:
                self._input(context_id, data)
            except _Invalid as exc:
                await self._error(context_id, 400, "Invalid request", str(exc))

    def stop(self) -> None:
        """Stop voicing every context (the server's cleanup awaits the tasks)."""
        for run in self._runs.values():
            run.stop_timer()
            if run.task is not None:
                run.task.cancel()

    # -- requests -----------------------------------------------------------------------

    def _input(self, context_id: str, data: dict[str, Any]) -> None:
        fields = _validated(data)
        run = self._runs.get(context_id)
        if run is None:
            record = Context(context_id)
            self._c.contexts[context_id] = record
            run = self._runs[context_id] = _ContextRun(record, fields)
            run.task = asyncio.ensure_future(self._voice(run))
            self._server._track_task(run.task)
        elif run.record.ended is not None or run.closing:
            raise _Invalid("Context has closed: start a new context for more input.")
        elif fields != run.fields:
            keys = fields.keys() | run.fields.keys()
            changed = sorted(k for k in keys if fields.get(k) != run.fields.get(k))
            raise _Invalid(f"Inputs on a context must keep their fields: {changed[0]!r} changed.")
        run.stop_timer()  # more input: the buffer's wait starts again
        transcript = data["transcript"]
        run.record.transcript += transcript
        run.buffer += transcript
        delay = data.get("max_buffer_delay_ms", 3000)
        if data.get("flush") is True:
            self._release(run, len(run.buffer))
            run.work.put_nowait(("flush", ""))
        elif data.get("continue", False) is not True:
            run.closing = True
            self._release(run, len(run.buffer))
            run.work.put_nowait(("done", ""))
        elif delay == 0:
            self._release(run, len(run.buffer))
        else:
            ends = list(_SENTENCE_END.finditer(run.buffer))
            if ends:
                self._release(run, ends[-1].end())
            if run.buffer:  # voiced after the delay unless more input comes first
                loop = asyncio.get_running_loop()
                run.timer = loop.call_later(delay / 1000, self._release, run, len(run.buffer))

    def _release(self, run: _ContextRun, upto: int) -> None:
        """Voice the buffer's first ``upto`` characters next."""
        run.stop_timer()
        text, run.buffer = run.buffer[:upto], run.buffer[upto:]
        if text.strip():
            run.work.put_nowait(("text", text))

    def _cancel(self, context_id: str) -> None:
        self._c.cancelled.append(context_id)
        run = self._runs.get(context_id)
        if run is None or run.record.ended is not None:
            return
        run.record.ended = "cancelled"
        run.stop_timer()
        if run.task is not None:
            run.task.cancel()

    # -- voicing ------------------------------------------------------------------------

    async def _voice(self, run: _ContextRun) -> None:
        record = run.record
        while True:
            kind, text = await run.work.get()
            if kind == "text":
                record.generations.append(text)
                step = self._server.chars_per_chunk
                for start in range(0, len(text), step):
                    if not await self._chunk(run, text[start : start + step]):
                        return
                await self._words(run, self._finish_word(run))  # a generation ends a word
            elif kind == "flush":
                record.flushes += 1
                await self._send(run, "flush_done", flush_done=True, flush_id=record.flushes)
            else:
                record.ended = "done"
                await self._send(run, "done", done=True)
                return

    async def _chunk(self, run: _ContextRun, chars: str) -> bool:
        """Send one chunk (and the words it completed); False when the context ended."""
        c = self._c
        if self._faults.stalled:
            return False
        fault = self._faults.due(c.chunks)
        if isinstance(fault, Cut):
            c.closed_with = (1006, "cut")
            return False
        if isinstance(fault, Stall):
            return False
        if isinstance(fault, SendError):
            run.record.ended = "error"
            await self._error(run.record.context_id, fault.status_code, fault.title,
                              fault.message, fault.error_code)  # fmt: skip
            return False
        if isinstance(fault, Garbage):
            await self._ws.send_str(fault.data.replace("<context_id>", run.record.context_id))
        if self._server.chunk_delay:
            await asyncio.sleep(self._server.chunk_delay)
        rate, record = run.rate, run.record
        pcm, per_char = tone_for(chars, self._server.seconds_per_char, rate)
        words: _Words = []
        for i, char in enumerate(chars):
            at = record.audio_seconds + i * per_char
            if char.isspace():
                words.extend(self._finish_word(run, at))
            else:
                if not run.word:
                    run.word_start = at
                run.word += char
        data = base64.b64encode(pcm).decode("ascii")
        await self._send(run, "chunk", data=data, step_time=12.5, flush_id=record.flushes)
        c.chunks += 1
        record.chunks += 1
        record.audio_seconds += per_char * len(chars)
        await self._words(run, words)
        return True

    def _finish_word(self, run: _ContextRun, at: float | None = None) -> _Words:
        word, run.word = run.word.strip(_EDGE_PUNCTUATION), ""
        if not word:
            return []  # punctuation on its own is not read out as a word
        end = run.record.audio_seconds if at is None else at
        return [(word, run.word_start, end)]

    async def _words(self, run: _ContextRun, words: _Words) -> None:
        if not words or not run.fields.get("add_timestamps"):
            return
        run.record.words.extend(words)
        stamps = {
            "words": [word for word, _, _ in words],
            "start": [json_number(start) for _, start, _ in words],
            "end": [json_number(end) for _, _, end in words],
        }
        await self._send(run, "timestamps", word_timestamps=stamps)

    async def _send(
        self, run: _ContextRun, kind: str, *, done: bool = False, **fields: Any
    ) -> None:
        if self._faults.stalled:
            return
        message = {"type": kind, "done": done, "status_code": 206, **fields}
        message["context_id"] = run.record.context_id
        await self._ws.send_str(json.dumps(message))

    async def _error(
        self,
        context_id: str | None,
        status: int,
        title: str,
        message: str,
        code: str | None = "invalid_request",
    ) -> None:
        error: dict[str, Any] = {"type": "error", "done": True, "status_code": status}
        if self._structured:
            error |= {"title": title, "message": message, "error_code": code, "request_id": _id()}
        else:
            error["error"] = f"{title}: {message}"
        if context_id is not None:
            error["context_id"] = context_id
        self._c.errors.append(error)
        await self._ws.send_str(json.dumps(error))


def _validated(data: dict[str, Any]) -> dict[str, Any]:
    """The request's fields that must stay the same on a context; ``_Invalid`` if the
    request is not one the service takes."""
    if unknown := sorted(set(data) - _FIELDS):
        raise _Invalid(f"Unknown field {unknown[0]!r}.")
    if not isinstance(data.get("model_id"), str) or not data["model_id"]:
        raise _Invalid("model_id is required.")
    if not isinstance(data.get("transcript"), str):
        raise _Invalid("transcript must be a string.")
    voice = data.get("voice")
    if not isinstance(voice, dict) or voice.get("mode") != "id" or not voice.get("id"):
        raise _Invalid('voice must be {"mode": "id", "id": ...}.')
    output = data.get("output_format")
    if (
        not isinstance(output, dict)
        or output.get("container") != "raw"
        or output.get("encoding") != "pcm_s16le"  # the only encoding this server makes
        or output.get("sample_rate") not in _RATES
    ):
        raise _Invalid("output_format must be raw pcm_s16le at a supported sample_rate.")
    delay = data.get("max_buffer_delay_ms", 3000)
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= 5000:
        raise _Invalid("max_buffer_delay_ms must be an integer from 0 to 5000.")
    if "continue" in data and not isinstance(data["continue"], bool):
        raise _Invalid("continue must be a boolean.")
    return {key: value for key, value in data.items() if key not in _PER_INPUT}
