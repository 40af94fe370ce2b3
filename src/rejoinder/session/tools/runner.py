"""Runs the model's tool calls: one task and one ``tool`` obligation per call.

A call's *first outcome* is what the reply that carried it waits for: the return value of
an inline tool, or the interim message of a tool released to the background by its first
``ctx.update()``. A released tool keeps running; its final value is handed to
``on_final`` (the activity turns it into a deferred reply).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..._dataclass import dataclass
from ...floor import Obligation, ObligationKind
from ...models import FunctionCall, FunctionCallOutput
from ..events import BackgroundToolFinishedEvent
from .invocation import ToolInvocation, ToolOutcome, call_output
from .tool import Tool

if TYPE_CHECKING:
    from ..context import SessionContext
    from ..speech.handle import SpeechHandle

logger = logging.getLogger("rejoinder")


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
        return call_output(self.call, "the tool call was interrupted", error=True)

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
        self, speech: SpeechHandle, call: FunctionCall, tools: Mapping[str, Tool]
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

    async def _run(self, run: ToolCallRun, speech: SpeechHandle, tool: Tool | None) -> None:
        call = run.call

        async def release(message: str) -> None:
            if run.released:
                logger.debug("%s: later ctx.update(%r) ignored", call.name, message)
                return
            run.released = True
            # Still committed: the interim result is owed a follow-up reply. The reply
            # that carried the call uncommits it when that follow-up takes over.
            if not run.first.done():
                run.first.set_result(ToolOutcome(call_output(call, message), reply_required=True))

        try:
            outcome = await ToolInvocation(self._ctx, call, tool, speech, release).run()
        except asyncio.CancelledError:
            outcome = ToolOutcome(
                call_output(call, "the tool call was cancelled", error=True), reply_required=False
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
