"""AgentStack: which agent is current, which callers wait paused on a task, and every switch.

Every change of the current agent goes through here: the first agent,
a handoff (a tool returning an ``Agent``, inline or from the background; a realtime
tool doing the same; ``session.update_agent``), and an ``AgentTask`` starting,
completing, failing or being cancelled, nested or not. No other module changes which
agent is current. Each switch is a sequence of floor hand-overs:

* a committed ``handoff`` obligation (owned by the session) opens *before* anything the
  outgoing agent owed is released: in the same floor step as the tool obligations that
  produced the switch close, or before the old agent's queued work is dropped;
* the incoming activity is made current, and the ``handoff`` obligation is handed over to
  its ``entering`` obligation, which stays open while its ``on_enter`` runs (the agent
  reports ``thinking``, the user is never marked away; the ``handoff`` watchdog bounds
  it) and closes when ``on_enter`` returns: whatever it queued is owed on its own by then,
  and if it queued nothing the agent is truly ``listening``;
* a task's completion makes its caller current again in the same floor step (the
  caller's waiting tool counts again before the task's work stops counting).

Once a task's agent has left, however the task ended (completed, failed, cancelled,
abandoned by its awaiting tool, ended with an outer task, stranded by a handoff or the
session closing), what was said in it goes into its caller's context, innermost task
first, in speaking order (``task_conversation``): the caller's model reads the task's
question and the user's answer before its waiting call and that call's output.

Output ownership moves with the switch: the outgoing agent's unheard speech is dropped
(resolved as interrupted), what the user is already hearing finishes (bounded) before
the incoming agent may deliver anything, and a paused caller's speech is cut before the
task speaks, so every speech hears its own playback finish.

Bounds: ``on_exit``, ``on_enter`` waits, playout waits and scope cancellation are each
bounded by ``close_timeout``; nothing here can hang a lifecycle call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any, TypeVar

from ..._dataclass import dataclass
from ...floor import SESSION_OWNER, Obligation, ObligationKind
from ...models import AgentHandoff, ToolError
from ..context import SessionContext
from .activity import AgentActivity, running_activity
from .agent import Agent
from .agent_task import AgentTask, TaskHost
from .task_conversation import answered_calls, merge_conversation

logger = logging.getLogger("rejoinder")

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class _Frame:
    """A running task and the caller that awaits it (paused while the task is current)."""

    caller: AgentActivity
    activity: AgentActivity
    task: AgentTask[Any]
    pending: Obligation
    """The session's ``handoff`` obligation covering the task's entry."""
    answered: frozenset[str]
    """The calls the caller's context had outputs for when the task began: the task's
    conversation goes before the others (see ``task_conversation``)."""
    ended: bool = False
    merged: bool = False
    finished: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """Resolves once the task's activity has left and the caller resumed."""


class AgentStack(TaskHost):
    def __init__(
        self,
        ctx: SessionContext,
        *,
        on_agent_changed: Callable[[Agent], None] = lambda agent: None,
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._on_agent_changed = on_agent_changed
        """Told the new current agent after each switch (a realtime connection pushes
        its instructions and tools)."""
        self._current: AgentActivity | None = None
        self._frames: list[_Frame] = []
        """Running tasks, innermost last."""
        self._replacing = asyncio.Lock()
        """Handoffs run one at a time, in the order they were asked for."""

    # -------------------------------------------------------------- reading

    @property
    def current(self) -> AgentActivity | None:
        return self._current

    @property
    def depth(self) -> int:
        """How many tasks are running (0: the current agent is not a task)."""
        return len(self._frames)

    def require_running(self) -> None:
        """Raise unless the session runs and is not closing (a call that needs it)."""
        if not self._ctx.running:
            raise RuntimeError("the session is not running (call start() first)")
        if self._ctx.closing:
            raise RuntimeError("the session is closing")

    def running(self) -> AgentActivity:
        """The current agent, for a call that needs a running session."""
        self.require_running()
        if self._current is None:
            raise RuntimeError("the session is not running (call start() first)")
        return self._current

    def speaker(self) -> AgentActivity:
        """Who says what an agent's own code asks for: that agent (from its tools and
        hooks; a paused agent's speech waits until it resumes, and one that was replaced
        says nothing more), or the current agent (from anywhere else: application code,
        an ``on_exit``). What the user says always goes to the current agent."""
        current = self.running()
        mine = running_activity.get()
        if mine is None or mine is current or mine.session_context is not self._ctx:
            return current
        if mine.closed:
            raise RuntimeError(f"{mine.agent.id} is no longer the current agent")
        return mine

    # ----------------------------------------------------------- the first

    async def start(self, agent: Agent) -> None:
        """Make ``agent`` the first current agent; returns once it is current (its
        ``on_enter`` goes on, owed as ``entering``)."""
        activity = self._activity_for(agent)
        self._make_current(activity)
        await self._launch(activity, handed=None)

    # ------------------------------------------------------------ handoffs

    def hand_off(self, agent: Agent, carried: Sequence[Obligation] = ()) -> asyncio.Future[None]:
        """Replace the current agent (and every caller paused on a task) by ``agent``.

        ``carried``: open obligations that produced the switch (the tool that returned
        ``agent``); they close in the same floor step as the ``handoff`` obligation
        opens. The returned future resolves once ``agent`` has entered (or the bound
        passed, or the session closed)."""
        if not isinstance(agent, Agent):
            raise TypeError(f"a handoff needs an rj.Agent, got {type(agent).__name__}")
        if not self._ctx.running or self._ctx.closing:
            raise RuntimeError("the session is not running")
        pending = self._state.new(ObligationKind.HANDOFF, SESSION_OWNER, label=f"to {agent.id}")
        self._state.hand_over(list(carried), pending)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def finished(_: object) -> None:
            # Also when the switch was cancelled before it ran (the session closing).
            self._state.close(pending, "entered")
            if not done.done():
                done.set_result(None)

        self._ctx.spawn(self._replace(agent, pending)).add_done_callback(finished)
        return done

    async def _replace(self, agent: Agent, pending: Obligation) -> None:
        async with self._replacing:
            if self._ctx.closing:
                return
            leaving = self._everyone()
            frames, self._frames = self._frames, []
            incoming = self._activity_for(agent)
            # The incoming agent is current from here on: what is said meanwhile is
            # queued to it, and the outgoing agents' work no longer counts; ``pending``
            # (the session's) keeps the agent thinking across the gap.
            self._make_current(incoming)
            for activity in leaving:  # unheard speech goes now, not one leave at a time
                activity.wind_down()
            outgoing = leaving[0].agent.id if leaving else None
            self._ctx.record(AgentHandoff(old_agent_id=outgoing, new_agent_id=agent.id))
            for frame in reversed(frames):
                # Each stranded caller's waiting tool gets an error now, not a hang.
                self._strand(frame, f"the task {frame.task.id} ended: the agent was replaced")
            for activity in leaving:  # innermost first
                await self._leave(activity)
            # The callers leave too, but their agents keep their contexts (an app may
            # bring one back): each still gets what was said in the task it awaited.
            self._merge(frames)
            if self._ctx.closing:
                return
            self._on_agent_changed(agent)
            await self._launch(incoming, handed=pending)

    # --------------------------------------------------------------- tasks

    async def run_task(self, task: AgentTask[T]) -> T:
        """Pause the current agent, run ``task`` as the current one until it completes,
        and resume the caller (its context gets the task's conversation)."""
        if self._current is None or not self._ctx.running or self._ctx.closing:
            raise RuntimeError("the session is not running")
        # The caller is the agent whose tool or hook awaits the task (the current one
        # when awaited from elsewhere: an on_exit, a realtime tool).
        caller = running_activity.get() or self._current
        if caller is not self._current:
            raise ToolError(
                f"{caller.agent.id} is no longer the current agent: it cannot start {task.id}"
            )
        if any(frame.task is task for frame in self._frames):
            raise RuntimeError(f"the task {task.id} is already running")
        outcome = task._future()
        if outcome.done():
            raise RuntimeError(f"the task {task.id} has already completed")
        pending = self._state.new(ObligationKind.HANDOFF, SESSION_OWNER, label=f"task {task.id}")
        self._state.open_new(pending)
        activity = self._activity_for(task)
        frame = _Frame(caller, activity, task, pending, answered_calls(caller.agent.chat_ctx.items))
        self._frames.append(frame)
        self._make_current(activity)
        cut = caller.pause()
        self._ctx.record(AgentHandoff(old_agent_id=caller.agent.id, new_agent_id=task.id))
        self._on_agent_changed(task)
        # In the session's scope: the switch completes even if the awaiting tool is
        # cancelled half-way (an interrupt racing the task's entry).
        starting = self._ctx.spawn(self._start_task(frame, cut))
        starting.add_done_callback(lambda _: self._task_entered(caller, pending))
        try:
            result = await asyncio.shield(outcome)
        except asyncio.CancelledError:
            # Nobody waits for the result any more: the task ends, the caller resumes.
            if not outcome.done():
                task.complete(ToolError(f"the task {task.id} was abandoned by its caller"))
            _retrieved(outcome)  # nobody awaits it any more
            raise
        except BaseException:
            await self._settled(frame)
            raise
        await self._settled(frame)
        return result

    def _task_entered(self, caller: AgentActivity, pending: Obligation) -> None:
        self._state.close(pending, "entered")
        if not caller.entered.done():
            # The caller awaited the task from its on_enter: the task speaks for it now,
            # so it has entered as far as the session goes (the opening ends, and a task
            # that waits for the user shows it: listening, not initializing). Its on_enter
            # goes on once the task returns, owed as ``entering`` again.
            caller.entered.set_result(None)

    async def _start_task(self, frame: _Frame, cut: asyncio.Future[None] | None) -> None:
        if cut is not None:
            # The caller's cut speech stops first: its output is the task's now.
            await self._ctx.bounded(asyncio.shield(cut), f"pausing {frame.caller.agent.id}")
        if frame.ended:
            return
        await self._launch(frame.activity, handed=frame.pending)

    def task_completing(self, task: AgentTask[Any]) -> None:
        """Called by ``task.complete()`` before its result is set: the caller is current
        again in this same floor step, so its waiting tool is owed with no gap."""
        frame = next((f for f in self._frames if f.task is task), None)
        if frame is None or self._ctx.closing:
            return
        index = self._frames.index(frame)
        inner, self._frames = self._frames[index + 1 :], self._frames[:index]
        frame.ended = True
        self._make_current(frame.caller)
        for nested in reversed(inner):
            self._strand(nested, f"the task {nested.task.id} ended with its caller {task.id}")
        # In this same step, before anything of theirs can start after the caller's
        # state was reported: what the task agents had not yet said is dropped.
        for ended in [*(nested.activity for nested in inner), frame.activity]:
            ended.wind_down()
        self._ctx.spawn(self._return_to_caller(frame, inner))

    async def _return_to_caller(self, frame: _Frame, inner: list[_Frame]) -> None:
        try:
            for nested in reversed(inner):
                await self._leave(nested.activity)
            await self._leave(frame.activity)
            # After the leaves: the task's last words are on record once they played.
            # Nested tasks first, so what the user said to them reaches this caller too.
            self._merge([frame, *inner])
            caller = frame.caller.agent
            if not self._ctx.closing:
                self._ctx.record(AgentHandoff(old_agent_id=frame.task.id, new_agent_id=caller.id))
                if self._current is frame.caller:
                    self._on_agent_changed(caller)
            frame.caller.resume()
        finally:
            self._merge([frame, *inner])  # also when the leave was cut short (closing)
            if not frame.finished.done():
                frame.finished.set_result(None)

    async def _settled(self, frame: _Frame) -> None:
        """The awaiting tool returns once the caller resumed, with the task's
        conversation merged into its context."""
        await self._ctx.bounded(asyncio.shield(frame.finished), f"returning from {frame.task.id}")

    def _merge(self, frames: list[_Frame]) -> None:
        """Each task's conversation into its caller's context, innermost first (``frames``
        outermost first, as ``_frames`` holds them); once per task."""
        for frame in reversed(frames):
            if frame.merged:
                continue
            frame.merged = True
            merge_conversation(
                frame.caller.agent.chat_ctx.items, frame.task.chat_ctx.items, frame.answered
            )

    def _strand(self, frame: _Frame, reason: str) -> None:
        """``frame``'s caller will not resume: its waiting tool gets a ``ToolError``."""
        frame.ended = True
        outcome = frame.task._future()
        if not outcome.done():
            outcome.set_exception(ToolError(reason))
            _retrieved(outcome)  # the awaiting tool may be gone already
        if not frame.finished.done():
            frame.finished.set_result(None)

    # --------------------------------------------------------------- close

    async def close(self) -> None:
        """Every agent leaves (innermost first), each bounded."""
        leaving = self._everyone()
        frames, self._frames = self._frames, []
        for frame in reversed(frames):
            self._strand(frame, "the session closed")
        for activity in leaving:
            await self._leave(activity, finish_audible=False)
        self._merge(frames)  # the contexts outlive the session (a record of the call)

    # ------------------------------------------------------------ internal

    def _everyone(self) -> list[AgentActivity]:
        """The current activity and every paused caller, innermost first."""
        paused = [frame.caller for frame in reversed(self._frames)]
        return [a for a in [self._current, *paused] if a is not None]

    def _activity_for(self, agent: Agent) -> AgentActivity:
        agent._session = self._ctx.session
        task = agent if isinstance(agent, AgentTask) else None
        return AgentActivity(
            agent,
            self._ctx,
            hand_off=self.hand_off,
            on_enter_failed=None if task is None else _fail_task(task),
        )

    def _make_current(self, activity: AgentActivity) -> None:
        self._current = activity
        self._state.set_current(activity.id)

    async def _launch(self, activity: AgentActivity, *, handed: Obligation | None) -> None:
        """Start ``activity``'s scope; ``handed`` goes over to its ``entering``
        obligation. Returns once ``on_enter`` returned, or after the bound."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        activity.task = self._ctx.spawn(activity.run(ready, handed))
        await ready
        await self._ctx.bounded(asyncio.shield(activity.entered), f"{activity.agent.id}.on_enter")

    async def _leave(self, activity: AgentActivity, *, finish_audible: bool = True) -> None:
        """Exit an agent: unheard speech dropped, audible speech finishes, ``on_exit``,
        then its scope is cancelled (each bounded). A second caller waits for the first
        one's; an activity that never ran just resolves what was queued to it."""
        audible = activity.wind_down(finish_audible=finish_audible)
        task = activity.task
        if task is None:
            activity.abandon()
            return
        if activity.stopped is not None:
            await asyncio.shield(activity.stopped)
            return
        activity.stopped = asyncio.get_running_loop().create_future()
        agent = activity.agent
        try:
            if audible is not None:
                await self._ctx.bounded(asyncio.shield(audible), f"{agent.id}'s last speech")
            await self._ctx.bounded(agent.on_exit(), f"{agent.id}.on_exit")
            task.cancel()
            await self._ctx.bounded(asyncio.wait((task,)), f"stopping {agent.id}")
        finally:
            if agent._session is self._ctx.session:
                agent._session = None
            activity.stopped.set_result(None)


def _retrieved(outcome: asyncio.Future[Any]) -> None:
    """Mark a task's outcome as seen: an awaiting tool still gets it, and one that is
    gone does not leave asyncio to log "exception was never retrieved"."""
    if outcome.done() and not outcome.cancelled():
        outcome.exception()


def _fail_task(task: AgentTask[Any]) -> Callable[[Exception], None]:
    def fail(exc: Exception) -> None:
        # The caller's waiting tool sees why the task could not run.
        error = ToolError(f"the task {task.id} failed: {exc}")
        error.__cause__ = exc
        task.complete(error)

    return fail
