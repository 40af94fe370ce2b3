"""Connection: what an agent's entry point receives, whatever the transport.

An agent file defines one function::

    async def entrypoint(conn: rejoinder.io.Connection) -> None:
        session = rj.AgentSession(llm=..., vad=..., stt=..., tts=...)
        await conn.serve(session, Assistant())

``rejoinder dev``/``serve``, the tests and any other host call it once per client. The
transport builds the ``Connection`` (microphone in, ``ReportedPlayback`` out, a way to
send protocol messages) and hands it client messages; ``serve`` wires a session to it,
forwards the session's events to the client as protocol messages, and returns once the
client left or the session closed, with the session closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ..models import is_realtime_model
from ..models.audio import AudioFrame, AudioInput
from ..models.chat import ChatMessage, FunctionCall, FunctionCallOutput, new_id
from ..models.text import TextOutput
from .mic_clock import MIC_BATCH_INTERVAL, mic_clock
from .playback import ReportedPlayback
from .protocol import (
    TIMELINE_KINDS,
    AgentStateMessage,
    ClientMessage,
    ErrorCode,
    ErrorMessage,
    Interrupt,
    MetricsMessage,
    Mute,
    Played,
    Ready,
    ServerMessage,
    Start,
    TimelineMessage,
    ToolMessage,
    TranscriptMessage,
    UserStateMessage,
    UserText,
    json_safe,
)

if TYPE_CHECKING:
    from ..session import Agent, AgentSession
    from .telephony.dialects import CallInfo

__all__ = ["Connection", "Entrypoint", "PushAudioInput"]

logger = logging.getLogger("rejoinder")


class PushAudioInput(AudioInput):
    """Microphone audio a transport pushes as it arrives (PCM16LE mono bytes, or frames).

    The client paces it (a microphone produces it in real time). A reader that waits for
    audio gets it on the next tick of the loop's shared ``MicClock`` (every
    ``batch_interval`` seconds; 0: at once), so that the sessions of one process hear
    their microphones in one loop iteration rather than each at its own moment (see
    ``mic_clock``); a reader that is busy finds every frame queued. At most
    ``max_seconds`` wait to be read; beyond that new audio is dropped and ``push_pcm``
    returns False (the session is not keeping up, or the client sends faster than real
    time)."""

    def __init__(
        self,
        sample_rate: int,
        *,
        max_seconds: float = 5.0,
        batch_interval: float = MIC_BATCH_INTERVAL,
    ) -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        if batch_interval < 0:
            raise ValueError("batch_interval must not be negative")
        self.sample_rate = sample_rate
        self.batch_interval = batch_interval
        self._limit = int(max_seconds * sample_rate)
        self._queued = 0
        self._frames: deque[AudioFrame] = deque()
        self._readers: list[asyncio.Future[None]] = []
        """Readers waiting for audio (one, but a second may come)."""
        self._wake_due = False
        """The clock will wake the readers at its next tick."""
        self._odd = b""
        self._closed = False
        self._discard = False
        self.dropped_samples = 0

    def push_pcm(self, pcm: bytes) -> bool:
        """Queue 16-bit little-endian mono PCM. An odd trailing byte waits for the next
        chunk. Returns False when the audio was dropped (closed, or over the limit)."""
        if self._closed:
            return False
        if self._odd:
            pcm, self._odd = self._odd + pcm, b""
        if len(pcm) % 2:
            pcm, self._odd = pcm[:-1], pcm[-1:]
        if not pcm:
            return True
        return self.push(AudioFrame(np.frombuffer(pcm, "<i2").astype(np.int16), self.sample_rate))

    def push(self, frame: AudioFrame) -> bool:
        if self._closed:
            return False
        if self._discard:
            return True
        samples = frame.samples_per_channel
        if self._queued + samples > self._limit:
            self.dropped_samples += samples
            return False
        self._queued += samples
        self._frames.append(frame)
        if self._readers and not self._wake_due:
            if self.batch_interval:
                self._wake_due = True
                mic_clock(self.batch_interval).call_at_tick(self._wake_readers)
            else:
                self._wake_readers()
        return True

    def _wake_readers(self) -> None:
        self._wake_due = False
        readers, self._readers = self._readers, []
        for reader in readers:
            if not reader.done():  # not cancelled meanwhile
                reader.set_result(None)

    def discard(self) -> None:
        """Nobody listens: accept audio and drop it (never an overrun)."""
        self._discard = True

    def close(self) -> None:
        """The microphone is gone: iteration ends after what was queued."""
        if not self._closed:
            self._closed = True
            self._wake_readers()  # the end need not wait for a tick

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        frames = self._frames
        loop = asyncio.get_running_loop()
        while True:
            if not frames:
                if self._closed:
                    return
                reader: asyncio.Future[None] = loop.create_future()
                self._readers.append(reader)
                try:
                    await reader
                finally:
                    if reader in self._readers:  # cancelled before it was woken
                        self._readers.remove(reader)
                continue
            frame = frames.popleft()
            self._queued -= frame.samples_per_channel
            yield frame


CHARS_PER_SECOND = 15.0
"""Speaking rate assumed to pace agent text before a reply's audio is complete."""


class _AgentText(TextOutput):
    """Agent text for the client, paced by what the listener has heard.

    With audio, each ``played`` report that moves the reply reveals the share of its text
    that its share of audio heard amounts to (whole words; at ``CHARS_PER_SECOND`` until
    the reply's audio is complete and its length known), so the text runs with the voice,
    give or take a word. Without audio (``paced=False``) text is shown as it is delivered.
    The final transcript (exactly what was heard) comes from the history, not from here.
    """

    def __init__(self, send: Callable[[ServerMessage], None]) -> None:
        self._send = send
        self._parts: list[str] = []
        self._shown = 0
        self.paced = True

    async def capture_text(self, text: str) -> None:
        self._parts.append(text)
        if not self.paced:
            self._show(len(self._text()))

    def flush(self) -> None:
        pass  # the text stays until the reply's final transcript replaces it

    def progress(self, heard: float, length: float | None) -> None:
        text = self._text()
        if length is not None and length > 0:
            chars = len(text) * min(1.0, heard / length)
        else:
            chars = heard * CHARS_PER_SECOND
        end = min(len(text), round(chars))
        if end < len(text):  # back to a whole word
            end = text.rfind(" ", 0, end + 1) if text[end : end + 1] != " " else end
        self._show(max(end, 0))

    def final(self) -> None:
        self._parts.clear()
        self._shown = 0

    @property
    def open(self) -> bool:
        """Interim text was shown that no final transcript closed yet."""
        return self._shown > 0

    def _text(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def _show(self, end: int) -> None:
        if end <= self._shown:
            return  # shown text only grows
        self._shown = end
        text = self._text()[:end].rstrip()
        if text:
            self._send(TranscriptMessage(role="agent", text=text, final=False))


class Connection:
    """One client connection. Built by a transport; given to the entry point.

    ``send`` never raises and never blocks: the transport queues the message (and drops
    the client if it stops reading). The transport reports client messages through
    ``receive`` and the client's departure through ``client_left``.
    """

    def __init__(
        self,
        *,
        transport: str,
        audio_input: PushAudioInput,
        audio_output: ReportedPlayback,
        send: Callable[[ServerMessage], None],
        remote: str | None = None,
        query: Mapping[str, str] | None = None,
        id: str | None = None,
        match_tts_rate: bool = False,
        call: CallInfo | None = None,
        wants_timeline: bool = False,
    ) -> None:
        self.id = id or new_id("conn")
        self.transport = transport
        """``"websocket"``, ``"webrtc"``, ..."""
        self.audio_input = audio_input
        self.audio_output = audio_output
        self.remote = remote
        """The client's address, when the transport knows it."""
        self.query: Mapping[str, str] = dict(query or {})
        """Query parameters of the request that opened the connection."""
        self.session: AgentSession[Any] | None = None
        """The session ``serve`` runs (None before)."""
        self.call: CallInfo | None = call
        """The phone call (telephony transports): ids, numbers, custom parameters."""
        self.wants_timeline = wants_timeline
        """The client asked for ``timeline`` messages (``start``'s ``timeline``); read when
        ``serve`` starts the session."""
        self.left_reason: str | None = None
        """Why the client left (the session's ``close`` reason when it ended that way)."""
        self._keys: list[str] = []
        self.session_observers: list[Callable[[AgentSession[Any]], None]] = []
        """Called with the session as ``serve`` starts it (the server's metrics use it)."""
        self._send = send
        self._match_tts_rate = match_tts_rate
        self._left = asyncio.Event()
        self._ready = False
        """``session.start`` returned: typed text and keys go to the session."""
        self._text = _AgentText(self.send)

    # -------------------------------------------------------------- client side

    @property
    def left(self) -> bool:
        return self._left.is_set()

    async def wait_left(self) -> None:
        await self._left.wait()

    def send(self, message: ServerMessage) -> None:
        """Send a protocol message to the client (dropped once it left)."""
        if self._left.is_set():
            return
        try:
            self._send(message)
        except Exception:  # a transport bug must not reach the session's callbacks
            logger.exception("sending %s to the client failed", message.type)

    def receive(self, message: ClientMessage) -> None:
        """A client message (after ``start``, which the transport handles)."""
        if isinstance(message, Played):
            self.audio_output.on_played(message.samples, cleared=message.cleared)
        elif isinstance(message, UserText):
            self._user_text(message.text)
        elif isinstance(message, Mute):
            self._when_ready("mute", lambda s: s.mute_input(message.muted))
        elif isinstance(message, Interrupt):
            self._when_ready("interrupt", lambda s: s.interrupt())
        elif isinstance(message, Start):
            self.send(
                ErrorMessage(code=ErrorCode.ALREADY_STARTED, message="start was already sent")
            )

    def keypad(self, digits: str) -> None:
        """Keys the caller pressed (DTMF). Keys pressed before the session listens wait
        for it, so none is lost."""
        session = self.session
        if session is None or not self._ready:
            self._keys.append(digits)
            return
        try:
            session.push_dtmf(digits)
        except (RuntimeError, ValueError) as exc:  # closing, or a transport bug
            logger.info("dtmf %r dropped: %s", digits, exc)

    def client_left(self, reason: str = "client left") -> None:
        """The client is gone: the microphone ends, open playback ends where the last
        report left it, and ``serve`` closes the session (``reason`` is its close reason)."""
        if self._left.is_set():
            return
        self.left_reason = reason
        self._left.set()
        self.audio_input.close()
        self.audio_output.close()

    def _playback_stalled(self, why: str) -> None:
        self.send(
            ErrorMessage(
                code=ErrorCode.PLAYBACK_REPORTS,
                message=f"{why}: the server estimates playback until `played` reports resume",
                source="playback",
            )
        )

    # ------------------------------------------------------------- agent side

    async def serve(self, session: AgentSession[Any], agent: Agent) -> None:
        """Run ``session`` with ``agent`` for this client until the client leaves or the
        session closes; the session is closed when this returns."""
        if self.session is not None:
            raise RuntimeError("serve() runs one session per connection")
        self.session = session
        for observe in self.session_observers:
            try:
                observe(session)
            except Exception:  # an observer's bug must not stop the call
                logger.exception("a session observer failed for %s", self.id)
        tts_rate = getattr(session.tts, "sample_rate", None)
        if self._match_tts_rate and isinstance(tts_rate, int) and tts_rate > 0:
            self.audio_output.sample_rate = tts_rate  # no resampling on the server
        if _hears(session):
            session.input.audio = self.audio_input
        else:  # a session without a VAD and an STT cannot listen: the audio goes nowhere
            self.audio_input.discard()
        session.output.audio = self.audio_output
        session.output.transcription = self._text
        self._text.paced = session.tts is not None or _is_realtime(session)
        self.audio_output.on_progress = self._text.progress
        self.audio_output.on_stall = self._playback_stalled
        closed = asyncio.Event()
        handlers = self._subscribe(session, closed)
        assert self.audio_output.sample_rate is not None
        self.send(Ready(sample_rate=self.audio_output.sample_rate))
        self.send(AgentStateMessage(state=session.agent_state))
        self.send(UserStateMessage(state=session.user_state))
        feed: _TimelineFeed | None = None
        try:
            if not await self._until_left(session.start(agent)):
                return
            # Its first agent has entered (the state may say so a loop turn later).
            self._ready = True
            if self.wants_timeline:
                feed = _TimelineFeed(session, self.send)
            keys, self._keys = self._keys, []
            for digits in keys:
                self.keypad(digits)
            left = asyncio.ensure_future(self._left.wait())
            ended = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait((left, ended), return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
                ended.cancel()
        finally:
            try:
                # aclose is bounded step by step; this bounds it as a whole, too.
                limit = session.options.close_timeout * 4 + 1
                reason = self.left_reason or "session ended"
                await asyncio.wait_for(session.aclose(reason=reason), limit)
            except Exception:
                logger.exception("closing the session of %s failed", self.id)
            finally:
                for name, handler in handlers:
                    session.off(name, handler)
                if feed is not None:
                    feed.stop()

    async def _until_left(self, work: Awaitable[None]) -> bool:
        """Await ``work``; False (and ``work`` cancelled) if the client left first."""
        task = asyncio.ensure_future(work)
        left = asyncio.ensure_future(self._left.wait())
        try:
            await asyncio.wait((task, left), return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if task.done():
            task.result()
            return True
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False

    def _subscribe(self, session: AgentSession[Any], closed: asyncio.Event) -> list[Any]:
        send = self.send

        def agent_state(ev: Any) -> None:
            if ev.new_state == "listening" and self._text.open:
                # The reply ended with nothing heard by the history's measure (cut in its
                # first word): its interim text still gets the final that closes it.
                self._text.final()
                send(TranscriptMessage(role="agent", text="", final=True, interrupted=True))
            send(AgentStateMessage(state=ev.new_state))

        def user_state(ev: Any) -> None:
            send(UserStateMessage(state=ev.new_state))

        def transcribed(ev: Any) -> None:
            send(TranscriptMessage(role="user", text=ev.transcript, final=ev.is_final))

        def item_added(ev: Any) -> None:
            item = ev.item
            if isinstance(item, ChatMessage) and item.role == "assistant":
                self._text.final()
                send(
                    TranscriptMessage(
                        role="agent", text=item.content, final=True, interrupted=item.interrupted
                    )
                )
            elif isinstance(item, FunctionCall):
                send(ToolMessage(name=item.name, call_id=item.call_id, status="started"))
            elif isinstance(item, FunctionCallOutput):
                send(
                    ToolMessage(
                        name=item.name,
                        call_id=item.call_id,
                        status="finished",
                        error=item.is_error,
                    )
                )

        def metrics(ev: Any) -> None:
            send(MetricsMessage(metrics=json_safe(ev.metrics.to_dict())))

        def error(ev: Any) -> None:
            err = ev.error
            send(
                ErrorMessage(
                    code=ErrorCode.SESSION,
                    message=f"{type(err).__name__}: {err}"[:500],
                    source=ev.source,
                )
            )

        def close(_: Any) -> None:
            closed.set()

        handlers: list[tuple[Any, Any]] = [
            ("agent_state_changed", agent_state),
            ("user_state_changed", user_state),
            ("user_input_transcribed", transcribed),
            ("conversation_item_added", item_added),
            ("metrics_collected", metrics),
            ("error", error),
            ("close", close),
        ]
        for name, handler in handlers:
            session.on(name, handler)
        return handlers

    def _when_ready(self, what: str, act: Callable[[AgentSession[Any]], object]) -> None:
        """Apply a client's control to the session, or tell it why not."""
        session = self.session
        if session is None or not self._ready:
            self.send(ErrorMessage(code=ErrorCode.NOT_READY, message=f"{what}: not ready"))
            return
        try:
            act(session)
        except RuntimeError as exc:  # closing, or not running any more
            self.send(ErrorMessage(code=ErrorCode.NOT_READY, message=f"{what}: {exc}"))

    def _user_text(self, text: str) -> None:
        session = self.session
        if session is None or not self._ready:
            self.send(ErrorMessage(code=ErrorCode.NOT_READY, message="the agent is not ready"))
            return
        try:
            current = session.current_speech
            if current is not None and not current.done() and current.allow_interruptions:
                session.interrupt()  # typed input is a barge-in, as in the console
            session.generate_reply(user_input=text)
        except RuntimeError as exc:  # closing, or not running any more
            self.send(ErrorMessage(code=ErrorCode.NOT_READY, message=str(exc)))


TIMELINE_POLL = 0.1
"""Longest wait (s) before a new timeline entry goes to a client that asked for them."""


class _TimelineFeed:
    """Forwards the floor's timeline entries (``TIMELINE_KINDS``) to the client, ``t``
    made relative to the session's start: those so far at once, then new ones on each
    state change and at least every ``TIMELINE_POLL`` seconds. The timeline is a bounded
    deque, so what was sent is tracked by the count of entries ever added."""

    def __init__(self, session: AgentSession[Any], send: Callable[[ServerMessage], None]) -> None:
        self._session = session
        self._send = send
        self._seen = 0
        self._t0: float | None = None
        self._loop = asyncio.get_running_loop()
        self._soon: asyncio.Handle | None = None
        self._handlers: list[tuple[Any, Any]] = [
            ("agent_state_changed", self._changed),
            ("user_state_changed", self._changed),
        ]
        for name, handler in self._handlers:
            session.on(name, handler)
        self.flush()
        self._task = asyncio.ensure_future(self._poll())

    def stop(self) -> None:
        """Send what is left and stop (the session closed)."""
        self._task.cancel()
        if self._soon is not None:
            self._soon.cancel()
        for name, handler in self._handlers:
            self._session.off(name, handler)
        self.flush()

    def _changed(self, _: Any) -> None:
        # the entry is noted in the same step as the event, maybe after it: read it soon
        if self._soon is None:
            self._soon = self._loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._soon = None
        self.flush()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(TIMELINE_POLL)
            self.flush()

    def flush(self) -> None:
        try:
            timeline = self._session.timeline
            total = len(timeline) + timeline.dropped
            new = total - self._seen
            if new <= 0:
                return
            self._seen = total
            entries = timeline.entries()
            if self._t0 is None:
                started = (e for e in entries if e["kind"] == "session")
                first = next(started, entries[0] if entries else None)
                self._t0 = float(first["t"]) if first is not None else self._loop.time()
            for entry in entries[-new:] if new < len(entries) else entries:
                if entry["kind"] not in TIMELINE_KINDS:
                    continue
                fields = json_safe({k: v for k, v in entry.items() if k != "t"})
                t = round(float(entry["t"]) - self._t0, 3)
                self._send(TimelineMessage(entry={"t": t, **fields}))
        except Exception:  # a bad entry must not stop the call
            logger.exception("sending the timeline failed")


def _is_realtime(session: AgentSession[Any]) -> bool:
    return is_realtime_model(session.llm)


def _hears(session: AgentSession[Any]) -> bool:
    """The session listens to a microphone (a VAD and an STT, or a realtime model)."""
    return _is_realtime(session) or (session.vad is not None and session.stt is not None)


Entrypoint: TypeAlias = Callable[[Connection], Awaitable[None]]
"""An agent file's ``entrypoint``: called once per client connection."""
