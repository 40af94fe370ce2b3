"""elevenlabs.TTS passes the TTS conformance suite over the loopback stream-input server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.tts import TTS
from rejoinder.providers import elevenlabs
from rejoinder.testing.conformance import TTSConformance, TTSHarness
from rejoinder.testing.elevenlabs_server import (
    Cut,
    ElevenLabsServer,
    Garbage,
    Refuse,
    Stall,
)

KEY = "xi-test"


class ElevenLabsHarness(TTSHarness):
    stall_timeout = 5.0
    retries = 2

    def __init__(self, server: ElevenLabsServer) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> elevenlabs.TTS:
        return elevenlabs.TTS(
            voice_id="voice-1",
            api_key=KEY,
            base_url=self.server.base_url,
            timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
        )

    def attempts(self) -> int:
        return self.server.refused + len(self.server.connections)

    def retries_of(self, tts: TTS) -> int:
        assert isinstance(tts, elevenlabs.TTS)
        return tts.retries

    def _seconds(self, text: str) -> float:
        # The engine sends the words with single spaces and a space after the last one;
        # the server voices each character it got for seconds_per_char.
        return len(" ".join(text.split()) + " ") * self.server.seconds_per_char

    def speak(self, text: str, *, pace: float = 0.0) -> float:
        self.server.message_delay = pace
        return self._seconds(text)

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.script(*[Refuse(503)] * times)
            return "503"
        self.server.script(*[Refuse(401, "Invalid API key")] * times)
        return "401"

    def drop_before_audio(self, text: str) -> float:
        self.server.script(Cut(after=0))
        return self.speak(text)

    def drop_mid_audio(self, text: str) -> None:
        self.server.script(Cut(after=1))

    def garbage(self, text: str) -> float | None:
        self.server.script(Garbage(after=1))
        return self._seconds(text)

    def stall(self, text: str) -> None:
        self.server.script(Stall(after=1))


class TestElevenLabsTTS(TTSConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[ElevenLabsHarness]:
        async with ElevenLabsServer(api_key=KEY) as server:
            yield ElevenLabsHarness(server)
