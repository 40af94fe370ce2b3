"""rj.MCPServer against real MCP servers (the mcp package's own, tests/mcp/weather_server.py)
over stdio and streamable HTTP on 127.0.0.1, in real time: tools listed and offered with
their schemas, filtered, called through the session's tool runner; a list change reaches
the next reply; a server that fails, hangs or dies gives the model a tool error and
never a stuck turn.

Starting the server costs about a second of imports: the tests that only list and call
share one (``shared_weather``, for the module); those that change its tools or kill it
start their own (``weather``)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("mcp", reason="MCP servers need the mcp extra")

import rejoinder as rj
from rejoinder.testing import ScriptedLLM, ToolCall

from .._samples import run_example

pytestmark = [
    pytest.mark.looptime(False),
    pytest.mark.timeout(60),
    # the shared server's connection belongs to the module's loop
    pytest.mark.asyncio(loop_scope="module"),
]

SERVER = Path(__file__).resolve().parent / "weather_server.py"


def stdio(**options: Any) -> rj.MCPServer:
    return rj.MCPServer.stdio(sys.executable, [str(SERVER)], **options)


@pytest_asyncio.fixture(loop_scope="module")
async def weather() -> AsyncIterator[rj.MCPServer]:
    """A server of the test's own: for tests that add a tool or kill it."""
    async with stdio(timeout=1.5) as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_weather() -> AsyncIterator[rj.MCPServer]:
    """The module's server, for tests that only list its tools and call them (a call left
    hanging on the server does not keep it from answering the next)."""
    async with stdio(timeout=1.5) as server:
        yield server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the HTTP MCP server did not start")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def test_tools_are_listed_with_their_schemas(shared_weather: rj.MCPServer) -> None:
    tools = {t.name: t for t in shared_weather.tools}
    assert set(tools) == {"get_weather", "fails", "hang", "die", "unlock"}
    schema = tools["get_weather"].definition.parameters
    assert schema["properties"]["city"]["type"] == "string" and schema["required"] == ["city"]
    assert tools["get_weather"].definition.description == "The current weather in a city."
    assert shared_weather.connected


async def test_allowed_tools_filters_what_is_offered() -> None:
    async with stdio(allowed_tools={"get_weather"}) as server:
        assert [t.name for t in server.tools] == ["get_weather"]


async def test_calls_answer_and_errors_are_tool_errors(shared_weather: rj.MCPServer) -> None:
    assert await shared_weather.call("get_weather", {"city": "Oslo"}) == (
        "12 degrees and light rain in Oslo"
    )
    with pytest.raises(rj.ToolError, match="fails"):
        await shared_weather.call("fails", {"reason": "no"})
    with pytest.raises(rj.ToolError, match="city"):  # the server checks the arguments
        await shared_weather.call("get_weather", {"town": "Oslo"})


async def test_a_hanging_server_is_a_tool_error_after_the_timeout(
    shared_weather: rj.MCPServer,
) -> None:
    started = time.monotonic()
    with pytest.raises(rj.ToolError, match=r"did not answer hang within 1\.5 s"):
        await shared_weather.call("hang", {})
    assert 1.4 < time.monotonic() - started < 4.5
    # the connection still serves other calls
    assert "Bergen" in await shared_weather.call("get_weather", {"city": "Bergen"})


async def test_a_server_that_dies_fails_each_call_at_once(weather: rj.MCPServer) -> None:
    with pytest.raises(rj.ToolError):
        await weather.call("die", {})
    started = time.monotonic()
    with pytest.raises(rj.ToolError, match="MCP server"):
        await weather.call("get_weather", {"city": "Oslo"})
    assert time.monotonic() - started < 1.5


async def test_a_server_that_cannot_start_is_a_clear_error() -> None:
    server = rj.MCPServer.stdio(sys.executable, ["-c", "import sys; sys.exit(2)"], name="broken")
    with pytest.raises(rj.MCPServerError, match="broken"):
        await server.connect()
    assert server.tools == [] and not server.connected
    silent = rj.MCPServer.stdio(
        sys.executable, ["-c", "import time; time.sleep(30)"], name="mute", connect_timeout=0.5
    )
    started = time.monotonic()
    with pytest.raises(rj.MCPServerError, match=r"mute did not answer within 0\.5 s"):
        await silent.connect()
    assert time.monotonic() - started < 7


async def wait_for_tool(server: rj.MCPServer, name: str) -> None:
    for _ in range(100):  # the change comes on its own, then the list is read again
        if name in [t.name for t in server.tools]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never appeared: {server.tools}")


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_list_change_is_listed_again(protocol: str) -> None:
    # auto: the 2026-07-28 protocol's listen stream; legacy: the notification
    async with stdio(protocol=protocol) as server:
        assert "forecast" not in [t.name for t in server.tools]
        assert await server.call("unlock", {}) == "forecast unlocked"
        await wait_for_tool(server, "forecast")


async def test_the_server_over_streamable_http(http_url: str) -> None:
    async with rj.MCPServer.http(http_url, headers={"X-Test": "1"}, timeout=1.5) as server:
        assert "get_weather" in [t.name for t in server.tools]
        assert "Rome" in await server.call("get_weather", {"city": "Rome"})
        with pytest.raises(rj.ToolError, match="did not answer"):
            await server.call("hang", {})


# -- in a session ---------------------------------------------------------------------------


def model(ctx: rj.ChatContext) -> list[Any]:
    """Calls what the user names ("tool:name:json"), then says the last tool output."""
    last = ctx.items[-1]
    if isinstance(last, rj.ChatMessage) and last.role == "user":
        _, name, arguments = last.content.split(":", 2)
        return [ToolCall(name, json.loads(arguments))]
    if isinstance(last, rj.FunctionCallOutput):
        return [("error: " if last.is_error else "result: ") + last.output]
    return ["?"]


async def session_with(*tools: Any) -> rj.AgentSession[None]:
    session: rj.AgentSession[None] = rj.AgentSession(
        llm=ScriptedLLM(model),  # type: ignore[arg-type]
        user_away_timeout=None,
    )
    await session.start(rj.Agent(instructions="weather", tools=list(tools)))
    return session


async def test_a_session_calls_the_servers_tools_and_sees_a_list_change(
    weather: rj.MCPServer,
) -> None:
    session = await session_with(weather)
    result = await session.run(user_input='tool:get_weather:{"city": "Oslo"}')
    assert result.final_output == "result: 12 degrees and light rain in Oslo"
    result = await session.run(user_input="tool:forecast:{}")
    assert result.final_output == "error: unknown tool 'forecast'"
    result = await session.run(user_input="tool:unlock:{}")
    assert result.final_output == "result: forecast unlocked"
    await wait_for_tool(weather, "forecast")
    result = await session.run(user_input='tool:forecast:{"city": "Oslo", "days": 2}')
    assert result.final_output == "result: 2 days of sun in Oslo"
    await session.aclose()


async def test_a_session_whose_server_hangs_or_dies_goes_on(weather: rj.MCPServer) -> None:
    session = await session_with(weather)
    result = await session.run(user_input="tool:hang:{}")
    assert "did not answer hang within 1.5 s" in str(result.final_output)
    assert session.agent_state == "listening"
    result = await session.run(user_input="tool:die:{}")
    assert str(result.final_output).startswith("error: ")
    result = await session.run(user_input='tool:get_weather:{"city": "Oslo"}')
    assert str(result.final_output).startswith("error: the MCP server")
    assert session.agent_state == "listening"
    await session.aclose()


async def test_the_sample_runs_with_its_own_server() -> None:
    out = await asyncio.to_thread(run_example, "mcp/agent.py", "Weather in Bergen?")
    assert out.splitlines() == ["tools: ['get_weather']", "12 degrees and light rain in Bergen."]
