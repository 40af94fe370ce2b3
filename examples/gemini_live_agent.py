"""A voice agent on Gemini Live, with a blocking tool and two non-blocking ones.

    GEMINI_API_KEY=... .venv/bin/rejoinder dev examples/gemini_live_agent.py
    # then open http://127.0.0.1:8000/ and talk

Gemini hears and speaks itself (no VAD, STT or TTS). ``get_weather`` is an ordinary
(blocking) tool: the model waits for it. ``search_flights`` is non-blocking and its
result is voiced ``when_idle``: the model keeps talking while it runs, and says what it
found once nobody is speaking; the agent reports ``thinking`` until then.
``note_preference`` is non-blocking and ``silent``: its result only goes into the
model's context, so nothing is owed for it (but the user is never marked away while it
runs). Connections are replaced by resuming the session, at quiet moments, before the
service's ten-minute limit.

Run as a script, it plays a short conversation offline against
``rejoinder.testing.gemini_live_server.GeminiLiveServer`` (the loopback server scripted
as Gemini would answer) and prints the agent's states and the conversation.
"""

from __future__ import annotations

import asyncio

import rejoinder as rj
from rejoinder.io import Connection
from rejoinder.providers.google.live import Live
from rejoinder.testing import MemoryAudioInput, MemoryAudioOutput, StateTimeline
from rejoinder.testing.gemini_live_server import GeminiLiveServer

INSTRUCTIONS = (
    "You are a travel desk on the phone. Answer in one or two short sentences. While a "
    "flight search runs, tell the caller you are looking and keep talking with them."
)
NON_BLOCKING = {"search_flights": "when_idle", "note_preference": "silent"}


class TravelDesk(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions=INSTRUCTIONS)
        self.preferences: list[str] = []

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        """The current weather in a city.

        Args:
            city: the city's name
        """
        return f"22 degrees and sunny in {city}"

    @rj.function_tool
    async def search_flights(self, city: str) -> str:
        """Search flights to a city (takes a few seconds).

        Args:
            city: where the caller wants to fly
        """
        await asyncio.sleep(0.5)  # a slow fare search
        return f"two flights to {city} tomorrow: 08:10 for 120 EUR, 17:45 for 95 EUR"

    @rj.function_tool
    async def note_preference(self, preference: str) -> str:
        """Write down a travel preference of the caller.

        Args:
            preference: what the caller prefers
        """
        self.preferences.append(preference)
        return "noted"


async def entrypoint(conn: Connection) -> None:
    """For ``rejoinder dev``: one session per browser connection, on the real service."""
    session: rj.AgentSession[None] = rj.AgentSession(llm=Live(non_blocking=NON_BLOCKING))
    await conn.serve(session, TravelDesk())


async def offline() -> None:
    """A short conversation against the loopback server, in real time (two seconds)."""
    async with GeminiLiveServer() as server:
        llm = Live(api_key="offline", base_url=server.base_url, non_blocking=NON_BLOCKING)
        session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
        session.output.audio = MemoryAudioOutput(sample_rate=24000)
        mic = MemoryAudioInput(sample_rate=16000, frame_ms=100)
        session.input.audio = mic
        timeline = StateTimeline(session)
        await session.start(TravelDesk())
        feeder = asyncio.create_task(mic.push_silence(30))  # a quiet phone line
        try:
            # The caller asks; the model says it is looking and starts the search.
            await server.input_transcript("Can you find me a flight to Rome?")
            await asyncio.sleep(0.2)
            await server.output_transcript("Sure, I'm looking for flights to Rome.")
            await server.tool_call(("call_1", "search_flights", {"city": "Rome"}))
            await server.audio(0.3)
            await server.generation_complete()
            await server.turn_complete()
            # The search runs; its result comes back scheduled WHEN_IDLE ...
            await server.wait_for("toolResponse", within=10)
            # ... and the model voices it, the line being quiet.
            await server.answer("I found two: 08:10 for 120 euros, 17:45 for 95.", 0.5)
            await asyncio.sleep(0.7)
            (result,) = server.function_responses()
            print(f"search result sent {result['scheduling']}: {result['response']['output']}")
            print("agent:", " → ".join(timeline.agent_states()))
            for message in session.history.messages():
                print(f"{message.role}: {message.content}")
        finally:
            feeder.cancel()
            await session.aclose()


if __name__ == "__main__":
    asyncio.run(offline())
