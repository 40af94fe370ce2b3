"""The asyncio runtime: sessions, agents, speeches, tools."""

from .agent import Agent
from .agent_task import AgentTask
from .events import (
    AgentStateChangedEvent,
    CloseEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    MetricsCollectedEvent,
    SpeechCreatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
)
from .run_context import RunContext
from .run_result import RunResult
from .session import AgentSession
from .speech import SpeechHandle
from .tools import FunctionTool, function_tool
from .turn_state import ObligationExpiredError

__all__ = [
    "Agent",
    "AgentSession",
    "AgentStateChangedEvent",
    "AgentTask",
    "CloseEvent",
    "ConversationItemAddedEvent",
    "ErrorEvent",
    "FunctionTool",
    "FunctionToolsExecutedEvent",
    "MetricsCollectedEvent",
    "ObligationExpiredError",
    "RunContext",
    "RunResult",
    "SpeechCreatedEvent",
    "SpeechHandle",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "function_tool",
]
