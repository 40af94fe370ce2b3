"""What a model needs to know about a tool, and the values a tool can produce.

The executable side (the ``function_tool`` decorator, argument validation, ``RunContext``)
lives in ``rejoinder.session.tools.function_tool``; providers only ever see ``ToolDefinition``.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .._dataclass import dataclass


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What a model is told about a tool: its name, what it does, and the JSON schema
    of its arguments (``function_tool`` builds it from the type hints and docstring)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema of the arguments object."""


class ToolError(Exception):
    """Raise from a tool to report an error to the model (the conversation goes on)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class StopResponse(Exception):
    """Raise from ``Agent.on_user_turn_completed`` to suppress the reply to that turn."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool's return value with an explicit choice about the follow-up reply."""

    output: Any
    reply_required: bool = True
