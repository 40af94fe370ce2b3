"""A text agent on Claude (Anthropic Messages), with a tool.

    ANTHROPIC_API_KEY=sk-ant-... .venv/bin/python examples/claude_agent.py "Weather in Oslo?"

Without ``ANTHROPIC_API_KEY`` it runs against ``rejoinder.testing.AnthropicServer`` on
127.0.0.1, which answers as Claude would (a tool call, then the answer), so the sample
runs anywhere. It prints the reply, the tool calls and the model's token counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator

import rejoinder as rj
from rejoinder.providers import anthropic
from rejoinder.testing.anthropic_server import AnthropicServer, StreamReply, ToolUse, message


class WeatherDesk(rj.Agent):
    instructions = "You answer questions about the weather in one short sentence."

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        """The current weather in a city.

        Args:
            city: the city's name
        """
        return f"12 degrees and light rain in {city}"


@contextlib.asynccontextmanager
async def claude() -> AsyncIterator[anthropic.LLM]:
    """The real API with a key; otherwise the loopback server, scripted like Claude."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        yield anthropic.LLM(model=os.environ.get("CLAUDE_MODEL", "claude-sonnet-4-5"))
        return
    replies = [
        StreamReply(
            message("Let me check.", ToolUse("toolu_1", "get_weather", '{"city": "Oslo"}'))
        ),
        StreamReply(message("It is 12 degrees with light rain in Oslo.", cache_read=1024)),
    ]
    async with AnthropicServer(replies) as server:
        yield anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="offline")


def print_tokens(event: rj.MetricsCollectedEvent) -> None:
    metrics = event.metrics
    if metrics["type"] == "llm":
        cached = metrics["cached_tokens"]
        print(f"tokens: {metrics['prompt_tokens']} in ({cached} cached), ", end="")
        print(f"{metrics['completion_tokens']} out")


async def main(question: str) -> str:
    async with claude() as llm:
        session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
        session.on(
            "function_tools_executed",
            lambda ev: print("tools:", [c.name for c in ev.function_calls]),
        )
        session.on("metrics_collected", print_tokens)
        await session.start(WeatherDesk())
        result = await session.run(user_input=question)
        await session.aclose()
    print(result.final_output)
    return str(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What is the weather in Oslo?"))
