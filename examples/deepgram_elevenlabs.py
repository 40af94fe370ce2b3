"""A voice agent that hears through Deepgram and speaks through ElevenLabs, interrupted
mid-reply: Deepgram's interim transcripts show the words as they are spoken, and
ElevenLabs' word alignment keeps exactly the words the user heard before speaking over it.

Talk to it from a browser (needs both keys)::

    DEEPGRAM_API_KEY=... ELEVENLABS_API_KEY=... \\
        .venv/bin/rejoinder dev examples/deepgram_elevenlabs.py
    # then open http://127.0.0.1:8000/, say "what can you do?" and talk over the answer

Silero VAD hears when you speak, Deepgram transcribes it as you speak (``nova-3``) and
Smart Turn decides when you have finished; ElevenLabs voices the answer over one
WebSocket per reply (``ELEVENLABS_VOICE_ID``, a stock voice by default). The chat model
is the rule-based demo (``rejoinder.demo``: no language model key needed), or
``openai.LLM`` when ``OPENAI_API_KEY`` is set (``OPENAI_MODEL``, ``gpt-4o-mini`` by
default).

Or as a script, two spoken turns from a scripted microphone::

    DEEPGRAM_API_KEY=... ELEVENLABS_API_KEY=... .venv/bin/python examples/deepgram_elevenlabs.py

The user's words are voiced by ElevenLabs and played into the microphone: the user asks
what the agent can do, then says thanks ``INTERRUPT_AFTER`` seconds into the answer,
which interrupts it. Without both keys the same code runs against loopback servers on
127.0.0.1 that speak the services' documented WebSocket protocols:
``rejoinder.testing.DeepgramServer`` (it reveals a scripted transcript word by word as
speech arrives) and ``rejoinder.testing.ElevenLabsServer`` (a tone per character, with
each message's character alignment as the service sends it), so the sample runs
anywhere. It prints the interim and final transcripts, what was heard of the interrupted
answer, and the conversation; offline also what the servers saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

import rejoinder as rj
from rejoinder.demo import DemoAgent, DemoLLM
from rejoinder.io import Connection
from rejoinder.models.audio import AudioFrame
from rejoinder.providers import deepgram, elevenlabs, local, openai
from rejoinder.testing import (
    DeepgramServer,
    ElevenLabsServer,
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedVAD,
)

QUESTION = "What can you do?"
THANKS = "Thanks, that's all."
INTERRUPT_AFTER = 1.0
"""Seconds of the answer the user hears before speaking over it."""
DEFAULT_VOICE = "JBFqnCBsd6RMkjVDRZzb"  # the voice in ElevenLabs' own examples
INSTRUCTIONS = (
    "You are a friendly voice assistant. Your words are spoken aloud: answer in two or "
    "three sentences, without lists or markdown. Use get_weather for weather questions, "
    "set_timer for timers and book_flight for flights."
)


class VoiceDesk(DemoAgent):
    """The demo agent's tools, with instructions for a real model that speaks."""

    def __init__(self) -> None:
        super().__init__()
        self.instructions = INSTRUCTIONS


def chat_model() -> rj.LLM:
    """``openai.LLM`` with ``OPENAI_API_KEY``, else the rule-based demo."""
    if os.environ.get("OPENAI_API_KEY"):
        return openai.LLM(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    return DemoLLM(spoken=True)


def voice_id() -> str:
    return os.environ.get("ELEVENLABS_VOICE_ID", DEFAULT_VOICE)


async def entrypoint(conn: Connection) -> None:
    """For ``rejoinder dev``: one session per browser connection, on the real services."""
    options = local.voice_session_options(
        stt=deepgram.STT(), tts=elevenlabs.TTS(voice_id=voice_id())
    )
    session: rj.AgentSession[None] = rj.AgentSession(llm=chat_model(), **options)
    await conn.serve(session, VoiceDesk())  # the session closes the recognizer and voice


@dataclass
class Speech:
    stt: deepgram.STT
    tts: elevenlabs.TTS
    deepgram_server: DeepgramServer | None = None
    elevenlabs_server: ElevenLabsServer | None = None

    async def aclose(self) -> None:
        """Close the clients, should the session not have (closing twice is harmless)."""
        await self.stt.aclose()
        await self.tts.aclose()


@contextlib.asynccontextmanager
async def speech_services() -> AsyncIterator[Speech]:
    """The real services with both keys; otherwise the two loopback servers."""
    if os.environ.get("DEEPGRAM_API_KEY") and os.environ.get("ELEVENLABS_API_KEY"):
        speech = Speech(deepgram.STT(), elevenlabs.TTS(voice_id=voice_id()))
        async with contextlib.aclosing(speech):
            yield speech
        return
    hearing = DeepgramServer(api_key="offline", transcripts=[QUESTION, THANKS], word_ms=200)
    voicing = ElevenLabsServer(api_key="offline", seconds_per_char=0.03)
    async with hearing, voicing:
        speech = Speech(
            deepgram.STT(api_key="offline", base_url=hearing.base_url),
            elevenlabs.TTS(voice_id=voice_id(), api_key="offline", base_url=voicing.base_url),
            hearing,
            voicing,
        )
        async with contextlib.aclosing(speech):
            yield speech


async def spoken(tts: elevenlabs.TTS, text: str) -> bytes:
    """``text`` as the voice says it, 16-bit PCM at its rate."""
    frames = [item async for item in tts.synthesize(text) if isinstance(item, AudioFrame)]
    return b"".join(frame.to_pcm() for frame in frames)


class Line:
    """The microphone's line: silence, with the user's words in it when they speak (one
    feeder, so the words and the silence never interleave)."""

    def __init__(self, mic: MemoryAudioInput) -> None:
        self._mic = mic
        self._pending = bytearray()

    def say(self, pcm: bytes) -> None:
        self._pending += pcm

    async def run(self) -> None:
        rate = self._mic.sample_rate
        frame_bytes = rate // 50 * 2  # 20 ms
        while True:
            piece = bytes(self._pending[:frame_bytes]).ljust(frame_bytes, b"\0")
            del self._pending[:frame_bytes]
            await self._mic.push(AudioFrame.from_pcm(piece, rate))


async def main() -> None:
    async with speech_services() as speech:
        offline = speech.deepgram_server is not None
        print("on", "loopback servers" if offline else "Deepgram and ElevenLabs")
        # The user's two utterances, voiced before the session starts (not part of it).
        question_pcm, thanks_pcm = [await spoken(speech.tts, text) for text in (QUESTION, THANKS)]
        mic = MemoryAudioInput(speech.tts.sample_rate)
        speaker = MemoryAudioOutput(speech.tts.sample_rate)
        session: rj.AgentSession[None] = rj.AgentSession(
            llm=chat_model(),
            stt=speech.stt,
            tts=speech.tts,
            vad=ScriptedVAD(min_silence=0.5),  # enough for a clean recording
            user_away_timeout=None,
        )
        session.input.audio, session.output.audio = mic, speaker
        speaking = asyncio.Event()
        answered = asyncio.Event()

        def state(ev: rj.AgentStateChangedEvent) -> None:
            if ev.new_state == "speaking":
                speaking.set()

        def added(ev: rj.ConversationItemAddedEvent) -> None:
            replies = [m for m in session.history.messages() if m.role == "assistant"]
            if len(replies) >= 2:  # the interrupted answer, then the answer to the thanks
                answered.set()

        def transcribed(ev: rj.UserInputTranscribedEvent) -> None:
            print(f"{'final' if ev.is_final else '  interim'}: {ev.transcript}")

        session.on("agent_state_changed", state)
        session.on("conversation_item_added", added)
        session.on("user_input_transcribed", transcribed)
        await session.start(VoiceDesk())
        line = Line(mic)
        feeder = asyncio.create_task(line.run())
        try:
            line.say(question_pcm)
            await asyncio.wait_for(speaking.wait(), 30)
            await asyncio.sleep(INTERRUPT_AFTER)
            line.say(thanks_pcm)
            await asyncio.wait_for(answered.wait(), 30)
        finally:
            feeder.cancel()
            await session.aclose()
        print_conversation(session.history)
        if speech.elevenlabs_server is not None and speech.deepgram_server is not None:
            print_offline(speech.deepgram_server, speech.elevenlabs_server, speaker)


def print_conversation(history: rj.ChatContext) -> None:
    for message in history.messages():
        if message.role in ("user", "assistant"):
            cut = " [interrupted]" if message.interrupted else ""
            print(f"{message.role}: {message.content}{cut}")
    cut_short = [m for m in history.messages() if m.interrupted]
    if cut_short:
        print(f"heard before the interruption: {cut_short[0].content}")
    else:  # a real model's answer can be over before the user speaks
        print("the answer was over before the user spoke: nothing was interrupted")


def print_offline(
    hearing: DeepgramServer, voicing: ElevenLabsServer, speaker: MemoryAudioOutput
) -> None:
    """What the loopback servers saw, and the voice's own word timings checked against
    what was played."""
    [listen] = hearing.connections  # one stream for the whole session
    finalized = listen.control_types().count("Finalize")
    print(f"deepgram: {len(listen.audio) / 32000:.1f} s of audio, {finalized} Finalize")
    reply = voicing.connections[2]  # after the two the user's words were voiced on
    played = speaker.segments[0]
    words = [word for word, start, end in reply.words if (start + end) / 2 <= played]
    print(f"elevenlabs voiced {reply.audio_seconds:.1f} s of the answer, {played:.2f} s played")
    print(f"its word timings put these words in the part played: {' '.join(words)}")


if __name__ == "__main__":
    asyncio.run(main())
