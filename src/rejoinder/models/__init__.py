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
from .stt import STT, StreamingSTT, STTError
from .text import TextOutput
from .tools import StopResponse, ToolDefinition, ToolError, ToolResult
from .tts import TTS, StreamingTTS, TTSError, TTSStream, WordTiming
from .vad import VAD, VADEvent, VADStream

__all__ = [
    "LLM",
    "STT",
    "TTS",
    "VAD",
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
    "STTError",
    "StopResponse",
    "StreamingSTT",
    "StreamingTTS",
    "TTSError",
    "TTSStream",
    "TextOutput",
    "ToolCallRequest",
    "ToolChoice",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "Usage",
    "VADEvent",
    "VADStream",
    "WordTiming",
]
