"""Provider-neutral model interfaces."""

from .chat import (
    AgentHandoff,
    ChatContext,
    ChatItem,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    Role,
)
from .fallback import FallbackLLM, FallbackSTT, FallbackTTS
from .llm import LLM, ChatChunk, LLMError, NamedToolChoice, ToolCallRequest, ToolChoice, Usage
from .tools import StopResponse, ToolDefinition, ToolError, ToolResult

__all__ = [
    "LLM",
    "AgentHandoff",
    "ChatChunk",
    "ChatContext",
    "ChatItem",
    "ChatMessage",
    "FallbackLLM",
    "FallbackSTT",
    "FallbackTTS",
    "FunctionCall",
    "FunctionCallOutput",
    "LLMError",
    "NamedToolChoice",
    "Role",
    "StopResponse",
    "ToolCallRequest",
    "ToolChoice",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "Usage",
]
