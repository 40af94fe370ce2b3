"""cartesia.TTS passes the TTS conformance suite over the loopback Cartesia server.

Its streams share one WebSocket, and the server's faults apply per connection: the suite
scripts each fault on an engine that has not connected yet, so the fault meets the
synthesis it is meant for."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.tts import TTS
from rejoinder.providers import cartesia
from rejoinder.testing.cartesia_server import CartesiaServer, Cut, Garbage, Refuse, Stall
from rejoinder.testing.conformance import TTSConformance, TTSHarness

KEY = "sk-cartesia-test"


class CartesiaHarness(TTSHarness):
    stall_timeout = 5.0
    retries = 2

    def __init__(self, server: CartesiaServer) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> cartesia.TTS:
        return cartesia.TTS(
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
        assert isinstance(tts, cartesia.TTS)
        return tts.retries

    def _seconds(self, text: str) -> float:
        # The server voices the transcript as sent, each character for seconds_per_char.
        return len(text) * self.server.seconds_per_char

    def speak(self, text: str, *, pace: float = 0.0) -> float:
        self.server.chunk_delay = pace
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


class TestCartesiaTTS(TTSConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[CartesiaHarness]:
        async with CartesiaServer(api_key=KEY) as server:
            yield CartesiaHarness(server)
