"""``GPTLiveSession``: one GPT-Live conversation's connection — connecting, the writer
that keeps client events in order, the reader that hands server frames to the sans-I/O
``ConnectionState`` (``_gpt_live_state``), reconnects, recycling and closing. The model
and its settings are ``gpt_live.GPTLive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Literal

from ...models import FunctionCallOutput, ToolDefinition
from ...models.realtime import (
    ConnectionLost,
    DelegationRequested,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeSession,
    Reconnected,
    ToolOutputFate,
)
from .._retry import sleep_unless_closed, with_retries
from ._auth import DEFAULT_BASE_URL as DEFAULT_BASE_URL  # kept importable from here
from ._gpt_live_io import FormatState, InputAudio, Link, close_ws, open_session
from ._gpt_live_protocol import (
    ANSWER_TYPED,
    MAX_APPEND_CHARS,
    NEW_INSTRUCTIONS,
    SPEAK_NOW,
    JSONObject,
    Options,
    append_event,
    handshake_headers,
    logger,
    mute_event,
    session_start,
    tools_update,
)
from ._gpt_live_state import ConnectionState
from ._realtime_wire import (
    AudioFormat,
    choose_audio_format,
)

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame

__all__ = ["GPTLiveSession"]

_Phase = Literal["new", "connecting", "live", "reconnecting", "closed"]
_QUIET_POLL = 0.2  # how often a due recycle looks for a quiet moment, in seconds


class GPTLiveSession(RealtimeSession):
    """One GPT-Live conversation; see ``RealtimeSession`` for the contract.

    GPT-Live has fewer verbs than the neutral interface, so some calls are translated:

    - ``generate_reply``: there is no "speak now" event (§2.5); a commentary append asks
      the model to answer at once. ``send_user_text``: the text goes in as a thinking
      append (``user: <text>``), then a commentary append asks for an answer to it.
    - ``update_instructions``: startup instructions cannot be replaced (§4.9); the new ones
      are appended as standing rules, and are the startup instructions of a reconnect
      (as are the tools of the last ``update_tools``).
    - ``submit_tool_output``: ``continue`` whatever ``reply_required`` says (the service
      voices every continuation), or ``silent`` for a call the service would refuse (its
      response failed, or its connection is gone): that result goes in as context.
    - Before ``session.started`` every client event is queued (§4.1). While reconnecting,
      input audio is dropped (``dropped_audio_chunks``) and other events wait.
    """

    def __init__(self, options: Options) -> None:
        self._o = options
        self._phase: _Phase = "new"
        self._events: asyncio.Queue[RealtimeEvent | None] = asyncio.Queue()
        self._events_ended = False
        self._pending: list[JSONObject] = []
        """Client events waiting for ``session.started`` (§4.1)."""
        self._muted = False
        self._unanswered: set[str] = set()
        """Client delegations of this connection with no answer sent yet."""
        self._recycle: asyncio.Task[None] | None = None
        self._recycling = False
        """The connection is being replaced at a quiet moment (not lost): input audio
        waits for the new one instead of being dropped."""
        self.recycles = 0
        """How many times the connection was replaced on purpose (``recycle_after``, or an
        ``expired`` close at a quiet moment)."""
        self._ids = itertools.count(1)
        self._config: RealtimeConfig | None = None
        self._instructions = ""
        self._tools: tuple[ToolDefinition, ...] = ()
        self._http: aiohttp.ClientSession | None = None
        self._link: Link | None = None
        self._run_task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._close_requested = False
        self._state = self._new_state()
        self._input: InputAudio | None = None
        self._session_id: str | None = None
        self._usage_before = 0.0
        self.dropped_audio_chunks = 0
        """Input chunks dropped while reconnecting (that audio never reached the service)."""
        self.connect_retries = 0
        """How many times ``start`` retried the first connection (each retry is also
        logged as a warning on the ``rejoinder.providers.openai`` logger)."""
        self._close_signal = asyncio.Event()
        """Set by ``aclose``: ends a wait between retries of the first connection."""

    @property
    def duplex(self) -> bool:
        """Full duplex: the voice model handles barge-in itself; never cut its audio."""
        return True

    @property
    def session_id(self) -> str | None:
        """The service's id for the current connection."""
        return self._session_id

    @property
    def usage_seconds(self) -> float:
        """Billed voice seconds so far, over every connection of this session."""
        return self._usage_before + self._state.usage_seconds

    # -- RealtimeSession ----------------------------------------------------------------

    async def start(self, config: RealtimeConfig) -> None:
        if self._phase != "new":
            raise RuntimeError("GPTLiveSession.start() may be called once, before aclose()")
        self._config = config
        self._instructions = config.instructions
        self._tools = tuple(config.tools)
        self._phase = "connecting"
        try:
            ws, session_id = await self._open_first()
        except BaseException:
            self._phase = "closed"
            await self._release()
            self._end_events()
            raise
        if self._close_requested:  # aclose() ran while we were connecting
            await close_ws(ws, self._o.close_timeout)
            self._phase = "closed"
            await self._release()
            return
        self._go_live(ws, session_id)
        self._run_task = asyncio.create_task(self._run(), name="gpt-live-session")

    async def events(self) -> AsyncIterator[RealtimeEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)  # a later iteration ends at once too
                return
            yield event

    def push_audio(self, frame: AudioFrame) -> None:
        if self._phase == "closed":
            return
        audio = self._audio_format()
        if self._input is None or self._input.audio != audio:
            self._input = InputAudio(audio)
        chunks, samples = self._input.push(frame)
        for chunk in chunks:
            if self._phase == "reconnecting" and not self._recycling:
                # Audio is live: replaying it after the reconnect would put stale speech
                # on the new session's timeline.
                self.dropped_audio_chunks += 1
                logger.debug("GPT-Live: reconnecting, input chunk dropped")
            else:
                self._send({"type": "session.input_audio.append", "audio": chunk})
        self._state.turns.on_audio_pushed(samples)

    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        # reply_required cannot be honoured: the service voices every continuation.
        return self._state.backend.submit(output)

    def add_context(self, text: str) -> None:
        self._send(append_event("thinking", text, self._next_id("ctx")))

    def update_instructions(self, instructions: str) -> None:
        # Startup instructions cannot be replaced (§4.9); the new ones become a standing
        # rule now, and the startup instructions of any reconnect.
        self._instructions = instructions
        if self._phase in ("connecting", "live"):
            text = NEW_INSTRUCTIONS + instructions
            for start in range(0, len(text), MAX_APPEND_CHARS):
                part = text[start : start + MAX_APPEND_CHARS]
                self._send(append_event("instructions", part, self._next_id("instr")))

    def update_tools(self, tools: Sequence[ToolDefinition]) -> None:
        self._tools = tuple(tools)
        # With client delegation the tools are the application's (its own LLM runs
        # them); the service has no tool channel to update (§4.2).
        if self._o.delegation == "responses" and self._phase in ("connecting", "live"):
            self._send(tools_update(self._next_id("update"), self._tools))

    def generate_reply(self, instructions: str | None = None) -> None:
        content = SPEAK_NOW if not instructions else f"{SPEAK_NOW} {instructions}"
        self._request_reply(append_event("commentary", content, self._next_id("reply")))

    def set_input_muted(self, muted: bool) -> None:
        if muted == self._muted:
            return
        self._muted = muted
        if self._phase == "live":
            self._send(mute_event(muted, self._next_id("mute")))

    def answer_delegation(self, delegation_id: str | None, text: str) -> None:
        if self._o.delegation != "client":
            raise RealtimeError("answer_delegation needs GPTLive(delegation='client')")
        if delegation_id is not None:
            self._unanswered.discard(delegation_id)
        else:  # the delegation died with its connection (§4.8)
            text = f"{SPEAK_NOW} You looked this up for the caller: {text}"
        # Appends beyond the first continue the same work (§2.5); each is clipped.
        for start in range(0, len(text), MAX_APPEND_CHARS):
            part = text[start : start + MAX_APPEND_CHARS]
            self._send(append_event("commentary", part, self._next_id("deleg"), delegation_id))

    def send_user_text(self, text: str) -> None:
        told = append_event("thinking", f"user: {text}", self._next_id("ctx"))
        self._request_reply(told, append_event("commentary", ANSWER_TYPED, self._next_id("reply")))

    async def aclose(self) -> None:
        if self._closing is not None:
            await self._closing.wait()
            return
        self._closing = asyncio.Event()
        try:
            await self._shutdown()
        finally:
            self._closing.set()

    # -- sending ------------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    def _request_reply(self, *events: JSONObject) -> None:
        """Send the events of a reply request; an error naming one of them refuses it."""
        self._state.reply_requested(*(str(event["event_id"]) for event in events))
        for event in events:
            self._send(event)

    def _send(self, event: JSONObject) -> None:
        if self._phase == "live" and self._link is not None:
            self._link.send(event)
        elif self._phase == "closed":
            logger.debug("GPT-Live: session closed, %s not sent", event.get("type"))
        else:
            self._pending.append(event)

    def _emit(self, event: RealtimeEvent) -> None:
        if isinstance(event, DelegationRequested):
            self._unanswered.add(event.delegation_id)
        if not self._events_ended:
            self._events.put_nowait(event)

    def _end_events(self) -> None:
        if not self._events_ended:
            self._events_ended = True
            self._events.put_nowait(None)

    # -- connecting ---------------------------------------------------------------------

    async def _open_first(self) -> tuple[aiohttp.ClientWebSocketResponse, str | None]:
        """``_open``, tried again after a transient failure (``_retry``). Only the first
        connection: a reconnect has its own attempts and backoff."""

        def counted() -> None:
            self.connect_retries += 1

        # aclose() may come during a wait: it must not open a connection after it.
        wait = sleep_unless_closed(self._close_signal, lambda: self._close_requested, "GPT-Live")
        return await with_retries(
            self._open, self._o.retry, what="GPT-Live", on_retry=counted, sleep=wait
        )

    async def _open(self) -> tuple[aiohttp.ClientWebSocketResponse, str | None]:
        import aiohttp

        assert self._config is not None
        if self._http is None:
            self._http = aiohttp.ClientSession()
        # The history is read again on every connection: a reconnect reseeds it (§4.8).
        start = session_start(
            self._next_id("start"),
            model=self._o.model,
            instructions=self._instructions,
            history=self._config.history(),
            voice=self._o.voice,
            backend=self._o.backend,
            tools=self._tools,
            audio=self._audio_format(),
            delegation=self._o.delegation,
        )
        return await open_session(
            self._http,
            self._o.endpoint.url,
            handshake_headers(
                self._o.api_key, azure=self._o.endpoint.azure, service_tier=self._o.service_tier
            ),
            start,
            connect_timeout=self._o.connect_timeout,
            close_grace=self._o.close_timeout,
        )

    def _go_live(self, ws: aiohttp.ClientWebSocketResponse, session_id: str | None) -> None:
        self._link = Link(ws)
        self._session_id = session_id
        self._phase = "live"
        pending, self._pending = self._pending, []
        if self._muted:
            # A new connection starts unmuted (§2.4): re-applied state goes first (§4.1).
            # A mute toggled while connecting is queued too; the last one decides.
            self._link.send(mute_event(True, self._next_id("mute")))
        for event in pending:
            self._link.send(event)
        if self._o.recycle_after is not None:
            self._recycle = asyncio.get_running_loop().create_task(
                self._recycle_when_quiet(self._link), name="gpt-live-recycle"
            )

    # -- the connection loop ------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                assert self._link is not None
                lost = await self._read(self._link.ws)
                if lost is None or not await self._reconnect(lost):
                    return
        finally:
            self._phase = "closed"
            await self._release()
            self._end_events()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> str | None:
        """Handle server events until the connection ends. Returns why it was lost, or
        None when the session is over (close requested, or a fatal error)."""
        lost = await self._read_frames(ws)
        if self._recycling and not self._close_requested:
            return "recycled"  # we asked it to close: open the next one
        if isinstance(lost, RealtimeError):
            self._emit(ProviderError(lost))
            self._lose_connection()
            self._emit(ConnectionLost(str(lost), reconnecting=False))
            return None
        return None if self._close_requested else lost

    async def _read_frames(self, ws: aiohttp.ClientWebSocketResponse) -> str | RealtimeError:
        """Frames until the connection ends: the reason it ended, or a fatal error."""
        import aiohttp

        while True:
            try:
                message = await ws.receive()
            except (aiohttp.ClientError, OSError) as exc:
                return f"connection lost: {exc!r}"
            if message.type == aiohttp.WSMsgType.BINARY:
                logger.debug("GPT-Live: ignored a binary frame")  # §1.3: none are used
            elif message.type != aiohttp.WSMsgType.TEXT:
                return f"connection lost (WebSocket {message.type.name.lower()})"
            else:
                outcome = self._state.on_frame(message.data)
                if isinstance(outcome, str):
                    return f"the service closed the session ({outcome})"
                if outcome is not None:
                    return outcome

    def _audio_format(self) -> AudioFormat:
        """The wire audio format: as configured, or for ``"auto"`` chosen from the
        microphone's rate (known from ``start``; 24 kHz PCM before it)."""
        rate = self._config.input_sample_rate if self._config is not None else None
        return choose_audio_format(self._o.audio_format, rate)

    def _new_state(self) -> ConnectionState:
        return FormatState(
            self._emit,
            self._send,
            self._next_id,
            user_turn_silence=self._o.user_turn_silence,
            burst_threshold=self._o.burst_threshold,
            burst_end_silence=self._o.burst_end_silence,
            burst_pause_after=self._o.burst_pause_after,
            audio=self._audio_format,
        )

    def _quiet(self) -> bool:
        return self._phase == "live" and self._state.quiet and not self._unanswered

    async def _recycle_when_quiet(self, link: Link) -> None:
        """After ``recycle_after`` seconds, at the first quiet moment, close this
        connection (``session.close``, §4.8) so ``_run`` opens the next one, seeded with
        the history. Nothing is owed at a quiet moment, so nothing is lost, and the user's
        audio meanwhile is held for the new connection."""
        assert self._o.recycle_after is not None
        await asyncio.sleep(self._o.recycle_after)
        # Quiet is derived from three trackers; looking every 0.2 s is cheaper than
        # signalling each of their changes.
        while self._link is link and not self._quiet():  # noqa: ASYNC110
            await asyncio.sleep(_QUIET_POLL)
        if self._link is not link or self._close_requested:
            return
        logger.info("GPT-Live: recycling the connection (%s) at a quiet moment", self._session_id)
        self._recycling = True
        link.send({"type": "session.close", "event_id": self._next_id("recycle")})
        # From now on what is sent (the user's audio included) waits for the new one.
        self._phase = "reconnecting"
        await asyncio.sleep(self._o.close_timeout)
        if self._link is link:  # no session.closed in time: end it from our side
            await link.close(self._o.close_timeout)

    def _lose_connection(self) -> None:
        """Everything tied to the connection is gone (§4.8)."""
        if self._recycle is not None and self._recycle is not asyncio.current_task():
            self._recycle.cancel()
        self._recycle = None
        self._unanswered.clear()
        self._state.end()
        self._usage_before += self._state.usage_seconds
        self._state = self._new_state()
        self._session_id = None

    async def _reconnect(self, reason: str) -> bool:
        """Reconnect with backoff, the history seeded again. False: gave up.

        A recycle (ours, or the service's ``expired`` close while nothing was going on)
        is not a loss: no ``ConnectionLost`` is reported unless the new connection fails."""
        if reason.endswith("(expired)") and self._quiet():
            self._recycling = True
        recycling = self._recycling
        self._lose_connection()
        self._phase = "reconnecting"
        if self._link is not None:
            link, self._link = self._link, None
            await link.close(self._o.close_timeout)
        attempts = self._o.max_reconnect_attempts
        if attempts <= 0:
            message = f"GPT-Live: {reason}, and reconnecting is disabled"
            self._emit(ProviderError(RealtimeError(message, fatal=True)))
            self._emit(ConnectionLost(reason, reconnecting=False))
            return False
        if not recycling:
            self._emit(ConnectionLost(reason, reconnecting=True))
        last: RealtimeError | None = None
        for attempt in range(attempts):
            if attempt:
                # The first retry is immediate: most drops are one-offs.
                await asyncio.sleep(self._o.reconnect_backoff * 2 ** (attempt - 1))
            try:
                ws, session_id = await self._open()
            except RealtimeError as exc:
                logger.debug("GPT-Live: reconnect attempt %d failed: %s", attempt + 1, exc)
                last = exc
                if exc.fatal:
                    break
                continue
            self._recycling = False
            if recycling:
                self.recycles += 1
            self._go_live(ws, session_id)
            self._emit(Reconnected(session_id))
            return True
        assert last is not None
        if recycling:  # not lost until now: what was held for the new connection is gone
            self._recycling = False
            self._pending.clear()
            self._emit(ConnectionLost(reason, reconnecting=True))
        message = f"GPT-Live: gave up reconnecting after {attempt + 1} attempt(s): {last}"
        self._emit(ProviderError(RealtimeError(message, fatal=True, code=last.code)))
        self._emit(ConnectionLost(f"reconnect failed: {last}", reconnecting=False))
        return False

    # -- closing ------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self._close_requested = True
        self._close_signal.set()
        task = self._run_task
        if task is not None and not task.done():
            if self._phase == "live":
                # The reader ends when session.closed (or the socket close) arrives.
                self._send({"type": "session.close", "event_id": self._next_id("close")})
                await asyncio.wait([task], timeout=self._o.close_timeout)
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._phase = "closed"
        await self._release()
        self._end_events()

    async def _release(self) -> None:
        if self._recycle is not None and self._recycle is not asyncio.current_task():
            self._recycle.cancel()
        self._recycle = None
        link, self._link = self._link, None
        if link is not None:
            await link.close(self._o.close_timeout)
        http, self._http = self._http, None
        if http is not None:
            await http.close()
