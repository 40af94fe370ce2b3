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
from rejoinder.providers.openai import GPTLive, Realtime
from rejoinder.testing import (
    GPTLiveServer,
    MemoryAudioInput,
    MemoryAudioOutput,
    OpenAIRealtimeServer,
    StateTimeline,
    advance,
)

ANSWERED_AT_ONCE = ["initializing", "thinking", "speaking", "listening"]
"""A reply asked for right after ``start()`` returned: no ``listening`` before it."""


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


class Weather(rj.Agent):
    """A phone assistant with one tool; ``gate`` holds the tool until it is set, and
    ``runs`` records each city the tool ran for."""

    def __init__(self, gate: asyncio.Event | None = None, **kwargs: Any) -> None:
        super().__init__(instructions="You are a phone assistant.", **kwargs)
        self.gate = gate
        self.reply_required = True
        self.runs: list[str] = []

    @rj.function_tool
    async def get_weather(self, city: str) -> rj.ToolResult:
        """Current weather for a city.

        Args:
            city: the city name
        """
        self.runs.append(city)
        if self.gate is not None:
            await self.gate.wait()
        return rj.ToolResult(f"18 C and sunny in {city}", reply_required=self.reply_required)


class Shop(rj.Agent):
    def __init__(self, *, reply_required: bool = True) -> None:
        super().__init__(instructions="You run a shop.")
        self.reply_required = reply_required

    @rj.function_tool
    async def stock(self, item: str) -> rj.ToolResult:
        """How many of an item are in stock.

        Args:
            item: the item name
        """
        return rj.ToolResult(f"3 {item}s", reply_required=self.reply_required)


# ------------------------------------------------------------------- GPT-Live


async def live(
    server: GPTLiveServer, rigs: list[Rig], agent: rj.Agent | None = None, **options: Any
) -> Rig:
    """A rig on GPT-Live (a ``Weather`` agent unless told), closed by the ``rigs`` fixture."""
    model = GPTLive(api_key="test", base_url=server.base_url)
    rig = await start_rig(model, agent or Weather(), **options)
    rigs.append(rig)
    return rig


async def user_asks(server: GPTLiveServer, rig: Rig, text: str) -> None:
    await server.input_transcript(text, 1200, 2700)
    await rig.settle(1.0)  # 0.8 s of input audio after the fragment ends the turn


async def answer(server: GPTLiveServer, rig: Rig, text: str, seconds: float = 1.0) -> None:
    await server.output_transcript(text)
    await server.speech(seconds, then_silence=1.0)
    await rig.settle(seconds + 0.1)


# ------------------------------------------------------------ OpenAI Realtime


async def realtime(
    oai: OpenAIRealtimeServer, rigs: list[Rig], agent: rj.Agent | None = None, **options: Any
) -> Rig:
    """A rig on OpenAI Realtime (a ``Shop`` agent unless told), closed by ``rigs``."""
    model = Realtime(api_key="sk-test", base_url=oai.base_url)
    rig = await start_rig(model, agent or Shop(), **options)
    rigs.append(rig)
    return rig


async def user_says(oai: OpenAIRealtimeServer, rig: Rig, text: str | None) -> None:
    """A user turn; ``None`` makes its input transcription fail."""
    await oai.speech_started()
    await rig.settle(0.5)
    await oai.speech_stopped(500)
    await oai.committed()
    if text is None:
        await oai.input_transcription_failed("item_user", "audio too noisy")
    else:
        await oai.input_transcription("item_user", text)
    await rig.settle()


async def spoken(
    oai: OpenAIRealtimeServer,
    rig: Rig,
    resp: str,
    text: str,
    seconds: float = 0.5,
    *,
    item: str | None = None,
) -> None:
    """A whole spoken response: created, transcript, audio, done, then played. Its one
    output item is ``item_<resp>`` unless named."""
    item = item or f"item_{resp}"
    await oai.response_created(resp)
    await oai.transcript(resp, item, text)
    await oai.audio(resp, item, seconds=seconds)
    await oai.audio_done(resp, item)
    await oai.response_done(resp)
    await rig.settle(seconds + 0.1)
