"""``GeminiLiveSession``: one Gemini Live conversation's connections — connecting (with
retries before anything was said), the writer that keeps client messages in order, the
reader that hands frames to the sans-I/O ``LiveProtocol``, replacing the connection
(resumed with the newest handle) and closing. The model and its settings are
``live.Live``.

**Replacing a connection.** A connection lasts about ten minutes, and the service says
so (``goAway``) about a minute before it ends; the setup cannot change while a connection
is open. So the session replaces its connection, resuming the conversation with the
newest resumable handle, when

- the service announced its end (``goAway``),
- the connection is older than ``recycle_after`` (in case no GoAway comes), or
- the agent changed (new instructions or tools: a resumed session takes a new setup),

at the first *quiet* moment: no model turn, no user turn, no call waiting for its result,
no reply asked for, and a handle issued after the last change (resuming it loses
nothing). Nothing was lost, so no ``ConnectionLost`` is reported, only ``Reconnected``;
the user's audio meanwhile is held for the new connection. If the GoAway's deadline comes
first, the switch is made anyway a little before it, and reported as a lost connection.

**A lost connection** (a drop, an error close) is reconnected the same way, resuming the
newest handle (if the service refuses it, a new session is seeded with the history);
what the lost connection was doing is reported lost unless it was quiet. Reconnects are
bounded: ``max_reconnect_attempts`` tries with exponential backoff, and connections that
keep ending within seconds of opening count as failures too, so a service that accepts
and drops at once cannot cause a reconnect storm.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...models.realtime import (
    ConnectionLost,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeSession,
    Reconnected,
    ToolOutputFate,
)
from .._retry import RetryPolicy, sleep_unless_closed, transient_connect_failure, with_retries
from ._live_io import (
    ClientActivity,
    Link,
    MicInput,
    SetupRefused,
    close_ws,
    open_connection,
    read_frames,
)
from ._live_protocol import LiveProtocol, logger
from ._live_wire import (
    JSONObject,
    SetupOptions,
    activity_end,
    activity_start,
    audio_input,
    client_content,
    history_turns,
    redact,
    setup_message,
)

if TYPE_CHECKING:
    import aiohttp

    from ...models.audio import AudioFrame
    from ...models.chat import FunctionCallOutput
    from ...models.image import ImageContent
    from ...models.tools import ToolDefinition
    from ...models.vad import VAD

__all__ = ["GeminiLiveSession", "Settings"]

_Phase = Literal["new", "connecting", "live", "switching", "reconnecting", "closed"]
_POLL = 0.2
"""How often a due switch looks for a quiet moment, in seconds."""
_FORCE_MARGIN = 2.0
"""A switch no quiet moment allowed is made this long before the GoAway deadline."""
_STABLE_AFTER = 5.0
"""A connection that ended sooner than this after opening counts as a failed attempt."""
_HELD_AUDIO = 100
"""Audio chunks (10 s) held for a connection being opened; older ones are dropped."""
NEW_INSTRUCTIONS = "(From now on, follow these instructions instead of the earlier ones.)\n"


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _is_audio(message: JSONObject) -> bool:
    realtime = message.get("realtimeInput")
    return isinstance(realtime, dict) and "audio" in realtime


@dataclass(frozen=True, slots=True)
class Settings:
    """A ``Live`` model's settings, shared by its sessions."""

    url: str
    setup: SetupOptions
    vad: VAD | None
    user_turn_silence: float
    connect_timeout: float
    close_timeout: float
    max_reconnect_attempts: int
    reconnect_backoff: float
    recycle_after: float | None
    retry: RetryPolicy


class GeminiLiveSession(RealtimeSession):
    """One Gemini Live conversation; see ``RealtimeSession`` for the contract and the
    module for how connections are replaced.

    Calls from the agent session never block: messages go to a writer in order (or wait
    for the next connection while one is being opened). ``generate_reply`` and
    ``send_user_text`` send a completed user turn (instructions, or the typed text);
    ``add_context`` an uncompleted one. ``audio_interrupted`` drops what still comes for
    the cut turn: the API has no truncation, the server estimates what was heard itself.
    """

    def __init__(self, settings: Settings) -> None:
        self._s = settings
        self._phase: _Phase = "new"
        self._events: asyncio.Queue[RealtimeEvent | None] = asyncio.Queue()
        self._events_ended = False
        self._config = RealtimeConfig(instructions="")
        self._instructions = ""
        self._tools: tuple[ToolDefinition, ...] = ()
        self._set_up: tuple[str, tuple[ToolDefinition, ...]] = ("", ())
        """The instructions and tools of the current connection's setup."""
        self._http: aiohttp.ClientSession | None = None
        self._link: Link | None = None
        self._connection = 0
        self._protocol = self._new_protocol(1)
        self._pending: deque[JSONObject] = deque()
        """Messages waiting for the next connection, in order (audio bounded)."""
        self._pending_audio = 0
        self._mic = MicInput()
        self._activity = ClientActivity(settings.vad) if settings.vad is not None else None
        self._handle: str | None = None
        self._switch: tuple[str, bool, bool] | None = None
        """Set when we close the connection on purpose: (why, forced, our own reason:
        the agent changed or the connection aged, not the service going away)."""
        self._wake = asyncio.Event()
        self._close_signal = asyncio.Event()
        self._close_requested = False
        self._closing: asyncio.Event | None = None
        self._connected_at = 0.0
        self._unstable = 0
        self._run_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self.recycles = 0
        """Connections replaced with nothing lost (a GoAway, ``recycle_after``, a new
        agent's setup, a quiet drop)."""
        self.reconnects = 0
        """Connections replaced after a loss."""
        self.connect_retries = 0
        """Retries of the first connection (each also logged as a warning)."""
        self.dropped_audio_chunks = 0
        """Input chunks dropped while reconnecting after a loss."""

    @property
    def handle(self) -> str | None:
        """The newest resumable session handle."""
        return self._handle

    # -- RealtimeSession ----------------------------------------------------------------

    async def start(self, config: RealtimeConfig) -> None:
        if self._phase != "new":
            raise RuntimeError("GeminiLiveSession.start() may be called once, on a new session")
        self._config = config
        self._instructions = config.instructions
        self._tools = tuple(config.tools)
        self._phase = "connecting"
        try:
            ws = await self._open_first()
        except BaseException:
            self._phase = "closed"
            await self._release()
            self._end_events()
            raise
        if self._close_requested:  # aclose() ran while we were connecting
            await close_ws(ws, self._s.close_timeout)
            self._phase = "closed"
            await self._release()
            self._end_events()
            return
        self._go_live(ws)
        self._run_task = asyncio.create_task(self._run(), name="gemini-live-session")

    async def events(self) -> AsyncIterator[RealtimeEvent]:
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)  # a later iteration ends at once too
                return
            yield event

    def push_audio(self, frame: AudioFrame) -> None:
        if self._phase in ("closed", "reconnecting"):
            if self._phase == "reconnecting":
                # Audio from before a reconnect would reach a conversation that moved on.
                self.dropped_audio_chunks += len(self._mic.push(frame))
            return
        for pcm, chunk in self._mic.push(frame):
            steps = self._activity.push(chunk, pcm) if self._activity is not None else [pcm]
            for step in steps:
                if step == "start":
                    self._send(activity_start())
                    self._protocol.activity_started()
                elif step == "end":
                    self._send(activity_end())
                    self._protocol.activity_ended()
                else:
                    self._send_audio(step)
            self._protocol.audio_pushed(chunk.samples_per_channel)

    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        if self._phase == "closed":
            return "silent"
        return self._protocol.submit_tool_output(output, reply_required)

    def add_context(self, text: str) -> None:
        self._protocol.add_context(text)

    def add_image(self, image: ImageContent) -> None:
        if image.data is None or image.mime_type is None:
            raise RealtimeError(
                "Gemini Live takes images as bytes, not a link: fetch it and pass "
                "ImageContent.from_bytes(...)"
            )
        self._protocol.add_image(image.mime_type, image.base64())

    def update_instructions(self, instructions: str) -> None:
        changed = instructions != self._instructions
        self._instructions = instructions
        if self._phase != "new" and changed:
            # Followed from now on; the next connection's setup carries them.
            self._protocol.add_context(NEW_INSTRUCTIONS + instructions)
            self._wake.set()

    def update_tools(self, tools: Sequence[ToolDefinition]) -> None:
        self._tools = tuple(tools)
        if self._phase != "new":
            self._wake.set()  # declared by the next connection's setup

    def generate_reply(self, instructions: str | None = None) -> None:
        self._protocol.request_reply(instructions)

    def send_user_text(self, text: str) -> None:
        self._protocol.request_reply(text)

    def audio_interrupted(self, heard_seconds: float) -> None:
        self._protocol.playback_cut()

    async def aclose(self) -> None:
        if self._closing is not None:
            await self._closing.wait()
            return
        self._closing = asyncio.Event()
        try:
            self._close_requested = True
            self._close_signal.set()
            task = self._run_task
            if task is not None and not task.done():
                if self._link is not None:
                    await self._link.close(self._s.close_timeout)  # the reader ends
                await asyncio.wait([task], timeout=self._s.close_timeout)
                if not task.done():
                    task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._phase = "closed"
            await self._release()
            self._end_events()
        finally:
            self._closing.set()

    # -- sending ------------------------------------------------------------------------

    def _send(self, message: JSONObject) -> None:
        if self._phase == "live" and self._link is not None:
            self._link.send(message)
        elif self._phase != "closed":
            self._pending.append(message)

    def _send_audio(self, pcm: bytes) -> None:
        if self._phase == "live" and self._link is not None:
            self._link.send(audio_input(pcm))
            return
        self._pending.append(audio_input(pcm))
        self._pending_audio += 1
        if self._pending_audio > _HELD_AUDIO:  # keep the newest audio, every other message
            for message in self._pending:
                if _is_audio(message):
                    self._pending.remove(message)
                    self._pending_audio -= 1
                    break

    def _emit(self, event: RealtimeEvent) -> None:
        if not self._events_ended:
            self._events.put_nowait(event)

    def _end_events(self) -> None:
        if not self._events_ended:
            self._events_ended = True
            self._events.put_nowait(None)

    def _new_protocol(self, connection: int) -> LiveProtocol:
        return LiveProtocol(
            self._emit,
            self._send,
            connection=connection,
            non_blocking=self._s.setup.non_blocking,
            client_activity=self._s.vad is not None,
            user_turn_silence=self._s.user_turn_silence,
            clock=_loop_time,
        )

    # -- connecting ---------------------------------------------------------------------

    async def _open_first(self) -> aiohttp.ClientWebSocketResponse:
        """``_open``, tried again after a transient failure (``_retry``). Only the first
        connection: a reconnect has its own attempts and backoff."""

        def counted() -> None:
            self.connect_retries += 1

        # aclose() may come during a wait: no connection may be opened after it.
        wait = sleep_unless_closed(self._close_signal, lambda: self._close_requested, "Gemini Live")
        return await with_retries(
            self._open, self._s.retry, what="Gemini Live", on_retry=counted, sleep=wait
        )

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        """A new connection: resuming the newest handle, or a new session seeded with the
        history when there is none (or the service refuses it)."""
        import aiohttp

        if self._http is None:
            self._http = aiohttp.ClientSession()
        if self._handle is not None:
            try:
                return await self._connect(self._handle, seed=[])
            except SetupRefused as exc:
                if transient_connect_failure(exc)[0]:
                    raise
                logger.warning(
                    "Gemini Live: resuming failed (%s); starting a new session with the history",
                    exc,
                )
                self._handle = None
        try:
            turns = history_turns(self._config.history())
        except Exception as exc:
            raise RealtimeError(f"reading the conversation history failed: {exc!r}") from exc
        seed = [client_content(turns, turn_complete=False)] if turns else []
        return await self._connect(None, seed=seed)

    async def _connect(
        self, handle: str | None, *, seed: list[JSONObject]
    ) -> aiohttp.ClientWebSocketResponse:
        assert self._http is not None
        self._set_up = (self._instructions, self._tools)
        setup = setup_message(self._s.setup, self._instructions, self._tools, handle)
        return await open_connection(
            self._http,
            self._s.url,
            setup,
            seed=seed,
            connect_timeout=self._s.connect_timeout,
            close_grace=self._s.close_timeout,
        )

    def _go_live(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._connection += 1
        self._link = Link(ws)
        self._phase = "live"
        self._connected_at = asyncio.get_running_loop().time()
        pending, self._pending, self._pending_audio = self._pending, deque(), 0
        for message in pending:
            self._link.send(message)
        self._watch_task = asyncio.create_task(self._watch(self._link), name="gemini-live-switch")

    # -- the connection loop ------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                assert self._link is not None
                ended = await read_frames(self._link.ws, self._on_frame)
                if self._close_requested:
                    return
                planned, self._switch = self._switch, None
                if ended.error is not None and ended.error.fatal:
                    self._protocol.end()
                    self._emit(ProviderError(ended.error))
                    self._emit(ConnectionLost(ended.reason, reconnecting=False))
                    return
                ours = False
                if planned is not None:
                    reason, forced, ours = planned
                    seamless = not forced
                else:
                    reason, seamless = ended.reason, self._switchable()
                if not await self._reconnect(reason, seamless=seamless, ours=ours):
                    return
        finally:
            self._phase = "closed"
            await self._release()
            self._end_events()

    def _on_frame(self, data: str | bytes) -> None:
        protocol = self._protocol
        had_go_away = protocol.go_away_deadline is not None
        try:
            protocol.receive(data)
        except Exception as exc:  # a bug here must cost one message, not the session
            logger.exception("Gemini Live: handling a server message failed")
            self._emit(ProviderError(RealtimeError(f"Gemini Live: internal error: {exc!r}")))
        if protocol.handle is not None:
            self._handle = protocol.handle
        if not had_go_away and protocol.go_away_deadline is not None:
            self._wake.set()

    async def _reconnect(self, reason: str, *, seamless: bool, ours: bool = False) -> bool:
        """Open the next connection, with bounded attempts and backoff. ``seamless``:
        nothing was lost (the moment was quiet), so no ``ConnectionLost`` is reported
        unless the new connection cannot be opened. ``ours``: we replace it for a reason
        of our own (a new agent, its age), which says nothing about the service's
        health. False: gave up."""
        lived = asyncio.get_running_loop().time() - self._connected_at
        if lived >= _STABLE_AFTER:
            self._unstable = 0
        elif not ours:
            self._unstable += 1  # the service ended it (or let it go) within seconds
        self._cancel_watch()
        link, self._link = self._link, None
        if link is not None:
            await link.close(self._s.close_timeout)
        attempts = self._s.max_reconnect_attempts
        last: RealtimeError | None = None
        if attempts and self._unstable > attempts:
            last = RealtimeError(f"{self._unstable} connections in a row ended within seconds")
            attempts = 0
        if not seamless:
            self._protocol.end()
            self._pending.clear()  # it was meant for a conversation that moved on
            self._pending_audio = 0
            if self._activity is not None:
                self._activity.reset()
            if attempts:  # else the giving up below reports it
                self._emit(ConnectionLost(reason, reconnecting=True))
        self._protocol = self._new_protocol(self._connection + 1)
        self._phase = "switching" if seamless else "reconnecting"
        for attempt in range(attempts):
            retry = attempt + self._unstable  # an unstable service is waited for too
            if retry:
                await asyncio.sleep(self._s.reconnect_backoff * 2 ** (retry - 1))
            if self._close_requested:
                return False
            try:
                ws = await self._open()
            except RealtimeError as exc:
                logger.info("Gemini Live: reconnect attempt %d failed: %s", attempt + 1, exc)
                last = exc
                if exc.fatal:
                    break
                continue
            if seamless:
                self.recycles += 1
                logger.info("Gemini Live: connection replaced (%s)", reason)
            else:
                self.reconnects += 1
            self._go_live(ws)
            self._emit(Reconnected(None))
            return True
        if seamless and attempts:  # lost only now: what was held for it is gone too
            self._pending.clear()
            self._emit(ConnectionLost(reason, reconnecting=True))
        if attempts == 0 and last is None:
            message = f"Gemini Live: {reason}, and reconnecting is disabled"
        else:
            message = f"Gemini Live: {reason}; gave up reconnecting: {last}"
        code = last.code if last is not None else None
        self._emit(ProviderError(RealtimeError(message, fatal=True, code=code)))
        self._emit(ConnectionLost(message, reconnecting=False))
        return False

    # -- replacing the connection at a quiet moment ---------------------------------------

    def _due(self) -> tuple[str, bool] | None:
        """Why the connection should be replaced, if it should, and whether the reason
        is ours (not the service going away)."""
        if self._protocol.go_away_deadline is not None:
            return "the service is going away", False
        if (self._instructions, self._tools) != self._set_up:
            return "the agent changed", True
        limit = self._s.recycle_after
        if limit is not None and asyncio.get_running_loop().time() - self._connected_at >= limit:
            return f"the connection is older than {limit:g} s", True
        return None

    def _switchable(self) -> bool:
        """A quiet moment, with a handle that loses nothing (or none at all: the new
        session is then seeded with the history, which holds everything)."""
        protocol = self._protocol
        return protocol.quiet and (protocol.handle_fresh or self._handle is None)

    async def _watch(self, link: Link) -> None:
        """Replace ``link`` when it is due (``_due``) at the first quiet moment, or just
        before the GoAway deadline if none comes."""
        loop = asyncio.get_running_loop()
        while self._link is link and not self._close_requested:
            due = self._due()
            deadline = self._protocol.go_away_deadline
            forced = deadline is not None and loop.time() >= deadline - _FORCE_MARGIN
            if due is not None and (forced or (self._phase == "live" and self._switchable())):
                reason, ours = due
                self._switch = (reason, forced, ours and not forced)
                self._phase = "switching" if not forced else "reconnecting"
                if not forced:  # what was not written yet goes to the next connection
                    self._pending.extendleft(reversed(link.take_unsent()))
                    self._pending_audio = sum(map(_is_audio, self._pending))
                await link.close(self._s.close_timeout)  # the reader ends; _run goes on
                return
            timeout: float | None = None
            if due is not None:
                timeout = _POLL
            elif self._s.recycle_after is not None:
                timeout = max(self._connected_at + self._s.recycle_after - loop.time(), 0.0)
            if deadline is not None:
                timeout = min(timeout or _POLL, max(deadline - _FORCE_MARGIN - loop.time(), 0))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def _cancel_watch(self) -> None:
        task, self._watch_task = self._watch_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    # -- closing ------------------------------------------------------------------------

    async def _release(self) -> None:
        self._cancel_watch()
        link, self._link = self._link, None
        if link is not None:
            await link.close(self._s.close_timeout)
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    def __repr__(self) -> str:
        return f"GeminiLiveSession(url={redact(self._s.url)!r}, phase={self._phase!r})"
