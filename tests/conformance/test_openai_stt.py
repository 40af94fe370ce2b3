"""openai.STT passes the STT conformance suite over the loopback audio server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from rejoinder.models.stt import STT
from rejoinder.providers import openai
from rejoinder.testing.conformance import STTConformance, STTHarness
from rejoinder.testing.openai_audio_server import ErrorReply, OpenAIAudioServer, TranscriptReply

from ._harnesses import OverServer


class OpenAITranscriptionHarness(OverServer, STTHarness):
    stall_timeout = 5.0
    retries = 2

    def make(self) -> openai.STT:
        return openai.STT(api_key="sk-test", timeout=self.stall_timeout, **self._client_options())

    def attempts(self) -> int:
        return len(self.server.transcription_requests)

    def retries_of(self, stt: STT) -> int:
        assert isinstance(stt, openai.STT)
        return stt.retries

    def transcript(self, text: str) -> None:
        self.server.add_transcripts(TranscriptReply(text))

    def refuse(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.add_transcripts(*[ErrorReply(503, "Overloaded.", "server_error")] * times)
            return "503"
        self.server.add_transcripts(*[ErrorReply(401, "Incorrect API key provided.")] * times)
        return "401"

    def drop_mid_utterance(self, text: str) -> None:
        # Streamed: one delta, then the connection is cut (before transcript.text.done).
        self.server.add_transcripts(TranscriptReply(text, cut_after=1))

    def garbage(self, text: str) -> None:
        # A JSON body that is no transcription: the protocol has no room for garbage inside
        # its events that the server could script.
        self.server.add_transcripts(ErrorReply(200, body={"transcript?": text}))

    def stall(self, text: str) -> None:
        self.server.add_transcripts(TranscriptReply(text, chunk_delay=3600))


class TestOpenAISTT(STTConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[OpenAITranscriptionHarness]:
        async with OpenAIAudioServer() as server:
            yield OpenAITranscriptionHarness(server)
