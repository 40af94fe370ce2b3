"""google.LLM passes the LLM conformance suite over the loopback Gemini server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models import Usage
from rejoinder.providers import google
from rejoinder.testing.conformance import LLMConformance
from rejoinder.testing.gemini_server import (
    Call,
    ErrorReply,
    GeminiServer,
    RawData,
    StreamReply,
    chunk,
    reply,
)

from ._harnesses import ChatStreamHarness


class GeminiHarness(ChatStreamHarness):
    def make(self) -> google.LLM:
        return google.LLM(
            model="gemini-test",
            api_key="gemini-test-key",
            timeout=self.stall_timeout,
            **self._client_options(),
        )

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

    def _streaming(self, *chunks: str) -> list[Any]:
        # One event per delta, none with a finish reason.
        return [chunk({"text": text}) for text in chunks]

    def garbage(self, *chunks: str) -> None:
        events: list[Any] = reply(*chunks)
        events.insert(1, RawData("data: {not json\r\n\r\n"))
        self.server.add(StreamReply(events))


class TestGoogleLLM(LLMConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[GeminiHarness]:
        async with GeminiServer() as server:
            yield GeminiHarness(server)
