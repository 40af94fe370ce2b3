"""A voice agent speaking through Cartesia, interrupted mid-reply: the history keeps
exactly the words that were played, as written.

    CARTESIA_API_KEY=sk_car_... CARTESIA_VOICE_ID=<voice uuid> \\
        .venv/bin/python examples/cartesia_voice.py [reply.wav]

The agent is the rule-based demo (``rejoinder.demo``: no language model key needed); the
user asks for help and interrupts after ``INTERRUPT_AFTER`` seconds of speech. Without
``CARTESIA_API_KEY`` it runs against ``rejoinder.testing.CartesiaServer`` on 127.0.0.1,
which speaks Cartesia's WebSocket protocol (a tone per character, word timestamps as the
service sends them), so the sample runs anywhere. It prints what was heard and how much
was played (offline, also what the server voiced and the context the interruption
cancelled); with a path, it also writes the audio played to a WAV file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import wave
from collections.abc import AsyncIterator

import rejoinder as rj
from rejoinder.demo import DemoAgent, DemoLLM
from rejoinder.providers import cartesia
from rejoinder.testing import MemoryAudioOutput
from rejoinder.testing.cartesia_server import CartesiaServer

INTERRUPT_AFTER = 1.0
"""Seconds of the reply the user hears before speaking over it."""
DEFAULT_VOICE = "a0e99841-438c-4a64-b679-ae501e7d6091"  # the reference's example voice


@contextlib.asynccontextmanager
async def cartesia_tts() -> AsyncIterator[tuple[cartesia.TTS, CartesiaServer | None]]:
    """The real API with a key; otherwise the loopback server."""
    voice = os.environ.get("CARTESIA_VOICE_ID", DEFAULT_VOICE)
    if os.environ.get("CARTESIA_API_KEY"):
        tts = cartesia.TTS(voice_id=voice, model=os.environ.get("CARTESIA_MODEL", "sonic-3"))
        try:
            yield tts, None
        finally:
            await tts.aclose()
        return
    async with CartesiaServer(api_key="offline", chunk_delay=0.05) as server:
        tts = cartesia.TTS(voice_id=voice, api_key="offline", base_url=server.base_url)
        try:
            yield tts, server
        finally:
            await tts.aclose()


async def main(wav_path: str | None = None) -> str:
    async with cartesia_tts() as (tts, server):
        speaker = MemoryAudioOutput(tts.sample_rate)
        session: rj.AgentSession[None] = rj.AgentSession(
            llm=DemoLLM(spoken=True), tts=tts, user_away_timeout=None
        )
        session.output.audio = speaker
        speaking = asyncio.Event()
        session.on(
            "agent_state_changed",
            lambda ev: speaking.set() if ev.new_state == "speaking" else None,
        )
        await tts.warm_up()  # the socket is open before the first reply
        await session.start(DemoAgent())
        session.generate_reply(user_input="help")
        await asyncio.wait_for(speaking.wait(), 30)
        await asyncio.sleep(INTERRUPT_AFTER)
        await session.interrupt()
        await session.aclose()
        heard = session.history.items[-1]
        assert isinstance(heard, rj.ChatMessage) and heard.interrupted
        print(f"heard before the interruption: {heard.content}")
        print(f"played: {speaker.played_seconds:.2f} s")
        if server is not None:  # what the loopback server saw
            [connection] = server.connections
            [context] = connection.contexts.values()
            print(f"the server voiced {context.audio_seconds:.2f} s of {context.transcript!r}")
            print(f"cancelled contexts: {len(connection.cancelled)}")
    if wav_path:
        write_wav(wav_path, speaker)
        print(f"wrote {wav_path}")
    return str(heard.content)


def write_wav(path: str, speaker: MemoryAudioOutput) -> None:
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(speaker.sample_rate or 24000)
        out.writeframes(b"".join(frame.to_pcm() for frame in speaker.frames))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
