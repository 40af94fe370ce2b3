"""The LLM interface: a chat context and tools in, a stream of text deltas and tool calls out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .chat import ChatContext
from .tools import ToolDefinition


@dataclass(frozen=True, slots=True)
class NamedToolChoice:
    name: str


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | NamedToolChoice


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One complete tool call from the model (a provider assembles streamed fragments)."""

    call_id: str
    name: str
    arguments: str
    """Raw JSON text as the model wrote it; validated by the tool executor, not here."""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChatChunk:
    delta: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage | None = None


class LLMError(Exception):
    """A provider failed to produce a reply. ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class LLM(ABC):
    """A chat model. ``chat`` must not block: the work happens while the stream is iterated."""

    @property
    def model(self) -> str:
        return type(self).__name__

    @property
    def provider(self) -> str:
        return "unknown"

    @abstractmethod
    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        """Stream the reply. Raise ``LLMError`` (while iterating) on provider failure."""

    async def aclose(self) -> None:  # noqa: B027 - most models hold nothing to release
        """Release connections. Idempotent."""
