"""rejoinder: real-time voice agents whose reported turn state is always true.

Heavy optional dependencies (HTTP clients, audio engines) are imported lazily by the
providers that need them, so ``import rejoinder`` stays fast.
"""

from .io.text import ConsoleTextOutput, MemoryTextOutput, TextOutput
from .models import (
    LLM,
    AgentHandoff,
    ChatChunk,
    ChatContext,
    ChatItem,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    LLMError,
    StopResponse,
    ToolCallRequest,
    ToolDefinition,
    ToolError,
    ToolResult,
)
from .session import (
    Agent,
    AgentSession,
    AgentStateChangedEvent,
    CloseEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    FunctionTool,
    FunctionToolsExecutedEvent,
    MetricsCollectedEvent,
    ObligationExpiredError,
    RunContext,
    RunResult,
    SpeechCreatedEvent,
    SpeechHandle,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
    function_tool,
)

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "Agent",
    "AgentHandoff",
    "AgentSession",
    "AgentStateChangedEvent",
    "ChatChunk",
    "ChatContext",
    "ChatItem",
    "ChatMessage",
    "CloseEvent",
    "ConsoleTextOutput",
    "ConversationItemAddedEvent",
    "ErrorEvent",
    "FunctionCall",
    "FunctionCallOutput",
    "FunctionTool",
    "FunctionToolsExecutedEvent",
    "LLMError",
    "MemoryTextOutput",
    "MetricsCollectedEvent",
    "ObligationExpiredError",
    "RunContext",
    "RunResult",
    "SpeechCreatedEvent",
    "SpeechHandle",
    "StopResponse",
    "TextOutput",
    "ToolCallRequest",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "__version__",
    "function_tool",
]
