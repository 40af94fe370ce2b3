"""RealtimeEngine: a session on a realtime or duplex model (``AgentSession(llm=<RealtimeModel>)``).

One provider connection serves the whole session and survives handoffs: the current
agent's instructions and tools are pushed to it when the agent changes. The engine
reads the provider's protocol facts and

- hands them to ``ProviderObligations``, which decides what the agent owes;
- plays agent audio through ``RealtimePlayout`` (``speaking`` = audible, as everywhere);
- runs tool calls with the current agent's tools and tells the provider the results;
- records what was said in the history and reports user speech and turns.

It never decides a state itself (docs/architecture.md: only the floor decides).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...floor import Obligation
from ...models import ChatMessage, FunctionCall, FunctionCallOutput, ToolDefinition
from ...models.realtime import (
    AgentAudio,
    AgentAudioCut,
    AgentAudioEnded,
    AgentAudioPaused,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    ConnectionLost,
    ContinuationFailed,
    DelegationRequested,
    ProviderError,
    RealtimeConfig,
    RealtimeEvent,
    RealtimeModel,
    RealtimeSession,
    Reconnected,
    ReplyRefused,
    ToolCallCancelled,
    ToolCallRequested,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from ..engine import Engine
from ..events import FunctionToolsExecutedEvent, SpeechCreatedEvent, UserInputTranscribedEvent
from ..hearing.mute import silence_like
from ..metrics_emit import RealtimeMeter
from ..speech.handle import SpeechHandle
from ..speech.run import VoicedReply
from ..tools.invocation import (
    ToolInvocation,
    ToolOutcome,
    call_output,
    final_record,
    offered_tools,
)
from .client_delegation import ClientDelegations
from .playout import Burst, RealtimePlayout
from .provider_obligations import ProviderObligations
from .record import RealtimeRecord

if TYPE_CHECKING:
    from ...models.audio import AudioInput, PlaybackFinished
    from ...models.image import ImageContent
    from ..agents.activity import AgentActivity
    from ..agents.agent import Agent
    from ..agents.agent_stack import AgentStack
    from ..context import SessionContext

logger = logging.getLogger("rejoinder")


class RealtimeEngine(Engine):
    def __init__(
        self,
        ctx: SessionContext,
        model: RealtimeModel,
        *,
        agents: AgentStack,
        close: Callable[[str], None],
    ) -> None:
        super().__init__(ctx, agents)
        self._close = close
        """Ends the session from inside (the provider gave up for good)."""
        self._model = model
        self._rt: RealtimeSession = model.session()
        state = ctx.state
        self._state = state
        self.obligations = ProviderObligations(
            state,
            answer_timeout=ctx.options.answer_timeout,
            on_unvoiced=self._unvoiced,
        )
        self._playout: RealtimePlayout | None = None
        self._record_of: RealtimeRecord | None = None
        self._tool_runs: dict[str, asyncio.Task[None]] = {}
        """Tools running for the provider's calls, by call id (a withdrawn call stops)."""
        self._offered: Sequence[ToolDefinition] = ()
        """The tool definitions the provider has: sent again only when they change."""
        self._handles: list[VoicedReply] = []
        """Replies the application asked for: done once the provider owes nothing more
        and nothing plays (a preamble is not the whole reply)."""
        self._meter = RealtimeMeter(ctx, model)
        self._user_speaking = False
        self._connection = 0
        """Bumped on every lost connection (a reconnect or a fallback is a new one)."""
        self.delegations = ClientDelegations(
            ctx,
            self._rt,
            self.obligations,
            agent=lambda: self._activity().agent,
            connection=lambda: self._connection,
        )

    @property
    def provider_session(self) -> RealtimeSession:
        return self._rt

    def add_image(self, image: ImageContent, key: str | None) -> None:
        """The realtime model hears the user itself: the image goes to it now, and it
        sees it with what the user says next (``RealtimeError`` if it cannot see). The
        ``key`` replaces nothing here: what was sent is in the model's context already."""
        self._rt.add_image(image)

    # ---------------------------------------------------------------- lifecycle

    async def start(self, agent: Agent, microphone: AudioInput | None) -> None:
        """Connect (raises ``RealtimeError`` if the provider refuses), then run: connected
        before the first agent enters, so it can speak from its ``on_enter``."""
        ctx = self._ctx
        # AudioInput does not declare a rate; the concrete inputs (and wrappers) carry one.
        rate = getattr(microphone, "sample_rate", None)
        self._offered = self._definitions(agent)
        config = RealtimeConfig(
            instructions=agent.instructions,
            tools=self._offered,
            history=lambda: ctx.history,
            input_sample_rate=rate if isinstance(rate, int) and rate > 0 else None,
        )
        await self._rt.start(config)
        self._record_of = RealtimeRecord(ctx, lambda: self._activity().agent)
        self._playout = RealtimePlayout(
            self._state,
            ctx.output.audio,
            spawn=ctx.spawn,
            started=self._burst_audible,
            finished=self._burst_finished,
        )
        ctx.spawn(self._pump_events())
        if microphone is not None:
            ctx.spawn(self._pump_microphone(microphone))
        await self._agents.start(agent)

    async def aclose(self) -> None:
        await self._ctx.bounded(self._disconnect(), "closing the realtime connection")

    async def _disconnect(self) -> None:
        if self._playout is not None:
            self._playout.stop()  # what was heard is recorded before the connection goes
        await self._rt.aclose()
        self.delegations.close_all()
        self.obligations.close_all()
        self._settle_handles(force=True)

    def agent_changed(self, agent: Agent) -> None:
        """A handoff: the connection stays, the new agent's rules and tools apply."""
        self._rt.update_instructions(agent.instructions)
        self._offered = self._definitions(agent)
        self._rt.update_tools(self._offered)

    def _refresh_tools(self) -> None:
        """Send the tools again if they changed since they were sent (a toolset such as
        an MCP server whose list changed): checked when the user starts a turn and when
        a reply is asked for, before the model answers, as a chat model's tools are read
        when each reply starts."""
        activity = self._agents.current
        if activity is None:
            return
        now = self._definitions(activity.agent)
        if list(now) != list(self._offered):
            self._offered = now
            self._rt.update_tools(now)

    # ------------------------------------------------------------------ replies

    def say(self, text: str, allow_interruptions: bool | None) -> SpeechHandle:
        if self._ctx.tts is None:
            raise RuntimeError(
                "say() speaks text through a TTS; this session's realtime model voices its "
                "own replies: use generate_reply(instructions=...) or give the session a tts="
            )
        return super().say(text, allow_interruptions)

    def _generate(
        self, user_input: str | None, instructions: str | None, allow_interruptions: bool | None
    ) -> SpeechHandle:
        # The provider decides whether its reply may be interrupted (its own VAD).
        self._agents.running()  # raises if the session is not running
        return self._reply(instructions, user_input)

    def _reply(self, instructions: str | None, user_input: str | None) -> SpeechHandle:
        handle = SpeechHandle(
            allow_interruptions=self._ctx.options.allow_interruptions,
            source="generate_reply",
            user_initiated=user_input is not None,
        )
        self._refresh_tools()
        if user_input is not None:
            self._record(ChatMessage(role="user", content=user_input))
            self._ctx.events.emit(
                "user_input_transcribed", UserInputTranscribedEvent(user_input, is_final=True)
            )
            self._rt.send_user_text(user_input)
        else:
            self._rt.generate_reply(instructions)
        self._handles.append(VoicedReply(handle))
        self.obligations.owe_reply(handle.id)
        self._ctx.events.emit(
            "speech_created",
            SpeechCreatedEvent(
                handle, source="generate_reply", user_initiated=user_input is not None
            ),
        )
        return handle

    def _stop_voice(self) -> None:
        if self._playout is not None:
            self._playout.interrupt()

    # ------------------------------------------------------------------ events

    async def _pump_events(self) -> None:
        async for event in self._rt.events():
            try:
                self._on_event(event)
            except Exception as exc:  # a bug here must not kill the connection
                logger.exception("handling %r failed", event)
                self._ctx.emit_error(exc, source="realtime", recoverable=True)
            self._settle_handles()
        if not self._ctx.closing:
            # The provider gave up (fatal error, reconnects exhausted): nothing more will
            # be heard or said, so the session ends instead of pretending to listen.
            self._connection_lost()
            self._close("the realtime connection ended")

    def _on_event(self, event: RealtimeEvent) -> None:
        playout = self._playout
        assert playout is not None
        if isinstance(event, AgentAudio):
            playout.frame(event.frame)
        elif isinstance(event, AgentAudioStarted):
            reply = self.obligations.audio_starting(owed=bool(self._owed()) or not playout.idle)
            self._meter.audio_started()
            assert self._record_of is not None
            burst = playout.begin(reply)
            burst.connection = self._connection
            self._record_of.burst_began(burst)
        elif isinstance(event, AgentAudioPaused):
            playout.pause()
        elif isinstance(event, AgentAudioCut):
            playout.interrupt()
        elif isinstance(event, ToolCallCancelled):
            self._tool_withdrawn(event.call_id)
        elif isinstance(event, AgentAudioEnded):
            playout.end()
        elif isinstance(event, Transcript):
            self._transcript(event)
        elif isinstance(event, BackendResponseStarted):
            self.obligations.response_started(event)
            self._meter.response_started(event.response_id)
        elif isinstance(event, ToolCallRequested):
            self._tool_called(event)
        elif isinstance(event, DelegationRequested):
            self.delegations.requested(event.delegation_id)
        elif isinstance(event, BackendResponseEnded):
            self.obligations.response_ended(event, audio_playing=playout.audible)
            self._meter.response_ended(event)
        elif isinstance(event, ReplyRefused):
            logger.warning("the provider refused a requested reply: %s", event.error)
            self.obligations.reply_refused()
        elif isinstance(event, ContinuationFailed):
            self.obligations.continuation_failed(event)
            logger.warning("provider continuation failed: %s", event.error)
        elif isinstance(event, UserSpeechStarted):
            self._user_started()
        elif isinstance(event, UserTurnEnded):
            self._user_turn_ended(event.text)
        elif isinstance(event, ProviderError):
            self._ctx.emit_error(event.error, source="realtime", recoverable=not event.error.fatal)
        elif isinstance(event, ConnectionLost):
            logger.warning("realtime connection lost: %s", event.reason)
            self._connection_lost(reconnecting=event.reconnecting)
        elif isinstance(event, Reconnected):
            logger.info("realtime connection re-established (%s)", event.session_id)

    def _connection_lost(self, *, reconnecting: bool = False) -> None:
        self._connection += 1
        self.delegations.connection_lost(reconnecting=reconnecting)
        if self._playout is not None:
            self._playout.end()  # what arrived still plays: the user hears it
        self.obligations.connection_lost()
        if self._user_speaking:
            self._user_speaking = False
            self._state.set_user_speaking(False)

    # -------------------------------------------------------------- the user

    def _user_started(self) -> None:
        assert self._record_of is not None
        self._record_of.user_turn_began()
        self._refresh_tools()
        if not self._user_speaking:
            self._user_speaking = True
            self._state.set_user_speaking(True)
        if not self._rt.duplex and self._ctx.options.allow_interruptions:
            # A realtime (not duplex) model expects the client to stop its own playback.
            assert self._playout is not None
            self._playout.interrupt()

    def _user_turn_ended(self, text: str) -> None:
        if self._user_speaking:
            self._user_speaking = False
            self._state.set_user_speaking(False)
        self._state.user_activity()
        self._meter.user_turn_ended()
        if text.strip():
            self._ctx.events.emit(
                "user_input_transcribed", UserInputTranscribedEvent(text, is_final=True)
            )
        assert self._record_of is not None
        self._record_of.user_turn_ended(text)

    def _transcript(self, event: Transcript) -> None:
        if event.role == "user":
            self._ctx.events.emit(
                "user_input_transcribed", UserInputTranscribedEvent(event.text, is_final=False)
            )
            return
        assert self._playout is not None and self._record_of is not None
        self._record_of.agent_text(event, self._playout.receiving)

    # ------------------------------------------------------------- agent audio

    def _burst_audible(self, burst: Burst) -> None:
        assert self._record_of is not None
        self._record_of.burst_audible(burst)
        self._meter.heard()

    def _burst_finished(self, burst: Burst, played: PlaybackFinished) -> None:
        text = "".join(burst.text).strip()
        if played.interrupted:
            self._rt.audio_interrupted(played.position)
            if not self._rt.duplex:
                self.obligations.responses_cancelled()  # the provider was told to stop
            text = _cut(text, played.position / burst.captured if burst.captured else 0.0)
            for reply in self._handles:
                reply.cut_short()
        if text and burst.connection != self._connection:
            # Heard after its connection was replaced: the new one was seeded without it.
            self._rt.add_context(f"You already told the caller: {text}")
        assert self._record_of is not None
        self._record_of.burst_finished(burst, text, played.interrupted)
        self.obligations.audio_finished(burst.reply, interrupted=played.interrupted)
        self._settle_handles()

    def _unvoiced(self) -> None:
        self._settle_handles()

    def _settle_handles(self, *, force: bool = False) -> None:
        if not self._handles:
            return
        playout = self._playout
        if not force and (self._owed() or (playout is not None and not playout.idle)):
            return
        handles, self._handles = self._handles, []
        for reply in handles:
            reply.over()

    # ------------------------------------------------------------------- tools

    def _tool_called(self, event: ToolCallRequested) -> None:
        call = event.call
        activity = self._activity()
        self.obligations.tool_called(
            call.call_id, call.name, event.delegation_id, owner=activity.id
        )
        task = self._ctx.spawn(self._run_tool(call, activity.agent))
        self._tool_runs[call.call_id] = task
        task.add_done_callback(lambda _: self._tool_runs.pop(call.call_id, None))

    def _tool_withdrawn(self, call_id: str) -> None:
        """The provider withdrew the call: a tool still running is cancelled (its debt
        ends as abandoned, nothing is sent); one already answered is left as it is."""
        task = self._tool_runs.get(call_id)
        if task is not None and not task.done():
            task.cancel()

    async def _run_tool(self, call: FunctionCall, agent: Agent) -> None:
        background: list[Obligation] = []

        async def release(message: str) -> None:
            if background:
                return
            background.append(self.obligations.tool_released(call.name))
            # The provider gets the interim result now; the final one comes later as
            # context and a reply, like a pipeline's deferred reply.
            self._answer(call, ToolOutcome(call_output(call, message), reply_required=True))

        # The provider voices this call's answer itself; there is no speech of ours to
        # wait for, so the handle a tool sees is already played out.
        handle = SpeechHandle.played_out(source="realtime_tool")
        invocation = ToolInvocation.offered(self._ctx, agent, call, handle, release)
        try:
            outcome = await invocation.run()
        except asyncio.CancelledError:
            self.obligations.tool_abandoned(call.call_id)
            self.obligations.background_ended(background, "cancelled")
            raise
        if outcome.handoff is not None and not self._ctx.closing:
            # The agent stack's handoff obligation opens before the call's own debt is
            # released below: the new agent owes what comes next, with no gap.
            self._agents.hand_off(outcome.handoff, background)
        if not background:
            self._answer(call, outcome)
        else:
            self._final_result(call, outcome)
            # Closes nothing when a handoff already carried it.
            self.obligations.background_ended(background, "done")
        self._settle_handles()

    def _answer(self, call: FunctionCall, outcome: ToolOutcome) -> None:
        self._record(call)
        self._record(outcome.output)
        self._ctx.events.emit(
            "function_tools_executed", FunctionToolsExecutedEvent([call], [outcome.output])
        )
        fate = self._rt.submit_tool_output(outcome.output, reply_required=outcome.reply_required)
        self.obligations.tool_answered(call.call_id, fate)

    def _final_result(self, call: FunctionCall, outcome: ToolOutcome) -> None:
        """A released tool returned: on record like a pipeline's (a second call/output
        pair), told to the provider as context, and spoken when a reply is required."""
        for item in final_record(call, outcome):
            self._record(item)
        self._rt.add_context(f"Result of {call.name}: {outcome.output.output}")
        if outcome.reply_required and outcome.handoff is None:
            self._reply(f"Tell the user the result of {call.name}.", None)

    # ----------------------------------------------------------------- helpers

    def _owed(self) -> int:
        """Work the provider (or we, for it) still owes the user."""
        return self.obligations.open_count() + self.delegations.open_count()

    def _record(self, item: ChatMessage | FunctionCall | FunctionCallOutput) -> None:
        self._activity().agent.chat_ctx.append(item)
        self._ctx.record(item)

    def _definitions(self, agent: Agent) -> Sequence[ToolDefinition]:
        return [t.definition for t in offered_tools(self._ctx, agent).values()]

    def _activity(self) -> AgentActivity:
        activity = self._agents.current
        if activity is None:
            raise RuntimeError("the session has no agent")
        return activity

    def input_muted(self, muted: bool) -> None:
        self._rt.set_input_muted(muted)

    async def _pump_microphone(self, mic: AudioInput) -> None:
        async for frame in mic:
            # Muted: the provider hears silence from us too (a model without a mute event
            # is muted all the same, and the user's audio stays here).
            self._rt.push_audio(silence_like(frame) if self._ctx.input_muted else frame)


def _cut(text: str, fraction: float) -> str:
    """The part of ``text`` heard when ``fraction`` of its audio played, to a whole word."""
    if fraction >= 1.0:
        return text
    cut = text[: int(len(text) * max(0.0, fraction))]
    return cut.rsplit(" ", 1)[0] if " " in cut else ""
