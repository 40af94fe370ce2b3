"""The system under test of ``bench/conversation.py``, served in its own process:

    rejoinder serve bench/conversation_agent.py --host 127.0.0.1 --port PORT

Each connection gets a session built exactly as the shipped offline stack builds one,
``rj.AgentSession(llm=..., **local.voice_session_options(stt=..., tts=...))``, whatever
the client's rate (the phone band gets the same stack, as a phone call does). Whisper and
Piper are shared by every connection, as ``examples/voice_agent.py`` shares them (loading
them per session would cost seconds each time), and ``prewarm`` loads them before the
server listens, so its /healthz answers only once they are ready.

The model is a zero-latency fake (``_fakes.InstantLLM``): every user turn gets the same
three sentences (``REPLY``, about 6 s of Piper speech), long enough for a barge-in to land
while the agent talks.
"""

from __future__ import annotations

import asyncio

import rejoinder as rj
from _conversation_reply import REPLY
from _fakes import InstantLLM, split_even
from rejoinder.io import Connection
from rejoinder.providers import local

STT = rj.shared(local.WhisperSTT())
TTS = rj.shared(local.PiperTTS())


async def prewarm() -> None:
    """Run by ``rejoinder serve`` before it listens: /healthz answers once both are loaded."""
    await asyncio.gather(STT.load(), TTS.load())


async def entrypoint(conn: Connection) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=InstantLLM(tuple(split_even(REPLY, 12))),
        **local.voice_session_options(stt=STT, tts=TTS),
    )
    await conn.serve(session, rj.Agent(instructions="Answer in three sentences."))
