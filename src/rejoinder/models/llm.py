"""The LLM interface: a chat context and tools in, a stream of text deltas and tool calls out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from typing import Literal, TypeAlias

from .._dataclass import dataclass
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
    """Token counts of one generation, as the provider reported them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    """Prompt tokens served from the provider's prompt cache, when it reports them."""


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """Who produced a stream and what it took to get it, carried by its first chunk (a
    provider may leave it out). The session's ``LLMMetrics`` are built from it."""

    model: str | None = None
    provider: str | None = None
    label: str | None = None
    """The implementing class (``package.module.Class``)."""
    retries: int = 0
    """Transient failures retried before this stream's first chunk."""
    fallback_from: str | None = None
    """Behind a fallback: the model that was tried first and failed."""


@dataclass(frozen=True, slots=True)
class ChatChunk:
    """One piece of a chat model's streamed reply: the next text (``delta``), tool
    calls the model completed (``tool_calls``, each whole once its arguments are),
    token counts, or who produced the stream."""

    delta: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage | None = None
    """The generation's token counts, normally on the last chunk."""
    info: StreamInfo | None = None
    """On the first chunk: which model produced the stream, with how many retries."""


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
