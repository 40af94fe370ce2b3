"""deepgram.STT passes the STT conformance suite over the loopback Deepgram server.

A silent server: recognize waits finalize_timeout for the final result after Finalize,
then returns what it heard (Deepgram's documented choice)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.providers import deepgram
from rejoinder.testing.conformance import STTConformance
from rejoinder.testing.deepgram_server import DeepgramServer, Fault

from ._harnesses import ListenHarness

KEY = "dg-test-key"


class DeepgramHarness(ListenHarness):
    engine = deepgram.STT
    key = KEY
    fault = Fault
    bad_key_message = "Invalid credentials."


class TestDeepgramSTT(STTConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[DeepgramHarness]:
        async with DeepgramServer(api_key=KEY) as server:
            yield DeepgramHarness(server)
