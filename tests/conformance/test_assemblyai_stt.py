"""assemblyai.STT passes the STT conformance suite over the loopback AssemblyAI server.

Its utterances share one long-lived session, and the server's faults apply per
connection: the suite scripts each fault on a recognizer that has not connected yet.
A silent server: recognize waits finalize_timeout for the utterance's turns to end
(no_words_timeout when no word came at all), then returns what it heard."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.providers import assemblyai
from rejoinder.testing.assemblyai_server import AssemblyAIServer, Fault
from rejoinder.testing.conformance import STTConformance

from ._harnesses import ListenHarness

KEY = "aai-test-key"


class AssemblyAIHarness(ListenHarness):
    engine = assemblyai.STT
    key = KEY
    fault = Fault
    bad_key_message = "Invalid API key"


class TestAssemblyAISTT(STTConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[AssemblyAIHarness]:
        async with AssemblyAIServer(api_key=KEY) as server:
            yield AssemblyAIHarness(server)
