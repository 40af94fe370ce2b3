"""Runs the model's tool calls: one task and one ``tool`` obligation per call.

A call's *first outcome* is what the reply that carried it waits for: the return value of
an inline tool, or the interim message of a tool released to the background by its first
``ctx.update()``. A released tool keeps running; its final value is handed to
``on_final`` (the activity turns it into a deferred reply).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...floor import Obligation, ObligationKind
from ...models import FunctionCall, FunctionCallOutput, ToolError, ToolResult
from ..events import BackgroundToolFinishedEvent
from .function_tool import FunctionTool
from .run_context import RunContext

if TYPE_CHECKING:
    from ..agents.agent import Agent
    from ..context import SessionContext
    from ..speech.handle import SpeechHandle

logger = logging.getLogger("rejoinder")


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: FunctionCallOutput
    reply_required: bool
    handoff: Agent | None = None


@dataclass(eq=False, slots=True)
class ToolCallRun:
    call: FunctionCall
    obligation: Obligation
    first: asyncio.Future[ToolOutcome]
    released: bool = False
    recorded: bool = False
    """The call is in the chat history, so an output must follow it there."""
    answered: bool = False
    pending_final: ToolOutcome | None = None
    """A released call's final result that landed before its call was on record."""
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def output_if_abandoned(self) -> FunctionCallOutput:
        """What the history says of a call whose reply was interrupted or failed."""
        if self.first.done() and not self.first.cancelled():
            return self.first.result().output  # the interim result of a released call
        return _output(self.call, "the tool call was interrupted", error=True)

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


class ToolRunner:
    def __init__(
        self,
        *,
        ctx: SessionContext,
        owner: str,
        spawn: Callable[[Any], asyncio.Task[None]],
        on_final: Callable[[ToolCallRun, ToolOutcome], None],
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._owner = owner
        self._spawn = spawn
        self._on_final = on_final

    def dispatch(
        self, speech: SpeechHandle, call: FunctionCall, tools: Mapping[str, FunctionTool]
    ) -> ToolCallRun:
        """Start one call now (while the reply carrying it may still be delivered)."""
        run = ToolCallRun(
            call=call,
            obligation=self._state.new(ObligationKind.TOOL, self._owner, label=call.name),
            first=asyncio.get_running_loop().create_future(),
        )
        # Open before the task exists: the obligation must be on the floor before the
        # reply that carries the call can end (docs/architecture.md: hand-over before release).
        self._state.open_new(run.obligation, on_expire=run.cancel)
        run.task = self._spawn(self._run(run, speech, tools.get(call.name)))
        return run

    async def _run(self, run: ToolCallRun, speech: SpeechHandle, tool: FunctionTool | None) -> None:
        call = run.call

        async def release(message: str) -> None:
            if run.released:
                logger.debug("%s: later ctx.update(%r) ignored", call.name, message)
                return
            run.released = True
            # Still committed: the interim result is owed a follow-up reply. The reply
            # that carried the call uncommits it when that follow-up takes over.
            if not run.first.done():
                run.first.set_result(ToolOutcome(_output(call, message), reply_required=True))

        context: RunContext[Any] = RunContext(
            session=self._ctx.session, speech_handle=speech, function_call=call, release=release
        )
        try:
            outcome = await invoke_tool(self._ctx, call, tool, context)
        except asyncio.CancelledError:
            outcome = ToolOutcome(
                _output(call, "the tool call was cancelled", error=True), reply_required=False
            )
            self._finish(run, outcome)
            raise
        self._finish(run, outcome)

    def _finish(self, run: ToolCallRun, outcome: ToolOutcome) -> None:
        if not run.released:
            if not outcome.reply_required and outcome.handoff is None:
                # Nothing will follow from this call: the debt ends now, not when the
                # reply that carried it has been delivered. (A handoff's debt goes on:
                # the new agent will answer.)
                self._state.close(run.obligation)
            if not run.first.done():
                run.first.set_result(outcome)
            return
        call, output = run.call, outcome.output
        self._state.report(
            "background_tool_finished",
            BackgroundToolFinishedEvent(
                call.name, call.call_id, output.is_error, self._state.now()
            ),
        )
        self._on_final(run, outcome)


async def invoke_tool(
    ctx: SessionContext,
    call: FunctionCall,
    tool: FunctionTool | None,
    context: RunContext[Any],
) -> ToolOutcome:
    """Run one call and say what it produced: its value, or the error the model sees (an
    unknown tool, bad arguments, ``ToolError``, or a crash, which is also reported as an
    ``error`` event). Cancellation propagates."""
    try:
        if tool is None:
            raise ToolError(f"unknown tool {call.name!r}")
        return _outcome_of(call, await tool.invoke(context, call.arguments))
    except ToolError as exc:
        return ToolOutcome(_output(call, exc.message, error=True), reply_required=True)
    except Exception as exc:
        logger.exception("tool %s failed", call.name)
        ctx.emit_error(exc, source="tool", recoverable=True)
        return ToolOutcome(
            _output(call, f"the tool {call.name} failed with an internal error", error=True),
            reply_required=True,
        )


def final_record(
    call: FunctionCall, outcome: ToolOutcome
) -> list[FunctionCall | FunctionCallOutput]:
    """How a released call's final result goes on record: a second call/output pair
    (``<call_id>_final``), after the interim one the model already saw."""
    final_call = FunctionCall(
        call_id=f"{call.call_id}_final", name=call.name, arguments=call.arguments
    )
    return [
        final_call,
        FunctionCallOutput(
            call_id=final_call.call_id,
            name=call.name,
            output=outcome.output.output,
            is_error=outcome.output.is_error,
        ),
    ]


def _output(call: FunctionCall, text: str, *, error: bool = False) -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call.call_id, name=call.name, output=text, is_error=error)


def _outcome_of(call: FunctionCall, value: Any) -> ToolOutcome:
    from ..agents.agent import Agent  # a tool returning an Agent hands the conversation over

    if isinstance(value, Agent):
        return ToolOutcome(
            _output(call, f"transferred to {value.id}"), reply_required=False, handoff=value
        )
    if isinstance(value, ToolResult):
        return ToolOutcome(_output(call, _to_text(value.output)), value.reply_required)
    if value is None:
        return ToolOutcome(_output(call, ""), reply_required=False)
    return ToolOutcome(_output(call, _to_text(value)), reply_required=True)


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)
