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
from .interruption import Interruption, InterruptionDetector, is_backchannel
from .llm import (
    LLM,
    ChatChunk,
    LLMError,
    NamedToolChoice,
    StreamInfo,
    ToolCallRequest,
    ToolChoice,
    Usage,
)
from .metrics import (
    EOUMetrics,
    LLMMetrics,
    Metrics,
    RealtimeMetrics,
    STTMetrics,
    TTSMetrics,
    UsageSummary,
    VoiceLatencyMetrics,
)
from .realtime import RealtimeError, RealtimeModel, RealtimeSession
from .realtime_fallback import FallbackRealtime
from .stt import STT, StreamingSTT, STTError, Transcript
from .text import TextOutput
from .tools import StopResponse, ToolDefinition, ToolError, ToolResult
from .tts import TTS, StreamingTTS, TTSError, TTSStream, WordTiming
from .turn_detector import TurnDetector, TurnDetectorError
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
    "EOUMetrics",
    "FallbackLLM",
    "FallbackRealtime",
    "FallbackSTT",
    "FallbackTTS",
    "FunctionCall",
    "FunctionCallOutput",
    "Interruption",
    "InterruptionDetector",
    "LLMError",
    "LLMMetrics",
    "Metrics",
    "NamedToolChoice",
    "RealtimeError",
    "RealtimeMetrics",
    "RealtimeModel",
    "RealtimeSession",
    "Role",
    "STTError",
    "STTMetrics",
    "StopResponse",
    "StreamInfo",
    "StreamingSTT",
    "StreamingTTS",
    "TTSError",
    "TTSMetrics",
    "TTSStream",
    "TextOutput",
    "ToolCallRequest",
    "ToolChoice",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "Transcript",
    "TurnDetector",
    "TurnDetectorError",
    "Usage",
    "UsageSummary",
    "VADEvent",
    "VADStream",
    "VoiceLatencyMetrics",
    "WordTiming",
    "is_backchannel",
]
