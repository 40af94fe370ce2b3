"""openai.LLM passes the LLM conformance suite over the loopback Chat Completions server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from rejoinder.models import Usage
from rejoinder.providers import openai
from rejoinder.testing.conformance import LLMConformance
from rejoinder.testing.openai_chat_server import (
    ErrorReply,
    OpenAIChatServer,
    RawData,
    StreamReply,
    chunk,
    text_chunks,
    tool_call_delta,
    usage_chunk,
)

from ._harnesses import ChatStreamHarness


class OpenAIChatHarness(ChatStreamHarness):
    def make(self) -> openai.LLM:
        return openai.LLM(
            model="test-model",
            api_key="sk-test",
            timeout=openai.Timeout(connect=5, read=self.stall_timeout),
            **self._client_options(),
        )

    def reply_text(self, *chunks: str, usage: Usage | None = None) -> None:
        steps: list[Any] = text_chunks(*chunks)
        if usage is not None:
            steps.append(usage_chunk(usage.prompt_tokens, usage.completion_tokens))
        self.server.add(StreamReply(steps))

    def reply_tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        text = json.dumps(arguments)
        half = len(text) // 2
        self.server.add(
            StreamReply(
                [
                    chunk(role="assistant"),
                    chunk(tool_calls=[tool_call_delta(0, call_id="call_1", name=name)]),
                    chunk(tool_calls=[tool_call_delta(0, arguments=text[:half])]),
                    chunk(tool_calls=[tool_call_delta(0, arguments=text[half:])]),
                    chunk(finish_reason="tool_calls"),
                ]
            )
        )

    def fail_before_output(self, *, transient: bool, times: int = 1) -> str:
        if transient:
            self.server.add(*[ErrorReply(503, "The server is overloaded.", "server_error")] * times)
            return "503"
        self.server.add(*[ErrorReply(401, "Incorrect API key provided.")] * times)
        return "401"

    def _streaming(self, *chunks: str) -> list[Any]:
        return [chunk(role="assistant", content=""), *(chunk(content=text) for text in chunks)]

    def garbage(self, *chunks: str) -> None:
        steps: list[Any] = text_chunks(*chunks)  # the role chunk, one per delta, the finish
        steps.insert(2, RawData("data: {not json\n\n"))
        self.server.add(StreamReply(steps))


class TestOpenAILLM(LLMConformance):
    @pytest_asyncio.fixture
    async def harness(self) -> AsyncIterator[OpenAIChatHarness]:
        async with OpenAIChatServer() as server:
            yield OpenAIChatHarness(server)
