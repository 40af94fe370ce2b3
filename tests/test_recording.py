"""SessionRecorder: a stereo WAV of what was heard (user left, agent right, on the loop
clock, the agent cut where it was interrupted) and the transcript JSON beside it."""

from __future__ import annotations

import asyncio
import json
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.recording import RecordingError, SessionRecorder
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    now,
    speech_frame,
)

RATE = 16000
FRAME = 0.02  # one microphone frame
EDGE = 0.005  # resampling blurs an edge by a few samples
MIN_SPEECH = 0.06  # ScriptedVAD


class Call:
    """A voice session wired like Connection.serve does: the recorder is attached first,
    the transport's slots are filled after it, just before start."""

    def __init__(self, llm: list[list[Any]], stt: list[str], path: Path | None, **opts: Any):
        self.tts = ScriptedTTS()  # 24 kHz: the recording resamples it to 16 kHz
        opts.setdefault("user_away_timeout", None)
        opts.setdefault("min_endpointing_delay", 0.5)
        self.session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM(llm), stt=ScriptedSTT(stt), tts=self.tts, vad=ScriptedVAD(), **opts
        )
        self.recorder = None if path is None else SessionRecorder(self.session, path)
        self.mic = MemoryAudioInput(16000)
        self.speaker = MemoryAudioOutput(24000)
        self.session.input.audio = self.mic
        self.session.output.audio = self.speaker
        self.session.output.transcription = MemoryTextOutput()
        self.timeline = StateTimeline(self.session)
        self.closed_at: list[float] = []
        self.session.on("close", lambda _: self.closed_at.append(now()))

    async def start(self) -> Call:
        await self.session.start(rj.Agent(instructions="voice"))
        return self

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / FRAME)):
            await self.mic.push(speech_frame(FRAME))

    async def silence(self, seconds: float) -> None:
        await self.mic.push_silence(seconds)


def read_wav(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with wave.open(str(path), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (2, 2, RATE)
        data = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
    return data[0::2], data[1::2]


def runs(channel: np.ndarray, threshold: int = 100) -> list[tuple[float, float]]:
    """The (start, end) seconds of each stretch louder than ``threshold``, gaps shorter
    than a frame (a tone's zero crossings) bridged."""
    loud = np.flatnonzero(np.abs(channel.astype(np.int32)) > threshold)
    if loud.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(loud) > FRAME * RATE)
    starts = [loud[0], *loud[breaks + 1]]
    ends = [*loud[breaks], loud[-1]]
    return [(s / RATE, (e + 1) / RATE) for s, e in zip(starts, ends, strict=True)]


def approx_runs(expected: list[tuple[float, float]]) -> Any:
    return [(pytest.approx(a, abs=EDGE), pytest.approx(b, abs=EDGE)) for a, b in expected]


async def test_spoken_turn_and_answer(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    reply = "It is sunny today."
    c = await Call([[reply]], ["What's the weather?"], path).start()
    await c.speak(1.0)
    await c.silence(3.0)
    await c.session.aclose()
    left, right = read_wav(path)
    # As long as the session ran, within a frame.
    assert len(left) / RATE == pytest.approx(c.closed_at[0], abs=FRAME)
    # The user's tone where it was pushed (0 to 1 s), silence elsewhere.
    assert runs(left) == approx_runs([(0.0, 1.0)])
    assert not left[round((1.0 + FRAME) * RATE) :].any()
    # The agent from the moment its output reported playback start, for the whole reply.
    start = c.timeline.times_of("speaking")[0]
    assert start == pytest.approx(1.5)
    assert runs(right) == approx_runs([(start, start + c.tts.duration_of(reply))])
    assert c.speaker.segments == [pytest.approx(c.tts.duration_of(reply))]
    record = json.loads(path.with_suffix(".json").read_text())
    assert record["sample_rate"] == RATE and record["channels"] == ["user", "agent"]
    assert record["duration"] == pytest.approx(c.closed_at[0])
    said = [(m["role"], m["content"], m["interrupted"]) for m in record["history"]]
    assert said == [("user", "What's the weather?", False), ("assistant", reply, False)]
    assert record["segments"] == [
        {
            "start": pytest.approx(start),
            "heard": pytest.approx(c.tts.duration_of(reply)),
            "interrupted": False,
        }
    ]
    if hasattr(c.session, "timeline"):
        assert record["timeline"] == json.loads(
            json.dumps(c.session.timeline.entries(), default=str)
        )


async def barge_in(path: Path | None) -> Call:
    reply = "This is a long answer that goes on and on for quite a while."
    c = await Call([[reply], ["Sure, stopping."]], ["Hello?", "Stop please."], path).start()
    await c.speak(1.0)
    await c.silence(2.0)  # the reply is heard from 1.5
    await c.speak(1.0)  # from 3.0: the reply pauses at 3.06, then is interrupted
    await c.silence(3.0)
    await c.session.aclose()
    return c


async def test_barge_in_cuts_the_agent_where_the_listener_stopped_hearing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "barge.wav"
    c = await barge_in(path)
    left, right = read_wav(path)
    assert runs(left) == approx_runs([(0.0, 1.0), (3.0, 4.0)])
    first, second = c.timeline.times_of("speaking")
    heard, answer = c.speaker.segments
    assert heard == pytest.approx(3.0 + MIN_SPEECH - 1.5)  # paused when the VAD heard her
    assert answer == pytest.approx(c.tts.duration_of("Sure, stopping."))
    assert runs(right) == approx_runs([(first, first + heard), (second, second + answer)])
    record = json.loads(path.with_suffix(".json").read_text())
    assistant = [m for m in record["history"] if m.get("role") == "assistant"]
    assert [m["interrupted"] for m in assistant] == [True, False]
    assert assistant[0]["content"] == c.session.history.messages()[1].content
    assert [s["interrupted"] for s in record["segments"]] == [True, False]


async def test_recording_never_changes_the_state_timeline(tmp_path: Path) -> None:
    plain = await barge_in(None)
    recorded = await barge_in(tmp_path / "r.wav")

    def relative(c: Call) -> list[tuple[float, str, str, str]]:
        t0 = c.timeline.changes[0].at  # each session starts at its own time
        return [(round(x.at - t0, 6), x.who, x.old, x.new) for x in c.timeline.changes]

    assert relative(recorded) == relative(plain)
    assert recorded.speaker.segments == pytest.approx(plain.speaker.segments)
    assert recorded.timeline.agent_states() == plain.timeline.agent_states()


async def test_a_false_interruption_keeps_the_pause_as_silence(tmp_path: Path) -> None:
    path = tmp_path / "cough.wav"
    reply = "Here is the whole answer, which is long enough to be talked over."
    c = Call([[reply]], ["Hi.", ""], path, false_interruption_timeout=1.0)
    await c.start()
    await c.speak(1.0)
    await c.silence(1.0)
    await c.speak(0.2)  # a cough at 2.0: the reply pauses, then resumes
    await c.silence(8.0)
    await c.session.aclose()
    _, right = read_wav(path)
    start, resumed = c.timeline.times_of("speaking")
    paused = c.timeline.times_of("thinking")[-1]  # paused: still owed, not listening
    before = paused - start
    after = c.tts.duration_of(reply) - before
    assert runs(right) == approx_runs([(start, paused), (resumed, resumed + after)])


async def test_a_long_call_is_written_as_it_goes(tmp_path: Path) -> None:
    path = tmp_path / "long.wav"
    c = await Call([], [], path).start()
    await c.silence(30.0)
    with wave.open(str(path), "rb"):
        pass  # readable while still being written
    assert path.stat().st_size > 2 * 2 * RATE * 25  # most of the 30 s is on disk
    await c.session.aclose()
    left, right = read_wav(path)
    assert len(left) / RATE == pytest.approx(30.0, abs=FRAME)
    assert not left.any() and not right.any()


async def test_a_text_only_session_records_silence_and_the_transcript(tmp_path: Path) -> None:
    path = tmp_path / "text.wav"
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Hello."]]), user_away_timeout=None
    )
    SessionRecorder(session, path)
    session.output.transcription = MemoryTextOutput()
    await session.start(rj.Agent(instructions="t"))
    await session.run(user_input="hi")
    await advance(1.0)
    await session.aclose()
    left, right = read_wav(path)
    assert len(left) == pytest.approx(RATE * now(), abs=FRAME * RATE)
    assert not right.any()
    record = json.loads(path.with_suffix(".json").read_text())
    assert [m["content"] for m in record["history"]] == ["hi", "Hello."]


async def test_a_missing_directory_fails_at_attach_time(tmp_path: Path) -> None:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=ScriptedLLM([]))
    path = tmp_path / "no" / "such" / "dir" / "call.wav"
    with pytest.raises(RecordingError, match=r"cannot record the session to .*call\.wav"):
        SessionRecorder(session, path)
    assert issubclass(RecordingError, OSError)
    await session.start(rj.Agent(instructions="t"))  # the session itself is unaffected
    await session.aclose()


async def test_attaching_after_start_is_refused(tmp_path: Path) -> None:
    session: rj.AgentSession[Any] = rj.AgentSession(llm=ScriptedLLM([]))
    await session.start(rj.Agent(instructions="t"))
    with pytest.raises(RuntimeError, match=r"before session\.start"):
        SessionRecorder(session, tmp_path / "late.wav")
    assert not (tmp_path / "late.wav").exists()
    await session.aclose()


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_a_websocket_call_served_by_connection_serve_is_recorded(tmp_path: Path) -> None:
    """Connection.serve fills the slots just before start: the recorder, attached to the
    session before serve, still wraps them (real sockets, real time)."""
    import aiohttp
    from aiohttp.test_utils import TestServer

    from rejoinder.io import Connection, create_app
    from rejoinder.io.protocol import TranscriptMessage

    from .io._client import VoiceClient, scripted_session

    path = tmp_path / "ws.wav"
    make = scripted_session([["Hello there."]], ["Hi."], lambda: ScriptedTTS(seconds_per_char=0.03))
    closed = asyncio.Event()

    async def entrypoint(conn: Connection) -> None:
        session = make()
        SessionRecorder(session, path)
        session.on("close", lambda _: closed.set())
        await conn.serve(session, rj.Agent(instructions="test"))

    server = TestServer(create_app(entrypoint), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(server.make_url("/ws")) as ws:
            client = VoiceClient(ws, 16000)
            await client.start()
            await client.silence(0.2)
            await client.speak(speech_frame(0.6).to_pcm())
            await client.silence(0.5)
            await client.wait_for(
                lambda m: isinstance(m, TranscriptMessage) and m.role == "agent" and m.final, 10
            )
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            await client.close()
        await asyncio.wait_for(closed.wait(), 10)
    finally:
        await server.close()
    left, right = read_wav(path)
    [(said, said_end)] = runs(left)
    assert said_end - said == pytest.approx(0.6, abs=0.05)
    [(heard, heard_end)] = runs(right)
    assert heard_end - heard == pytest.approx(len("Hello there.") * 0.03, abs=0.05)
    assert heard > said_end  # the answer came after the question
    record = json.loads(path.with_suffix(".json").read_text())
    assert [m["content"] for m in record["history"]] == ["Hi.", "Hello there."]
