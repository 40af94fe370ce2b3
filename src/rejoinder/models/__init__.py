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
from .realtime import RealtimeError, RealtimeModel, RealtimeSession
from .realtime_fallback import FallbackRealtime
from .tools import StopResponse, ToolDefinition, ToolError, ToolResult

__all__ = [
    "LLM",
    "AgentHandoff",
    "ChatChunk",
    "ChatContext",
    "ChatItem",
    "ChatMessage",
    "FallbackLLM",
    "FallbackRealtime",
    "FallbackSTT",
    "FallbackTTS",
    "FunctionCall",
    "FunctionCallOutput",
    "LLMError",
    "NamedToolChoice",
    "RealtimeError",
    "RealtimeModel",
    "RealtimeSession",
    "Role",
    "StopResponse",
    "ToolCallRequest",
    "ToolChoice",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "Usage",
]
