"""assemblyai.STT passes the STT conformance suite over the loopback AssemblyAI server.

Its utterances share one long-lived session, and the server's faults apply per
connection: the suite scripts each fault on a recognizer that has not connected yet."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.stt import STT
from rejoinder.providers import assemblyai
from rejoinder.testing.assemblyai_server import AssemblyAIServer, Fault
from rejoinder.testing.conformance import STTConformance, STTHarness

KEY = "aai-test-key"
FRAME_BYTES = 640  # 20 ms at 16 kHz, 16-bit mono


class AssemblyAIHarness(STTHarness):
    # A silent server: recognize waits finalize_timeout for the utterance's turns to end
    # (no_words_timeout when no word came at all), then returns what it heard.
    stall_timeout = 2.0
    retries = 2

    def __init__(self, server: AssemblyAIServer) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> assemblyai.STT:
        return assemblyai.STT(
            api_key=KEY,
            base_url=self.server.base_url,
            finalize_timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
        )

    def attempts(self) -> int:
        return len(self.server.refused) + len(self.server.connections)

    def retries_of(self, stt: STT) -> int:
        assert isinstance(stt, assemblyai.STT)
        return stt.retries

    def transcript(self, text: str) -> None:
        self.server.add_transcripts(text)

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.refuse(503, times=times, message="Service overloaded.")
            return "503"
        self.server.refuse(401, times=times, message="Invalid API key")
        return "401"

    def drop_mid_utterance(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(Fault("drop", after_bytes=10 * FRAME_BYTES))

    def garbage(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(Fault("garbage", after_bytes=FRAME_BYTES))

    def stall(self, text: str) -> None:
        self.server.add_transcripts(text)
        self.server.add_faults(Fault("mute"))


class TestAssemblyAISTT(STTConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[AssemblyAIHarness]:
        async with AssemblyAIServer(api_key=KEY) as server:
            yield AssemblyAIHarness(server)
