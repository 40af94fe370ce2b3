"""PipelineEngine: a chat model with our own hearing and our own voice.

The microphone goes through the VAD and the STT to ``UserTurns`` (``hearing/``), which
decides when the user's turn ended; each finished turn interrupts what the agent says and
becomes a reply owed by the current agent, which its activity generates with the chat
model and speaks through the TTS (``agents/activity.py``, ``speech/``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .engine import Engine
from .events import UserInputTranscribedEvent, UserTurnDiscardedEvent
from .speech.handle import ReplyRequest, SpeechHandle

if TYPE_CHECKING:
    from ..models.audio import AudioInput
    from ..models.stt import STT
    from ..models.vad import VAD
    from .agents.agent import Agent
    from .agents.agent_stack import AgentStack
    from .context import SessionContext
    from .hearing.user_turns import UserTurns

logger = logging.getLogger("rejoinder")


class PipelineEngine(Engine):
    __slots__ = ("_stt", "_user_turns", "_vad")

    def __init__(
        self, ctx: SessionContext, agents: AgentStack, *, vad: VAD | None, stt: STT | None
    ) -> None:
        super().__init__(ctx, agents)
        self._vad, self._stt = vad, stt
        self._user_turns: UserTurns | None = None

    async def start(self, agent: Agent, microphone: AudioInput | None) -> None:
        if microphone is not None:
            self._start_hearing(microphone)
        await self._agents.start(agent)

    def _start_hearing(self, microphone: AudioInput) -> None:
        """Hear the user from the first moment, while the first agent enters: an
        ``on_enter`` that waits for something (who answered a phone call, a task) must
        not leave the user unheard, nor find a backlog of their words answered after
        its greeting."""
        if self._vad is None or self._stt is None:
            raise RuntimeError("audio input needs both a vad= and an stt= to hear the user")
        # Here, not at import: a text session never loads the hearing side.
        from .hearing.user_turns import UserTurns

        agents = self._agents
        self._user_turns = UserTurns(
            self._ctx,
            self._vad,
            self._stt,
            current=lambda: agents.current,
            on_turn=self._user_turn_completed,
        )
        self._ctx.spawn(self._user_turns.run(microphone))

    def _generate(
        self, user_input: str | None, instructions: str | None, allow_interruptions: bool | None
    ) -> SpeechHandle:
        if user_input is None:
            return self._agents.speaker().create_speech(
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

    def commit_user_turn(self) -> None:
        if self._user_turns is not None:
            self._user_turns.commit()

    def clear_user_turn(self) -> None:
        if self._user_turns is not None:
            self._user_turns.clear()

    def _user_turn_completed(self, text: str) -> None:
        activity = self._agents.current
        if activity is None or self._ctx.closing:
            return
        current = activity.current_speech
        if current is not None and not current.done() and not current.allow_interruptions:
            # Nothing is kept for later: a stale answer after the speech would be wrong.
            logger.info("user turn %r discarded: it ended during an uninterruptible reply", text)
            reason = "it ended while a reply that may not be interrupted was playing"
            state = self._ctx.state
            state.report("user_turn_discarded", UserTurnDiscardedEvent(text, reason, state.now()))
            activity.discard_preemptive("the turn was discarded")
            return
        activity.interrupt()
        self._reply_to_user(text, source="user_turn", report_transcript=False)

    def _reply_to_user(
        self,
        text: str,
        *,
        source: str,
        report_transcript: bool,
        instructions: str | None = None,
        allow_interruptions: bool | None = None,
    ) -> SpeechHandle:
        activity = self._agents.running()
        self._ctx.state.user_activity()
        if report_transcript:
            self._ctx.events.emit(
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
