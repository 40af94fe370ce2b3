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
so one Whisper and one Piper serve every connection (each runs one request at a time);
they start loading in the background as soon as this file is loaded, and stay loaded when
a session ends.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading

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


class SharedWhisper(local.WhisperSTT):
    """Whisper shared by every session: a session that ends leaves it loaded."""

    async def aclose(self) -> None:
        pass


class SharedPiper(local.PiperTTS):
    """Piper shared by every session: a session that ends leaves it loaded."""

    async def aclose(self) -> None:
        pass


STT = SharedWhisper()
TTS = SharedPiper()


def _load_models() -> None:
    async def load() -> None:
        await asyncio.gather(STT.load(), TTS.load())

    try:
        asyncio.run(load())
    except Exception as exc:  # each session reports it again when it needs the model
        print(f"voice_agent: loading the speech models failed: {exc}", file=sys.stderr)


threading.Thread(target=_load_models, name="load-speech-models", daemon=True).start()


def make_llm() -> rj.LLM:
    """The rule-based demo LLM, or the model named by ``$REJOINDER_LLM``."""
    model = os.environ.get("REJOINDER_LLM", "").strip()
    if not model:
        return DemoLLM(spoken=True)
    from rejoinder.providers import openai

    # base_url and api_key default to $OPENAI_BASE_URL and $OPENAI_API_KEY.
    return openai.LLM(model=model)


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
