"""A voice session on a scripted microphone, for the tests of the user's side (end of
speech, recognition): an energy VAD, the given recognizer, a scripted model and voice, on
virtual time."""

from __future__ import annotations

from typing import Any

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    speech_frame,
)


class Call:
    def __init__(self, stt: rj.STT, *, min_silence: float, **options: Any) -> None:
        self.llm = ScriptedLLM([["Answer."], ["Again."]])
        self.mic = MemoryAudioInput(16000)
        self.session: rj.AgentSession[Any] = rj.AgentSession(
            llm=self.llm,
            stt=stt,
            tts=ScriptedTTS(),
            vad=ScriptedVAD(min_silence=min_silence),
            **{"user_away_timeout": None, **options},
        )
        self.session.input.audio = self.mic
        self.session.output.audio = MemoryAudioOutput(24000)
        self.timeline = StateTimeline(self.session)
        self.errors: list[rj.ErrorEvent] = []
        self.session.on("error", self.errors.append)

    async def __aenter__(self) -> Call:
        await self.session.start(rj.Agent(instructions="voice"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.aclose()

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.02)):
            await self.mic.push(speech_frame(0.02))

    def user_turns(self) -> list[str]:
        return [m.content for m in self.session.history.messages() if m.role == "user"]
