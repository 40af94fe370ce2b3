"""The cloud voices are fallback-friendly: a provider that refuses (a bad key) or goes
away hands the utterance or the sentence to the next one in ``FallbackSTT`` /
``FallbackTTS``, over the real loopback servers, with nothing repeated and nothing
stuck. On virtual time."""

from __future__ import annotations

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.providers import deepgram, elevenlabs
from rejoinder.testing import DeepgramServer, ElevenLabsServer, ScriptedSTT, ScriptedTTS

pytestmark = pytest.mark.looptime(noop_cycles=200)


def speech(seconds: float = 1.0, rate: int = 16000) -> list[AudioFrame]:
    t = np.arange(round(seconds * rate)) / rate
    pcm = (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)
    silence = np.zeros(rate // 2, np.int16)
    data = np.concatenate([pcm, silence])
    step = rate // 50
    return [AudioFrame(data[i : i + step], rate) for i in range(0, data.size, step)]


async def test_a_refused_deepgram_key_hands_the_utterance_to_the_next_recognizer() -> None:
    async with DeepgramServer(api_key="right", transcripts=["never heard"]) as server:
        cloud = deepgram.STT(base_url=server.base_url, api_key="wrong", max_retries=2)
        backup = ScriptedSTT(["Hello from the backup."])
        stt = rj.FallbackSTT([cloud, backup], probe=False)
        try:
            assert await stt.recognize(speech()) == "Hello from the backup."
            assert server.refused == [401]  # refused once, not retried: a bad key
            assert not stt.available(cloud)
        finally:
            await stt.aclose()


async def test_a_deepgram_outage_is_retried_then_handed_over() -> None:
    async with DeepgramServer(api_key="k", transcripts=["never heard"]) as server:
        server.refuse(503, times=10)
        cloud = deepgram.STT(base_url=server.base_url, api_key="k", max_retries=2)
        stt = rj.FallbackSTT([cloud, ScriptedSTT(["From the backup."])], probe=False)
        try:
            assert await stt.recognize(speech()) == "From the backup."
            assert server.refused == [503, 503, 503]  # the first try and two retries
        finally:
            await stt.aclose()


async def test_a_refused_elevenlabs_key_hands_the_sentence_to_the_next_voice() -> None:
    async with ElevenLabsServer(api_key="right") as server:
        cloud = elevenlabs.TTS(
            voice_id="v", base_url=server.base_url, api_key="wrong", sample_rate=24000
        )
        backup = ScriptedTTS(sample_rate=24000)
        tts = rj.FallbackTTS([cloud, backup], probe=False)
        try:
            frames = [f async for f in tts.synthesize("Hello there.")]
            audio = [f for f in frames if isinstance(f, AudioFrame)]
            assert audio and sum(f.duration for f in audio) > 0
            assert backup.texts == ["Hello there."]
            assert server.connections == [] and not tts.available(cloud)
        finally:
            await tts.aclose()
