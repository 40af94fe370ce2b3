"""rejoinder: real-time voice agents whose reported turn state is always true.

Heavy optional dependencies (HTTP clients, audio engines) are imported lazily by the
providers that need them, so ``import rejoinder`` stays fast. The model interfaces
(``LLM``, ``STT``, ``TTS``, ``VAD``) are plain ABCs and load eagerly; the audio names
(numpy) load on first use through ``_LAZY``.
"""

from .io.text import ConsoleTextOutput, MemoryTextOutput, TextOutput
from .models import (
    LLM,
    STT,
    TTS,
    VAD,
    AgentHandoff,
    ChatChunk,
    ChatContext,
    ChatItem,
    ChatMessage,
    EOUMetrics,
    FallbackLLM,
    FallbackRealtime,
    FallbackSTT,
    FallbackTTS,
    FunctionCall,
    FunctionCallOutput,
    LLMError,
    LLMMetrics,
    Metrics,
    RealtimeError,
    RealtimeMetrics,
    RealtimeModel,
    RealtimeSession,
    StopResponse,
    STTError,
    STTMetrics,
    ToolCallRequest,
    ToolDefinition,
    ToolError,
    ToolResult,
    TTSError,
    TTSMetrics,
    TurnDetector,
    TurnDetectorError,
    UsageSummary,
    VoiceLatencyMetrics,
)
from .session import (
    Agent,
    AgentSession,
    AgentStateChangedEvent,
    AgentTask,
    AwayTimerEvent,
    BackgroundToolFinishedEvent,
    ClientDelegation,
    CloseEvent,
    CollectDigits,
    ConversationItemAddedEvent,
    Digits,
    DTMFEvent,
    ErrorEvent,
    FunctionTool,
    FunctionToolsExecutedEvent,
    MetricsCollectedEvent,
    ObligationExpiredError,
    Owed,
    RunContext,
    RunResult,
    SpeculationEvent,
    SpeechCreatedEvent,
    SpeechHandle,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
    UserTurnDiscardedEvent,
    function_tool,
)

__version__ = "0.1.0"

# Audio names pull in numpy: load them on first use so text-only programs start fast.
_LAZY = {
    "AudioFrame": "rejoinder.models.audio",
    "AudioInput": "rejoinder.models.audio",
    "AudioOutput": "rejoinder.models.audio",
    "PlaybackFinished": "rejoinder.models.audio",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rejoinder' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "LLM",
    "STT",
    "TTS",
    "VAD",
    "Agent",
    "AgentHandoff",
    "AgentSession",
    "AgentStateChangedEvent",
    "AgentTask",
    "AudioFrame",
    "AudioInput",
    "AudioOutput",
    "AwayTimerEvent",
    "BackgroundToolFinishedEvent",
    "ChatChunk",
    "ChatContext",
    "ChatItem",
    "ChatMessage",
    "ClientDelegation",
    "CloseEvent",
    "CollectDigits",
    "ConsoleTextOutput",
    "ConversationItemAddedEvent",
    "DTMFEvent",
    "Digits",
    "EOUMetrics",
    "ErrorEvent",
    "FallbackLLM",
    "FallbackRealtime",
    "FallbackSTT",
    "FallbackTTS",
    "FunctionCall",
    "FunctionCallOutput",
    "FunctionTool",
    "FunctionToolsExecutedEvent",
    "LLMError",
    "LLMMetrics",
    "MemoryTextOutput",
    "Metrics",
    "MetricsCollectedEvent",
    "ObligationExpiredError",
    "Owed",
    "PlaybackFinished",
    "RealtimeError",
    "RealtimeMetrics",
    "RealtimeModel",
    "RealtimeSession",
    "RunContext",
    "RunResult",
    "STTError",
    "STTMetrics",
    "SpeculationEvent",
    "SpeechCreatedEvent",
    "SpeechHandle",
    "StopResponse",
    "TTSError",
    "TTSMetrics",
    "TextOutput",
    "ToolCallRequest",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "TurnDetector",
    "TurnDetectorError",
    "UsageSummary",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "UserTurnDiscardedEvent",
    "VoiceLatencyMetrics",
    "__version__",
    "function_tool",
]
