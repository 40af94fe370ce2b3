"""A spoken question answered with a tool, all on OpenAI: ``openai.STT`` hears it,
``openai.LLM`` calls ``get_weather`` and answers, ``openai.TTS`` speaks the answer.

Talk to it from a browser (needs a key)::

    OPENAI_API_KEY=sk-... .venv/bin/rejoinder dev examples/openai_voice.py
    # then open http://127.0.0.1:8000/ and ask about the weather

Silero VAD hears when you speak and Smart Turn when you have finished; the utterance
goes to OpenAI's transcription endpoint, the chat model answers (``OPENAI_MODEL``,
``gpt-4o-mini`` by default) and OpenAI's speech endpoint voices it.

Or as a script, one spoken question from a scripted microphone::

    OPENAI_API_KEY=sk-... .venv/bin/python examples/openai_voice.py ["Weather in Oslo?"]

The question is voiced by ``openai.TTS`` itself and played into the microphone, so
``openai.STT`` hears real speech. Without ``OPENAI_API_KEY`` the same code runs against
loopback servers on 127.0.0.1 that speak OpenAI's documented wire formats:
``rejoinder.testing.OpenAIAudioServer`` for the transcription and speech endpoints (a
tone for speech, a scripted transcript for what it hears) and
``rejoinder.testing.OpenAIChatServer`` for the chat model (a streamed ``get_weather``
call, then the answer), so the sample runs anywhere. It prints what was heard, the
agent's states, the conversation and how much of the answer was played; offline also
what each server received.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.models.audio import AudioFrame
from rejoinder.providers import local, openai
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    OpenAIAudioServer,
    OpenAIChatServer,
    ScriptedVAD,
    SpeechReply,
    StateTimeline,
    StreamReply,
    TranscriptReply,
    tone,
)
from rejoinder.testing.openai_chat_server import chunk, text_chunks, tool_call_delta

QUESTION = "What's the weather in Paris?"


class WeatherDesk(rj.Agent):
    instructions = (
        "You answer questions about the weather. Your words are spoken aloud: answer in "
        "one short sentence, without lists or markdown."
    )

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        """The current weather in a city.

        Args:
            city: the city's name
        """
        return f"22 degrees and sunny in {city}"


def chat_model(*, api_key: str | None = None, base_url: str | None = None) -> openai.LLM:
    model = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
    return openai.LLM(model=model, api_key=api_key, base_url=base_url)


async def entrypoint(conn: Connection) -> None:
    """For ``rejoinder dev``: one session per browser connection, on the real API."""
    options = local.voice_session_options(stt=openai.STT(), tts=openai.TTS())
    session: rj.AgentSession[None] = rj.AgentSession(llm=chat_model(), **options)
    await conn.serve(session, WeatherDesk())  # the session closes the three clients


@dataclass
class Models:
    stt: openai.STT
    llm: openai.LLM
    tts: openai.TTS
    audio_server: OpenAIAudioServer | None = None
    chat_server: OpenAIChatServer | None = None

    async def aclose(self) -> None:
        """Close the clients, should the session not have (closing twice is harmless)."""
        for client in (self.stt, self.llm, self.tts):
            await client.aclose()


@contextlib.asynccontextmanager
async def openai_models(question: str) -> AsyncIterator[Models]:
    """The real API with a key; otherwise the loopback servers, scripted like OpenAI."""
    if os.environ.get("OPENAI_API_KEY"):
        async with contextlib.aclosing(Models(openai.STT(), chat_model(), openai.TTS())) as models:
            yield models
        return
    audio = OpenAIAudioServer(
        transcripts=[TranscriptReply(question, chunk_delay=0.02)],
        # The question (the TTS voices it for the microphone), then the answer.
        speech=[SpeechReply(tone(1.2)), SpeechReply(tone(1.0), chunk_delay=0.01)],
    )
    weather_call = tool_call_delta(
        0, call_id="call_1", name="get_weather", arguments='{"city": "Paris"}'
    )
    chat = OpenAIChatServer(
        [
            StreamReply(
                [
                    chunk(role="assistant", tool_calls=[weather_call]),
                    chunk(finish_reason="tool_calls"),
                ]
            ),
            StreamReply(text_chunks("It's 22 degrees ", "and sunny in Paris.")),
        ]
    )
    async with audio, chat:
        models = Models(
            openai.STT(base_url=audio.base_url, api_key="offline"),
            chat_model(base_url=chat.base_url, api_key="offline"),
            openai.TTS(base_url=audio.base_url, api_key="offline"),
            audio,
            chat,
        )
        async with contextlib.aclosing(models):
            yield models


async def spoken(tts: openai.TTS, text: str) -> bytes:
    """``text`` as the TTS says it, 16-bit PCM at its rate."""
    frames = [item async for item in tts.synthesize(text) if isinstance(item, AudioFrame)]
    return b"".join(frame.to_pcm() for frame in frames)


async def ask(mic: MemoryAudioInput, question_pcm: bytes) -> None:
    """The question into the microphone, then a quiet line."""
    await mic.push_pcm(question_pcm)
    await mic.push_silence(60)


async def main(question: str) -> None:
    async with openai_models(question) as models:
        where = "the OpenAI API" if models.audio_server is None else "loopback servers"
        print(f"on {where}")
        question_pcm = await spoken(models.tts, question)
        mic = MemoryAudioInput(models.tts.sample_rate)
        speaker = MemoryAudioOutput(models.tts.sample_rate)
        session: rj.AgentSession[None] = rj.AgentSession(
            llm=models.llm,
            stt=models.stt,
            tts=models.tts,
            # An energy detector is enough for a clean recording; pauses between words
            # stay well under half a second.
            vad=ScriptedVAD(min_silence=0.5),
            user_away_timeout=None,
        )
        session.input.audio, session.output.audio = mic, speaker
        timeline = StateTimeline(session)
        answered = asyncio.Event()

        def state(ev: rj.AgentStateChangedEvent) -> None:
            if ev.old_state == "speaking" and ev.new_state == "listening":
                answered.set()  # nothing more owed: the answer was played

        session.on("agent_state_changed", state)
        session.on(
            "user_input_transcribed",
            lambda ev: print(f"heard: {ev.transcript}") if ev.is_final else None,
        )
        session.on(
            "function_tools_executed",
            lambda ev: print("tools:", [call.name for call in ev.function_calls]),
        )
        await session.start(WeatherDesk())
        feeder = asyncio.create_task(ask(mic, question_pcm))
        try:
            await asyncio.wait_for(answered.wait(), 30)
        finally:
            feeder.cancel()
            await session.aclose()
        print("agent:", " → ".join(timeline.agent_states()))
        print_history(session.history)
        print(f"played {speaker.played_seconds:.1f} s of the answer")
        if models.audio_server is not None and models.chat_server is not None:
            print_offline(models.audio_server, models.chat_server)


def print_history(history: rj.ChatContext) -> None:
    for item in history.items:
        if isinstance(item, rj.ChatMessage) and item.role in ("user", "assistant"):
            print(f"{item.role}: {item.content}")
        elif isinstance(item, rj.FunctionCall):
            print(f"tool call: {item.name}({item.arguments})")
        elif isinstance(item, rj.FunctionCallOutput):
            print(f"tool result: {item.output}")


def print_offline(audio: OpenAIAudioServer, chat: OpenAIChatServer) -> None:
    """What the loopback servers were sent."""
    [heard] = audio.transcription_requests
    print(f"transcribed: {heard.duration:.1f} s of {heard.sample_rate} Hz audio")
    print("voiced:", [request["input"] for request in audio.speech_requests])
    tool_message = chat.requests[-1]["messages"][-1]
    print(f"the chat model was sent back: {tool_message['role']} {tool_message['content']!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else QUESTION))
