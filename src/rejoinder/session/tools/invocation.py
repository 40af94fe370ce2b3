"""One tool call, whichever path asked for it: the tools an agent is offered, the
``RunContext`` the tool sees, and what its value means.

Three paths run tools: a pipeline reply's calls (``runner.py``), a realtime provider's
calls (``realtime/engine.py``) and the calls inside an answer the application gives a
duplex model's delegation (``realtime/client_delegation.py``). They differ in what a
release (the tool's first ``ctx.update()``) does and in which speech carries the call;
everything else is decided here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..._dataclass import dataclass
from ...models import FunctionCall, FunctionCallOutput, ToolError, ToolResult
from .run_context import RunContext
from .tool import Tool, expand

if TYPE_CHECKING:
    from ..agents.agent import Agent
    from ..context import SessionContext
    from ..speech.handle import SpeechHandle

logger = logging.getLogger("rejoinder")

Release = Callable[[str], Awaitable[None]]


def offered_tools(ctx: SessionContext, agent: Agent) -> dict[str, Tool]:
    """The tools ``agent`` is offered, by name: the session's and its own (its own win),
    toolsets as they are now."""
    return {t.name: t for t in expand((*ctx.tools, *agent.tools))}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: FunctionCallOutput
    reply_required: bool
    handoff: Agent | None = None


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One call to run: ``tool`` is ``None`` when the model named a tool it was not
    offered (the model is told so); ``speech`` carries the call (``SpeechHandle.played_out``
    when no speech of the session's does); ``release`` is what the tool's first
    ``ctx.update()`` does."""

    ctx: SessionContext
    call: FunctionCall
    tool: Tool | None
    speech: SpeechHandle
    release: Release

    @classmethod
    def offered(
        cls,
        ctx: SessionContext,
        agent: Agent,
        call: FunctionCall,
        speech: SpeechHandle,
        release: Release,
    ) -> ToolInvocation:
        """The call ``agent``'s model made, against the tools it is offered."""
        return cls(ctx, call, offered_tools(ctx, agent).get(call.name), speech, release)

    async def run(self) -> ToolOutcome:
        """Run the call and say what it produced: its value, or the error the model sees
        (an unknown tool, bad arguments, ``ToolError``, or a crash, which is also reported
        as an ``error`` event). Cancellation propagates."""
        call, tool = self.call, self.tool
        context: RunContext[Any] = RunContext(
            session=self.ctx.session,
            speech_handle=self.speech,
            function_call=call,
            release=self.release,
        )
        try:
            if tool is None:
                raise ToolError(f"unknown tool {call.name!r}")
            return _outcome_of(call, await tool.invoke(context, call.arguments))
        except ToolError as exc:
            return ToolOutcome(call_output(call, exc.message, error=True), reply_required=True)
        except Exception as exc:
            logger.exception("tool %s failed", call.name)
            self.ctx.emit_error(exc, source="tool", recoverable=True)
            return ToolOutcome(
                call_output(
                    call, f"the tool {call.name} failed with an internal error", error=True
                ),
                reply_required=True,
            )


def call_output(call: FunctionCall, text: str, *, error: bool = False) -> FunctionCallOutput:
    """The output item answering ``call``."""
    return FunctionCallOutput(call_id=call.call_id, name=call.name, output=text, is_error=error)


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


def _outcome_of(call: FunctionCall, value: Any) -> ToolOutcome:
    from ..agents.agent import Agent  # a tool returning an Agent hands the conversation over

    if isinstance(value, Agent):
        return ToolOutcome(
            call_output(call, f"transferred to {value.id}"), reply_required=False, handoff=value
        )
    if isinstance(value, ToolResult):
        return ToolOutcome(call_output(call, _to_text(value.output)), value.reply_required)
    if value is None:
        return ToolOutcome(call_output(call, ""), reply_required=False)
    return ToolOutcome(call_output(call, _to_text(value)), reply_required=True)


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    dump = getattr(value, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    import json  # here, not at import: a session without tool calls never writes JSON

    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)
