"""A call the agent placed, on virtual time: the callee's line is a ``MemoryAudioInput``
the test plays synthesized audio into (``_answering_audio``), the session has an energy
VAD, a scripted recognizer, voice and model, and answering detection on its microphone.

``Outbound`` is the documented pattern: wait (bounded) for who answered, then greet,
leave a voicemail, or say who is calling and why; the greeting's words get no reply
before the answer is known."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import numpy.typing as npt

import rejoinder as rj
from rejoinder.session.hearing.answering import (
    AnsweredByListener,
    LeaveVoicemail,
    Voicemail,
    detect_answered_by,
    wait_answered_by,
)
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    now,
)

GREETING = "Hi, this is Ada from Doctor Lee's office."
INTRODUCTION = "This is Ada from Doctor Lee's office, calling about your appointment."
MESSAGE = "Hi, this is Ada from Doctor Lee's office: please call us back."


class Outbound(rj.Agent):
    def __init__(self, *, timeout: float = 3.0, **voicemail: Any) -> None:
        super().__init__(instructions="You remind patients of appointments.", id="outbound")
        self.timeout = timeout
        self.voicemail_options = voicemail
        self.answered: tuple[str, float] | None = None
        self.voicemail: Voicemail | None = None

    async def on_enter(self) -> None:
        kind = await wait_answered_by(self.session, timeout=self.timeout)
        self.answered = (kind, now())
        if kind == "machine":
            self.voicemail = await LeaveVoicemail(MESSAGE, **self.voicemail_options)
            if self.voicemail.outcome == "screening":  # an assistant, not a recorder
                self.session.say(INTRODUCTION)
        elif kind == "screening":
            self.session.say(INTRODUCTION)
        else:
            self.session.say(GREETING)

    async def on_user_turn_completed(
        self, turn_ctx: rj.ChatContext, new_message: rj.ChatMessage
    ) -> None:
        if self.answered is None:
            raise rj.StopResponse  # not known yet who is talking: no reply to a greeting


class PlacedCall:
    def __init__(
        self,
        *,
        rate: int = 8000,
        transcripts: list[str] | None = None,
        detect: bool = True,
        replies: list[list[str]] | None = None,
    ) -> None:
        self.rate = rate
        self.mic = MemoryAudioInput(rate)
        self.llm = ScriptedLLM(replies or [])
        self.tts = ScriptedTTS()
        self.speaker = MemoryAudioOutput(24000)
        self.session: rj.AgentSession[Any] = rj.AgentSession(
            llm=self.llm,
            stt=ScriptedSTT(transcripts or []),
            tts=self.tts,
            vad=ScriptedVAD(),
            user_away_timeout=None,
        )
        self.session.input.audio = self.mic
        self.session.output.audio = self.speaker
        self.timeline = StateTimeline(self.session)
        self.events: list[rj.AnsweredByEvent] = []
        self.session.on("answered_by", self.events.append)
        self.closed: list[tuple[str, float]] = []
        self.session.on("close", lambda e: self.closed.append((e.reason, now())))
        self.errors: list[rj.ErrorEvent] = []
        self.session.on("error", self.errors.append)
        self.played: list[tuple[float, float]] = []  # (start, end) of each agent segment
        self.listener: AnsweredByListener | None = (
            detect_answered_by(self.session) if detect else None
        )
        self.answered_at = 0.0
        self._line: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None

    async def start(self, agent: rj.Agent) -> None:
        """Start the session as the call is answered. ``session.start`` returns once the
        first agent has entered, and an outbound agent enters by waiting for who
        answered: the line plays meanwhile, so the start goes on in the background."""
        self.session.on("agent_state_changed", self._speaking)
        self.answered_at = now()
        self._starting = asyncio.get_running_loop().create_task(self.session.start(agent))
        await advance(0)  # the session is started (its agent is entering)
        assert self.session.started

    def _speaking(self, event: rj.AgentStateChangedEvent) -> None:
        if event.new_state == "speaking":
            self.played.append((event.created_at, float("nan")))
        elif event.old_state == "speaking" and self.played:
            self.played[-1] = (self.played[-1][0], event.created_at)

    def play(self, audio: npt.NDArray[np.int16]) -> None:
        """The callee's line plays ``audio`` from now on (in the background)."""

        async def line() -> None:
            await self.mic.push_pcm(audio.astype("<i2").tobytes())

        self._line = asyncio.get_running_loop().create_task(line())

    def kinds(self) -> list[tuple[str, str, bool]]:
        return [(e.answered_by, e.source, e.beep) for e in self.events]

    def said(self) -> list[str]:
        return list(self.tts.texts)

    async def aclose(self) -> None:
        if self._line is not None:
            self._line.cancel()
        await self.session.aclose()
        await asyncio.wait((self._starting,), timeout=10.0)
