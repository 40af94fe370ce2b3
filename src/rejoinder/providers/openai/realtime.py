"""OpenAI Realtime API (GA, WebSocket) as a ``RealtimeModel``: speech in, speech out.

``from rejoinder.providers import openai; llm = openai.Realtime(voice="marin")``

What is implemented (the WebSocket transport, model ``gpt-realtime`` and compatible):

- Client events: ``session.update`` (instructions, flat function tools, ``tool_choice``
  "auto", ``output_modalities`` ["audio"], 24 kHz PCM in and out, voice, server VAD or
  none, input transcription), ``input_audio_buffer.append`` (and ``.commit`` before a
  reply when turn detection is off), ``conversation.item.create`` (user, assistant and
  system text messages, ``function_call_output``), ``conversation.item.truncate``,
  ``response.create`` (optionally with one-off instructions) and ``response.cancel``.
- Server events: ``session.created``/``session.updated``, ``error``,
  ``input_audio_buffer.speech_started`` and ``.committed``, input transcription
  ``completed``/``failed``, ``response.created``, ``response.output_audio.delta`` and
  ``.done``, ``response.output_audio_transcript.delta``, ``response.output_item.done``
  and ``response.function_call_arguments.done`` (function calls), ``response.done``.
  The beta names of the audio and transcript events are accepted too. Everything else
  (rate limits, item bookkeeping, text output, partial transcripts, ``speech_stopped``)
  is ignored.

Not implemented: WebRTC and SIP transports, ephemeral client secrets, out-of-band
responses (``conversation: "none"``, custom ``input``), MCP and other hosted tools,
image and text-only output, prompts, semantic VAD-specific options beyond passing a
``turn_detection`` dict through, ``input_audio_buffer.clear``, and item deletion or
retrieval. The conversation history is replayed as text on every (re)connect; audio of
earlier turns is not.

Barge-in: with server VAD (``interrupt_response``) the server cancels a running
response by itself when the user starts speaking. The client still sends
``conversation.item.truncate`` on ``audio_interrupted``: audio is generated faster than
real time, so the server holds words the user never heard, and only the client knows
where playback stopped.

``aiohttp``, ``numpy`` and ``soxr`` are imported on first use, so importing this module is
cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode

from ...models.realtime import (
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeModel,
    RealtimeSession,
    Reconnected,
    ToolOutputFate,
)
from . import _realtime_protocol as wire
from ._realtime_protocol import SAMPLE_RATE, JSONObject, RealtimeProtocol

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.audio_utils import Resampler
    from ...models.chat import FunctionCallOutput
    from ...models.tools import ToolDefinition

__all__ = ["DEFAULT_TURN_DETECTION", "OpenAIRealtimeSession", "Realtime"]

logger = logging.getLogger("rejoinder.providers.openai.realtime")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TURN_DETECTION: Mapping[str, Any] = MappingProxyType(
    {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
    }
)
_USER_AGENT = "rejoinder/0.1"
_CLOSE_TIMEOUT = 2.0
_CHUNK_BYTES = SAMPLE_RATE // 10 * 2  # 100 ms of 16-bit mono
_EARLY_AUDIO_CHUNKS = 50
"""Audio kept while the first connection is set up (5 s); older chunks are dropped."""


class Realtime(RealtimeModel):
    """The OpenAI Realtime API over a WebSocket. Each ``session()`` is one connection."""

    duplex = False
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        *,
        model: str = "gpt-realtime",
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        voice: str = "marin",
        turn_detection: Mapping[str, Any] | None = DEFAULT_TURN_DETECTION,
        input_transcription_model: str | None = "gpt-4o-mini-transcribe",
        connect_timeout: float = 10.0,
        max_reconnect_attempts: int = 3,
        reconnect_backoff: float = 0.5,
    ) -> None:
        """
        Args:
            model: the Realtime model, sent as the ``model`` query parameter.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``.
            base_url: the API root; ``https``/``http`` become ``wss``/``ws``.
            voice: the output voice (fixed once the model has spoken).
            turn_detection: the ``audio.input.turn_detection`` object; ``None`` turns
                server VAD off (buffered audio is committed on ``generate_reply``).
            input_transcription_model: transcribes the user's speech (``None``: off, and
                user turns then end with empty text).
            connect_timeout: seconds for connecting and configuring, each (re)connect.
            max_reconnect_attempts: reconnects tried after the connection drops.
            reconnect_backoff: seconds before the first reconnect; doubles each try.
        """
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            raise ValueError(
                "openai.Realtime needs an API key: pass api_key=... or set OPENAI_API_KEY"
            )
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        if max_reconnect_attempts < 0 or reconnect_backoff < 0:
            raise ValueError("max_reconnect_attempts and reconnect_backoff must be >= 0")
        self._model = model
        self._settings = _Settings(
            url=realtime_url(base_url, model),
            headers={"Authorization": f"Bearer {key}", "User-Agent": _USER_AGENT},
            audio=wire.AudioSettings(
                voice=voice,
                turn_detection=dict(turn_detection) if turn_detection is not None else None,
                transcription_model=input_transcription_model,
            ),
            connect_timeout=connect_timeout,
            max_reconnect_attempts=max_reconnect_attempts,
            reconnect_backoff=reconnect_backoff,
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "openai"

    @property
    def url(self) -> str:
        return self._settings.url

    def __repr__(self) -> str:
        return f"openai.Realtime(model={self._model!r}, url={self._settings.url!r})"

    def session(self) -> OpenAIRealtimeSession:
        return OpenAIRealtimeSession(self._settings)


def realtime_url(base_url: str, model: str) -> str:
    base = base_url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return f"{base}/realtime?{urlencode({'model': model})}"


@dataclass(frozen=True, slots=True)
class _Settings:
    url: str
    headers: Mapping[str, str]
    audio: wire.AudioSettings
    connect_timeout: float
    max_reconnect_attempts: int
    reconnect_backoff: float


@dataclass(frozen=True, slots=True)
class _Ended:
    """Why a connection's pump stopped."""

    reason: str
    fatal: bool = False


_State = Literal["new", "connecting", "live", "reconnecting", "closed"]


class OpenAIRealtimeSession(RealtimeSession):
    """One conversation: a WebSocket, reconnected and re-seeded when it drops.

    Calls from the agent session never block: client events go to an outbox that a
    writer task sends in order. Server events are read by a reader task and turned into
    ``RealtimeEvent`` values by ``RealtimeProtocol``.
    """

    def __init__(self, settings: _Settings) -> None:
        self._s = settings
        self._state: _State = "new"
        self._config = RealtimeConfig(instructions="")
        self._instructions = ""
        self._tools: tuple[ToolDefinition, ...] = ()
        self._socket = _Socket(settings.url, settings.headers)
        self._protocol = self._new_protocol()
        self._mic = _MicChunker()
        self._outbox: deque[JSONObject] = deque()
        self._early_audio: deque[JSONObject] = deque(maxlen=_EARLY_AUDIO_CHUNKS)
        self._wake = asyncio.Event()
        self._events: asyncio.Queue[RealtimeEvent | None] = asyncio.Queue()
        self._ended = False
        self._uncommitted_audio = False
        self._connecting: asyncio.Task[str | None] | None = None
        self._runner: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, config: RealtimeConfig) -> None:
        if self._state != "new":
            raise RuntimeError("start() can be called once, on a new session")
        self._config = config
        self._instructions = config.instructions
        self._tools = tuple(config.tools)
        self._state = "connecting"
        self._connecting = asyncio.create_task(self._open(), name="openai-realtime-connect")
        try:
            session_id = await self._connecting
        except asyncio.CancelledError:
            await self._fail_start()
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            raise RealtimeError("the session was closed while connecting") from None
        except BaseException:
            await self._fail_start()
            raise
        finally:
            self._connecting = None
        logger.debug("realtime session %s configured", session_id)
        self._state = "live"
        self._outbox.extend(self._early_audio)
        self._early_audio.clear()
        self._runner = asyncio.create_task(self._run(), name="openai-realtime-session")

    async def _fail_start(self) -> None:
        self._state = "closed"
        await self._socket.close()
        self._finish()

    def events(self) -> AsyncIterator[RealtimeEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[RealtimeEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)  # so any other iterator ends too
                return
            yield event

    async def aclose(self) -> None:
        if self._state == "closed" and self._runner is None and self._connecting is None:
            self._finish()
            return
        self._state = "closed"
        tasks = [t for t in (self._runner, self._connecting) if t is not None and not t.done()]
        self._runner = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT)
        await self._socket.close()
        self._finish()

    # -- the session's calls ----------------------------------------------------------------

    def push_audio(self, frame: AudioFrame) -> None:
        if self._state in ("closed", "reconnecting"):
            return  # audio from before a reconnect would reach a conversation that moved on
        for chunk in self._mic.push(frame):
            event = wire.audio_append(chunk)
            if self._state == "live":
                self._send(event)
            else:
                self._early_audio.append(event)
            self._uncommitted_audio = True

    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        if self._state == "closed":
            return "silent"
        fate = self._protocol.submit_tool_output(output, reply_required)
        self._take_protocol_output()
        return fate

    def add_context(self, text: str) -> None:
        self._send(wire.item_create(wire.message_item("system", text)))

    def update_instructions(self, instructions: str) -> None:
        self._instructions = instructions
        if self._state != "new":  # before start, start() sends it with the rest
            self._send(wire.session_update({"type": "realtime", "instructions": instructions}))

    def update_tools(self, tools: Sequence[ToolDefinition]) -> None:
        self._tools = tuple(tools)
        if self._state != "new":
            self._send(wire.session_update({"type": "realtime", **wire.tools_config(self._tools)}))

    def generate_reply(self, instructions: str | None = None) -> None:
        if self._s.audio.turn_detection is None and self._uncommitted_audio:
            # Without server VAD nobody else ends the user's audio turn.
            self._send({"type": "input_audio_buffer.commit"})
            self._uncommitted_audio = False
        self._send(wire.response_create(instructions))

    def send_user_text(self, text: str) -> None:
        self._send(wire.item_create(wire.message_item("user", text)))
        self._send(wire.response_create())

    def audio_interrupted(self, heard_seconds: float) -> None:
        if self._state == "closed":
            return
        self._protocol.interrupt(heard_seconds)
        self._take_protocol_output()

    # -- sending ----------------------------------------------------------------------------

    def _send(self, event: JSONObject) -> None:
        if self._state == "closed":
            return
        self._outbox.append(event)
        self._wake.set()

    def _take_protocol_output(self) -> None:
        for event in self._protocol.take_outgoing():
            self._send(event)

    def _new_protocol(self) -> RealtimeProtocol:
        return RealtimeProtocol(transcribes_input=self._s.audio.transcription_model is not None)

    def _emit(self, event: RealtimeEvent) -> None:
        if not self._ended:
            self._events.put_nowait(event)

    def _finish(self) -> None:
        if not self._ended:
            self._ended = True
            self._events.put_nowait(None)

    # -- connecting -------------------------------------------------------------------------

    async def _open(self) -> str | None:
        """Connect, configure and seed the history; return the server's session id."""
        try:
            seed = wire.history_items(self._config.history())
        except Exception as exc:
            raise RealtimeError(f"reading the conversation history failed: {exc!r}") from exc
        try:
            async with asyncio.timeout(self._s.connect_timeout):
                ws = await self._socket.connect()
                created = await self._read_until(ws, "session.created", None)
                update = wire.session_update(
                    wire.session_config(self._s.audio, self._instructions, self._tools)
                )
                await ws.send_str(json.dumps(update))
                await self._read_until(ws, "session.updated", update["event_id"])
                for event in seed:
                    await ws.send_str(json.dumps(event))
        except TimeoutError:
            await self._socket.close_ws()
            raise RealtimeError(
                f"timed out after {self._s.connect_timeout}s setting up {self._s.url}"
            ) from None
        except RealtimeError:
            await self._socket.close_ws()
            raise
        except BaseException as exc:
            await self._socket.close_ws()
            if isinstance(exc, Exception):  # e.g. the socket reset mid-handshake
                raise RealtimeError(f"setting up {self._s.url} failed: {exc!r}") from exc
            raise
        session = created.get("session")
        session_id = session.get("id") if isinstance(session, dict) else None
        return session_id if isinstance(session_id, str) else None

    async def _read_until(
        self, ws: aiohttp.ClientWebSocketResponse, wanted: str, event_id: str | None
    ) -> JSONObject:
        """Read until an event of type ``wanted``; events before it are handled normally."""
        import aiohttp

        while True:
            message = await ws.receive()
            if message.type != aiohttp.WSMsgType.TEXT:
                raise RealtimeError(f"the server closed the connection before {wanted}")
            try:
                event: object = json.loads(message.data)
            except ValueError:
                event = None
            if isinstance(event, dict) and event.get("type") == wanted:
                return event
            if isinstance(event, dict) and event.get("type") == "error":
                error = _setup_error(event, event_id)
                if error is not None:
                    raise error
            fatal = self._dispatch(message.data)
            if fatal is not None:
                raise fatal

    # -- running ----------------------------------------------------------------------------

    async def _run(self) -> None:
        ended_by_close = False
        try:
            while True:
                ended = await self._pump()
                await self._socket.close_ws()
                if ended.fatal:
                    self._emit(ConnectionLost(ended.reason, reconnecting=False))
                    break
                if not await self._reconnect(ended.reason):
                    break
        except asyncio.CancelledError:
            ended_by_close = True
            raise
        finally:
            if not ended_by_close:
                self._state = "closed"
                self._finish()
        await self._socket.close()

    async def _pump(self) -> _Ended:
        ws = self._socket.ws
        if ws is None:
            return _Ended("no connection")
        reader = asyncio.create_task(self._read_loop(ws), name="openai-realtime-reader")
        writer = asyncio.create_task(self._write_loop(ws), name="openai-realtime-writer")
        try:
            done, _ = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
        finished = reader if reader in done else writer
        try:
            return finished.result()
        except Exception as exc:  # a bug here must end the session, not hang it
            logger.exception("the realtime connection loop failed")
            return _Ended(f"internal error: {exc!r}", fatal=True)

    async def _read_loop(self, ws: aiohttp.ClientWebSocketResponse) -> _Ended:
        import aiohttp

        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.TEXT:
                fatal = self._dispatch(message.data)
                if fatal is not None:
                    return _Ended(str(fatal), fatal=True)
            elif message.type == aiohttp.WSMsgType.BINARY:
                self._emit(ProviderError(RealtimeError("the server sent a binary frame")))
            elif message.type == aiohttp.WSMsgType.ERROR:
                return _Ended(f"the connection failed: {ws.exception() or message.data}")
            else:
                return _Ended(f"the server closed the connection (code {ws.close_code})")

    async def _write_loop(self, ws: aiohttp.ClientWebSocketResponse) -> _Ended:
        while True:
            while self._outbox:
                event = self._outbox[0]
                try:
                    await ws.send_str(json.dumps(event))
                except Exception as exc:
                    return _Ended(f"sending to the server failed: {exc or type(exc).__name__}")
                self._outbox.popleft()
            self._wake.clear()
            await self._wake.wait()

    def _dispatch(self, text: str) -> RealtimeError | None:
        """Handle one server message; return the fatal error it reported, if any."""
        events = self._protocol.receive(text)
        self._take_protocol_output()
        fatal: RealtimeError | None = None
        for event in events:
            self._emit(event)
            if isinstance(event, ProviderError) and event.error.fatal:
                fatal = event.error
        return fatal

    async def _reconnect(self, reason: str) -> bool:
        """Open a new connection seeded with the history; False when giving up."""
        attempts = self._s.max_reconnect_attempts
        self._state = "reconnecting"
        # What was queued refers to the lost session (its items, responses, calls).
        self._outbox.clear()
        self._mic.reset()
        self._protocol = self._new_protocol()
        self._emit(ConnectionLost(reason, reconnecting=attempts > 0))
        if attempts == 0:
            return False
        last: RealtimeError | None = None
        tried = 0
        for attempt in range(attempts):
            tried += 1
            await asyncio.sleep(self._s.reconnect_backoff * 2**attempt)
            try:
                session_id = await self._open()
            except RealtimeError as exc:
                logger.info("reconnect attempt %d/%d failed: %s", attempt + 1, attempts, exc)
                last = exc
                if exc.fatal:
                    break
                continue
            self._state = "live"
            self._wake.set()
            self._emit(Reconnected(session_id))
            return True
        tries = "attempt" if tried == 1 else "attempts"
        error = RealtimeError(
            f"the connection was lost ({reason}) and {tried} reconnect {tries} failed: {last}",
            fatal=True,
            code=last.code if last is not None else None,
        )
        self._emit(ProviderError(error))
        self._emit(ConnectionLost(str(error), reconnecting=False))
        return False


class _Socket:
    """Opens and closes the WebSocket, and the aiohttp session it runs on."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self._url = url
        self._headers = dict(headers)
        self._http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def connect(self) -> aiohttp.ClientWebSocketResponse:
        import aiohttp

        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        try:
            self.ws = await self._http.ws_connect(
                self._url,
                headers=self._headers,
                timeout=aiohttp.ClientWSTimeout(ws_close=1.0),
                max_msg_size=16 * 1024 * 1024,
            )
        except aiohttp.WSServerHandshakeError as exc:
            fatal = exc.status in (401, 403)
            raise RealtimeError(
                f"{self._url} refused the connection: HTTP {exc.status} {exc.message}".rstrip(),
                fatal=fatal,
                code=f"http_{exc.status}",
            ) from exc
        except aiohttp.InvalidURL as exc:
            raise RealtimeError(f"invalid Realtime URL {self._url!r}", fatal=True) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise RealtimeError(f"cannot connect to {self._url}: {exc}") from exc
        return self.ws

    async def close_ws(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None and not ws.closed:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CLOSE_TIMEOUT):
                    await ws.close()

    async def close(self) -> None:
        await self.close_ws()
        http, self._http = self._http, None
        if http is not None and not http.closed:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CLOSE_TIMEOUT):
                    await http.close()


class _MicChunker:
    """Microphone frames (any rate, any channel count) → 100 ms chunks of 24 kHz mono PCM.

    Fixed-size appends keep the number of events (and their JSON overhead) low whatever
    frame size the microphone delivers.
    """

    def __init__(self) -> None:
        self._resampler: Resampler | None = None
        self._pending = bytearray()

    def push(self, frame: AudioFrame) -> list[bytes]:
        from ...models.audio_utils import Resampler

        mono = _downmix(frame)
        if self._resampler is None or self._resampler.in_rate != mono.sample_rate:
            self._resampler = Resampler(mono.sample_rate, SAMPLE_RATE)
        out = self._resampler.push(mono)
        if out is not None:
            self._pending += out.to_pcm()
        chunks: list[bytes] = []
        while len(self._pending) >= _CHUNK_BYTES:
            chunks.append(bytes(self._pending[:_CHUNK_BYTES]))
            del self._pending[:_CHUNK_BYTES]
        return chunks

    def reset(self) -> None:
        self._resampler = None
        self._pending.clear()


def _downmix(frame: AudioFrame) -> AudioFrame:
    if frame.num_channels == 1:
        return frame
    import numpy as np

    from ...models.audio import AudioFrame

    mixed = frame.data.reshape(-1, frame.num_channels).mean(axis=1)
    return AudioFrame(np.round(mixed).astype(np.int16), frame.sample_rate)


def _setup_error(event: JSONObject, event_id: str | None) -> RealtimeError | None:
    """An ``error`` during set-up that must fail it: fatal, or a rejected session.update."""
    error = wire.ServerError.parse(event)
    rejected = event_id is not None and error.event_id == event_id
    if not (error.fatal or rejected):
        return None
    what = "rejected the session configuration" if rejected else "refused the session"
    return RealtimeError(f"the server {what}: {error.message}", fatal=error.fatal, code=error.code)
