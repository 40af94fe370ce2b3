"""A fake Twilio call talks to the demo agent (``examples/voice_agent.py``: Silero VAD,
Whisper tiny.en, the rule-based demo LLM, Piper) end to end over the phone transport, on
127.0.0.1 in real time.

The caller's question is Piper speech at 8 kHz μ-law, as a phone line carries it. The
call must hear the greeting and the weather answer; the agent's words are transcribed
back from what the *caller* heard (Whisper on the fake's recording), so the audio is
checked, not just its length; the session's history holds the question and the answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.discover import load_agent_file
from rejoinder.io import Connection, create_app
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import FakePhoneCall

pytest.importorskip("faster_whisper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("piper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("onnxruntime", reason="SileroVAD needs onnxruntime (rejoinder[local])")
if importlib.util.find_spec("silero_vad") is None:
    pytest.skip("SileroVAD needs: pip install --no-deps silero-vad", allow_module_level=True)

from rejoinder.providers.local import PiperTTS, WhisperSTT

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(150), pytest.mark.alone]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "voice_agent.py"
ASK = "What is the weather in Paris?"
LOAD_TIMEOUT = 60.0


def words(text: str) -> set[str]:
    return set(re.sub(r"[^a-z' ]", " ", text.lower()).split())


async def test_a_phone_call_to_the_demo_agent(tmp_path: Path) -> None:
    began = time.perf_counter()
    loaded = load_agent_file(EXAMPLE)
    demo = loaded.entrypoint
    # as rejoinder dev/serve do before taking calls: the shared Whisper and Piper load
    await asyncio.wait_for(loaded.run_prewarm(), LOAD_TIMEOUT)
    # the caller: whole sentences, the same audio every run
    tts = PiperTTS(first_clause=False, noise_scale=0.0, noise_w_scale=0.0)
    listener = WhisperSTT()
    await asyncio.wait_for(asyncio.gather(tts.load(), listener.load()), LOAD_TIMEOUT)
    question = np.concatenate([f.data async for f in tts.synthesize(ASK)])  # type: ignore[misc]
    wav = tmp_path / "question.wav"  # the caller's line plays a recording, as a test would
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(tts.sample_rate)
        out.writeframes(np.repeat(question, 2).astype("<i2").tobytes())
    sessions: list[rj.AgentSession[Any]] = []

    async def entrypoint(conn: Connection) -> None:
        original = conn.serve

        async def serve(session: rj.AgentSession[Any], agent: rj.Agent) -> None:
            sessions.append(session)
            await original(session, agent)

        conn.serve = serve  # type: ignore[method-assign]
        await demo(conn)

    app = create_app(entrypoint, telephony=["twilio"], webrtc=False, page=False)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with FakePhoneCall.connect(str(server.make_url("/twilio"))) as call:
            # The greeting plays first (the demo agent's on_enter); wait for its end.
            await call.until(lambda: bool(sessions) and call.heard_seconds() > 1.0, 60)
            session = sessions[0]
            await call.until(lambda: session.agent_state == "listening", 30)
            greeting = call.heard_seconds()
            greeting_chunks = len(call.heard)
            await call.silence(0.3)
            await call.say_wav(wav)
            try:
                await call.until(lambda: _answered(session), 30)
            except TimeoutError:  # say what was heard: a misrecognition, or no answer
                heard = [(i.role, i.content) for i in session.history.messages()]
                raise AssertionError(
                    f"no answer naming Paris in 30 s; history {heard}, clears {call.clears}, "
                    f"agent {session.agent_state}, user {session.user_state}"
                ) from None
            await call.until(lambda: session.agent_state == "listening", 30)
            answer = np.concatenate([h.pcm for h in call.heard[greeting_chunks:]])
            call.save_heard(tmp_path / "heard.wav")
            await call.hang_up()
    finally:
        await server.close()
    print(f"\nphone call to the demo agent: {time.perf_counter() - began:.1f} s")

    users = [i.content for i in session.history.items if _is(i, "user")]
    agents = [i.content for i in session.history.items if _is(i, "assistant")]
    assert any({"weather", "paris"} <= words(u) for u in users), users
    assert any("paris" in words(a) for a in agents), agents
    assert call.heard_seconds() > greeting + 1.0  # the answer was heard after the greeting
    # What the caller heard after the greeting, transcribed: the answer, in words.
    transcript = await listener.recognize([AudioFrame(answer, 8000)])
    assert {"weather", "paris"} <= words(transcript), transcript
    assert call.clears == []  # nobody talked over the agent
    with wave.open(str(tmp_path / "heard.wav"), "rb") as recording:
        assert recording.getframerate() == 8000
        assert recording.getnframes() == len(call.heard_audio())


def _is(item: object, role: str) -> bool:
    return isinstance(item, rj.ChatMessage) and item.role == role


def _answered(session: rj.AgentSession[Any]) -> bool:
    replies = [i for i in session.history.items if isinstance(i, rj.ChatMessage)]
    return any(i.role == "assistant" and "paris" in words(i.content) for i in replies)
