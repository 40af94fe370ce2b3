"""A real MCP server for the tests (the ``mcp`` package's ``MCPServer``): stdio by
default, streamable HTTP with ``--http PORT``."""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("weather")


@app.tool()
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"12 degrees and light rain in {city}"


@app.tool()
def fails(reason: str = "boom") -> str:
    """Always fails."""
    raise ValueError(reason)


@app.tool()
async def hang() -> str:
    """Never answers (for a minute)."""
    await asyncio.sleep(60)
    return "late"


@app.tool()
def die() -> str:
    """The server process exits mid-call."""
    os._exit(3)


@app.tool()
async def unlock(ctx: Context) -> str:
    """Adds the ``forecast`` tool and tells the clients their tool list changed."""

    def forecast(city: str, days: int = 3) -> str:
        """The forecast for a city."""
        return f"{days} days of sun in {city}"

    app.add_tool(forecast)
    await ctx.notify_tools_changed()  # clients of the 2026-07-28 protocol: listen events
    await ctx.session.send_tool_list_changed()  # older clients: a notification
    return "forecast unlocked"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
