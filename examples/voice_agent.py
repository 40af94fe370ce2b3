"""A voice agent you can talk to from a browser, entirely offline.

    .venv/bin/rejoinder dev examples/voice_agent.py      # then open http://127.0.0.1:8000/

Silero VAD hears when you speak, Whisper transcribes it, Smart Turn and the words decide
when you have finished, the rule-based demo LLM answers (weather, a background timer, a
flight booking that fails), and Piper speaks the answer; "uh-huh" while it talks is let
pass, "wait" stops it. Everything runs on this machine; nothing is downloaded. The page
shows the agent's and the user's state as the session reports it.

The demo LLM is not a language model: it reacts to keywords ("what's the weather in
Paris", "set a timer for five seconds", "book a flight to Rome", "help"). To talk to a
real model through an OpenAI-compatible API instead, set ``REJOINDER_LLM`` (and
``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` as needed)::

    REJOINDER_LLM=gpt-4o-mini OPENAI_API_KEY=sk-... .venv/bin/rejoinder dev examples/voice_agent.py
    make demo LLM=llama3.2 BASE_URL=http://localhost:11434/v1          # Ollama

``rejoinder dev`` calls ``entrypoint`` once per connection (a browser tab over WebRTC or
WebSocket); each connection gets its own session. The speech models take seconds to load,
so one Whisper and one Piper serve every connection (each runs one request at a time):
``rj.shared`` marks them as the process's, ``prewarm`` loads them once before the server
listens, and they stay loaded when a session ends.
"""

from __future__ import annotations

import asyncio
import os

import rejoinder as rj
from rejoinder.demo import MAX_TIMER_SECONDS, DemoAgent, DemoLLM
from rejoinder.io import Connection
from rejoinder.providers import local

GREETING = (
    "Hi! I'm the rejoinder voice demo. Ask me about the weather, "
    "to set a timer, or to book a flight."
)

INSTRUCTIONS = (
    "You are a friendly voice assistant in a demo of the rejoinder framework. Your words "
    "are spoken aloud: answer in one or two short sentences, without lists or markdown. "
    "Use get_weather for weather questions, set_timer to start timers (it runs in the "
    "background; say it started, and announce when it is done), and book_flight to book "
    "flights. If a tool fails, apologise and say what went wrong."
)


class VoiceAssistant(DemoAgent):
    """The demo agent's tools, with instructions for speech and a spoken greeting."""

    def __init__(self) -> None:
        super().__init__()
        self.instructions = INSTRUCTIONS

    async def on_enter(self) -> None:
        self.session.say(GREETING)


# Loaded once per process and shared by every session (none closes them): rejoinder
# dev/serve run prewarm() below before they listen, so the first caller does not wait.
STT = rj.shared(local.WhisperSTT())
TTS = rj.shared(local.PiperTTS())


async def prewarm() -> None:
    await asyncio.gather(STT.load(), TTS.load())


def make_llm() -> rj.LLM:
    """The rule-based demo LLM, or the model named by ``$REJOINDER_LLM`` (``gpt-4o-mini``,
    ``anthropic/claude-sonnet-4-5``, ...: see ``rejoinder.providers.registry``)."""
    model = os.environ.get("REJOINDER_LLM", "").strip()
    if not model:
        return DemoLLM(spoken=True)
    from rejoinder.providers.registry import llm_from_name

    # The key and the URL come from the provider's variables ($OPENAI_API_KEY, ...).
    return llm_from_name(model)


async def entrypoint(conn: Connection) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=make_llm(),
        # the offline voice setup the benchmarks measure: Silero VAD, Smart Turn and the
        # words for turn ends, the onset classifier for interruptions (small: per session)
        **local.voice_session_options(stt=STT, tts=TTS),
        # the longest demo timer runs in the background under the tool watchdog
        obligation_timeouts={"tool": MAX_TIMER_SECONDS + 60.0},
    )
    await conn.serve(session, VoiceAssistant())
