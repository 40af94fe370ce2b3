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

The client's connection itself is a ``ClientLink`` (``link``). With resuming on (a
``ResumeRegistry``, see ``rejoinder.io.resume``) a connection that breaks without the
client's goodbye only detaches the session (``lost``), and a later connection that
names the session's token takes it over (``attach``): the session, its microphone and
its playback stay; the link changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from ..models import is_realtime_model
from ..models.chat import ChatMessage, FunctionCall, FunctionCallOutput, new_id
from .agent_text import AgentText
from .call_transfers import CallTransfers
from .link import ClientLink
from .microphone import PushAudioInput
from .playback import ReportedPlayback
from .protocol import (
    AgentStateMessage,
    ClientMessage,
    ErrorCode,
    ErrorMessage,
    Interrupt,
    MetricsMessage,
    Mute,
    Ping,
    Played,
    Pong,
    Ready,
    ServerMessage,
    Start,
    ToolMessage,
    TranscriptMessage,
    UserStateMessage,
    UserText,
    json_safe,
)
from .resume import ENTRY_TIMEOUT, ReplyCut, hear_silence
from .timeline_feed import TimelineFeed

if TYPE_CHECKING:
    from ..session import Agent, AgentSession
    from .resume import ResumeRegistry
    from .telephony.dialects import CallInfo
    from .telephony.line import PhoneLine

__all__ = ["Connection", "Entrypoint", "PushAudioInput"]

logger = logging.getLogger("rejoinder")


MAX_EARLY_CONTROLS = 32
"""Typed text and controls (``mute``, ``interrupt``) kept for the agent's first moment; more
are refused."""


class Connection(CallTransfers):
    """One client's session. Built by a transport; given to the entry point.

    ``send`` never raises and never blocks: the transport queues the message (and drops
    the client if it stops reading). The transport reports client messages through
    ``receive`` (or its ``link``) and the client's departure through ``client_left``
    (a goodbye) or ``link.lost`` (a broken connection, which detaches the session when
    ``resume`` is given).
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
        resume: ResumeRegistry | None = None,
    ) -> None:
        self.id = id or new_id("conn")
        self.transport = transport
        """``"websocket"``, ``"webrtc"``, ... (the first connection's)"""
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
        self.line: PhoneLine | None = None
        """The phone line (telephony transports): the session's keypad, and transfers."""
        self.wants_timeline = wants_timeline
        """The client asked for ``timeline`` messages (``start``'s ``timeline``); read when
        ``serve`` starts the session."""
        self.left_reason: str | None = None
        """Why the client left (the session's ``close`` reason when it ended that way)."""
        self.resume = resume
        """Where the session waits for its client after a drop (None: it ends)."""
        self.entry: asyncio.Future[None] | None = None
        """The entry point's call, set by the transport that made it: a link that took
        the session over waits for it, as the first one does."""
        self.resumes = 0
        """Connections that took this session over."""
        self._controls: list[tuple[str, Callable[[AgentSession[Any]], object]]] = []
        """``text``, ``mute`` and ``interrupt`` sent before the agent was ready: applied, in
        order, then (``ready`` comes while the agent starts, and a client that re-sends its
        mute at each ``ready`` must not be refused)."""
        self._server_waiting: list[Callable[[AgentSession[Any]], object]] = []
        """What the server side learned before the session was ready (``when_ready``):
        keys the caller pressed, who answered the call."""
        self.session_observers: list[Callable[[AgentSession[Any]], None]] = []
        """Called with the session as ``serve`` takes it, before it starts (the server's
        metrics subscribe to its events here); to act on it, use ``when_ready``."""
        self._link: ClientLink | None = ClientLink(transport, send, wants_timeline=wants_timeline)
        self._link.connection = self
        self._match_tts_rate = match_tts_rate
        self._left = asyncio.Event()
        self._attended = asyncio.Event()
        """Set unless the session waits for its client to resume."""
        self._attended.set()
        self._ready = False
        """``session.start`` returned: typed text and keys go to the session."""
        self._text = AgentText(self.send)
        self._feed: TimelineFeed | None = None
        self._silence: asyncio.Task[None] | None = None
        self._cut: ReplyCut | None = None
        self._missed_final: TranscriptMessage | None = None
        """The final agent transcript the client had interim text of when it dropped."""
        self._client_had_interim = False
        self._entry_bounded = False

    # -------------------------------------------------------------- client side

    @property
    def left(self) -> bool:
        """The client is gone for good (the session ends, or has)."""
        return self._left.is_set()

    @property
    def link(self) -> ClientLink | None:
        """The connection carrying the session now (None while it waits to be resumed)."""
        return self._link

    @property
    def detached(self) -> bool:
        """The client dropped and the session waits for it to resume."""
        return self._link is None and not self._left.is_set()

    async def wait_left(self) -> None:
        await self._left.wait()

    async def wait_attended(self) -> None:
        """Wait while the session is detached: until a connection resumed it, or its
        client is gone for good. (The ASGI host holds a dropped socket's request this long,
        so a server that counts requests, as Ray Serve does, still counts the session.)"""
        await self._attended.wait()

    def send(self, message: ServerMessage) -> None:
        """Send a protocol message to the client (dropped once it left, or while the
        session waits to be resumed)."""
        link = self._link
        if self._left.is_set() or link is None:
            if isinstance(message, TranscriptMessage) and message.role == "agent":
                self._note_missed(message)
            return
        try:
            link.send(message)
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
        elif isinstance(message, Ping):  # the connection's own liveness: never the agent's
            self.send(Pong(id=message.id))
        elif isinstance(message, Start):
            self.send(
                ErrorMessage(code=ErrorCode.ALREADY_STARTED, message="start was already sent")
            )

    def keypad(self, digits: str) -> None:
        """Keys the caller pressed (DTMF). Keys pressed before the session listens wait
        for it, so none is lost."""

        def push(session: AgentSession[Any]) -> None:
            try:
                session.push_dtmf(digits)
            except (RuntimeError, ValueError) as exc:  # closing, or a transport bug
                logger.info("dtmf %r dropped: %s", digits, exc)

        self.when_ready(push)

    def client_left(self, reason: str = "client left") -> None:
        """The client is gone: the microphone ends, open playback ends where the last
        report left it, and ``serve`` closes the session (``reason`` is its close reason)."""
        if self._left.is_set():
            return
        self.left_reason = reason
        self._left.set()
        self._attended.set()
        self._stop_silence()
        if self.resume is not None:
            self.resume.forget(self)
            # A resumed session's entry point may have no transport waiting for it.
            self._bound_entry(ENTRY_TIMEOUT)
        self.audio_input.close()
        self.audio_output.close()

    def give_up(self, reason: str, entry_timeout: float) -> None:
        """The session's client did not come back (``ResumeRegistry``): the session
        closes, and the entry point, which no transport waits for any more, is cancelled
        if it has not returned ``entry_timeout`` seconds later."""
        self._bound_entry(entry_timeout)
        self.client_left(reason)

    def _bound_entry(self, seconds: float) -> None:
        entry = self.entry
        if entry is None or entry.done() or self._entry_bounded:
            return
        self._entry_bounded = True
        timer = asyncio.get_running_loop().call_later(seconds, entry.cancel)
        entry.add_done_callback(lambda _: timer.cancel())

    # ---------------------------------------------------------------- resuming

    def lost(self, reason: str) -> bool:
        """The client's connection broke without a goodbye. With resuming on and the
        session running, the session is detached (True): it waits for its client for the
        registry's grace; otherwise it ends (False), as ``client_left``."""
        link = self._link
        if self._left.is_set():
            return False
        registry = self.resume
        if link is None:
            return True  # already waiting
        if registry is None or self.session is None or not registry.detach(self):
            self.client_left(reason)
            return False
        logger.info("the client of %s dropped (%s): its session waits for it", self.id, reason)
        self._let_go(link, "lost")
        self._attended.clear()
        self._silence = asyncio.get_running_loop().create_task(
            hear_silence(self.audio_input), name=f"rejoinder-silence-{self.id}"
        )
        return True

    def attach(self, link: ClientLink) -> bool:
        """``link``'s client resumes this session (it gave the token of the last
        ``ready``): it carries the session from now on, and gets a ``ready`` with
        ``resumed: true``, then the state snapshot. A link still carrying the session is
        replaced (the client came back before the server saw it go). False when the
        session is gone."""
        session = self.session
        if self._left.is_set() or session is None or self.resume is None:
            return False
        old = self._link
        if old is not None:
            self._let_go(old, "replaced")
        self.resume.attached(self)
        self._stop_silence()
        self._link = link
        self._attended.set()
        link.connection = self
        self.resumes += 1
        if link.send_audio is not None and link.send_clear is not None:
            self.audio_output.attach(link.send_audio, link.send_clear)
        self._text.attach()
        self._send_ready(session, resumed=True)
        missed, self._missed_final = self._missed_final, None
        if missed is None and self._client_had_interim:
            missed = TranscriptMessage(role="agent", text="", final=True, interrupted=True)
        self._client_had_interim = False
        if missed is not None:
            self.send(missed)  # closes the interim text the client showed when it dropped
        self._start_feed(session, link.wants_timeline)
        return True

    def _let_go(self, link: ClientLink, why: str) -> None:
        """``link`` stops carrying the session: what its client had not heard of the
        reply playing was not heard, and the words of it not heard are said again."""
        self._link = None
        link.end(why)
        self._client_had_interim = self._text.open
        self._missed_final = None
        self._text.detach()
        if self._feed is not None:
            self._feed.stop()
            self._feed = None
        session = self.session
        cut = None
        if session is not None and (_is_realtime(session) or session.tts is not None):
            # Before the detach: a realtime model records the heard part within it.
            realtime = _is_realtime(session)
            cut = ReplyCut(session, session.current_speech, realtime=realtime)
            self._cut = cut
        heard = self.audio_output.detach()
        if cut is None:
            return
        if heard is None:  # nothing was playing: nothing was cut
            cut.settled = True
            self._cut = None
            return
        cut.heard = heard
        if not cut.settled and not self.audio_output.cutting:
            # Its audio was all out already: its whole text is in the agent text.
            cut.text_known(self._text.final(), ended=True)

    def _cut_over(self, ended: bool) -> None:
        """The speech the drop cut has no more audio: all of its text has come."""
        cut = self._cut
        if cut is not None and not cut.settled:
            cut.text_known(self._text.final(), ended=ended)

    def _note_missed(self, message: TranscriptMessage) -> None:
        if message.final and self._client_had_interim and self._missed_final is None:
            self._missed_final = message

    def _stop_silence(self) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None

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
        session.output.keypad = self.line
        self._text.paced = session.tts is not None or _is_realtime(session)
        self.audio_output.on_progress = self._text.progress
        self.audio_output.on_stall = self._playback_stalled
        self.audio_output.on_cut_over = self._cut_over
        closed = asyncio.Event()
        handlers = self._subscribe(session, closed)
        self._send_ready(session, resumed=False)
        try:
            if not await self._until_left(session.start(agent)):
                return
            # Its first agent has entered (the state may say so a loop turn later).
            self._ready = True
            link = self._link
            if link is not None:
                self._start_feed(session, link.wants_timeline)
            waiting, self._server_waiting = self._server_waiting, []
            for act in waiting:  # keys pressed, who answered: in the order they came
                self.when_ready(act)
            controls, self._controls = self._controls, []
            for what, act in controls:
                self._when_ready(what, act)
            left = asyncio.ensure_future(self._left.wait())
            ended = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait((left, ended), return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
                ended.cancel()
        finally:
            if self.resume is not None:
                self.resume.forget(self)  # no resuming a session that is closing
            self._stop_silence()
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
                if self._feed is not None:
                    self._feed.stop()
                    self._feed = None

    def _send_ready(self, session: AgentSession[Any], *, resumed: bool) -> None:
        """``ready`` (with a new resume token when resuming is on), then the states."""
        assert self.audio_output.sample_rate is not None
        token = self.resume.issue(self) if self.resume is not None else None
        if token is None:
            ready = Ready(sample_rate=self.audio_output.sample_rate)
        else:
            assert self.resume is not None
            ready = Ready(
                sample_rate=self.audio_output.sample_rate,
                session_id=session.id,
                resume_token=token,
                resume_grace=self.resume.grace,
                resumed=resumed,
            )
        self.send(ready)
        self.send(AgentStateMessage(state=session.agent_state))
        self.send(UserStateMessage(state=session.user_state))

    def _start_feed(self, session: AgentSession[Any], wanted: bool) -> None:
        if self._feed is not None:
            self._feed.stop()
            self._feed = None
        if wanted and self._ready:
            self._feed = TimelineFeed(session, self.send)

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
                given = self._text.final()
                send(
                    TranscriptMessage(
                        role="agent", text=item.content, final=True, interrupted=item.interrupted
                    )
                )
                if self._cut is not None:
                    self._cut.recorded(item, given)  # in this step: the rest is owed at once
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

    def when_ready(self, act: Callable[[AgentSession[Any]], object]) -> None:
        """Call ``act`` with the session once its first agent has entered (at once if it
        has): how the server side (a phone call's status callbacks) hands the session
        something it learned early, such as who answered. ``serve`` sets ``session``
        before the session starts, and a session that has not started cannot take events.
        ``act``'s errors are logged; what waits for a session that never gets ready is
        dropped with it."""
        session = self.session
        if session is None or not self._ready:
            self._server_waiting.append(act)
            return
        try:
            act(session)
        except Exception:  # what the server learned must not fail the call
            logger.exception("%s: a server-side update failed", self.id)

    def _when_ready(self, what: str, act: Callable[[AgentSession[Any]], object]) -> None:
        """Apply a client's control to the session, or tell it why not."""
        session = self.session
        if session is None or not self._ready:
            if len(self._controls) >= MAX_EARLY_CONTROLS:
                self.send(ErrorMessage(code=ErrorCode.NOT_READY, message=f"{what}: not ready"))
            else:
                self._controls.append((what, act))
            return
        try:
            act(session)
        except RuntimeError as exc:  # closing, or not running any more
            self.send(ErrorMessage(code=ErrorCode.NOT_READY, message=f"{what}: {exc}"))

    def _user_text(self, text: str) -> None:
        """Typed input: a user turn (sent before the agent is ready, it waits for it, as a
        control does: ``ready`` comes while the agent is still starting)."""

        def turn(session: AgentSession[Any]) -> None:
            current = session.current_speech
            if current is not None and not current.done() and current.allow_interruptions:
                session.interrupt()  # typed input is a barge-in, as in the console
            session.generate_reply(user_input=text)

        self._when_ready("text", turn)


def _is_realtime(session: AgentSession[Any]) -> bool:
    return is_realtime_model(session.llm)


def _hears(session: AgentSession[Any]) -> bool:
    """The session listens to a microphone (a VAD and an STT, or a realtime model)."""
    return _is_realtime(session) or (session.vad is not None and session.stt is not None)


Entrypoint: TypeAlias = Callable[[Connection], Awaitable[None]]
"""An agent file's ``entrypoint``: called once per client connection."""
