"""Engine: how a session hears the user and answers, behind one interface.

A session runs one of two engines, chosen once when it starts:

- ``PipelineEngine`` (``pipeline.py``): a chat model, with our own hearing (VAD, STT and
  the turn-end decision in ``hearing/``) and our own voice (a TTS);
- ``RealtimeEngine`` (``realtime/engine.py``): a realtime or duplex model that hears the
  microphone and voices its replies itself, over one provider connection.

``AgentSession`` hands every call on (``start``, ``say``, ``generate_reply``,
``interrupt``, ``agent_changed``, ``input_muted``, the manual turn controls, ``aclose``)
and never asks which engine it has. What both do the same way lives here: who speaks
what an agent's own code asks for, and what is asked for while the session closes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .speech.handle import SpeechHandle

if TYPE_CHECKING:
    from ..models.audio import AudioInput
    from ..models.image import ImageContent
    from .agents.agent import Agent
    from .agents.agent_stack import AgentStack
    from .context import SessionContext

logger = logging.getLogger("rejoinder")


class Engine:
    # Slotted: every session holds one, and an idle session is counted in bytes.
    __slots__ = ("_agents", "_ctx")

    def __init__(self, ctx: SessionContext, agents: AgentStack) -> None:
        self._ctx = ctx
        self._agents = agents

    async def start(self, agent: Agent, microphone: AudioInput | None) -> None:
        """Make ``agent`` the first current agent and begin hearing ``microphone``
        (``None``: text only). Raises if the engine cannot run (the session then closes)."""
        raise NotImplementedError

    def say(self, text: str, allow_interruptions: bool | None) -> SpeechHandle:
        if self._closing_while_running():
            return self._unsaid("say", text)
        return self._agents.speaker().create_speech(
            source="say", text=text, allow_interruptions=allow_interruptions
        )

    def generate_reply(
        self,
        *,
        user_input: str | None,
        instructions: str | None,
        allow_interruptions: bool | None,
    ) -> SpeechHandle:
        if self._closing_while_running():
            return self._unsaid("generate_reply", user_input)
        return self._generate(user_input, instructions, allow_interruptions)

    def _generate(
        self, user_input: str | None, instructions: str | None, allow_interruptions: bool | None
    ) -> SpeechHandle:
        """A reply the session is running to produce (``generate_reply``, checked)."""
        raise NotImplementedError

    def interrupt(self) -> asyncio.Future[None]:
        """Stop what the agent says (and the speculative reply being prepared)."""
        activity = self._agents.current
        if activity is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        activity.discard_preemptive("interrupted")
        self._stop_voice()
        return activity.interrupt()

    def _stop_voice(self) -> None:
        """Silence audio the engine plays itself (not through an agent's speech)."""

    def add_image(self, image: ImageContent, key: str | None) -> None:
        """``session.add_image``: the image goes with the user's next message."""
        self._ctx.show_image(image, key)

    def agent_changed(self, agent: Agent) -> None:
        """A switch made ``agent`` current."""

    def input_muted(self, muted: bool) -> None:
        """``session.mute_input``: the context already says so; tell whoever else hears."""

    def commit_user_turn(self) -> None:
        """End the user's turn now (manual turn control), where the engine decides turns."""

    def clear_user_turn(self) -> None:
        """Drop what the user said in the turn in progress, where the engine hears it."""

    async def aclose(self) -> None:
        """Release what the engine holds (after the agents left, bounded by the engine)."""

    @staticmethod
    def _unsaid(source: str, text: str | None) -> SpeechHandle:
        """What the agent asks to say while the session closes (a greeting racing a
        client that left at once): nothing is said, and that is no error."""
        logger.info("%s() not spoken: the session is closing", source)
        return SpeechHandle.unsaid(source=source, text=text)

    def _closing_while_running(self) -> bool:
        """Closing, not yet closed: what is asked for now is dropped, not refused."""
        return self._ctx.closing and self._ctx.running
