"""anthropic.LLM passes the LLM conformance suite over the loopback Messages server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models import Usage
from rejoinder.providers import anthropic
from rejoinder.testing.anthropic_server import (
    AnthropicServer,
    ErrorReply,
    RawData,
    StreamReply,
    ToolUse,
    message,
    message_start,
)
from rejoinder.testing.conformance import LLMConformance

from ._harnesses import ChatStreamHarness


class AnthropicHarness(ChatStreamHarness):
    def make(self) -> anthropic.LLM:
        return anthropic.LLM(
            model="claude-test",
            api_key="sk-ant-test",
            timeout=self.stall_timeout,
            **self._client_options(),
        )

    def reply_text(self, *chunks: str, usage: Usage | None = None) -> None:
        if usage is None:
            self.server.add(StreamReply(message(*chunks)))
            return
        events = message(
            *chunks, input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens
        )
        self.server.add(StreamReply(events))

    def reply_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        text = json.dumps(arguments)
        half = len(text) // 2
        self.server.add(StreamReply(message(ToolUse("toolu_1", name, text[:half], text[half:]))))

    def fail_before_output(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.add(*[ErrorReply(529, "Overloaded", "overloaded_error")] * times)
            return "529"
        self.server.add(*[ErrorReply(401, "invalid x-api-key", "authentication_error")] * times)
        return "401"

    def _streaming(self, *chunks: str) -> list[Any]:
        # message_start, and a text block streaming the chunks (not stopped).
        events: list[dict[str, Any]] = [
            message_start(),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ]
        return events + [
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
            for text in chunks
        ]

    def garbage(self, *chunks: str) -> None:
        events: list[Any] = message(*chunks, ping=False)
        # message_start, the block's start, the first delta: then an unreadable event
        events.insert(3, RawData("event: content_block_delta\ndata: {not json\n\n"))
        self.server.add(StreamReply(events))


class TestAnthropicLLM(LLMConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[AnthropicHarness]:
        async with AnthropicServer() as server:
            yield AnthropicHarness(server)
