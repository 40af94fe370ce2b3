"""A small MCP server with one tool, for ``agent.py`` beside it (run by it over stdio)."""

from mcp.server.mcpserver import MCPServer

app = MCPServer("weather")


@app.tool()
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"12 degrees and light rain in {city}"


if __name__ == "__main__":
    app.run()
