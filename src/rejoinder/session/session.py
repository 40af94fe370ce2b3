"""AgentSession: the public entry point. Owns the floor (through ``TurnState``), the task
scope everything runs in, the history, and the agent stack (which agent is current).

Every lifecycle call is bounded: ``aclose`` waits at most ``close_timeout`` for hooks and
for work to unwind after cancellation, ``drain`` at most its ``timeout``. Public calls
check their arguments' types at the call site, before anything is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..floor import SESSION_OWNER, AgentState, Floor, Obligation, ObligationKind, UserState
from ..models import LLM, ChatContext, ImageContent, is_realtime_model
from ..models.chat import new_id
from ..models.claims import ModelClaims
from ..models.interruption import InterruptionDetector
from ..models.metrics import UsageSummary
from ..models.turn_detector import TurnDetector
from .agents.activity import AgentActivity
from .agents.agent import Agent
from .agents.agent_stack import AgentStack
from .agents.agent_task import running_host
from .arguments import MODES, check_free_recognizer, check_options, require
from .context import SessionContext
from .engine import Engine
from .events import (
    CloseEvent,
    EventEmitter,
    EventName,
    SessionStartedEvent,
)
from .log_context import session_id as log_session_id
from .options import SessionInput, SessionOptions, SessionOutput
from .phone_calls import PhoneCalls
from .pipeline import PipelineEngine
from .run_result import RunResult
from .speech.handle import SpeechHandle
from .timeline import Timeline
from .timeline_events import Owed, owed_now, record_events
from .tools.tool import Tool, Toolset
from .turn_state import TurnState
from .usage import UsageCollector

if TYPE_CHECKING:
    from ..models.realtime import RealtimeModel
    from ..models.stt import STT
    from ..models.tts import TTS
    from ..models.vad import VAD
    from .public_session import PublicSession

__all__ = ["AgentSession", "SessionInput", "SessionOptions", "SessionOutput"]

logger = logging.getLogger("rejoinder")

Userdata = TypeVar("Userdata")


class AgentSession(PhoneCalls, Generic[Userdata]):
    """One conversation: the models it runs on, its I/O, its history, and its true state.

    Give it models, fill ``session.input.audio`` / ``session.output.audio`` (a transport's
    ``conn.serve`` does it), then ``await session.start(agent)``. Use it as ``async with``
    or call ``aclose()`` when done. ``agent_state`` and ``user_state`` are derived from
    what is owed and what is audible (docs/state-model.md), and every change is an event
    (``session.on("agent_state_changed", ...)``).

    Args:
        llm: the chat model (``rj.LLM``) or a speech-to-speech model
            (``rj.RealtimeModel``, which then hears and speaks itself).
        stt: the recognizer, for a voice pipeline.
        tts: the voice, for a voice pipeline.
        vad: the voice activity detector, for a voice pipeline.
        allow_interruptions: whether the user's speech may interrupt the agent (a reply,
            ``say`` or an agent can override it).
        min_interruption_duration: seconds of speech over the agent that interrupt it
            (without an interruption detector).
        min_endpointing_delay: seconds after the end of the user's speech before a turn
            whose words are whole ends (the VAD's own silence counts towards it).
        max_endpointing_delay: the longest wait for a user whose words broke off.
        preemptive_generation: start the model on the final transcript, before the turn
            has ended; its work is used only if nothing changed by the end of the turn.
        user_away_timeout: seconds of mutual silence, with nothing owed or running,
            after which the user is ``away`` (``None``: never).
        max_tool_steps: tool rounds a reply may take; at the limit the model is offered
            no tools and must answer.
        tools: tools offered to every agent (they survive handoffs; an agent's own tool
            of the same name wins).
        turn_detection: ``"vad"`` (the words and the silence decide), ``"manual"``
            (``commit_user_turn`` ends a turn) or a turn model (``rj.TurnDetector``).
        interruption_detection: an ``rj.InterruptionDetector``: speech over the agent is
            judged while the agent goes on talking, instead of pausing the reply.
        min_interruption_words: without a detector, an interruption also needs this many
            recognized words (0: none).
        resume_false_interruption: without a detector, pause a reply the user talks over
            and resume it if the speech was too short to interrupt.
        false_interruption_timeout: seconds after such a short sound before the paused
            reply resumes.
        userdata: your own state, read back as ``session.userdata`` (and from tools).
        obligation_timeouts: watchdog seconds per obligation kind
            (``{"reply": 120, "tool": 900}``) over the defaults.
        close_timeout: the bound on each step of closing, a handoff or an interruption.
        answer_timeout: with a realtime model, seconds a completed response may take to
            become audible before its answer is given up.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a value out of range (a negative timeout, an unknown kind).
    """

    def __init__(
        self,
        *,
        llm: LLM | RealtimeModel | None = None,
        stt: STT | None = None,
        tts: TTS | None = None,
        vad: VAD | None = None,
        allow_interruptions: bool = True,
        min_interruption_duration: float = 0.5,
        min_endpointing_delay: float = 0.4,
        max_endpointing_delay: float = 3.0,
        preemptive_generation: bool = False,
        user_away_timeout: float | None = 15.0,
        max_tool_steps: int = 3,
        tools: Sequence[Tool | Toolset] = (),
        turn_detection: Literal["vad", "manual"] | TurnDetector = "vad",
        interruption_detection: InterruptionDetector | None = None,
        min_interruption_words: int = 0,
        resume_false_interruption: bool = True,
        false_interruption_timeout: float = 2.0,
        userdata: Userdata | None = None,
        obligation_timeouts: Mapping[str, float] | None = None,
        close_timeout: float = 5.0,
        answer_timeout: float = 5.0,
    ) -> None:
        check_options(
            max_tool_steps=max_tool_steps,
            close_timeout=close_timeout,
            answer_timeout=answer_timeout,
            turn_detection=turn_detection,
            interruption_detection=interruption_detection,
        )
        self.llm = llm
        self.tools: list[Tool | Toolset] = list(tools)
        """Session-scoped tools: offered to every agent, so they survive handoffs (an
        agent's own tool of the same name wins)."""
        self.stt, self.tts, self.vad = stt, tts, vad
        self.options = SessionOptions(
            allow_interruptions=allow_interruptions,
            min_interruption_duration=min_interruption_duration,
            min_endpointing_delay=min_endpointing_delay,
            max_endpointing_delay=max_endpointing_delay,
            preemptive_generation=preemptive_generation,
            max_tool_steps=max_tool_steps,
            close_timeout=close_timeout,
            turn_detection=turn_detection,
            interruption_detection=interruption_detection,
            min_interruption_words=min_interruption_words,
            resume_false_interruption=resume_false_interruption,
            false_interruption_timeout=false_interruption_timeout,
            answer_timeout=answer_timeout,
        )
        # Validates kinds and values now, not at start().
        self._floor = Floor(user_away_timeout=user_away_timeout, watchdogs=obligation_timeouts)
        self._userdata = userdata
        self.input = SessionInput()
        self.output = SessionOutput()
        self._events = EventEmitter()
        self._usage = UsageCollector(self._events)
        self.id = new_id("session")
        self._timeline = Timeline()
        record_events(self._timeline, self._events)
        self._history = ChatContext()
        self._turn_state_: TurnState | None = None
        self._ctx: SessionContext | None = None
        self._agents: AgentStack | None = None
        self._root: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._engine: Engine | None = None
        """How the session hears and answers (the one place that knows which engine)."""
        self._models = ModelClaims()
        """This session's claim on its models, from start to close (the last closes them)."""
        self._close_reason: str | None = None
        self._shutdown: asyncio.Task[None] | None = None
        self._transferred: Obligation | None = None

    # -------------------------------------------------------------- reading

    @property
    def agent_state(self) -> AgentState:
        """``initializing``, ``listening``, ``thinking`` or ``speaking``, derived from
        what is owed and what is audible (docs/state-model.md)."""
        return self._floor.agent_state

    @property
    def user_state(self) -> UserState:
        """``listening``, ``speaking`` or ``away``."""
        return self._floor.user_state

    @property
    def started(self) -> bool:
        """``start()`` was called (the state may still be ``initializing`` while the
        first agent enters)."""
        return self._root is not None

    @property
    def current_agent(self) -> Agent:
        """The agent that has the conversation now (a running task, if one is current)."""
        activity = self._activity
        if activity is None:
            raise RuntimeError("the session has no agent (call start() first)")
        return activity.agent

    @property
    def current_speech(self) -> SpeechHandle | None:
        """The handle of what the agent is saying now, if anything."""
        activity = self._activity
        return None if activity is None else activity.current_speech

    @property
    def history(self) -> ChatContext:
        """The conversation so far, of every agent: messages (the agent's as heard),
        tool calls and outputs, handoffs."""
        return self._history

    @property
    def userdata(self) -> Userdata:
        """The ``userdata`` the session was given (``ValueError`` if none was)."""
        if self._userdata is None:
            raise ValueError("no userdata was given to the session")
        return self._userdata

    @userdata.setter
    def userdata(self, value: Userdata) -> None:
        self._userdata = value

    @property
    def timeline(self) -> Timeline:
        """What the session did and why, on loop time (``rejoinder.session.timeline``):
        ``timeline.entries()``, or ``timeline.write_to(path)`` for JSON lines."""
        return self._timeline

    @property
    def usage(self) -> dict[str, UsageSummary]:
        """What each model consumed so far, by model name (its label when it has none):
        the sums of this session's ``metrics_collected`` events."""
        return self._usage.usage

    def owed(self) -> list[Owed]:
        """What is owed or being worked on right now, and why: the answer to "why is it
        thinking". Empty when the agent owes nothing (and reports ``listening``)."""
        state = self._turn_state_
        if state is None:
            return []
        return owed_now(state.owed(), state.now())

    def on(self, name: EventName, callback: Any = None) -> Any:
        """Subscribe to an event (README: events); usable as a decorator."""
        return self._events.on(name, callback)

    def off(self, name: EventName, callback: Any) -> None:
        """Unsubscribe ``callback`` from the event."""
        self._events.off(name, callback)

    @property
    def _turn_state(self) -> TurnState:
        if self._turn_state_ is None:
            raise RuntimeError("the session is not started")
        return self._turn_state_

    @property
    def _activity(self) -> AgentActivity | None:
        return None if self._agents is None else self._agents.current

    # ------------------------------------------------------------ lifecycle

    async def start(self, agent: Agent) -> None:
        """Start the session with its first agent: the microphone is heard from now on,
        and this returns once ``agent`` is current (its ``on_enter`` goes on running; the
        agent stays ``initializing`` until it has entered). A session starts once."""
        if not isinstance(agent, Agent):
            raise TypeError(f"start() needs an rj.Agent, got {type(agent).__name__}")
        if self._root is not None:
            raise RuntimeError("the session was already started")
        loop = asyncio.get_running_loop()
        check_free_recognizer(self.stt)
        detector = self.options.turn_detection
        self._models.claim(
            (
                self.llm,
                self.stt,
                self.tts,
                self.vad,
                detector if detector not in MODES else None,
                self.options.interruption_detection,
            )
        )
        state = self._turn_state_ = TurnState(self._floor, self._events, loop, self._timeline)
        state.note("session", event="started", session_id=self.id)
        # Everything the session runs starts in this context, so `await SomeTask()`
        # finds its host (without touching the caller's own context).
        context = contextvars.copy_context()
        ctx = self._ctx = SessionContext(
            session=self,
            state=state,
            events=self._events,
            history=self._history,
            options=self.options,
            output=self.output,
            tools=self.tools,
            context=context,
        )
        agents = self._agents = AgentStack(ctx, on_agent_changed=self._agent_changed)
        context.run(running_host.set, agents)
        context.run(log_session_id.set, self.id)
        ready: asyncio.Future[None] = loop.create_future()
        self._root = loop.create_task(
            self._supervise(ctx, ready), name="rejoinder-session", context=context
        )
        await ready
        state.start()
        self._events.emit("session_started", SessionStartedEvent(loop.time()))
        engine = self._engine = self._new_engine(ctx, agents)
        try:
            await engine.start(agent, self.input.audio)
        except BaseException:
            await self.aclose()
            raise
        # The opening ends on the next loop turn, not here: a caller that queues its
        # greeting right after start() returns ("await session.start(a); session.say(...)")
        # is seen thinking, without a listening pulse before it.
        loop.call_soon(lambda: None if ctx.closing else state.entered())

    def _new_engine(self, ctx: SessionContext, agents: AgentStack) -> Engine:
        if is_realtime_model(self.llm):
            from .realtime.engine import RealtimeEngine

            return RealtimeEngine(ctx, self.llm, agents=agents, close=self._close_from_inside)
        return PipelineEngine(ctx, agents, vad=self.vad, stt=self.stt)

    def _agent_changed(self, agent: Agent) -> None:
        if self._engine is not None:
            self._engine.agent_changed(agent)

    @property
    def input_muted(self) -> bool:
        """Whether the microphone is heard as silence (``mute_input``)."""
        return self._ctx is not None and self._ctx.input_muted

    def mute_input(self, muted: bool = True) -> None:
        """Hear the microphone as silence (``False``: hear it again). The agent goes on
        speaking and working; the user cannot interrupt or start a turn. A realtime model
        is told too (GPT-Live: ``session.input_audio.mute``, sent again after every
        reconnect, since a new connection starts unmuted); what it is sent is silence
        either way, so muted audio never leaves the process."""
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError("mute_input() needs a started session")
        if ctx.input_muted == muted:
            return
        ctx.input_muted = muted
        ctx.state.note("input", muted=muted)
        if self._engine is not None:
            self._engine.input_muted(muted)

    def unmute_input(self) -> None:
        """Hear the microphone again."""
        self.mute_input(False)

    def commit_user_turn(self) -> None:
        """End the user's turn now (manual turn control)."""
        if self._engine is not None:
            self._engine.commit_user_turn()

    def clear_user_turn(self) -> None:
        """Drop what the user said in the turn in progress."""
        if self._engine is not None:
            self._engine.clear_user_turn()

    async def _supervise(self, ctx: SessionContext, ready: asyncio.Future[None]) -> None:
        """The session's scope. It runs until ``aclose`` cancels it."""
        try:
            async with asyncio.TaskGroup() as tg:
                ctx.open_scope(tg)
                ready.set_result(None)
                await asyncio.get_running_loop().create_future()  # cancelled by aclose
        except* Exception as group:  # a bug escaped a task: report it, then close
            for exc in group.exceptions:
                logger.error("session task failed", exc_info=exc)
                ctx.emit_error(exc, source="session", recoverable=False)
        finally:
            ctx.close_scope()

    def update_agent(self, agent: Agent) -> asyncio.Future[None]:
        """Hand the conversation to ``agent`` (the old one, and every caller paused on a
        task, exits first). Handoffs run one at a time, in order; the returned future
        resolves once ``agent`` has entered."""
        if not isinstance(agent, Agent):
            raise TypeError(f"update_agent() needs an rj.Agent, got {type(agent).__name__}")
        return self._running_agents().hand_off(agent)

    async def aclose(self, *, reason: str = "closed") -> None:
        """Stop everything, bounded by ``close_timeout`` per step, even if work hangs.
        Safe to call from inside a tool or hook: the close runs in its own task, which
        the agent being stopped does not own. ``reason`` goes to the ``close`` event (the
        first reason given wins)."""
        require(reason, str, "reason")
        self._close_reason = self._close_reason or reason
        if self._close_task is None:
            self._begin_close()
        assert self._close_task is not None
        await asyncio.shield(self._close_task)

    def _begin_close(self) -> None:
        if self._ctx is not None:
            self._ctx.mark_closing()  # the parts see it at once, not when the task runs
        self._close_task = asyncio.get_running_loop().create_task(self._close())

    def _close_from_inside(self, reason: str) -> None:
        """Start closing from a task the close will cancel (it must not await it)."""
        if self._close_task is None:
            logger.warning("closing the session: %s", reason)
            self._begin_close()

    async def _close(self) -> None:
        ctx = self._ctx
        if self._agents is not None:
            await self._agents.close()
        if self._engine is not None:
            await self._engine.aclose()
        if ctx is not None and self._root is not None:
            self._root.cancel()
            await ctx.bounded(asyncio.wait((self._root,)), "closing the session")
        if self._turn_state_ is not None:
            if self._transferred is not None:
                self._turn_state_.close(self._transferred, "transferred")
            self._turn_state_.close_all()
            self._turn_state_.shutdown()
        await self._models.release(self.options.close_timeout)
        self._events.emit("close", CloseEvent(reason=self._close_reason or "closed"))
        self._timeline.close()

    async def drain(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109 - a bound, not I/O
        """Let everything owed finish (replies, tools, deferred results), then close.
        Gives up waiting after ``timeout`` seconds and closes anyway."""
        ctx = self._ctx
        if ctx is not None and self._turn_state_ is not None and not self._is_closing():
            activity = self._activity
            if activity is not None:
                activity.discard_preemptive("draining")
            await ctx.bounded(self._turn_state.nothing_open(), "draining", timeout)
        await self.aclose()

    def shutdown(
        self, *, drain: bool = True, reason: str = "shutdown", timeout: float = 30.0
    ) -> None:
        """End the session without waiting for it, from anywhere: a tool that hangs up a
        phone call, a hook, the app. With ``drain``, what the agent is saying (its
        current and queued speech, tool follow-ups included) plays out first, for at most
        ``timeout`` seconds; then the session closes as ``aclose`` does."""
        require(drain, bool, "drain")
        require(reason, str, "reason")
        if self._close_task is not None or self._shutdown is not None:
            return
        self._close_reason = self._close_reason or reason
        # Not in the session's scope: the close cancels that scope, and this must go on.
        self._shutdown = asyncio.get_running_loop().create_task(
            self._shut_down(drain, bound=timeout), name="rejoinder-shutdown"
        )

    async def _shut_down(self, drain: bool, *, bound: float) -> None:
        if drain and self._turn_state_ is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(bound):
                    await self._listening_again(None)  # nothing owed, nothing audible
        await self.aclose()

    def add_image(self, image: ImageContent, *, key: str | None = None) -> None:
        """Show the agent an image: it goes with the user's next message (what they say,
        or ``generate_reply(user_input=...)``), in the model's own image format. A
        realtime model gets it at once and sees it with what the user says next (one
        that cannot see raises ``RealtimeError``). At most four wait for a message; past
        that the oldest is dropped; an image with a ``key`` replaces one with the same
        key that no message has taken yet (a camera's latest still: ``key="camera"``).
        Make images with ``rj.ImageContent.from_bytes``, ``from_url`` or ``from_file``
        (checked there: format and size)."""
        require(image, ImageContent, "add_image() image")
        require(key, (str, type(None)), "add_image() key")
        engine = self._started_engine()
        if self._is_closing():
            raise RuntimeError("the session is closing: no user message is coming for the image")
        engine.add_image(image, key)

    async def __aenter__(self) -> AgentSession[Userdata]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -------------------------------------------------------------- replies

    def say(self, text: str, *, allow_interruptions: bool | None = None) -> SpeechHandle:
        """Say ``text`` as it is (no model involved), after what is already queued; the
        agent is ``thinking`` from now until it is heard. The handle resolves when it
        was played (or interrupted)."""
        require(text, str, "say() text")
        require(allow_interruptions, (bool, type(None)), "allow_interruptions")
        return self._started_engine().say(text, allow_interruptions)

    def generate_reply(
        self,
        *,
        user_input: str | None = None,
        instructions: str | None = None,
        allow_interruptions: bool | None = None,
    ) -> SpeechHandle:
        """Have the model reply now: to ``user_input`` as a user turn if given, with
        ``instructions`` for this reply only if given. Returns the reply's handle."""
        require(user_input, (str, type(None)), "user_input")
        require(instructions, (str, type(None)), "instructions")
        require(allow_interruptions, (bool, type(None)), "allow_interruptions")
        return self._started_engine().generate_reply(
            user_input=user_input,
            instructions=instructions,
            allow_interruptions=allow_interruptions,
        )

    async def run(self, *, user_input: str) -> RunResult:
        """Send ``user_input`` and wait until the turn is over: the agent owes nothing
        more and is ``listening`` (the reply, its tool follow-ups and any handoff are
        done; or an ``AgentTask`` asked something and waits for the user's answer, in
        which case the reply resumes after a later input). Returns what happened."""
        require(user_input, str, "user_input")
        result = RunResult(user_input=user_input)
        handle = self.generate_reply(user_input=user_input)
        # Subscribed after the input was recorded, before the reply can produce anything.
        self._events.on("conversation_item_added", result._on_item)
        try:
            await self._listening_again(handle)
        finally:
            self._events.off("conversation_item_added", result._on_item)
        return result

    async def _listening_again(self, handle: SpeechHandle | None) -> None:
        """Until the agent is ``listening`` (it never is while a reply is owed, so this
        is the end of the turn), or the handle resolved while the session closed."""
        loop = asyncio.get_running_loop()
        over: asyncio.Future[None] = loop.create_future()

        def check(_: object = None) -> None:
            if not over.done() and (self.agent_state == "listening" or self._is_closing()):
                over.set_result(None)

        self._events.on("agent_state_changed", check)
        self._events.on("close", check)
        if handle is not None:
            handle.add_done_callback(check)
        try:
            check()
            await over
        finally:
            self._events.off("agent_state_changed", check)
            self._events.off("close", check)

    def interrupt(self) -> asyncio.Future[None]:
        """Interrupt what the agent is saying; await the result to know it stopped."""
        if self._engine is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return self._engine.interrupt()

    @contextmanager
    def hold(self, label: str = "hold") -> Iterator[None]:
        """Keep the user from being marked away while the block runs (an uncommitted
        session-owned obligation: the agent still reports ``listening``)."""
        ob = self._turn_state.open(ObligationKind.HOLD, SESSION_OWNER, label=label)
        try:
            yield
        finally:
            self._turn_state.close(ob, "released")

    # ------------------------------------------------------------- internal

    def _running_agents(self) -> AgentStack:
        if self._agents is None:
            raise RuntimeError("the session is not running (call start() first)")
        self._agents.require_running()
        return self._agents

    def _started_engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the session is not running (call start() first)")
        return self._engine

    def _is_closing(self) -> bool:
        return self._close_task is not None


if TYPE_CHECKING:

    def _implements_public_session(session: AgentSession[Any]) -> PublicSession[Agent]:
        # mypy checks here that AgentSession offers every member of PublicSession, the
        # type its parts hand to user code (Agent.session, RunContext.session).
        return session
