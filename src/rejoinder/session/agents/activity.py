"""AgentActivity: one running agent. Schedules its speeches one at a time, runs each reply
(model stream → output, tool calls → follow-up), and delivers background tool results.

Obligations are opened where the debt arises and handed over where one piece of work gives
way to the next, so the floor always holds the truth; this module never decides a state.
Which agent is current is decided by the agent stack (``agent_stack``); an activity only
does what it is told: enter, pause (a task is current), resume, wind down (it leaves).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing
from typing import Any

from ...floor import Obligation, ObligationKind
from ...models import LLM, ChatChunk, ChatItem, ChatMessage, FunctionCall, LLMError, StopResponse
from ...models.chat import new_id
from ...models.tts import TTSError
from ..context import SessionContext
from ..events import FunctionToolsExecutedEvent, SpeechCreatedEvent
from ..hearing.preemptive import Preemptive, speculation_key
from ..hearing.speculation import Speculation
from ..metrics_emit import LLMMeter, meter_for, watch_delivery
from ..speech.delivery import Delivery, OutputError
from ..speech.handle import ReplyRequest, SpeechHandle
from ..speech.outputs import new_delivery
from ..speech.queue import FOLLOW_UP, NORMAL, SpeechQueue
from ..speech.run import SpeechRun
from ..tools.invocation import ToolOutcome, final_record, offered_tools
from ..tools.runner import ToolCallRun, ToolRunner
from ..tools.tool import Tool
from .agent import Agent
from .agent_record import AgentRecord

HandOff = Callable[[Agent, Sequence[Obligation]], Awaitable[None]]
"""The agent stack's ``hand_off``: switch to an agent, closing ``carried`` in the same step."""

logger = logging.getLogger("rejoinder")

_ids = itertools.count(1)


running_activity: contextvars.ContextVar[AgentActivity | None] = contextvars.ContextVar(
    "rejoinder_activity", default=None
)
"""The activity whose scope the running code belongs to (a tool, a hook, a speech)."""


class AgentActivity:
    def __init__(
        self,
        agent: Agent,
        ctx: SessionContext,
        *,
        hand_off: Callable[[Agent, Sequence[Obligation]], asyncio.Future[None]],
        on_enter_failed: Callable[[Exception], None] | None = None,
    ) -> None:
        self.agent = agent
        self.id = f"activity_{next(_ids)}_{agent.id}"
        self._ctx = ctx
        self._state = ctx.state
        self._hand_off = hand_off
        self._on_enter_failed = on_enter_failed
        self._speeches = SpeechQueue()
        self._deferred: list[Obligation] = []
        self._tg: asyncio.TaskGroup | None = None
        self._closed = False
        self.entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Resolves once ``on_enter`` has returned (or failed, or the agent stopped), or
        has handed the floor to a task it awaits (see ``AgentStack._task_entered``)."""
        self.task: asyncio.Task[None] | None = None
        """The activity's scope, once the agent stack started it."""
        self.stopped: asyncio.Future[None] | None = None
        """Set by the agent stack while this agent leaves."""
        self._entering: asyncio.Task[None] | None = None
        self._record = AgentRecord(agent, ctx)
        self._speculation = Speculation(self._state, self.id, self._spawn)
        self._tools = ToolRunner(
            ctx=ctx,
            owner=self.id,
            spawn=self._spawn,
            on_final=self._background_tool_finished,
        )

    # ------------------------------------------------------------- lifecycle

    async def run(self, ready: asyncio.Future[None], handed: Obligation | None) -> None:
        """The activity's scope: every task it starts lives and dies inside it (and
        knows it runs for this agent, see ``running_activity``). ``handed`` (a switch's
        ``handoff`` obligation) goes over to ``entering``."""
        running_activity.set(self)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                if not ready.done():
                    ready.set_result(None)
                if self._closed:
                    # It left before its scope even began: no on_enter, no speech.
                    if handed is not None:
                        self._state.close(handed, "entered")
                    return
                entering = self._open_entering(handed)
                self._entering = tg.create_task(self._enter(entering))
                await self._schedule_forever()
        finally:
            self._tg = None
            if not self.entered.done():
                self.entered.set_result(None)
            self.abandon()

    def _open_entering(self, handed: Obligation | None) -> Obligation | None:
        """While ``on_enter`` runs the agent owes the user (it is preparing to speak):
        ``thinking``, never ``away``. An agent without an ``on_enter`` enters at once."""
        if type(self.agent).on_enter is Agent.on_enter:
            if handed is not None:
                self._state.close(handed, "entered")
            return None
        entering = self._state.new(
            ObligationKind.HANDOFF, self.id, label=f"{self.agent.id} entering"
        )
        self._state.hand_over([handed] if handed is not None else [], entering)
        return entering

    def abandon(self) -> None:
        """This agent will say nothing more: drop speculation, resolve queued speeches,
        and close what it still owed."""
        self._closed = True
        if self._deferred:
            logger.warning(
                "%s stopped with %d background result(s) not yet spoken; dropped",
                self.agent.id,
                len(self._deferred),
            )
        self.discard_preemptive("the agent stopped")
        self._speeches.drop()
        self._state.remove_owner(self.id)

    def wind_down(self, *, finish_audible: bool = True) -> asyncio.Future[None] | None:
        """The agent stops being current: nothing new is queued to it, its unheard speech
        is dropped (resolved as interrupted), and the speech the user is hearing may
        finish (unless the session is closing). Returns that speech's playout."""
        self._closed = True
        if self._entering is not None and not self._entering.done():
            # An agent that is no longer current must not go on preparing to speak:
            # what its on_enter said would land on the agent that is current now.
            self._entering.cancel()
        self._speeches.resume()  # a paused caller that leaves must not hold its scope open
        self.discard_preemptive("the agent left")
        self._speeches.drop()
        speech = self._speeches.current
        if speech is None or not speech.playing:
            return None
        if not finish_audible or not speech.audible:
            speech.interrupt()  # unheard (or closing): stopped, not finished
        return speech.playout

    def pause(self) -> asyncio.Future[None] | None:
        """A task is current: deliver nothing until ``resume``. The speech being
        delivered is cut (what was heard is kept, marked interrupted); its tools go on,
        and their follow-up waits for the resume. Returns the cut speech's playout."""
        self._speeches.pause()
        self.discard_preemptive("a task started")
        speech = self._speeches.current
        if speech is None or not speech.playing:
            return None
        speech.cut()
        return speech.playout

    def resume(self) -> None:
        self._speeches.resume()

    @property
    def session_context(self) -> SessionContext:
        return self._ctx

    @property
    def closed(self) -> bool:
        """It left (or is leaving): it says nothing more."""
        return self._closed

    @property
    def current_speech(self) -> SpeechHandle | None:
        speech = self._speeches.current
        return None if speech is None else speech.handle

    @property
    def current_run(self) -> SpeechRun | None:
        """The speech being delivered, for what hears the user over it (barge-in)."""
        return self._speeches.current

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        if self._tg is None:
            coro.close()
            raise RuntimeError(f"{self.agent.id} is not running")
        return self._ctx.start_in(self._tg, coro)

    async def _enter(self, entering: Obligation | None) -> None:
        try:
            await self._call_hook(self.agent.on_enter(), "on_enter", self._on_enter_failed)
        finally:
            if entering is not None:
                self._state.close(entering, "entered")
            if not self.entered.done():
                self.entered.set_result(None)

    async def _call_hook(
        self,
        hook: Awaitable[None],
        name: str,
        on_failure: Callable[[Exception], None] | None = None,
    ) -> None:
        try:
            await hook
        except Exception as exc:
            logger.exception("%s.%s failed", self.agent.id, name)
            self._ctx.emit_error(exc, source=name, recoverable=True)
            if on_failure is not None:
                on_failure(exc)

    # -------------------------------------------------------------- speeches

    def create_speech(
        self,
        *,
        source: str,
        text: str | None = None,
        request: ReplyRequest | None = None,
        allow_interruptions: bool | None = None,
        user_initiated: bool = False,
        hand_over_from: list[Obligation] | None = None,
        uncommit: list[Obligation] | None = None,
        priority: int = NORMAL,
    ) -> SpeechHandle:
        if self._closed:
            raise RuntimeError(f"{self.agent.id} is no longer the current agent")
        if allow_interruptions is None:
            allow_interruptions = self.agent.allow_interruptions
        if allow_interruptions is None:
            allow_interruptions = self._ctx.options.allow_interruptions
        handle = SpeechHandle(
            allow_interruptions=allow_interruptions,
            source=source,
            user_initiated=user_initiated,
            text=text,
            request=request,
        )
        run = SpeechRun(
            self._state, handle, self.id, hand_over_from=hand_over_from, uncommit=uncommit
        )
        self._speeches.push(run, priority)
        self._ctx.events.emit("speech_created", SpeechCreatedEvent(handle, source, user_initiated))
        return handle

    def interrupt(self) -> asyncio.Future[None]:
        """Interrupt every speech that allows it (see ``SpeechQueue.interrupt``)."""
        return self._speeches.interrupt()

    async def _schedule_forever(self) -> None:
        await self._speeches.run(
            lambda speech: self._spawn(self._run_speech(speech)),
            self._queue_deferred_reply,
            self._never_started,
        )

    def _queue_deferred_reply(self) -> bool:
        if self._deferred and not self._closed:
            self._create_deferred_reply()
            return True
        return False

    @staticmethod
    def _never_started(speech: SpeechRun) -> None:
        # Cancelled before its first step: _run_speech never ran its cleanup.
        speech.never_started()

    # ----------------------------------------------------------- one speech

    async def _run_speech(self, speech: SpeechRun) -> None:
        speech.begin(self._record.mark())
        reply = speech.reply
        delivery = self._new_delivery(speech)
        watch_delivery(self._ctx, delivery, speech.handle.id)
        runs: list[ToolCallRun] = []
        chained = False
        try:
            if not speech.cutting:
                try:
                    await self._produce(speech, reply, delivery, runs)
                    await delivery.finish()
                except asyncio.CancelledError:
                    if not speech.take_cut():
                        raise
            # A cut (paused for a task, or the listener left) ends the output, not the tools.
            cut = speech.cutting or delivery.cut_short
            self._end_playout(speech, delivery, interrupted=cut)
            if runs:
                chained = await self._settle_tools(speech, runs)
        except asyncio.CancelledError:
            self._abandon(speech, delivery, runs, "interrupted")
            raise
        except Exception as exc:
            source = _error_source(exc)
            logger.warning("reply %s failed (%s): %s", speech.handle.id, source, exc)
            self._ctx.emit_error(exc, source=source, recoverable=True)
            self._abandon(speech, delivery, runs, "failed")
        finally:
            if not chained:
                speech.finished()

    async def _produce(
        self,
        speech: SpeechRun,
        reply: Obligation,
        delivery: Delivery,
        runs: list[ToolCallRun],
    ) -> None:
        request = speech.request
        if request is None:
            if speech.text:
                await delivery.push_text(speech.text)
            return
        if request.user_message is not None:
            try:
                await self.agent.on_user_turn_completed(self.agent.chat_ctx, request.user_message)
            except StopResponse:
                return
        llm = self._chat_llm()
        if llm is None:
            raise RuntimeError(f"{self.agent.id} has no LLM to generate a reply with")
        # Background results already in the context are carried by this reply.
        if self._deferred:
            self._state.close(self._deferred, "carried")
            self._deferred = []
        tools = self._offered_tools(request.step)
        meter = LLMMeter(llm, speech.handle.id)
        stream = self._prepared_stream(request, tools) or llm.chat(
            self._record.model_context(request.instructions),
            [t.definition for t in tools.values()],
            "auto" if tools else "none",
        )
        async with aclosing(stream):  # type: ignore[type-var]
            async for chunk in stream:
                if self._closed:
                    # The agent left while the user was hearing this: what was produced
                    # plays out, nothing more is said or called.
                    break
                meter.observe(chunk)
                if chunk.delta:
                    await delivery.push_text(chunk.delta)
                elif chunk.tool_calls:
                    delivery.text_paused()  # arguments stream: speak the ready sentence
                for request_call in chunk.tool_calls:
                    call = FunctionCall(
                        call_id=request_call.call_id or new_id("call"),
                        name=request_call.name,
                        arguments=request_call.arguments,
                    )
                    runs.append(self._tools.dispatch(speech.handle, call, tools))
        meter_for(self._ctx).emit(meter.metrics())

    def _chat_llm(self) -> LLM | None:
        """The chat model replies are generated with (a realtime model voices its own)."""
        llm = self.agent.llm or self._ctx.llm
        return llm if isinstance(llm, LLM) else None

    def _offered_tools(self, step: int) -> dict[str, Tool]:
        if step >= self._ctx.options.max_tool_steps:
            return {}
        return offered_tools(self._ctx, self.agent)

    # ------------------------------------------------------ preemptive replies

    def start_preemptive(self, user_text: str) -> None:
        """Start generating a reply to ``user_text`` before the user's turn has ended."""
        llm = self._chat_llm()
        if llm is None or self._tg is None or self._closed or self._speeches.paused:
            return
        tools = self._offered_tools(0)
        items = list(self.agent.chat_ctx.items)
        images = self._ctx.pending_images
        key = speculation_key(user_text, images, items, self.agent.instructions, tools)
        context = self._record.model_context(None).items
        self._speculation.start(
            llm, key, context, ChatMessage("user", user_text, images=images), tools
        )

    def discard_preemptive(self, reason: str) -> None:
        self._speculation.discard(reason)

    def claim_preemptive(self) -> Preemptive | None:
        """The speculative reply, for the user turn that just ended (checked before use)."""
        return self._speculation.claim()

    def _prepared_stream(
        self, request: ReplyRequest, tools: dict[str, Tool]
    ) -> AsyncIterator[ChatChunk] | None:
        if request.prepared is None or request.user_message is None:
            return None
        # Checked after on_user_turn_completed: the hook may have changed the message,
        # the context, the instructions or the tools.
        agent = self.agent
        return request.prepared.reuse_for(
            request.user_message,
            agent.chat_ctx.items,
            agent.instructions,
            tools,
            extra_instructions=request.instructions,
        )

    def _new_delivery(self, speech: SpeechRun) -> Delivery:
        return new_delivery(
            self._ctx, speech.heard, self._spawn, self._output_failed, inaudible=speech.not_heard
        )

    def _output_failed(self, exc: Exception) -> None:
        self._ctx.emit_error(exc, source="output", recoverable=True)

    def _end_playout(self, speech: SpeechRun, delivery: Delivery, *, interrupted: bool) -> None:
        """Output of this speech is over: record what was heard, release its reply."""
        if interrupted:
            delivery.stop()
        heard = delivery.heard()
        if heard:
            message = ChatMessage(role="assistant", content=heard, interrupted=interrupted)
            # Where the speech began: before what the user said while it played.
            self._record.commit(message, speech.handle, at=speech.began)
        speech.played(interrupted=interrupted)

    def _abandon(
        self,
        speech: SpeechRun,
        delivery: Delivery,
        runs: list[ToolCallRun],
        outcome: str,
    ) -> None:
        """Stop everything this speech still owes, in one floor step."""
        inline = [run for run in runs if not run.released]
        for run in inline:
            run.cancel()
        if speech.playing:  # the watchdog may have closed the reply already
            self._end_playout(speech, delivery, interrupted=True)
        for run in runs:
            # Every call that started is on record, paired with an output: a tool that
            # ran (booked a flight) must not be run again by the next request.
            if not run.recorded:
                self._commit(run.call, speech.handle)
                run.recorded = True
            if not run.answered:
                self._commit(run.output_if_abandoned(), speech.handle)
                run.answered = True
            self._deliver_pending_final(run)
        released = [run.obligation for run in runs if run.released]
        self._state.close([run.obligation for run in inline], outcome, uncommit=released)

    async def _settle_tools(self, speech: SpeechRun, runs: list[ToolCallRun]) -> bool:
        """Wait for each call's first outcome; chain a follow-up reply when one is owed.
        Returns whether a follow-up was chained (the handle then resolves with it)."""
        for run in runs:
            self._commit(run.call, speech.handle)
            run.recorded = True
        outcomes: list[ToolOutcome] = [await run.first for run in runs]
        for run, outcome in zip(runs, outcomes, strict=True):
            self._commit(outcome.output, speech.handle)
            run.answered = True
        self._ctx.events.emit(
            "function_tools_executed",
            FunctionToolsExecutedEvent(
                [run.call for run in runs], [outcome.output for outcome in outcomes]
            ),
        )
        try:
            return self._follow_up(speech, runs, outcomes)
        finally:
            # Final results of released calls that landed while this reply was still
            # delivered come after the step above: whatever follows them (a deferred
            # reply, nothing) starts from a floor that already holds the follow-up.
            for run in runs:
                self._deliver_pending_final(run)

    def _follow_up(
        self, speech: SpeechRun, runs: list[ToolCallRun], outcomes: list[ToolOutcome]
    ) -> bool:
        """What the tools' first outcomes lead to: a handoff, a follow-up reply, or the
        end of the turn. Returns whether the handle now resolves with something else."""
        finished = [run.obligation for run in runs if not run.released]
        background = [run.obligation for run in runs if run.released]
        handoff = next((o.handoff for o in outcomes if o.handoff is not None), None)
        request = speech.request
        if handoff is not None and not self._closed:
            # The user was handed over: the new agent owes the answer. The agent stack
            # opens its handoff obligation in the same floor step as these tools close,
            # and this handle resolves once the new agent has entered.
            self._state.close([], uncommit=background)
            entered = self._hand_off(handoff, finished)
            entered.add_done_callback(lambda _: speech.finished())
            return True
        # At max_tool_steps the model was offered no tools; a call it makes anyway is
        # answered with an error and the turn ends, so the rounds are exactly bounded.
        # An agent that left says nothing more.
        if (
            request is None
            or self._closed
            or request.step >= self._ctx.options.max_tool_steps
            or not any(o.reply_required for o in outcomes)
        ):
            self._state.close(finished, uncommit=background)
            return False
        follow_up = self.create_speech(
            source="tool_reply",
            request=ReplyRequest(step=request.step + 1),
            allow_interruptions=speech.handle.allow_interruptions,
            hand_over_from=finished,
            uncommit=background,
            priority=FOLLOW_UP,
        )
        speech.chain(follow_up)
        return True

    # ------------------------------------------------------ deferred replies

    def _background_tool_finished(self, run: ToolCallRun, outcome: ToolOutcome) -> None:
        """A released tool returned: its result goes into the context and, when a reply
        is owed, the tool obligation hands over to a ``deferred_reply`` one."""
        if not run.answered:
            # Its call and interim result are not on record yet (the reply carrying it
            # is still being delivered): the final result waits to come after them.
            run.pending_final = outcome
            return
        for item in final_record(run.call, outcome):
            self._commit(item, None)
        if outcome.handoff is not None and not self._closed:
            # Handed over in the same floor step as the tool's debt ends (no gap).
            self._hand_off(outcome.handoff, [run.obligation])
            return
        if not outcome.reply_required or outcome.handoff is not None:
            self._state.close(run.obligation)
            return
        deferred = self._state.new(ObligationKind.DEFERRED_REPLY, self.id, label=run.call.name)
        self._state.hand_over(run.obligation, deferred)
        self._deferred.append(deferred)
        self._speeches.wake()

    def _deliver_pending_final(self, run: ToolCallRun) -> None:
        if run.pending_final is not None:
            outcome, run.pending_final = run.pending_final, None
            self._background_tool_finished(run, outcome)

    def _create_deferred_reply(self) -> None:
        """One reply for every result that landed since the last one (coalescing)."""
        pending, self._deferred = self._deferred, []
        self.create_speech(source="deferred_reply", request=ReplyRequest(), hand_over_from=pending)

    # ------------------------------------------------------------ the record

    def _commit(self, item: ChatItem, speech: SpeechHandle | None) -> None:
        self._record.commit(item, speech)

    def add_user_message(self, text: str) -> ChatMessage:
        return self._record.add_user_message(text)


def _error_source(exc: Exception) -> str:
    if isinstance(exc, OutputError):
        return "output"
    if isinstance(exc, LLMError):
        return "llm"
    if isinstance(exc, TTSError):
        return "tts"
    return "reply"
