"""Client delegations: the voice model hands work to *us*, and we owe the answer.

With GPT-Live's ``delegation="client"`` the voice model says "let me check" and sends
``session.delegation.created{target:"client"}``; the application answers with a
commentary append carrying that id, which the model then says in its own words. No
event on the wire closes the delegation (gpt-live §5.1), so nothing but us knows an
answer is owed — and other frameworks report nothing while it is prepared, so their
users are marked away and clients see ``listening``.

Here each delegation opens a committed ``client_delegation`` obligation (owned by the
session: the answer outlives a handoff). The current agent's ``on_delegation`` makes the
answer — by default its own LLM and tools, on the conversation so far. When the answer
is sent the obligation hands over to ``answer`` (the wait for the voice model to speak
it, bounded by ``answer_timeout``), and that to the ``reply`` its audio opens: the agent
is ``thinking`` until the spoken answer is audible.

A failed answer closes the debt with an ``error`` event (source ``delegation``) and the
voice model is told, so it does not go on promising one. Closing the session cancels
answers being made. A lost connection takes its delegation ids with it (a new
connection is a new session, §4.8), but not the user's question: an answer being made
is **re-owed** explicitly — the obligation is handed over to a new one labelled
``re-owed`` — and sent on the new connection as plain speakable context (no id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...floor import SESSION_OWNER, Obligation, ObligationKind
from ...models import ChatContext, ChatMessage, FunctionCall, FunctionCallOutput, LLMError
from ..agents.agent import ClientDelegation
from ..speech.handle import SpeechHandle
from ..tools.invocation import ToolInvocation, offered_tools

if TYPE_CHECKING:
    from ...models.realtime import RealtimeSession
    from ..agents.agent import Agent
    from ..context import SessionContext
    from .provider_obligations import ProviderObligations

logger = logging.getLogger("rejoinder")

FAILED_NOTE = (
    "The lookup you started for the caller failed ({error}). Tell them you could not get "
    "the answer, and offer to try again."
)


def answerer(ctx: SessionContext) -> Callable[[ClientDelegation], Awaitable[str]]:
    """``ClientDelegation.answer_with_llm`` in this session: the agent's own ``llm`` and
    tools on the delegation's context, the tools run through ``ToolInvocation``."""

    async def answer_with_llm(delegation: ClientDelegation) -> str:
        agent = delegation.agent
        llm = agent.llm
        if llm is None:
            raise RuntimeError(
                f"{agent.id} got a client delegation but has no llm: give it "
                "Agent(llm=...) or override on_delegation()"
            )
        tools = offered_tools(ctx, agent)
        definitions = [t.definition for t in tools.values()]
        context = delegation.chat_ctx.copy()
        steps = ctx.options.max_tool_steps
        for step in range(steps + 1):
            text: list[str] = []
            calls: list[FunctionCall] = []
            offered = definitions if step < steps else []
            async for chunk in llm.chat(context, offered):
                text.append(chunk.delta)
                calls.extend(
                    FunctionCall(call_id=c.call_id, name=c.name, arguments=c.arguments)
                    for c in chunk.tool_calls
                )
            if not calls:
                return "".join(text).strip()
            for call in calls:
                context.append(call)
                _record(ctx, agent, call)
                invocation = ToolInvocation(
                    ctx, call, tools.get(call.name), _no_speech(), _not_released(call)
                )
                outcome = await invocation.run()
                context.append(outcome.output)
                _record(ctx, agent, outcome.output)
        raise LLMError("the delegated answer used up max_tool_steps without a final text")

    return answer_with_llm


def _record(ctx: SessionContext, agent: Agent, item: FunctionCall | FunctionCallOutput) -> None:
    # As the realtime engine records its tool calls: the agent's context (which the next
    # delegation is answered from) and the session history.
    agent.chat_ctx.append(item)
    ctx.record(item)


@dataclass(eq=False, slots=True)
class _Pending:
    delegation_id: str
    obligation: Obligation
    connection: int
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class ClientDelegations:
    def __init__(
        self,
        ctx: SessionContext,
        rt: RealtimeSession,
        obligations: ProviderObligations,
        *,
        agent: Callable[[], Agent],
        connection: Callable[[], int],
    ) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._rt = rt
        self._obligations = obligations
        self._agent = agent
        self._connection = connection
        self._pending: dict[str, _Pending] = {}
        self._answer_with_llm = answerer(ctx)

    def open_count(self) -> int:
        return len(self._pending)

    def requested(self, delegation_id: str) -> None:
        if delegation_id in self._pending:
            return  # a repeated report changes nothing
        ob = self._state.new(ObligationKind.CLIENT_DELEGATION, SESSION_OWNER, label=delegation_id)
        self._state.open_new(ob)
        pending = _Pending(delegation_id, ob, self._connection())
        self._pending[delegation_id] = pending
        pending.task = self._ctx.spawn(self._answer(pending))

    def connection_lost(self, *, reconnecting: bool) -> None:
        """The ids die with the connection; answers being made are re-owed (sent on the
        new connection without an id) or, with no new connection coming, dropped."""
        for pending in list(self._pending.values()):
            if not reconnecting:
                self._drop(pending, "connection lost")
                continue
            again = self._state.new(
                ObligationKind.CLIENT_DELEGATION, SESSION_OWNER, label="re-owed"
            )
            self._state.hand_over(pending.obligation, again)
            pending.obligation = again

    def close_all(self) -> None:
        for pending in list(self._pending.values()):
            self._drop(pending, "closed")

    # ----------------------------------------------------------------- internal

    def _drop(self, pending: _Pending, outcome: str) -> None:
        self._pending.pop(pending.delegation_id, None)
        if pending.task is not None and not pending.task.done():
            pending.task.cancel()
        self._state.close(pending.obligation, outcome)

    async def _answer(self, pending: _Pending) -> None:
        agent = self._agent()
        request = ClientDelegation(
            self._ctx.session,
            agent,
            pending.delegation_id,
            _model_context(agent),
            answer_with_llm=self._answer_with_llm,
        )
        try:
            text = await agent.on_delegation(request)
        except asyncio.CancelledError:
            if self._pending.pop(pending.delegation_id, None) is not None:
                self._state.close(pending.obligation, "cancelled")
            raise
        except Exception as exc:
            logger.warning("the answer to delegation %s failed: %s", pending.delegation_id, exc)
            if self._pending.pop(pending.delegation_id, None) is None:
                return
            self._ctx.emit_error(exc, source="delegation", recoverable=True)
            self._state.close(pending.obligation, "failed")
            self._send(pending, FAILED_NOTE.format(error=_short(exc)))
            return
        if self._pending.pop(pending.delegation_id, None) is None:
            return  # dropped meanwhile (the session closes)
        if not text or not text.strip():
            self._state.close(pending.obligation, "nothing to say")
            return
        self._send(pending, text.strip())
        # The voice model now owes the spoken answer: the debt passes to it, no gap.
        self._obligations.answer_sent(pending.obligation, label=pending.delegation_id)

    def _send(self, pending: _Pending, text: str) -> None:
        same = pending.connection == self._connection()
        try:
            self._rt.answer_delegation(pending.delegation_id if same else None, text)
        except Exception as exc:  # the provider refused it synchronously
            logger.warning("sending the delegated answer failed: %s", exc)
            self._ctx.emit_error(exc, source="delegation", recoverable=True)


def _model_context(agent: Agent) -> ChatContext:
    return ChatContext([ChatMessage(role="system", content=agent.instructions), *agent.chat_ctx])


def _no_speech() -> SpeechHandle:
    """A delegated answer's tools are carried by no speech of the session's."""
    return SpeechHandle.played_out(source="delegation_tool")


def _not_released(call: FunctionCall) -> Callable[[str], Awaitable[None]]:
    async def release(message: str) -> None:
        # A delegated answer waits for its tools: there is no one to release them to.
        logger.debug("%s: ctx.update(%r) in a delegated answer is not released", call.name, message)

    return release


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
