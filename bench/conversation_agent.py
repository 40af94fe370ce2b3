"""The system under test of ``bench/conversation.py``, served in its own process:

    rejoinder serve bench/conversation_agent.py --host 127.0.0.1 --port PORT

Each connection gets a session built exactly as the shipped offline stack builds one,
``rj.AgentSession(llm=..., **local.voice_session_options(stt=..., tts=...))``, whatever
the client's rate (the phone band gets the same stack, as a phone call does). Whisper and
Piper are shared by every connection, as ``examples/voice_agent.py`` shares them (loading
them per session would cost seconds each time), and they are loaded before this file
finishes importing, so the server's /healthz answers only once they are ready.

The model is a zero-latency fake (``_fakes.InstantLLM``): every user turn gets the same
three sentences (``REPLY``, about 6 s of Piper speech), long enough for a barge-in to land
while the agent talks.
"""

from __future__ import annotations

import asyncio
import threading

import rejoinder as rj
from _conversation_reply import REPLY
from _fakes import InstantLLM, split_even
from rejoinder.io import Connection
from rejoinder.providers import local


class _SharedWhisper(local.WhisperSTT):
    async def aclose(self) -> None:
        pass  # shared: a session that ends leaves it loaded


class _SharedPiper(local.PiperTTS):
    async def aclose(self) -> None:
        pass


STT = _SharedWhisper()
TTS = _SharedPiper()


def _load() -> None:
    async def load() -> None:
        await asyncio.gather(STT.load(), TTS.load())

    asyncio.run(load())


# A thread of its own: the file may be imported while an event loop runs.
_loader = threading.Thread(target=_load, name="load-speech-models")
_loader.start()
_loader.join()


async def entrypoint(conn: Connection) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=InstantLLM(tuple(split_even(REPLY, 12))),
        **local.voice_session_options(stt=STT, tts=TTS),
    )
    await conn.serve(session, rj.Agent(instructions="Answer in three sentences."))
