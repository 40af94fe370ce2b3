"""openai.STT and openai.TTS against the loopback audio server, over real sockets on
127.0.0.1, on virtual time (see test_openai_chat.py for why the marker is enough)."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.models.stt import STTError
from rejoinder.models.tts import TTSError
from rejoinder.providers.openai.stt import STT, frames_to_wav
from rejoinder.providers.openai.tts import TTS
from rejoinder.testing import MemoryAudioOutput, ScriptedLLM
from rejoinder.testing.openai_audio_server import (
    CutConnection,
    ErrorReply,
    OpenAIAudioServer,
    SpeechReply,
    TranscriptReply,
    tone,
)

pytestmark = pytest.mark.looptime(noop_cycles=2000)

TEXT = "Hello, this is a test of the transcription."


@pytest.fixture
async def server() -> AsyncIterator[OpenAIAudioServer]:
    async with OpenAIAudioServer(api_key="sk-test") as srv:
        yield srv


def utterance(seconds: float = 0.5, rate: int = 16000) -> list[AudioFrame]:
    step = rate // 50
    samples = np.frombuffer(tone(seconds, sample_rate=rate), dtype="<i2").astype(np.int16)
    return [AudioFrame(samples[i : i + step], rate) for i in range(0, len(samples), step)]


def make_stt(server: OpenAIAudioServer, **options: Any) -> STT:
    options.setdefault("retry_backoff", 0.01)
    return STT(base_url=server.url, api_key="sk-test", **options)


def make_tts(server: OpenAIAudioServer, **options: Any) -> TTS:
    options.setdefault("retry_backoff", 0.01)
    return TTS(base_url=server.url, api_key="sk-test", **options)


async def all_frames(tts: TTS, text: str = "Say this.") -> list[AudioFrame]:
    return [item async for item in tts.synthesize(text) if isinstance(item, AudioFrame)]


async def collect(tts: TTS, frames: list[AudioFrame]) -> None:
    async for item in tts.synthesize("Long text."):
        if isinstance(item, AudioFrame):
            frames.append(item)


# -- STT ------------------------------------------------------------------------------------


def test_frames_to_wav_is_mono_16_bit_at_the_frames_rate() -> None:
    stereo = AudioFrame(np.array([100, 300, -100, -300], np.int16), 8000, num_channels=2)
    with wave.open(io.BytesIO(frames_to_wav([stereo])), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (8000, 1, 2)
        assert np.frombuffer(wav.readframes(2), "<i2").tolist() == [200, -200]
    with pytest.raises(ValueError, match="different sample rates"):
        frames_to_wav([stereo, AudioFrame.silence(0.01, 16000)])


async def test_transcription_plain_json(server: OpenAIAudioServer) -> None:
    server.add_transcripts(TranscriptReply(TEXT))
    stt = make_stt(server, stream=False, model="whisper-1", language="en")
    try:
        assert await stt.recognize(utterance(0.5)) == TEXT
    finally:
        await stt.aclose()
    [request] = server.transcription_requests
    assert request.fields == {"model": "whisper-1", "response_format": "json", "language": "en"}
    assert (request.sample_rate, request.num_channels, request.sample_width) == (16000, 1, 2)
    assert request.num_frames == 8000
    assert request.filename.endswith(".wav")
    assert request.headers["Authorization"] == "Bearer sk-test"


async def test_transcription_streamed_deltas(server: OpenAIAudioServer) -> None:
    server.add_transcripts(TranscriptReply(TEXT, chunk_delay=0.05))
    stt = make_stt(server)
    try:
        assert await stt.recognize(utterance(1.2, rate=24000)) == TEXT
    finally:
        await stt.aclose()
    [request] = server.transcription_requests
    assert request.fields["stream"] == "true"
    assert request.fields["model"] == "gpt-4o-mini-transcribe"
    assert request.sample_rate == 24000
    assert request.duration == pytest.approx(1.2)


async def test_transcription_retries_after_a_503(server: OpenAIAudioServer) -> None:
    server.add_transcripts(ErrorReply(503, "overloaded", "server_error"), TranscriptReply(TEXT))
    stt = make_stt(server)
    try:
        assert await stt.recognize(utterance()) == TEXT
        assert stt.retries == 1
    finally:
        await stt.aclose()
    assert len(server.transcription_requests) == 2


async def test_transcription_retries_a_stream_cut_before_done(server: OpenAIAudioServer) -> None:
    server.add_transcripts(
        TranscriptReply(TEXT, cut_after=2), CutConnection(), TranscriptReply(TEXT)
    )
    stt = make_stt(server)
    try:
        assert await stt.recognize(utterance()) == TEXT
        assert stt.retries == 2
    finally:
        await stt.aclose()


async def test_transcription_400_raises_with_the_message(server: OpenAIAudioServer) -> None:
    server.add_transcripts(ErrorReply(400, "Audio file is too short."))
    stt = make_stt(server)
    try:
        with pytest.raises(STTError, match=r"HTTP 400.*Audio file is too short") as caught:
            await stt.recognize(utterance())
        assert not caught.value.retryable
    finally:
        await stt.aclose()
    assert len(server.transcription_requests) == 1


async def test_transcription_wrong_key_is_a_401(server: OpenAIAudioServer) -> None:
    stt = STT(base_url=server.url, api_key="wrong")
    try:
        with pytest.raises(STTError, match=r"401.*Incorrect API key"):
            await stt.recognize(utterance())
    finally:
        await stt.aclose()


async def test_transcription_gives_up_after_the_retries(server: OpenAIAudioServer) -> None:
    server.add_transcripts(*[ErrorReply(429, "slow down")] * 3)
    stt = make_stt(server, max_retries=2)
    try:
        with pytest.raises(STTError, match=r"429.*slow down.*gave up after 2 retries") as caught:
            await stt.recognize(utterance())
        assert caught.value.retryable
    finally:
        await stt.aclose()


async def test_empty_utterance_sends_nothing(server: OpenAIAudioServer) -> None:
    stt = make_stt(server)
    assert await stt.recognize([]) == ""
    assert server.transcription_requests == []


# -- TTS ------------------------------------------------------------------------------------


async def test_tts_streams_20ms_frames_of_the_scripted_audio(server: OpenAIAudioServer) -> None:
    pcm = tone(1.01)
    server.add_speech(SpeechReply(pcm, chunk_size=1001, chunk_delay=0.01))
    tts = make_tts(server, instructions="Cheerful.")
    try:
        assert tts.sample_rate == 24000
        frames = await all_frames(tts, "Hello there.")
    finally:
        await tts.aclose()
    assert all(f.sample_rate == 24000 and f.num_channels == 1 for f in frames)
    assert all(f.data.dtype == np.int16 for f in frames)
    assert [f.samples_per_channel for f in frames[:-1]] == [480] * (len(frames) - 1)
    assert sum(f.duration for f in frames) == pytest.approx(1.01)
    assert b"".join(f.to_pcm() for f in frames) == pcm
    [body] = server.speech_requests
    assert body == {
        "model": "gpt-4o-mini-tts",
        "voice": "alloy",
        "input": "Hello there.",
        "response_format": "pcm",
        "instructions": "Cheerful.",
    }
    assert server.speech_headers[0]["Authorization"] == "Bearer sk-test"


async def test_tts_retries_after_a_503(server: OpenAIAudioServer) -> None:
    server.add_speech(ErrorReply(503, "busy"), SpeechReply(tone(0.2)))
    tts = make_tts(server)
    try:
        frames = await all_frames(tts)
        assert tts.retries == 1
    finally:
        await tts.aclose()
    assert sum(f.duration for f in frames) == pytest.approx(0.2)
    assert len(server.speech_requests) == 2


async def test_tts_cut_before_the_first_frame_is_retried(server: OpenAIAudioServer) -> None:
    server.add_speech(
        SpeechReply(tone(0.5), cut_after=501), CutConnection(), SpeechReply(tone(0.3))
    )
    tts = make_tts(server)
    try:
        frames = await all_frames(tts)
        assert tts.retries == 2
    finally:
        await tts.aclose()
    assert sum(f.duration for f in frames) == pytest.approx(0.3)


async def test_tts_400_raises_naming_the_message(server: OpenAIAudioServer) -> None:
    server.add_speech(ErrorReply(400, "Invalid voice 'nope'."))
    tts = make_tts(server, voice="nope")
    try:
        with pytest.raises(TTSError, match=r"HTTP 400.*Invalid voice 'nope'") as caught:
            await all_frames(tts)
        assert not caught.value.retryable
    finally:
        await tts.aclose()


async def test_tts_cut_mid_body_raises_promptly(server: OpenAIAudioServer) -> None:
    server.add_speech(SpeechReply(tone(2.0), cut_after=24000), SpeechReply(tone(2.0)))
    tts = make_tts(server, timeout=30.0)
    frames: list[AudioFrame] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(TTSError, match="connection lost") as caught:
            await collect(tts, frames)
        assert caught.value.retryable
    finally:
        await tts.aclose()
    assert loop.time() - started < 5.0  # not the 30 s read timeout
    assert 0 < sum(f.duration for f in frames) <= 0.5 + 1e-9
    assert len(server.speech_requests) == 1  # audio was yielded: no retry


async def test_tts_empty_text_sends_nothing(server: OpenAIAudioServer) -> None:
    tts = make_tts(server)
    assert await all_frames(tts, "  ") == []
    assert server.speech_requests == []


def test_tts_rejects_a_bad_speed() -> None:
    with pytest.raises(ValueError, match="speed"):
        TTS(speed=9.0, api_key="x")


# -- in a session ---------------------------------------------------------------------------


async def test_session_speaks_a_reply_through_openai_tts(server: OpenAIAudioServer) -> None:
    server.add_speech(SpeechReply(tone(0.8), chunk_delay=0.01))
    tts = TTS(base_url=server.url, api_key="sk-test")
    speaker = MemoryAudioOutput(24000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Here is my answer."]]), tts=tts, user_away_timeout=None
    )
    session.output.audio = speaker
    await session.start(rj.Agent(instructions="voice"))
    try:
        handle = session.generate_reply()
        await asyncio.wait_for(handle.wait_for_playout(), 10)
        assert speaker.played_seconds == pytest.approx(0.8)
        assert server.speech_requests[0]["input"] == "Here is my answer."
    finally:
        await session.aclose()
        await tts.aclose()
