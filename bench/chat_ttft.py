"""Time to first token of the chat clients through their loopback servers, tools on.

    python bench/chat_ttft.py [--requests 200] [--tools 8]

Each client (``anthropic.LLM`` against ``AnthropicServer``, ``google.LLM`` against
``GeminiServer``, ``openai.LLM`` against ``OpenAIChatServer``, all on 127.0.0.1 in this
process) sends ``--requests`` requests one
after another, each with a short conversation (a system prompt, an earlier tool call and
its result, the user's question) and ``--tools`` tools offered; the server answers at
once with a few text deltas. Measured: from ``chat()`` to the first text delta, and the
whole reply, on the real clock; the first 10 requests warm up. What it shows is the
client's own cost (request building, the HTTP round trip on loopback, the stream
parsing), not a model's: a real API adds its own time to first token on top. Prints one
JSON line per client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

from rejoinder.models import ChatChunk, ChatContext, ToolDefinition
from rejoinder.models.chat import FunctionCall, FunctionCallOutput
from rejoinder.providers import anthropic, google, openai
from rejoinder.testing.anthropic_server import AnthropicServer, message
from rejoinder.testing.gemini_server import GeminiServer, reply
from rejoinder.testing.openai_chat_server import OpenAIChatServer, StreamReply, text_chunks

WARMUP = 10
REPLY = ("The weather", " in Oslo is", " twelve degrees", " and rainy.")


def conversation() -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="system", content="You are a concise weather assistant. " * 20)
    ctx.add_message(role="user", content="What about Bergen?")
    ctx.items.append(FunctionCall(call_id="call_1", name="tool_0", arguments='{"city": "Bergen"}'))
    ctx.items.append(FunctionCallOutput(call_id="call_1", name="tool_0", output="9 degrees"))
    ctx.add_message(role="assistant", content="Bergen has 9 degrees.")
    ctx.add_message(role="user", content="And Oslo?")
    return ctx


def tools(n: int) -> list[ToolDefinition]:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    }
    return [
        ToolDefinition(f"tool_{i}", f"Tool number {i} for the weather.", schema) for i in range(n)
    ]


async def timed(stream: AsyncIterator[ChatChunk]) -> tuple[float, float]:
    start = time.perf_counter()
    first: float | None = None
    async for chunk in stream:
        if first is None and chunk.delta:
            first = time.perf_counter()
    end = time.perf_counter()
    if first is None:
        raise RuntimeError("no text came")
    return first - start, end - start


async def run(
    name: str, llm: Any, requests: int, offered: list[ToolDefinition]
) -> dict[str, object]:
    ctx = conversation()
    firsts: list[float] = []
    wholes: list[float] = []
    for i in range(WARMUP + requests):
        first, whole = await timed(llm.chat(ctx, offered))
        if i >= WARMUP:
            firsts.append(first * 1000)
            wholes.append(whole * 1000)
    await llm.aclose()
    firsts.sort()
    return {
        "bench": "chat_ttft",
        "client": name,
        "requests": requests,
        "tools": len(offered),
        "first_token_ms": {
            "median": round(statistics.median(firsts), 3),
            "p90": round(firsts[int(0.9 * len(firsts))], 3),
        },
        "whole_reply_ms_median": round(statistics.median(wholes), 3),
    }


async def bench(requests: int, n_tools: int) -> list[dict[str, object]]:
    offered = tools(n_tools)
    total = WARMUP + requests
    results = []
    async with AnthropicServer(lambda _: StreamReply(message(*REPLY))) as server:
        llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="k")
        results.append(await run("anthropic.LLM", llm, requests, offered))
        assert len(server.requests) == total
    async with GeminiServer(lambda _: StreamReply(reply(*REPLY))) as server:
        llm = google.LLM(model="gemini-test", base_url=server.base_url, api_key="k")
        results.append(await run("google.LLM", llm, requests, offered))
        assert len(server.requests) == total and server.rejected == []
    async with OpenAIChatServer(lambda _: StreamReply(text_chunks(*REPLY))) as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="k")
        results.append(await run("openai.LLM", llm, requests, offered))
        assert len(server.requests) == total
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tools", type=int, default=8)
    args = parser.parse_args()
    for result in asyncio.run(bench(args.requests, args.tools)):
        print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
