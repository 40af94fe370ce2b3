"""A speech-to-speech agent on OpenAI, with a tool: the Realtime API (``openai.Realtime``)
or GPT-Live (``openai.GPTLive``, full duplex, its tools run by a backend model).

Talk to it from a browser (needs a key)::

    OPENAI_API_KEY=sk-... .venv/bin/rejoinder dev examples/openai_realtime_agent.py
    OPENAI_API_KEY=sk-... OPENAI_REALTIME=gpt-live \\
        .venv/bin/rejoinder dev examples/openai_realtime_agent.py
    # then open http://127.0.0.1:8000/ and ask about the weather

The model hears and speaks itself (no VAD, STT or TTS here): the Realtime API with its
server VAD and input transcription, or GPT-Live, which hands the ``get_weather`` call to
its backend model and speaks the answer once the result is back.

Run as a script, it plays one spoken question answered with the tool, offline::

    .venv/bin/python examples/openai_realtime_agent.py [--gpt-live]

against ``rejoinder.testing.OpenAIRealtimeServer`` (or ``GPTLiveServer``) on 127.0.0.1,
which speaks the service's documented WebSocket events and is scripted here as the
service would answer: it hears the user, transcribes the question, calls ``get_weather``,
waits for the result and speaks the answer. It prints the agent's states, the
conversation (the tool call and its result included) and what the server was sent back.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.providers import openai
from rejoinder.testing import (
    GPTLiveServer,
    MemoryAudioInput,
    MemoryAudioOutput,
    OpenAIRealtimeServer,
    StateTimeline,
)

QUESTION = "What's the weather in Oslo?"
ANSWER = "It's 12 degrees with light rain in Oslo."
ARGUMENTS = {"city": "Oslo"}


class WeatherDesk(rj.Agent):
    instructions = (
        "You answer questions about the weather on the phone, in one short sentence. "
        "Use get_weather to look it up."
    )

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        """The current weather in a city.

        Args:
            city: the city's name
        """
        return f"12 degrees and light rain in {city}"


def realtime_model(
    *, gpt_live: bool, api_key: str | None = None, base_url: str | None = None
) -> rj.RealtimeModel:
    if gpt_live:
        return openai.GPTLive(api_key=api_key, base_url=base_url)
    return openai.Realtime(api_key=api_key, base_url=base_url)


async def entrypoint(conn: Connection) -> None:
    """For ``rejoinder dev``: one session per browser connection, on the real service
    (``$OPENAI_REALTIME``: ``realtime``, the default, or ``gpt-live``)."""
    choice = os.environ.get("OPENAI_REALTIME", "realtime")
    if choice not in ("realtime", "gpt-live"):
        raise ValueError(f"OPENAI_REALTIME must be 'realtime' or 'gpt-live', not {choice!r}")
    model = realtime_model(gpt_live=choice == "gpt-live")
    session: rj.AgentSession[None] = rj.AgentSession(llm=model)
    await conn.serve(session, WeatherDesk())


async def play_realtime(server: OpenAIRealtimeServer) -> None:
    """The Realtime API's side of the conversation."""
    # Server VAD hears the question; the audio becomes an item, then its transcript.
    await server.speech_started(audio_start_ms=200)
    await asyncio.sleep(0.3)
    await server.speech_stopped(audio_end_ms=1500)
    await server.committed("item_user")
    await server.input_transcription("item_user", QUESTION)
    # The model answers with a function call and waits for its output ...
    await server.response_created("resp_1")
    await server.function_call("resp_1", "call_1", "get_weather", json.dumps(ARGUMENTS))
    await server.response_done("resp_1")
    await server.wait_for("response.create")
    # ... then speaks the answer.
    await server.response_created("resp_2")
    await server.transcript("resp_2", "item_answer", ANSWER)
    await server.audio("resp_2", "item_answer", seconds=0.8)
    await server.audio_done("resp_2", "item_answer")
    await server.response_done("resp_2")


async def play_gpt_live(server: GPTLiveServer) -> None:
    """GPT-Live's side: the voice model hears the question, its backend runs the tool."""
    await server.input_transcript(QUESTION, 200, 1500)
    await asyncio.sleep(1.0)  # the user's turn ends after 0.8 s of audio past the words
    await server.delegation("dlg_1")
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", ARGUMENTS)
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")  # the tool's output went back
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await server.output_transcript(ANSWER)
    # The voice streams on in silence when it stops talking: 0.8 s of it ends the answer.
    await server.speech(0.8, then_silence=1.0)


async def offline(gpt_live: bool) -> None:
    """One question against the loopback server, in real time (about two seconds)."""
    server = GPTLiveServer() if gpt_live else OpenAIRealtimeServer()
    async with server:
        model = realtime_model(gpt_live=gpt_live, api_key="offline", base_url=server.base_url)
        session: rj.AgentSession[None] = rj.AgentSession(llm=model, user_away_timeout=None)
        session.output.audio = MemoryAudioOutput(sample_rate=24000)
        mic = MemoryAudioInput(sample_rate=24000, frame_ms=100)
        session.input.audio = mic
        timeline = StateTimeline(session)
        answered = asyncio.Event()

        def state(ev: rj.AgentStateChangedEvent) -> None:
            if ev.old_state == "speaking" and ev.new_state == "listening":
                answered.set()  # the answer was played and nothing more is owed

        session.on("agent_state_changed", state)
        await session.start(WeatherDesk())
        feeder = asyncio.create_task(mic.push_silence(30))  # a quiet phone line
        try:
            if isinstance(server, GPTLiveServer):
                await play_gpt_live(server)
                created = server.of_type("response.item.create")
            else:
                await play_realtime(server)
                created = server.of_type("conversation.item.create")
            await asyncio.wait_for(answered.wait(), 10)
        finally:
            feeder.cancel()
            await session.aclose()
    print("on", "GPT-Live" if gpt_live else "the Realtime API", "(loopback server)")
    print("agent:", " → ".join(timeline.agent_states()))
    for item in session.history.items:
        if isinstance(item, rj.ChatMessage) and item.role in ("user", "assistant"):
            print(f"{item.role}: {item.content}")
        elif isinstance(item, rj.FunctionCall):
            print(f"tool call: {item.name}({item.arguments})")
        elif isinstance(item, rj.FunctionCallOutput):
            print(f"tool result: {item.output}")
    for event in created:
        if event["item"]["type"] == "function_call_output":
            print(f"sent back to the model: {event['item']['output']!r}")


if __name__ == "__main__":
    asyncio.run(offline(gpt_live="--gpt-live" in sys.argv[1:]))
