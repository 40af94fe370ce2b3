"""AgentSession: the public entry point. Owns the floor (through ``TurnState``), the task
scope everything runs in, the history, and the current agent's activity.

Every lifecycle call is bounded: ``aclose`` waits at most ``close_timeout`` for hooks and
for work to unwind after cancellation, ``drain`` at most its ``timeout``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from ..floor import SESSION_OWNER, AgentState, Floor, Obligation, ObligationKind, UserState
from ..io.text import TextOutput
from ..models import LLM, AgentHandoff, ChatContext, ChatItem, ChatMessage
from ..models.realtime import RealtimeModel
from .activity import AgentActivity
from .agent import Agent
from .agent_task import AgentTask, running_session
from .events import (
    CloseEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    EventEmitter,
    EventName,
    UserInputTranscribedEvent,
)
from .run_result import RunResult
from .speech import ReplyRequest, SpeechHandle
from .tools import FunctionTool
from .turn_state import TurnState
from .user_turns import UserTurns

if TYPE_CHECKING:
    from ..models.stt import STT
    from ..models.tts import TTS
    from ..models.vad import VAD
    from .realtime_driver import RealtimeDriver

logger = logging.getLogger("rejoinder")

Userdata = TypeVar("Userdata")
T = TypeVar("T")


def _is_instruction(item: ChatItem) -> bool:
    return isinstance(item, ChatMessage) and item.role in ("system", "developer")


@dataclass(frozen=True, slots=True)
class SessionOptions:
    allow_interruptions: bool
    min_interruption_duration: float
    min_endpointing_delay: float
    max_endpointing_delay: float
    preemptive_generation: bool
    user_away_timeout: float | None
    max_tool_steps: int
    close_timeout: float
    turn_detection: Literal["vad", "manual"]
    min_interruption_words: int
    resume_false_interruption: bool
    false_interruption_timeout: float
    answer_timeout: float


class SessionInput:
    def __init__(self) -> None:
        self.audio: Any = None


class SessionOutput:
    def __init__(self) -> None:
        self.audio: Any = None
        self.transcription: TextOutput | None = None


class AgentSession(Generic[Userdata]):
    def __init__(
        self,
        *,
        llm: LLM | RealtimeModel | None = None,
        stt: STT | None = None,
        tts: TTS | None = None,
        vad: VAD | None = None,
        allow_interruptions: bool = True,
        min_interruption_duration: float = 0.5,
        min_endpointing_delay: float = 0.5,
        max_endpointing_delay: float = 3.0,
        preemptive_generation: bool = False,
        user_away_timeout: float | None = 15.0,
        max_tool_steps: int = 3,
        tools: Sequence[FunctionTool] = (),
        turn_detection: Literal["vad", "manual"] = "vad",
        min_interruption_words: int = 0,
        resume_false_interruption: bool = True,
        false_interruption_timeout: float = 2.0,
        userdata: Userdata | None = None,
        obligation_timeouts: Mapping[str, float] | None = None,
        close_timeout: float = 5.0,
        answer_timeout: float = 5.0,
    ) -> None:
        if max_tool_steps < 0:
            raise ValueError("max_tool_steps must be >= 0")
        if close_timeout <= 0:
            raise ValueError("close_timeout must be positive")
        if not answer_timeout > 0:
            raise ValueError("answer_timeout must be positive")
        self.llm = llm
        self.tools: list[FunctionTool] = list(tools)
        """Session-scoped tools: offered to every agent, so they survive handoffs (an
        agent's own tool of the same name wins)."""
        self.stt, self.tts, self.vad = stt, tts, vad
        self.options = SessionOptions(
            allow_interruptions=allow_interruptions,
            min_interruption_duration=min_interruption_duration,
            min_endpointing_delay=min_endpointing_delay,
            max_endpointing_delay=max_endpointing_delay,
            preemptive_generation=preemptive_generation,
            user_away_timeout=user_away_timeout,
            max_tool_steps=max_tool_steps,
            close_timeout=close_timeout,
            turn_detection=turn_detection,
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
        self._history = ChatContext()
        self._turn_state_: TurnState | None = None
        self._activity: AgentActivity | None = None
        self._root: asyncio.Task[None] | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._handoff_lock = asyncio.Lock()
        self._user_turns: UserTurns | None = None
        self._realtime: RealtimeDriver | None = None
        self._task_callers: dict[int, AgentActivity] = {}
        """The agent each running AgentTask (by id()) returns to."""
        self._context = contextvars.copy_context()

    # -------------------------------------------------------------- reading

    @property
    def agent_state(self) -> AgentState:
        return self._floor.agent_state

    @property
    def user_state(self) -> UserState:
        return self._floor.user_state

    @property
    def current_agent(self) -> Agent:
        if self._activity is None:
            raise RuntimeError("the session has no agent (call start() first)")
        return self._activity.agent

    @property
    def current_speech(self) -> SpeechHandle | None:
        return None if self._activity is None else self._activity.current_speech

    @property
    def history(self) -> ChatContext:
        return self._history

    @property
    def userdata(self) -> Userdata:
        if self._userdata is None:
            raise ValueError("no userdata was given to the session")
        return self._userdata

    @userdata.setter
    def userdata(self, value: Userdata) -> None:
        self._userdata = value

    def on(self, name: EventName, callback: Any = None) -> Any:
        """Subscribe to an event (API.md "Events"); usable as a decorator."""
        return self._events.on(name, callback)

    def off(self, name: EventName, callback: Any) -> None:
        self._events.off(name, callback)

    @property
    def _turn_state(self) -> TurnState:
        if self._turn_state_ is None:
            raise RuntimeError("the session is not started")
        return self._turn_state_

    # ------------------------------------------------------------ lifecycle

    async def start(self, agent: Agent) -> None:
        if self._root is not None:
            raise RuntimeError("the session was already started")
        loop = asyncio.get_running_loop()
        self._turn_state_ = TurnState(self._floor, self._events, loop)
        ready: asyncio.Future[None] = loop.create_future()
        # Everything the session runs starts in this context, so `await SomeTask()`
        # finds its session (without touching the caller's own context).
        self._context = contextvars.copy_context()
        self._context.run(running_session.set, self)
        self._root = loop.create_task(
            self._supervise(ready), name="rejoinder-session", context=self._context
        )
        await ready
        self._turn_state.start()
        self._activity = self._new_activity(agent)
        if isinstance(self.llm, RealtimeModel):
            # Connected before on_enter runs, so the agent can speak from there.
            from .realtime_driver import RealtimeDriver

            self._realtime = RealtimeDriver(self, self.llm)
            try:
                await self._realtime.start(agent)
            except BaseException:
                await self.aclose()
                raise
        await self._run_activity(self._activity)
        self._start_listening()

    def _start_listening(self) -> None:
        """Run the microphone side when there is a microphone to listen to (a realtime
        model hears the microphone itself)."""
        if self.input.audio is None or self._realtime is not None:
            return
        if self.vad is None or self.stt is None:
            raise RuntimeError("audio input needs both a vad= and an stt= to hear the user")
        assert self._tg is not None
        self._user_turns = UserTurns(self, self.vad, self.stt)
        self._spawn(self._user_turns.run(self.input.audio))

    def commit_user_turn(self) -> None:
        """End the user's turn now (manual turn control)."""
        if self._user_turns is not None:
            self._user_turns.commit()

    def clear_user_turn(self) -> None:
        """Drop what the user said in the turn in progress."""
        if self._user_turns is not None:
            self._user_turns.clear()

    def _user_turn_completed(self, text: str) -> None:
        activity = self._activity
        if activity is None or self._is_closing():
            return
        current = activity.current_speech
        if current is not None and not current.done() and not current.allow_interruptions:
            # Nothing is kept for later: a stale answer after the speech would be wrong.
            logger.info("user turn %r discarded: it ended during an uninterruptible reply", text)
            activity.discard_preemptive("the turn was discarded")
            return
        activity.interrupt()
        self._reply_to_user(text, source="user_turn", report_transcript=False)

    async def _supervise(self, ready: asyncio.Future[None]) -> None:
        """The session's scope. It runs until ``aclose`` cancels it."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                ready.set_result(None)
                await asyncio.Event().wait()  # cancelled by aclose
        except* Exception as group:  # a bug escaped a task: report it, then close
            for exc in group.exceptions:
                logger.error("session task failed", exc_info=exc)
                self._emit_error(exc, source="session", recoverable=False)
        finally:
            self._tg = None

    def _new_activity(self, agent: Agent, owed: Obligation | None = None) -> AgentActivity:
        agent._session = self
        return AgentActivity(agent, self, inherited=owed)

    async def _run_activity(self, activity: AgentActivity) -> None:
        """Start ``activity``'s scope; return once it is the current agent."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        activity.task = self._spawn(activity.run(ready))
        await ready

    async def _stop(self, activity: AgentActivity) -> None:
        """Exit an agent: ``on_exit`` once, then cancel its scope (both bounded). A
        second caller waits for the first one's stop; one that never ran has no exit."""
        task = activity.task
        if task is None:
            activity.abandon()  # it never ran: resolve what was queued to it
            return
        if activity.stopped is not None:
            await asyncio.shield(activity.stopped)
            return
        activity.stopped = asyncio.get_running_loop().create_future()
        try:
            await self._bounded(activity.agent.on_exit(), f"{activity.agent.id}.on_exit")
            task.cancel()
            await self._bounded(asyncio.wait((task,)), f"stopping {activity.agent.id}")
        finally:
            activity.agent._session = None
            activity.stopped.set_result(None)

    async def _run_task(self, task: AgentTask[T], outcome: asyncio.Future[T]) -> T:
        """Pause the current agent, run ``task`` as the current one until it completes,
        then resume the caller with its conversation merged in."""
        caller = self._activity
        if caller is None or self._tg is None or self._is_closing():
            raise RuntimeError("the session is not running")
        state = self._turn_state
        # The caller's pending work stops counting while the task is current; a handoff
        # obligation covers the switch until the task's first speech takes it over.
        owed = state.new(ObligationKind.HANDOFF, SESSION_OWNER, label=task.id)
        state.open_new(owed)
        caller.pause()
        activity = self._new_activity(task, owed)
        self._activity = activity
        self._task_callers[id(task)] = caller
        self._record(AgentHandoff(old_agent_id=caller.agent.id, new_agent_id=task.id))
        if self._realtime is not None:
            self._realtime.agent_changed(task)
        try:
            await self._run_activity(activity)
            await self._bounded(activity.entered, f"{task.id}.on_enter")
            state.close(owed, "entered")
            return await outcome
        finally:
            self._task_callers.pop(id(task), None)
            await self._return_from_task(caller, activity)

    def _task_completing(self, task: AgentTask[Any]) -> None:
        caller = self._task_callers.get(id(task))
        if caller is not None and not self._is_closing() and self._turn_state_ is not None:
            self._turn_state_.set_current(caller.id)

    async def _return_from_task(self, caller: AgentActivity, activity: AgentActivity) -> None:
        task = activity.agent
        if self._activity is activity:
            self._activity = caller
        # The caller is live again before the task's own work is dropped: its tool is
        # still owed, so there is no listening gap.
        if not self._is_closing():
            self._turn_state.set_current(caller.id)
        await self._stop(activity)
        merged = [item for item in task.chat_ctx.items if not _is_instruction(item)]
        caller.agent.chat_ctx.items.extend(merged)
        if not self._is_closing():
            self._record(AgentHandoff(old_agent_id=task.id, new_agent_id=caller.agent.id))
            if self._realtime is not None:
                self._realtime.agent_changed(caller.agent)
        caller.resume()

    def update_agent(self, agent: Agent) -> asyncio.Future[None]:
        """Hand the conversation to ``agent`` (the old one exits first). Handoffs run one
        at a time, in order; the returned future resolves once ``agent`` has entered."""
        return self._hand_off(agent, None)

    def _hand_off(self, agent: Agent, owed: Obligation | None) -> asyncio.Future[None]:
        """``owed``: a committed obligation the handoff carries (a tool handed the user
        over, so the new agent owes the answer). It closes once the new agent entered."""
        if self._tg is None:
            raise RuntimeError("the session is not running")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def switch() -> None:
            async with self._handoff_lock:
                if self._is_closing():
                    return
                old = self._activity
                # The incoming agent is current from now on: what is said meanwhile is
                # queued to it, and the outgoing agent's pending work no longer counts.
                new = self._new_activity(agent, owed)
                self._activity = new
                self._turn_state.set_current(new.id)
                self._record(
                    AgentHandoff(old_agent_id=old.agent.id if old else None, new_agent_id=agent.id)
                )
                if old is not None:
                    await self._stop(old)
                if self._is_closing():
                    return
                if self._realtime is not None:
                    self._realtime.agent_changed(agent)
                await self._run_activity(new)
                await self._bounded(new.entered, f"{agent.id}.on_enter")

        def finished(_: object) -> None:
            # Also runs when the switch was cancelled before it started (session closing).
            if owed is not None and self._turn_state_ is not None:
                self._turn_state_.close(owed, "entered")
            if not done.done():
                done.set_result(None)

        self._spawn(switch()).add_done_callback(finished)
        return done

    async def aclose(self) -> None:
        """Stop everything, bounded by ``close_timeout`` per step, even if work hangs.
        Safe to call from inside a tool or hook: the close runs in its own task, which
        the agent being stopped does not own."""
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    def _close_from_inside(self, reason: str) -> None:
        """Start closing from a task the close will cancel (it must not await it)."""
        if self._close_task is None:
            logger.warning("closing the session: %s", reason)
            self._close_task = asyncio.get_running_loop().create_task(self._close())

    async def _close(self) -> None:
        if self._activity is not None:
            await self._stop(self._activity)
        if self._realtime is not None:
            await self._bounded(self._realtime.aclose(), "closing the realtime connection")
        if self._root is not None:
            self._root.cancel()
            await self._bounded(asyncio.wait((self._root,)), "closing the session")
        if self._turn_state_ is not None:
            self._turn_state_.close_all()
            self._turn_state_.shutdown()
        self._events.emit("close", CloseEvent(reason="closed"))

    async def drain(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109 - a bound, not I/O
        """Let everything owed finish (replies, tools, deferred results), then close.
        Gives up waiting after ``timeout`` seconds and closes anyway."""
        if self._turn_state_ is not None and not self._is_closing():
            if self._activity is not None:
                self._activity.discard_preemptive("draining")
            await self._bounded(self._turn_state.nothing_open(), "draining", timeout)
        await self.aclose()

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
        if self._realtime is not None and self.tts is None:
            raise RuntimeError(
                "say() speaks text through a TTS; this session's realtime model voices its "
                "own replies: use generate_reply(instructions=...) or give the session a tts="
            )
        return self._running_activity().create_speech(
            source="say", text=text, allow_interruptions=allow_interruptions
        )

    def generate_reply(
        self,
        *,
        user_input: str | None = None,
        instructions: str | None = None,
        allow_interruptions: bool | None = None,
    ) -> SpeechHandle:
        if self._realtime is not None:
            self._running_activity()  # raises if the session is not running
            return self._realtime.generate_reply(instructions, user_input)
        if user_input is None:
            return self._running_activity().create_speech(
                source="generate_reply",
                request=ReplyRequest(instructions=instructions),
                allow_interruptions=allow_interruptions,
            )
        # Typed input is what the user said, final: report it like a transcript.
        return self._reply_to_user(
            user_input,
            source="generate_reply",
            report_transcript=True,
            instructions=instructions,
            allow_interruptions=allow_interruptions,
        )

    def _reply_to_user(
        self,
        text: str,
        *,
        source: str,
        report_transcript: bool,
        instructions: str | None = None,
        allow_interruptions: bool | None = None,
    ) -> SpeechHandle:
        activity = self._running_activity()
        self._turn_state.user_activity()
        if report_transcript:
            self._events.emit(
                "user_input_transcribed", UserInputTranscribedEvent(text, is_final=True)
            )
        message = activity.add_user_message(text)
        prepared = activity.claim_preemptive() if source == "user_turn" else None
        return activity.create_speech(
            source=source,
            request=ReplyRequest(
                user_message=message, instructions=instructions, prepared=prepared
            ),
            allow_interruptions=allow_interruptions,
            user_initiated=True,
            # The reply takes the speculative work over (or, if it no longer matches,
            # cancels it): either way the preemptive obligation ends here.
            hand_over_from=[prepared.obligation] if prepared is not None else None,
        )

    async def run(self, *, user_input: str) -> RunResult:
        """Send ``user_input`` and wait for the whole reply; returns what happened."""
        result = RunResult(user_input=user_input)
        handle = self.generate_reply(user_input=user_input)
        # Subscribed after the input was recorded, before the reply can produce anything.
        self._events.on("conversation_item_added", result._on_item)
        try:
            await handle
        finally:
            self._events.off("conversation_item_added", result._on_item)
        return result

    def interrupt(self) -> asyncio.Future[None]:
        """Interrupt what the agent is saying; await the result to know it stopped."""
        if self._activity is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        self._activity.discard_preemptive("interrupted")
        if self._realtime is not None:
            self._realtime.interrupt()
        return self._activity.interrupt()

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

    def _running_activity(self) -> AgentActivity:
        if self._activity is None or self._tg is None:
            raise RuntimeError("the session is not running (call start() first)")
        if self._is_closing():
            raise RuntimeError("the session is closing")
        return self._activity

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task in the session's scope and context."""
        if self._tg is None:
            coro.close()
            raise RuntimeError("the session is not running")
        return self._tg.create_task(coro, context=self._context.copy())

    def _is_closing(self) -> bool:
        return self._close_task is not None

    def _record(self, item: ChatItem, *, at: int | None = None) -> None:
        """Append ``item`` (or insert it at index ``at``: speech recorded once played
        goes where it began, before what the user said over it)."""
        if at is None:
            self._history.append(item)
        else:
            self._history.items.insert(at, item)
        self._events.emit("conversation_item_added", ConversationItemAddedEvent(item))

    def _emit_error(self, error: BaseException, *, source: str, recoverable: bool) -> None:
        self._events.emit("error", ErrorEvent(error, source=source, recoverable=recoverable))

    async def _bounded(self, work: Any, what: str, limit: float | None = None) -> None:
        limit = self.options.close_timeout if limit is None else limit
        try:
            await asyncio.wait_for(work, limit)
        except TimeoutError:
            logger.warning("%s took longer than %.1f s; going on without it", what, limit)
        except Exception as exc:
            logger.exception("%s failed", what)
            self._emit_error(exc, source=what, recoverable=True)
