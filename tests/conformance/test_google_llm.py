"""google.LLM passes the LLM conformance suite over the loopback Gemini server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models import Usage
from rejoinder.providers import google
from rejoinder.testing.conformance import LLMConformance, LLMHarness
from rejoinder.testing.gemini_server import (
    Call,
    CutConnection,
    ErrorReply,
    GeminiServer,
    Pause,
    RawData,
    StreamReply,
    chunk,
    reply,
)


def _text_chunks(*chunks: str) -> list[Any]:
    """One event per delta, none with a finish reason (a reply still streaming)."""
    return [chunk({"text": text}) for text in chunks]


class GeminiHarness(LLMHarness):
    stall_timeout = 5.0
    retries = 2

    def __init__(self, server: GeminiServer) -> None:
        self.server = server

    @property
    def server_port(self) -> int:
        return self.server.port

    def make(self) -> google.LLM:
        return google.LLM(
            model="gemini-test",
            api_key="gemini-test-key",
            base_url=self.server.base_url,
            timeout=self.stall_timeout,
            max_retries=self.retries,
            retry_backoff=0.01,
        )

    def attempts(self) -> int:
        return len(self.server.requests)

    def reply_text(self, *chunks: str, usage: Usage | None = None) -> None:
        if usage is None:
            self.server.add(StreamReply(reply(*chunks)))
            return
        events = reply(
            *chunks, prompt_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens
        )
        self.server.add(StreamReply(events))

    def reply_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        # Gemini sends a call's arguments whole, as an object.
        self.server.add(StreamReply(reply(Call(name, arguments))))

    def fail_before_output(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.add(*[ErrorReply(503, "The model is overloaded.", "UNAVAILABLE")] * times)
            return "503"
        refused = ErrorReply(403, "The caller does not have permission.", "PERMISSION_DENIED")
        self.server.add(*[refused] * times)
        return "403"

    def cut_mid_stream(self, *chunks: str) -> None:
        self.server.add(StreamReply([*_text_chunks(*chunks), CutConnection()]))

    def garbage(self, *chunks: str) -> None:
        events: list[Any] = reply(*chunks)
        events.insert(1, RawData("data: {not json\r\n\r\n"))
        self.server.add(StreamReply(events))

    def stall(self, *chunks: str) -> None:
        self.server.add(StreamReply([*_text_chunks(*chunks), Pause(3600)]))


class TestGoogleLLM(LLMConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[GeminiHarness]:
        async with GeminiServer() as server:
            yield GeminiHarness(server)
