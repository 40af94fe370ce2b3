"""An agent whose tools come from an MCP server (``weather_server.py`` beside this file,
started over stdio).

    .venv/bin/python examples/mcp/agent.py "Weather in Oslo?"

With ``OPENAI_API_KEY`` the model is ``gpt-4o-mini`` (``OPENAI_MODEL`` to change it);
without, a scripted model that calls the server's tool and reads its answer, so the sample
runs anywhere (``pip install 'rejoinder[mcp]'``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import rejoinder as rj
from rejoinder.providers import openai
from rejoinder.testing import ScriptedLLM, ToolCall

SERVER = Path(__file__).resolve().parent / "weather_server.py"


def scripted(ctx: rj.ChatContext) -> list[Any]:
    """Calls get_weather for the last word of the question, then says what it answered."""
    last = ctx.items[-1]
    if isinstance(last, rj.FunctionCallOutput):
        return [last.output + "."]
    city = ctx.items[-1].content.rstrip("?.! ").split()[-1] if ctx.items else "Oslo"
    return [ToolCall("get_weather", {"city": city})]


def model() -> rj.LLM:
    if os.environ.get("OPENAI_API_KEY"):
        return openai.LLM(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    return ScriptedLLM(scripted)  # type: ignore[return-value]


async def main(question: str) -> str:
    async with rj.MCPServer.stdio(sys.executable, [str(SERVER)], timeout=10.0) as weather:
        print("tools:", [tool.name for tool in weather.tools])
        session: rj.AgentSession[None] = rj.AgentSession(llm=model(), user_away_timeout=None)
        await session.start(rj.Agent(instructions="Answer about the weather.", tools=[weather]))
        result = await session.run(user_input=question)
        await session.aclose()
    print(result.final_output)
    return str(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "What is the weather in Oslo?"))
