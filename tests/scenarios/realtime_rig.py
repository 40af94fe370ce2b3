"""A session on a realtime/duplex model over a loopback server, for scenario tests.

The rig starts a real ``AgentSession`` whose ``llm=`` is the real client talking to a
loopback server over a real WebSocket on 127.0.0.1; a microphone feeds silence the way a
phone line would (GPT-Live infers the end of a user turn from input audio sent), and a
``MemoryAudioOutput`` plays agent audio on virtual time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import rejoinder as rj
from rejoinder.testing import MemoryAudioInput, MemoryAudioOutput, StateTimeline, advance


@dataclass
class Rig:
    session: rj.AgentSession[Any]
    timeline: StateTimeline
    speaker: MemoryAudioOutput
    mic: MemoryAudioInput
    errors: list[rj.ErrorEvent] = field(default_factory=list)
    feeder: asyncio.Task[None] | None = None

    @property
    def owed(self) -> int:
        """Obligations still open on the floor."""
        return self.session._turn_state.floor.open_count

    async def settle(self, seconds: float = 0.05) -> None:
        """Let the client read what the server sent and the session react."""
        await advance(seconds)

    def messages(self) -> list[tuple[str, str]]:
        return [(m.role, m.content) for m in self.session.history.messages()]

    async def aclose(self) -> None:
        await self.session.aclose()
        if self.feeder is not None:
            self.feeder.cancel()
            await asyncio.gather(self.feeder, return_exceptions=True)


async def start_rig(model: rj.RealtimeModel, agent: rj.Agent | None = None, **options: Any) -> Rig:
    options.setdefault("user_away_timeout", None)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=model, **options)
    speaker = MemoryAudioOutput(sample_rate=24000)
    # 200 ms frames: fewer clock jumps keep virtual time cheap (GPT-Live sends 100 ms chunks).
    mic = MemoryAudioInput(sample_rate=24000, frame_ms=200)
    session.output.audio = speaker
    session.input.audio = mic
    rig = Rig(session, StateTimeline(session), speaker, mic)
    session.on("error", rig.errors.append)
    await session.start(agent or rj.Agent(instructions="You are a phone assistant."))
    rig.feeder = asyncio.get_running_loop().create_task(mic.push_silence(3600))
    await rig.settle()
    return rig
