"""rejoinder: real-time voice agents whose reported turn state is always true.

Heavy optional dependencies (HTTP clients, audio engines) are imported lazily by the
providers that need them, so ``import rejoinder`` stays fast. The model interfaces
(``LLM``, ``STT``, ``TTS``, ``VAD``) are plain ABCs and load eagerly; the audio names
(numpy) and the realtime names (``RealtimeModel``, ``ClientDelegation``, ...: the realtime
engine, which a text or pipeline session never uses) load on first use through ``_LAZY``.
"""

from typing import TYPE_CHECKING

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
    FallbackSTT,
    FallbackTTS,
    FunctionCall,
    FunctionCallOutput,
    Interruption,
    InterruptionDetector,
    LLMError,
    LLMMetrics,
    Metrics,
    RealtimeMetrics,
    StopResponse,
    STTError,
    STTMetrics,
    ToolCallRequest,
    ToolDefinition,
    ToolError,
    ToolResult,
    Transcript,
    TTSError,
    TTSMetrics,
    TurnDetector,
    TurnDetectorError,
    UsageSummary,
    VoiceLatencyMetrics,
    is_backchannel,
)
from .session import (
    Agent,
    AgentSession,
    AgentStateChangedEvent,
    AgentTask,
    AwayTimerEvent,
    BackgroundToolFinishedEvent,
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
    SessionStartedEvent,
    SpeculationEvent,
    SpeechCreatedEvent,
    SpeechHandle,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
    UserTurnDiscardedEvent,
    close_shared,
    function_tool,
    shared,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from .models import FallbackRealtime, RealtimeError, RealtimeModel, RealtimeSession
    from .models.audio import AudioFrame, AudioInput, AudioOutput, PlaybackFinished
    from .session import ClientDelegation

# Audio names pull in numpy: load them on first use so text-only programs start fast.
_LAZY = {
    # Realtime models and client delegations: only sessions on a realtime model use them.
    "ClientDelegation": "rejoinder.session",
    "FallbackRealtime": "rejoinder.models",
    "RealtimeError": "rejoinder.models",
    "RealtimeModel": "rejoinder.models",
    "RealtimeSession": "rejoinder.models",
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
    "Interruption",
    "InterruptionDetector",
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
    "SessionStartedEvent",
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
    "Transcript",
    "TurnDetector",
    "TurnDetectorError",
    "UsageSummary",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "UserTurnDiscardedEvent",
    "VoiceLatencyMetrics",
    "__version__",
    "close_shared",
    "function_tool",
    "is_backchannel",
    "shared",
]
