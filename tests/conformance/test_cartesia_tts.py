"""cartesia.TTS passes the TTS conformance suite over the loopback Cartesia server.

Its streams share one WebSocket, and the server's faults apply per connection: the suite
scripts each fault on an engine that has not connected yet, so the fault meets the
synthesis it is meant for."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.providers import cartesia
from rejoinder.testing.cartesia_server import CartesiaServer, Garbage
from rejoinder.testing.conformance import TTSConformance

from ._harnesses import ToneHarness

KEY = "sk-cartesia-test"


class CartesiaHarness(ToneHarness):
    engine = cartesia.TTS
    key = KEY
    garbage_step = Garbage

    def _seconds(self, text: str) -> float:
        # The server voices the transcript as sent, each character for seconds_per_char.
        return len(text) * self.server.seconds_per_char

    def _set_pace(self, pace: float) -> None:
        self.server.chunk_delay = pace


class TestCartesiaTTS(TTSConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[CartesiaHarness]:
        async with CartesiaServer(api_key=KEY) as server:
            yield CartesiaHarness(server)
