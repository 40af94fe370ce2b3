"""What a tool is to the session, whatever made it: ``Tool`` (a definition the model is
offered and a way to run one call) and ``Toolset`` (tools that can change while the
session runs, such as an MCP server's: the agent is offered the set's tools as they are
when each reply starts)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from ...models import ToolDefinition
from .run_context import RunContext


class Tool(ABC):
    """A tool the model can call. ``@function_tool`` makes them from functions; subclass
    it for tools described some other way (``invoke`` gets the model's JSON text and
    returns the value, or raises ``ToolError`` with what the model should be told)."""

    definition: ToolDefinition

    @property
    def name(self) -> str:
        return self.definition.name

    @abstractmethod
    async def invoke(self, context: RunContext[Any], raw_arguments: str) -> Any:
        """Run one call with the model-written arguments."""


class Toolset(ABC):
    """Tools that may change while the session runs; read when each reply starts."""

    @property
    @abstractmethod
    def tools(self) -> Sequence[Tool]:
        """The tools now."""


def expand(items: Iterable[Tool | Toolset]) -> list[Tool]:
    """The tools of ``items`` as they are now, toolsets opened in place."""
    tools: list[Tool] = []
    for item in items:
        if isinstance(item, Toolset):
            tools.extend(item.tools)
        else:
            tools.append(item)
    return tools
