"""A real client talks to an agent over the WebSocket transport with the offline voice
stack (Silero VAD, Whisper tiny.en, Piper), on 127.0.0.1 in real time.

The client synthesises its phrases with Piper, streams them as a microphone would (PCM16
at Piper's 22050 Hz, 20 ms a frame, silence in between), and plays the agent's audio
through a simulated speaker that reports ``played``. It checks the whole loop once: its
words are transcribed, the answer's audio arrives, the agent's states come in order, and
``speaking`` follows its own playback (not the server's sending); then it talks over a
long answer: an "uh-huh" changes nothing (no ``clear``, no state change, no turn), a "wait,
stop" gets ``clear`` within a few hundred milliseconds of its onset (the shipped
``local.voice_session_options``: the onset detector stops the agent), the client reports
where it stopped, and the history keeps the heard part, marked interrupted. The finer
points of playback truth and barge-in are checked exactly, with the scripted stack, in
``test_websocket_scripted.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import time
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.protocol import AgentStateMessage, Clear, TranscriptMessage
from rejoinder.testing import ScriptedLLM

from ._client import VoiceClient

pytest.importorskip("faster_whisper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("piper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("onnxruntime", reason="SileroVAD needs onnxruntime (rejoinder[local])")
if importlib.util.find_spec("silero_vad") is None:
    pytest.skip("SileroVAD needs: pip install --no-deps silero-vad", allow_module_level=True)

from rejoinder.providers import local
from rejoinder.providers.local import PiperTTS, WhisperSTT

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(120), pytest.mark.alone]

ASK = "Hello, can you hear me?"
ASK_MORE = "Please tell me a long story."
BARGE = "Wait, stop, stop."
BACKCHANNEL = "Uh-huh."
REPLY = "Yes, I can hear you."
LONG = (
    "Once upon a time there was a small town by the sea, where every morning the "
    "fishermen went out before sunrise and came back with the tide. "
    "The children ran down to the harbour to meet them, and the old lighthouse keeper "
    "told them stories about the storms he had seen."
)
LOAD_TIMEOUT = 60.0


def words(text: str) -> set[str]:
    return set(re.sub(r"[^a-z' ]", " ", text.lower()).split())


async def spoken(tts: PiperTTS, text: str) -> bytes:
    frames = [frame async for frame in tts.synthesize(text)]
    return np.concatenate([f.data for f in frames]).astype("<i2").tobytes()


def onset(pcm: bytes, rate: int) -> float:
    """Seconds from the clip's start to its first sound (Piper leads with silence)."""
    samples = np.abs(np.frombuffer(pcm, "<i2").astype(np.int32))
    return float(np.flatnonzero(samples > 300)[0]) / rate


def final_agent(text: str | None = None) -> Any:
    def match(m: Any) -> bool:
        return (
            isinstance(m, TranscriptMessage)
            and m.role == "agent"
            and m.final
            and (text is None or m.text == text)
        )

    return match


async def test_a_spoken_turn_and_a_barge_in_with_the_offline_stack() -> None:
    began = time.perf_counter()
    tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)  # the user: the same audio every run
    stt = WhisperSTT()
    await asyncio.wait_for(asyncio.gather(tts.load(), stt.load()), LOAD_TIMEOUT)
    ask, ask_more, barge, backchannel = [
        await spoken(tts, t) for t in (ASK, ASK_MORE, BARGE, BACKCHANNEL)
    ]
    loaded = time.perf_counter()

    sessions: list[rj.AgentSession[Any]] = []

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([[REPLY], [LONG], ["Okay."]]),
            user_away_timeout=None,
            **local.voice_session_options(stt=stt, tts=tts),
        )
        sessions.append(session)
        await conn.serve(session, rj.Agent(instructions="a voice agent"))

    server = TestServer(create_app(entrypoint), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(server.make_url("/ws")) as ws:
            client = VoiceClient(ws, tts.sample_rate, jitter=0.2)
            ready = await client.start()
            assert ready.sample_rate == tts.sample_rate  # no resampling: Piper's own rate

            # ---- one turn, played out
            await client.silence(0.3)
            await client.speak(ask)
            said = await client.wait_for(
                lambda m: isinstance(m, TranscriptMessage) and m.role == "user" and m.final, 20
            )
            answer = await client.wait_for(final_agent(REPLY), 20)
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            first_turn = client.states()
            first_reports = list(client.reports)
            first_received = client.received

            # ---- a long answer, talked over
            mark = len(client.messages)
            await client.speak(ask_more)
            await client.wait_for(
                lambda m: isinstance(m, AgentStateMessage) and m.state == "speaking",
                20,
                after=mark,
            )
            await client.silence(1.0)
            talked_over = len(client.messages)
            await client.speak(backchannel)
            await client.silence(1.5)  # its transcript is in, judged a backchannel
            after_backchannel = client.messages[talked_over:]
            barged_at = client.now + onset(barge, tts.sample_rate)
            await client.speak(barge)
            await client.wait_for(lambda m: isinstance(m, Clear), 10, after=mark)
            cleared_at = next(t for t, m in client.messages[mark:] if isinstance(m, Clear))
            cut = await client.wait_for(final_agent(), 10, after=mark)
            await client.close()
    finally:
        await server.close()
    finished = time.perf_counter()
    print(f"\noffline websocket: load {loaded - began:.1f} s, talk {finished - loaded:.1f} s")

    assert isinstance(said, TranscriptMessage)
    assert {"hello", "hear"} <= words(said.text), said.text
    assert isinstance(answer, TranscriptMessage) and not answer.interrupted
    assert first_received > 0.5 * tts.sample_rate  # Piper's answer arrived
    assert [s for _, s in first_turn] == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    spoke_at = next(t for t, s in first_turn if s == "speaking")
    done_at = first_turn[-1][0]
    first_audio = client.audio_arrivals[0][0]
    first_heard = next(r.at for r in first_reports if r.samples > 0)
    last_heard = next(r.at for r in first_reports if r.samples >= first_received)
    assert first_audio < first_heard < spoke_at  # speaking once heard, not once sent
    assert first_heard - first_audio >= 0.15  # the client's jitter buffer
    assert last_heard < done_at

    # "uh-huh" over the agent: the reply went on, nothing was cleared or changed state
    overlaps = sessions[0]._turn_state.timeline.entries("overlap")  # type: ignore[union-attr]
    assert not [m for _, m in after_backchannel if isinstance(m, Clear | AgentStateMessage)], (
        overlaps
    )
    # "wait, stop": cleared at the client a few hundred ms after its onset (300 ms is the
    # benchmark's p90 target; a loaded CI machine gets some slack here)
    print(f"barge-in: clear {1000 * (cleared_at - barged_at):.0f} ms after the onset")
    assert cleared_at - barged_at < 0.45

    assert isinstance(cut, TranscriptMessage) and cut.interrupted
    cleared = [r for r in client.reports if r.cleared]
    history = sessions[0].history.messages()
    # The story is stopped once, by the barge-in's onset. A second clear is right only
    # when the barge-in was heard as two turns: on a busy machine the turn can end at the
    # pause after "Wait," (a complete sentence), and "stop." then stops the reply to
    # "Wait." (seen under two workers, and once with the test alone). Say what was heard
    # and decided, whole: a str message is not shortened the way a repr is.
    said_then = [(m.role, m.content, m.interrupted) for m in history]
    why = f"{cleared}\n{said_then}\n{overlaps}"
    story = overlaps[0]["speech_id"]  # the backchannel's overlap was over the story
    story_stops = [e for e in overlaps if e["event"] == "interrupt" and e["speech_id"] == story]
    assert len(story_stops) == 1 and client.dropped > 0, why
    story_at = next(i for i, m in enumerate(history) if m.role == "assistant" and m.interrupted)
    turns_after_story = [m for m in history[story_at + 1 :] if m.role == "user"]
    assert len(cleared) == 1 or (len(cleared) == 2 and len(turns_after_story) == 2), why
    heard = [m for m in history if m.role == "assistant" and m.interrupted]
    assert len(heard) == 1 and heard[0].content == cut.text
    assert heard[0].content and LONG.startswith(heard[0].content)
    assert len(heard[0].content) < len(LONG) / 2  # about 3 s of a 15 s answer
    users = [m.content for m in history if m.role == "user"]
    assert not any("uh" in re.sub(r"[^a-z ]", " ", u.lower()).split() for u in users), users
