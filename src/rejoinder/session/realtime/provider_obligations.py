"""Turns a realtime provider's protocol facts into obligations (docs/architecture.md).

The provider reports what happened on the wire; this class decides what the agent owes
because of it, and opens each successor before it closes the predecessor (Rule 2):

    tool call ──output, provider continues──▶ provider_continuation
    provider_continuation ──response started──▶ backend_response
    backend_response ──completed, result still to be voiced──▶ answer
    answer ──agent audio starts──▶ reply (the burst that voices it)

A failed or incomplete response closes (its calls are discarded by the provider, so the
tools still running for them stop being owed: they are uncommitted, not closed, and keep
the user from being marked away until they return). A lost connection closes everything
the provider was doing. ``answer`` has no closing event on the wire, so it closes after
``answer_timeout`` if no audio follows.

This is the one place a realtime session's obligations open and close, but for a
client delegation's (``client_delegation.py``) and an agent switch's (``agents/``): a
stretch of agent audio's ``reply`` and a tool released to the background included.

Every obligation here is owned by the session, not by an agent: the provider connection
outlives handoffs, and so does the work it is doing for the user (scenario B4).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ...floor import SESSION_OWNER, Obligation, ObligationKind
from ...models.realtime import (
    BackendResponseEnded,
    BackendResponseStarted,
    ContinuationFailed,
    ToolOutputFate,
)
from ..turn_state import TurnState

logger = logging.getLogger("rejoinder")


@dataclass(eq=False, slots=True)
class _Call:
    obligation: Obligation
    delegation_id: str | None
    response_id: str | None


class ProviderObligations:
    def __init__(
        self,
        state: TurnState,
        *,
        answer_timeout: float,
        on_unvoiced: Callable[[], None] = lambda: None,
    ) -> None:
        self._state = state
        self._answer_timeout = answer_timeout
        self._on_unvoiced = on_unvoiced
        """Called when an owed answer was given up on (no audio came)."""
        self._responses: dict[str, tuple[Obligation, str | None]] = {}
        self._started_at: dict[str, int] = {}
        """Bursts of agent audio begun before each running response started."""
        self._bursts = 0
        self._continuations: dict[str | None, Obligation] = {}
        self._calls: dict[str, _Call] = {}
        self._answer: Obligation | None = None
        self._answer_requested = False
        """The owed answer is one the application asked for (not a backend result)."""
        self._answer_timer: asyncio.TimerHandle | None = None

    def open_count(self) -> int:
        """Provider obligations still open (for tests and diagnostics)."""
        return (
            len(self._responses)
            + len(self._continuations)
            + len(self._calls)
            + (self._answer is not None)
        )

    # ------------------------------------------------------------------ backend

    def response_started(self, fact: BackendResponseStarted) -> None:
        if fact.response_id in self._responses:
            return  # a repeated report changes nothing
        ob = self._new(ObligationKind.BACKEND_RESPONSE, fact.response_id)
        self._responses[fact.response_id] = (ob, fact.delegation_id)
        self._started_at[fact.response_id] = self._bursts
        continuation = self._continuations.pop(fact.delegation_id, None)
        if continuation is None and self._answer_requested:
            # The response the application asked for: if it fails, nothing is owed.
            continuation = self._take_answer()
        if continuation is not None:
            self._state.hand_over(continuation, ob)
        else:
            self._state.open_new(ob)

    def response_ended(self, fact: BackendResponseEnded, *, audio_playing: bool) -> None:
        """``audio_playing``: agent audio is audible now. If that audio began after this
        response started, it is taken to voice the result (the provider may speak it
        before it reports completion); audio begun earlier (a preamble) is not."""
        entry = self._responses.pop(fact.response_id, None)
        bursts_before = self._started_at.pop(fact.response_id, self._bursts)
        voicing = audio_playing and self._bursts > bursts_before
        ob = entry[0] if entry is not None else None
        if fact.status != "completed":
            # The provider discarded this response's calls: no reply follows from them.
            discarded = [
                call.obligation
                for call in self._calls.values()
                if call.response_id == fact.response_id
            ]
            self._close([ob] if ob else [], f"response {fact.status}", uncommit=discarded)
            return
        if fact.expects_answer and not voicing:
            self._owe_answer(ob, label=fact.response_id)
        elif ob is not None:
            # Its calls (if any) are open obligations already: closing leaves no gap.
            self._state.close(ob, "completed")

    def responses_cancelled(self) -> None:
        """The client cancelled what the provider was saying (a barge-in on a realtime,
        not duplex, model): no reply follows from the running responses any more."""
        obs = [ob for ob, _ in self._responses.values()]
        self._responses.clear()
        self._started_at.clear()
        self._close(obs, "cancelled", uncommit=[])

    def reply_refused(self) -> None:
        """A reply the application asked for was refused: it no longer owes one (if the
        request already became a running response, that response's end decides)."""
        if self._answer_requested:
            answer = self._take_answer()
            if answer is not None:
                self._state.close(answer, "refused")
                self._on_unvoiced()

    def continuation_failed(self, fact: ContinuationFailed) -> None:
        ob = self._continuations.pop(fact.delegation_id, None)
        if ob is not None:
            self._state.close(ob, "failed")

    # -------------------------------------------------------------------- tools

    def tool_called(
        self, call_id: str, name: str, fact_delegation: str | None, *, owner: str
    ) -> Obligation:
        """Open the ``tool`` obligation for a call (before the tool starts). ``owner`` is
        the agent whose tool runs: while an ``AgentTask`` pauses that agent, its tool does
        not count (B5), like a pipeline tool."""
        ob = self._state.new(ObligationKind.TOOL, owner, label=name)
        response_id = self._running_response(fact_delegation)
        self._calls[call_id] = _Call(ob, fact_delegation, response_id)
        self._state.open_new(ob)
        return ob

    def tool_answered(self, call_id: str, fate: ToolOutputFate) -> None:
        """The tool's output went to the provider, which said what it will do with it."""
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        if fate != "continue":
            self._state.close(call.obligation, "answered")
            return
        pending = self._continuations.get(call.delegation_id)
        if pending is not None:
            # Other outputs of this batch already owe the continuation.
            self._state.close(call.obligation, "answered")
            return
        continuation = self._new(ObligationKind.PROVIDER_CONTINUATION, call.obligation.label)
        self._continuations[call.delegation_id] = continuation
        self._state.hand_over(call.obligation, continuation)

    def tool_abandoned(self, call_id: str) -> None:
        call = self._calls.pop(call_id, None)
        if call is not None:
            self._state.close(call.obligation, "abandoned")

    def tool_released(self, name: str) -> Obligation:
        """A tool released itself to the background (``ctx.update``): its interim result
        answers the call, and until its final result lands it is still work for the
        user (no "away"), but no reply of ours is owed for it (uncommitted)."""
        ob = self._state.new(ObligationKind.TOOL, SESSION_OWNER, label=name, committed=False)
        self._state.open_new(ob)
        return ob

    def background_ended(self, background: list[Obligation], outcome: str) -> None:
        """A released tool returned (``done``) or was cancelled (``cancelled``)."""
        self._state.close(background, outcome)

    # ------------------------------------------------------------ answers, audio

    def owe_reply(self, label: str) -> None:
        """The application asked the provider to speak (generate_reply, typed input):
        a reply is owed until agent audio starts, for at most ``answer_timeout``."""
        self._owe_answer(None, label=label)
        self._answer_requested = True

    def answer_sent(self, predecessor: Obligation, *, label: str) -> None:
        """The application sent the provider an answer to voice (a client delegation's):
        ``predecessor`` hands over to the ``answer`` owed until agent audio starts."""
        self._owe_answer(predecessor, label=label)

    def audio_starting(self, *, owed: bool) -> Obligation:
        """A stretch of agent audio begins: the ``reply`` that covers it, open. Speech
        the provider starts while nothing is owed or playing (not ``owed``) owes nothing
        until it is heard (no 0 ms "thinking" before "speaking"): the playout commits it
        then. Speech of a running response, an owed answer, or queued behind other
        speech is owed from the start."""
        reply = self._state.new(
            ObligationKind.REPLY,
            SESSION_OWNER,
            label="realtime audio",
            committed=None if owed else False,
        )
        self._bursts += 1
        answer = self._take_answer()
        if answer is not None:
            self._state.hand_over(answer, reply)
        else:
            self._state.open_new(reply)
        return reply

    def audio_finished(self, reply: Obligation, *, interrupted: bool) -> None:
        """A stretch of agent audio played out (or was cut): its reply closes."""
        self._state.close(reply, "interrupted" if interrupted else "played")

    def connection_lost(self) -> None:
        """Nothing the lost connection was doing will happen. Tools still running are no
        longer owed a reply (their outputs can only become context), but they still
        count as work for the user."""
        obs = [ob for ob, _ in self._responses.values()]
        obs.extend(self._continuations.values())
        answer = self._take_answer()
        if answer is not None:
            obs.append(answer)
        calls = [call.obligation for call in self._calls.values()]
        self._responses.clear()
        self._started_at.clear()
        self._continuations.clear()
        for call in self._calls.values():
            call.response_id = None
        self._close(obs, "connection lost", uncommit=calls)
        if answer is not None:
            self._on_unvoiced()

    def close_all(self) -> None:
        self.connection_lost()
        calls = [call.obligation for call in self._calls.values()]
        self._calls.clear()
        self._close(calls, "closed", uncommit=[])

    # ----------------------------------------------------------------- internal

    def _new(self, kind: ObligationKind, label: str) -> Obligation:
        return self._state.new(kind, SESSION_OWNER, label=label)

    def _running_response(self, delegation_id: str | None) -> str | None:
        for response_id, (_, delegation) in reversed(list(self._responses.items())):
            if delegation == delegation_id:
                return response_id
        return None

    def _owe_answer(self, predecessor: Obligation | None, *, label: str) -> None:
        previous = self._take_answer()
        answer = self._new(ObligationKind.ANSWER, label)
        olds = [ob for ob in (predecessor, previous) if ob is not None]
        if olds:
            self._state.hand_over(olds, answer)
        else:
            self._state.open_new(answer)
        self._answer = answer
        self._answer_timer = asyncio.get_running_loop().call_later(
            self._answer_timeout, self._answer_timed_out
        )

    def _take_answer(self) -> Obligation | None:
        answer, self._answer = self._answer, None
        self._answer_requested = False
        if self._answer_timer is not None:
            self._answer_timer.cancel()
            self._answer_timer = None
        return answer

    def _answer_timed_out(self) -> None:
        self._answer_timer = None
        answer = self._take_answer()
        if answer is not None:
            # The protocol has no "will not speak" event (gpt-live §5.3.2): expected, so a
            # log line rather than an error event.
            logger.info("no agent audio followed %s within %.1f s", answer, self._answer_timeout)
            self._state.close(answer, "unvoiced")
            self._on_unvoiced()

    def _close(self, obs: list[Obligation], outcome: str, *, uncommit: list[Obligation]) -> None:
        if obs or uncommit:
            self._state.close(obs, outcome, uncommit=uncommit)
