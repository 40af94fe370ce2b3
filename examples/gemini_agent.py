"""A text agent on Gemini (the Gemini API's streamGenerateContent), with a tool.

    GEMINI_API_KEY=... .venv/bin/python examples/gemini_agent.py "Weather in Oslo?"

Without ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``) it runs against
``rejoinder.testing.gemini_server.GeminiServer`` on 127.0.0.1, which answers as a Gemini
thinking model would (a signed function call, then the answer) and checks that the
follow-up request sends the call's thought signature back, so the sample runs anywhere.
It prints the reply, the tool calls and the model's token counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator

import rejoinder as rj
from rejoinder.providers import google
from rejoinder.testing.gemini_server import Call, GeminiServer, StreamReply, reply


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
async def gemini() -> AsyncIterator[google.LLM]:
    """The real API with a key; otherwise the loopback server, scripted like Gemini."""
    if os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY"):
        yield google.LLM(model=os.environ.get("GEMINI_MODEL", "gemini-2.5-flash"))
        return
    replies = [
        StreamReply(reply(Call("get_weather", {"city": "Oslo"}, signature="b2ZmbGluZQ=="))),
        StreamReply(
            reply(
                "It is 12 degrees with light rain in Oslo.", prompt_tokens=1100, cached_tokens=1024
            )
        ),
    ]
    async with GeminiServer(replies) as server:
        yield google.LLM(model="gemini-test", base_url=server.base_url, api_key="offline")


def print_tokens(event: rj.MetricsCollectedEvent) -> None:
    metrics = event.metrics
    if metrics["type"] == "llm":
        cached = metrics["cached_tokens"]
        print(f"tokens: {metrics['prompt_tokens']} in ({cached} cached), ", end="")
        print(f"{metrics['completion_tokens']} out")


async def main(question: str) -> str:
    async with gemini() as llm:
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
