"""OpenAI Realtime API (GA, WebSocket) as a ``RealtimeModel``: speech in, speech out.

``from rejoinder.providers import openai; llm = openai.Realtime(voice="marin")``

What is implemented (the WebSocket transport, model ``gpt-realtime`` and compatible):

- Client events: ``session.update`` (instructions, flat function tools, ``tool_choice``
  "auto", ``output_modalities`` ["audio"], 24 kHz PCM or 8 kHz G.711 (μ-law, A-law) in
  and out, voice, server VAD or none, input transcription), ``input_audio_buffer.append``
  (and ``.commit`` before a reply when turn detection is off),
  ``conversation.item.create`` (user, assistant and system text messages,
  ``function_call_output``), ``conversation.item.truncate``,
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
import json
import logging
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
from .._retry import RetryPolicy, with_retries
from . import _realtime_wire as wire
from ._auth import DEFAULT_BASE_URL as DEFAULT_BASE_URL  # kept importable from here
from ._auth import base_url_from, require_api_key
from ._realtime_io import CLOSE_TIMEOUT, MicChunker, Socket, pump, read_until
from ._realtime_protocol import RealtimeProtocol
from ._realtime_wire import SAMPLE_RATE, JSONObject

if TYPE_CHECKING:
    from ...models.audio import AudioFrame
    from ...models.chat import FunctionCallOutput
    from ...models.image import ImageContent
    from ...models.tools import ToolDefinition

__all__ = ["DEFAULT_TURN_DETECTION", "OpenAIRealtimeSession", "Realtime"]

logger = logging.getLogger("rejoinder.providers.openai.realtime")

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
        base_url: str | None = None,
        voice: str = "marin",
        turn_detection: Mapping[str, Any] | None = DEFAULT_TURN_DETECTION,
        input_transcription_model: str | None = "gpt-4o-mini-transcribe",
        audio_format: wire.AudioFormatOption = "auto",
        connect_timeout: float = 10.0,
        max_reconnect_attempts: int = 3,
        reconnect_backoff: float = 0.5,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        """
        Args:
            model: the Realtime model, sent as the ``model`` query parameter.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``.
            base_url: the API root; ``https``/``http`` become ``wss``/``ws``. Defaults to
                ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
            voice: the output voice (fixed once the model has spoken).
            turn_detection: the ``audio.input.turn_detection`` object; ``None`` turns
                server VAD off (buffered audio is committed on ``generate_reply``).
            input_transcription_model: transcribes the user's speech (``None``: off, and
                user turns then end with empty text).
            audio_format: the wire audio, the same for input and output. ``"pcm"``:
                24 kHz 16-bit PCM. ``"pcmu"``/``"pcma"``: 8 kHz G.711 μ-law/A-law;
                8 kHz microphone frames are encoded with no resampling, and agent audio
                comes out as 8 kHz frames, so a phone line plays it as it is. ``"auto"``
                (the default): ``"pcmu"`` when the session's microphone runs at 8 kHz
                (``RealtimeConfig.input_sample_rate``: a phone call), else ``"pcm"``.
            connect_timeout: seconds for connecting and configuring, each (re)connect.
            max_reconnect_attempts: reconnects tried after the connection drops.
            reconnect_backoff: seconds before the first reconnect; doubles each try.
            max_retries: how many times ``start`` tries the first connection again after
                a transient failure (cannot connect, connection cut, HTTP 429 or 5xx to
                the upgrade); 0 disables it. A refusal such as 401, 403 or 404, a timeout,
                or a session the server refuses fails at once. Counted in the session's
                ``connect_retries``.
            retry_backoff: seconds before the first such retry, doubling each time, with
                jitter; a ``Retry-After`` of up to 30 s is honoured instead.
            retry_backoff_cap: the longest wait between two such tries, in seconds.
        """
        key = require_api_key(api_key, "openai.Realtime")
        if connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        if max_reconnect_attempts < 0 or reconnect_backoff < 0:
            raise ValueError("max_reconnect_attempts and reconnect_backoff must be >= 0")
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        wire.check_audio_format(audio_format, "openai.Realtime")
        if audio_format in ("pcmu", "pcma"):
            self.sample_rate = wire.G711_RATE  # "auto" decides per session
        self._model = model
        self._settings = _Settings(
            url=realtime_url(base_url_from(base_url), model),
            headers={"Authorization": f"Bearer {key}", "User-Agent": _USER_AGENT},
            audio=wire.AudioSettings(
                voice=voice,
                turn_detection=dict(turn_detection) if turn_detection is not None else None,
                transcription_model=input_transcription_model,
            ),
            audio_format=audio_format,
            connect_timeout=connect_timeout,
            max_reconnect_attempts=max_reconnect_attempts,
            reconnect_backoff=reconnect_backoff,
            retry=retry,
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
    audio_format: str
    """``"pcm"``, ``"pcmu"``, ``"pcma"`` or ``"auto"`` (chosen at ``start``)."""
    connect_timeout: float
    max_reconnect_attempts: int
    reconnect_backoff: float
    retry: RetryPolicy


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
        self._socket = Socket(settings.url, settings.headers)
        # "auto" is decided at start(), from the microphone's rate; 24 kHz PCM until then.
        self._format = wire.choose_audio_format(settings.audio_format, None)
        self._protocol = self._new_protocol()
        self._mic = MicChunker(self._format)
        self._outbox: deque[JSONObject] = deque()
        self._early_audio: deque[JSONObject] = deque(maxlen=_EARLY_AUDIO_CHUNKS)
        self._wake = asyncio.Event()
        self._events: asyncio.Queue[RealtimeEvent | None] = asyncio.Queue()
        self._ended = False
        self._uncommitted_audio = False
        self._connecting: asyncio.Task[str | None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self.connect_retries = 0
        """How many times ``start`` retried the first connection (each retry is also
        logged as a warning on the ``rejoinder.providers.openai`` logger)."""

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, config: RealtimeConfig) -> None:
        if self._state != "new":
            raise RuntimeError("start() can be called once, on a new session")
        self._config = config
        self._instructions = config.instructions
        self._tools = tuple(config.tools)
        chosen = wire.choose_audio_format(self._s.audio_format, config.input_sample_rate)
        if chosen != self._format:
            # Only "auto" gets here; audio pushed before start() was in the other format.
            self._format = chosen
            self._mic = MicChunker(chosen)
            self._early_audio.clear()
            self._protocol = self._new_protocol()
        self._state = "connecting"
        self._connecting = asyncio.create_task(self._open_first(), name="openai-realtime-connect")
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
            await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
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

    def add_image(self, image: ImageContent) -> None:
        if image.data is None:
            raise RealtimeError(
                "the Realtime API takes images as bytes (a data URL), not a link: "
                "fetch it and pass ImageContent.from_bytes(...)"
            )
        self._send(wire.item_create(wire.image_item(image.data_url())))

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
            self._send(wire.audio_commit())
            self._uncommitted_audio = False
        self._protocol.request_reply(instructions)
        self._take_protocol_output()

    def send_user_text(self, text: str) -> None:
        self._protocol.request_reply(user_text=text)
        self._take_protocol_output()

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
        return RealtimeProtocol(
            transcribes_input=self._s.audio.transcription_model is not None, audio=self._format
        )

    def _emit(self, event: RealtimeEvent) -> None:
        if not self._ended:
            self._events.put_nowait(event)

    def _finish(self) -> None:
        if not self._ended:
            self._ended = True
            self._events.put_nowait(None)

    # -- connecting -------------------------------------------------------------------------

    async def _open_first(self) -> str | None:
        """``_open``, tried again after a transient failure (``_retry``). Only the first
        connection: a reconnect has its own attempts and backoff."""

        def counted() -> None:
            self.connect_retries += 1

        return await with_retries(
            self._open, self._s.retry, what="openai.Realtime", on_retry=counted
        )

    async def _open(self) -> str | None:
        """Connect, configure and seed the history; return the server's session id."""
        try:
            seed = wire.history_items(self._config.history())
        except Exception as exc:
            raise RealtimeError(f"reading the conversation history failed: {exc!r}") from exc
        try:
            async with asyncio.timeout(self._s.connect_timeout):
                ws = await self._socket.connect()
                created = await read_until(ws, "session.created", None, self._dispatch)
                update = wire.session_update(
                    wire.session_config(
                        self._s.audio, self._instructions, self._tools, self._format
                    )
                )
                await ws.send_str(json.dumps(update))
                await read_until(ws, "session.updated", update["event_id"], self._dispatch)
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

    # -- running ----------------------------------------------------------------------------

    async def _run(self) -> None:
        ended_by_close = False
        try:
            while True:
                ended = await pump(
                    self._socket.ws, self._outbox, self._wake, self._dispatch, self._emit
                )
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
