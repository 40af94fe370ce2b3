"""MCP tool servers as tools of an agent: ``rj.MCPServer.stdio(...)`` and
``rj.MCPServer.http(url)``.

    async with rj.MCPServer.stdio("python", ["weather_server.py"]) as weather:
        agent = rj.Agent(instructions="...", tools=[weather])

The server is a ``Toolset``: its tools (``allowed_tools`` filters them by name) are
offered to the model with the schemas the server gives, and a reply offers them as they
are when it starts, so a server that says its tool list changed
(``notifications/tools/list_changed``, or a ``subscriptions/listen`` event on servers of
the 2026-07-28 protocol) is listed again and the next reply sees the change. A call runs
through the session's tool runner like any tool (an obligation, cancelled with its
reply) and is bounded by ``timeout``: a server that hangs, dies or answers with an
error gives the model a tool error, never a stuck turn. The connection is opened by
``connect()`` (or ``async with``) and closed by ``aclose()``; a server that died stays
dead (its calls fail with a clear error) until it is connected again.

Built on the ``mcp`` package (``pip install 'rejoinder[mcp]'``), imported when a server
connects.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from . import _extras
from .models import ToolDefinition, ToolError
from .session.tools.function_tool import arguments_object
from .session.tools.run_context import RunContext
from .session.tools.tool import Tool, Toolset

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["MCPServer", "MCPServerError"]

logger = logging.getLogger("rejoinder.mcp")


@dataclass(frozen=True, slots=True)
class _Stdio:
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None


@dataclass(frozen=True, slots=True)
class _HTTP:
    url: str
    headers: dict[str, str]


class MCPServerError(RuntimeError):
    """The server could not be connected, or it is not connected."""


class MCPServer(Toolset):
    """One MCP server's tools (see the module). Make one with ``stdio`` or ``http``."""

    def __init__(
        self,
        target: _Stdio | _HTTP,
        *,
        name: str,
        allowed_tools: Collection[str] | None,
        timeout: float,
        connect_timeout: float,
        protocol: str,
    ) -> None:
        if timeout <= 0 or connect_timeout <= 0:
            raise ValueError("timeout and connect_timeout must be positive")
        if protocol not in ("auto", "legacy"):
            raise ValueError("protocol must be 'auto' or 'legacy'")
        self.protocol = protocol
        self._target = target
        self.name = name
        self._allowed = None if allowed_tools is None else frozenset(allowed_tools)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._client: Client | None = None
        self._owner: asyncio.Task[None] | None = None
        self._tools: list[Tool] = []
        self._gone: str | None = None
        """Why the connection ended, once it did."""
        self._refreshing: asyncio.Task[None] | None = None

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        allowed_tools: Collection[str] | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        protocol: str = "auto",
    ) -> MCPServer:
        """A server the session starts as a process and talks to over its stdin/stdout.

        Args:
            command: the program (``python``, ``npx``, ``uvx``, ...).
            args: its arguments.
            env: added to the process's environment.
            cwd: its working directory.
            name: how errors name it (default: the command and its first argument).
            allowed_tools: offer only these of its tools (default: all).
            timeout: seconds a tool call may take before the model is told it failed.
            connect_timeout: seconds to start it and list its tools.
            protocol: ``"auto"`` (ask the server which protocol it speaks, falling back
                to the initialize handshake of servers before 2026-07-28) or ``"legacy"``
                (the handshake at once).
        """
        target = _Stdio(command, list(args), dict(env or {}), cwd)
        label = name or " ".join([command, *args[:1]])
        return cls(
            target,
            name=label,
            allowed_tools=allowed_tools,
            timeout=timeout,
            connect_timeout=connect_timeout,
            protocol=protocol,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        allowed_tools: Collection[str] | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        protocol: str = "auto",
    ) -> MCPServer:
        """A server reached over streamable HTTP at ``url`` (``.../mcp``); ``headers`` go
        with every request (``Authorization``). The other arguments as for ``stdio``."""
        target = _HTTP(url, dict(headers or {}))
        return cls(
            target,
            name=name or url,
            allowed_tools=allowed_tools,
            timeout=timeout,
            connect_timeout=connect_timeout,
            protocol=protocol,
        )

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, tools={[t.name for t in self._tools]})"

    # -- Toolset ----------------------------------------------------------------------------

    @property
    def tools(self) -> Sequence[Tool]:
        """The server's tools as last listed (none before ``connect``)."""
        return self._tools

    @property
    def connected(self) -> bool:
        return self._client is not None and self._gone is None

    # -- lifecycle --------------------------------------------------------------------------

    async def connect(self) -> None:
        """Start or reach the server and list its tools; ``MCPServerError`` if it does not
        answer within ``connect_timeout``. Connecting a connected server does nothing."""
        if self._owner is not None and not self._owner.done():
            return
        self._gone = None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # One task owns the connection from start to end: the mcp client's task groups
        # must be entered and left in the same task.
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp {self.name}")
        try:
            async with asyncio.timeout(self.connect_timeout):
                await asyncio.shield(ready)
        except TimeoutError:
            await self.aclose()
            raise MCPServerError(
                f"the MCP server {self.name} did not answer within {self.connect_timeout:g} s"
            ) from None
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the connection (the process of a stdio server ends with it). Idempotent."""
        owner, self._owner = self._owner, None
        for task in (self._refreshing, owner):
            if task is not None and not task.done():
                task.cancel()
        if owner is not None:
            await asyncio.wait({owner}, timeout=5.0)
        self._client = None

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _own(self, ready: asyncio.Future[None]) -> None:
        try:
            mcp = _require_mcp()
            client_of = mcp.Client(
                self._transport(), message_handler=self._on_message, mode=self.protocol
            )
            async with client_of as client:
                self._client = client
                await self._list_tools()
                ready.set_result(None)
                await self._follow_changes(client)
                self._gone = "the server ended the connection"
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the process died, the URL failed, garbage came
            self._gone = _describe(exc)
            if not ready.done():
                ready.set_exception(
                    MCPServerError(f"cannot connect to the MCP server {self.name}: {self._gone}")
                )
            else:
                logger.warning("the MCP server %s is gone: %s", self.name, self._gone)
        finally:
            self._client = None

    def _transport(self) -> Any:
        mcp = _require_mcp()
        target = self._target
        if isinstance(target, _Stdio):
            return mcp.StdioServerParameters(
                command=target.command, args=target.args, env=target.env or None, cwd=target.cwd
            )
        if not target.headers:
            return target.url
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=target.headers)
        return streamable_http_client(target.url, http_client=client)

    async def _follow_changes(self, client: Client) -> None:
        """Servers of the 2026-07-28 protocol report changes on a listen stream; older ones
        send notifications (``_on_message``). Returns when the connection ends."""
        from mcp.client.subscriptions import ListenNotSupportedError

        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._list_tools()
        except ListenNotSupportedError:
            await asyncio.Event().wait()  # notifications come through _on_message

    async def _on_message(self, message: object) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.create_task(self._refresh())
        elif isinstance(message, Exception):
            logger.warning("the MCP server %s sent something unreadable: %s", self.name, message)

    async def _refresh(self) -> None:
        try:
            await self._list_tools()
        except Exception as exc:
            logger.warning("listing the tools of the MCP server %s failed: %s", self.name, exc)

    async def _list_tools(self) -> None:
        client = self._client
        if client is None:
            return
        async with asyncio.timeout(self.timeout):
            listed = await client.list_tools()
        tools: list[Tool] = []
        for tool in listed.tools:
            if self._allowed is not None and tool.name not in self._allowed:
                continue
            definition = ToolDefinition(
                name=tool.name,
                description=tool.description or "",
                parameters=dict(tool.input_schema or {"type": "object", "properties": {}}),
            )
            tools.append(MCPTool(self, definition))
        self._tools = tools
        logger.info("MCP server %s offers %s", self.name, [t.name for t in tools])

    # -- calls ------------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call a tool of the server; its text, or ``ToolError`` (what the model is told)."""
        client = self._client
        if client is None or self._gone is not None:
            why = self._gone or "not connected"
            raise ToolError(f"the MCP server {self.name} is unavailable ({why})")
        try:
            async with asyncio.timeout(self.timeout):
                result = await client.call_tool(name, arguments)
        except TimeoutError:
            raise ToolError(
                f"the MCP server {self.name} did not answer {name} within {self.timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise ToolError(f"the MCP server {self.name} failed: {_describe(exc)}") from None
        text = _result_text(result)
        if getattr(result, "is_error", False):
            raise ToolError(text or f"{name} failed on the MCP server {self.name}")
        return text


class MCPTool(Tool):
    """One tool of an MCP server: the model's arguments go to the server as they are (it
    checks them against its schema and says what is wrong)."""

    def __init__(self, server: MCPServer, definition: ToolDefinition) -> None:
        self.server = server
        self.definition = definition

    def __repr__(self) -> str:
        return f"<MCPTool {self.name} of {self.server.name}>"

    async def invoke(self, context: RunContext[Any], raw_arguments: str) -> Any:
        return await self.server.call(self.name, arguments_object(self.name, raw_arguments))


def _result_text(result: Any) -> str:
    """A call result as the text the model reads: its text parts; other parts named."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or ():
        kind = getattr(item, "type", None)
        if kind == "text":
            parts.append(str(item.text))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({getattr(item, 'mime_type', None) or 'unknown type'})]")
        elif kind is not None:
            parts.append(f"[{kind}]")
    if not parts:
        structured = getattr(result, "structured_content", None)
        if structured is not None:
            try:
                return json.dumps(structured)
            except (TypeError, ValueError):
                return str(structured)
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _require_mcp() -> Any:
    with _extras.needed("mcp", "MCP servers", error=MCPServerError):
        import mcp
    return mcp
