"""Provider-neutral model interfaces.

The realtime names (``RealtimeModel``, ``RealtimeSession``, ``RealtimeError``,
``FallbackRealtime``) load on first use: a text or pipeline session never needs them, and
they are about a tenth of ``import rejoinder``. So do the fallback chains (``FallbackLLM``,
``FallbackSTT``, ``FallbackTTS``): nothing in the session uses them unless given one.
"""

import sys
from typing import TYPE_CHECKING, TypeGuard

from .._lazy import lazy_names
from .chat import (
    AgentHandoff,
    ChatContext,
    ChatItem,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    Role,
)
from .image import ImageContent, ImageError
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
from .stt import STT, StreamingSTT, STTError, Transcript
from .text import TextOutput
from .tools import StopResponse, ToolDefinition, ToolError, ToolResult
from .tts import TTS, StreamingTTS, TTSError, TTSStream, WordTiming
from .turn_detector import TurnDetector, TurnDetectorError
from .vad import VAD, VADEvent, VADStream

if TYPE_CHECKING:
    from .fallback import FallbackLLM, FallbackSTT, FallbackTTS
    from .realtime import RealtimeError, RealtimeModel, RealtimeSession
    from .realtime_fallback import FallbackRealtime

_LAZY = {
    "FallbackLLM": ".fallback",
    "FallbackSTT": ".fallback",
    "FallbackTTS": ".fallback",
    "RealtimeError": ".realtime",
    "RealtimeModel": ".realtime",
    "RealtimeSession": ".realtime",
    "FallbackRealtime": ".realtime_fallback",
}


__getattr__ = lazy_names(__name__, globals(), _LAZY)


def is_realtime_model(model: object) -> "TypeGuard[RealtimeModel]":
    """Whether ``model`` is a ``RealtimeModel``, without loading the realtime interfaces:
    nothing is an instance of a class whose module was never imported."""
    realtime = sys.modules.get(f"{__name__}.realtime")
    return realtime is not None and isinstance(model, realtime.RealtimeModel)


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
    "ImageContent",
    "ImageError",
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
    "is_realtime_model",
]
