"""deepgram.STT passes the STT conformance suite over the loopback Deepgram server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.stt import STT
from rejoinder.providers import deepgram
from rejoinder.testing.conformance import STTConformance, STTHarness
from rejoinder.testing.deepgram_server import DeepgramServer, Fault

KEY = "dg-test-key"
FRAME_BYTES = 640  # 20 ms at 16 kHz, 16-bit mono


class DeepgramHarness(STTHarness):
    # A silent server: recognize waits finalize_timeout for the final result after
    # Finalize, then returns what it heard (Deepgram's documented choice).
    stall_timeout = 2.0
    retries = 2

    def __init__(self, server: DeepgramServer) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> deepgram.STT:
        return deepgram.STT(
            api_key=KEY,
            base_url=self.server.base_url,
            finalize_timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
        )

    def attempts(self) -> int:
        return len(self.server.refused) + len(self.server.connections)

    def retries_of(self, stt: STT) -> int:
        assert isinstance(stt, deepgram.STT)
        return stt.retries

    def transcript(self, text: str) -> None:
        self.server.add_transcripts(text)

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.refuse(503, times=times, message="Service overloaded.")
            return "503"
        self.server.refuse(401, times=times, message="Invalid credentials.")
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


class TestDeepgramSTT(STTConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[DeepgramHarness]:
        async with DeepgramServer(api_key=KEY) as server:
            yield DeepgramHarness(server)
