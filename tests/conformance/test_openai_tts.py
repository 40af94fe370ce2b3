"""openai.TTS passes the TTS conformance suite over the loopback audio server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.tts import TTS
from rejoinder.providers import openai
from rejoinder.testing.conformance import TTSConformance, TTSHarness
from rejoinder.testing.openai_audio_server import ErrorReply, OpenAIAudioServer, SpeechReply, tone

from ._harnesses import OverServer

SECONDS = 0.5


class OpenAISpeechHarness(OverServer, TTSHarness):
    stall_timeout = 5.0
    retries = 2

    def make(self) -> openai.TTS:
        return openai.TTS(api_key="sk-test", timeout=self.stall_timeout, **self._client_options())

    def attempts(self) -> int:
        return len(self.server.speech_requests)

    def retries_of(self, tts: TTS) -> int:
        assert isinstance(tts, openai.TTS)
        return tts.retries

    def speak(self, text: str, *, pace: float = 0.0) -> float:
        self.server.add_speech(SpeechReply(tone(SECONDS), chunk_delay=pace))
        return SECONDS

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.add_speech(*[ErrorReply(503, "Overloaded.", "server_error")] * times)
            return "503"
        self.server.add_speech(*[ErrorReply(401, "Incorrect API key provided.")] * times)
        return "401"

    def drop_before_audio(self, text: str) -> float:
        self.server.add_speech(SpeechReply(tone(SECONDS), cut_after=0))
        return self.speak(text)

    def drop_mid_audio(self, text: str) -> None:
        self.server.add_speech(SpeechReply(tone(SECONDS), cut_after=9600))  # after 0.2 s

    def garbage(self, text: str) -> float | None:
        # Raw PCM has no framing to corrupt: the garbage is a JSON body instead of audio.
        self.server.add_speech(ErrorReply(200, body={"audio?": text}))
        return None

    def stall(self, text: str) -> None:
        self.server.add_speech(SpeechReply(tone(SECONDS), chunk_delay=3600))


class TestOpenAITTS(TTSConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[OpenAISpeechHarness]:
        async with OpenAIAudioServer() as server:
            yield OpenAISpeechHarness(server)
