"""elevenlabs.TTS passes the TTS conformance suite over the loopback stream-input server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.providers import elevenlabs
from rejoinder.testing.conformance import TTSConformance
from rejoinder.testing.elevenlabs_server import ElevenLabsServer, Garbage

from ._harnesses import ToneHarness

KEY = "xi-test"


class ElevenLabsHarness(ToneHarness):
    engine = elevenlabs.TTS
    key = KEY
    garbage_step = Garbage

    def _seconds(self, text: str) -> float:
        # The engine sends the words with single spaces and a space after the last one;
        # the server voices each character it got for seconds_per_char.
        return len(" ".join(text.split()) + " ") * self.server.seconds_per_char

    def _set_pace(self, pace: float) -> None:
        self.server.message_delay = pace


class TestElevenLabsTTS(TTSConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[ElevenLabsHarness]:
        async with ElevenLabsServer(api_key=KEY) as server:
            yield ElevenLabsHarness(server)
