"""A voice agent that hears through AssemblyAI's Universal-Streaming recognizer.

Talk to it from a browser (needs a key, https://www.assemblyai.com/dashboard)::

    ASSEMBLYAI_API_KEY=... .venv/bin/rejoinder dev examples/assemblyai_agent.py
    # then open http://127.0.0.1:8000/

Silero VAD hears when you speak; AssemblyAI transcribes it as you speak (partials show up
live) and its own turn model says how sure it is that you finished, which the session
weighs with your words to end your turn (here it stands in for an audio turn model:
add ``turn_detection=local.SmartTurn()`` and it breaks ties instead). The rule-based demo
LLM answers and Piper speaks.

Or see it work without a key or a microphone::

    .venv/bin/python examples/assemblyai_agent.py

runs two spoken turns from a scripted microphone against
``rejoinder.testing.AssemblyAIServer`` on 127.0.0.1, which answers as AssemblyAI would,
and prints the partial and final transcripts, AssemblyAI's end-of-turn probability and
how long after the user stopped each turn ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import rejoinder as rj
from rejoinder.demo import DemoAgent, DemoLLM
from rejoinder.io import Connection
from rejoinder.models.audio import AudioFrame
from rejoinder.providers import assemblyai, local


class ShowingSTT(assemblyai.STT):
    """``assemblyai.STT`` that prints each final transcript with its end-of-turn view."""

    async def transcribe(self, frames: Sequence[AudioFrame]) -> rj.Transcript:
        transcript = await super().transcribe(frames)
        if transcript.text and transcript.end_of_turn_probability is not None:
            print(
                f"final: {transcript.text!r} "
                f"(end of turn probability {transcript.end_of_turn_probability:.2f})"
            )
        return transcript


async def prewarm() -> None:
    from rejoinder.providers.local.voice_defaults import shared_piper

    await shared_piper().load()  # the process's Piper voice, loaded before the server listens


async def entrypoint(conn: Connection) -> None:
    options = local.voice_session_options(stt=assemblyai.STT())  # key: $ASSEMBLYAI_API_KEY
    del options["turn_detection"]  # AssemblyAI's turn model stands in for Smart Turn
    session: rj.AgentSession[None] = rj.AgentSession(llm=DemoLLM(spoken=True), **options)
    await conn.serve(session, DemoAgent())  # the session closes the recognizer


async def offline() -> None:
    """Two turns from a scripted microphone, heard by the loopback AssemblyAI server."""
    from rejoinder.testing import MemoryAudioInput, ScriptedTTS, ScriptedVAD, speech_frame
    from rejoinder.testing.assemblyai_server import AssemblyAIServer, Said

    said = [
        Said("What's the weather in Paris?", end_of_turn_confidence=0.92),
        Said("Thanks, and in Rome", end_of_turn_confidence=0.12),
    ]
    async with AssemblyAIServer(api_key="offline", transcripts=said, word_ms=150) as server:
        stt = ShowingSTT(base_url=server.base_url, api_key="offline")
        mic = MemoryAudioInput(16000)
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=DemoLLM(spoken=True, chunk_delay=0.0),
            stt=stt,
            tts=ScriptedTTS(),
            vad=ScriptedVAD(min_silence=0.3),
            user_away_timeout=None,
        )
        session.input.audio = mic
        loop = asyncio.get_running_loop()
        stopped: list[float] = []  # when the user stopped speaking, until the turn ended

        def transcribed(ev: rj.UserInputTranscribedEvent) -> None:
            if not ev.is_final:
                print(f"  partial: {ev.transcript}")

        def state(ev: rj.AgentStateChangedEvent) -> None:
            if ev.new_state == "thinking" and stopped:
                print(f"turn ended {loop.time() - stopped.pop():.1f} s after the user stopped")

        def added(ev: rj.ConversationItemAddedEvent) -> None:
            item = ev.item
            if isinstance(item, rj.ChatMessage) and item.text_content:
                print(f"{item.role}: {item.text_content}")

        session.on("user_input_transcribed", transcribed)
        session.on("agent_state_changed", state)
        session.on("conversation_item_added", added)
        await session.start(DemoAgent())
        for words in said:
            for _ in range(round(len(words.text.split()) * 0.15 / 0.02) + 5):
                await mic.push(speech_frame(0.02))
            stopped[:] = [loop.time()]
            await mic.push_silence(3.5)
        await session.aclose()


if __name__ == "__main__":
    asyncio.run(offline())
