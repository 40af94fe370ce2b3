"""The asyncio runtime: sessions, agents, speeches, tools.

Where things are decided:

- ``session``: ``AgentSession``, the public entry point (lifecycle, replies, events).
- ``agent_stack``: which agent is current and *every* switch (handoffs, ``update_agent``,
  ``AgentTask`` start/completion, nesting) — one transaction, nowhere else.
- ``activity``: one running agent (its speeches, replies and tool follow-ups), with
  ``speech_queue`` (one speech at a time), ``tool_runner``, ``delivery`` /
  ``audio_delivery`` (output and playback truth) and ``agent_record`` (the history).
- ``context``: the narrow ``SessionContext`` every part is handed instead of the session.
- ``turn_state``: the only code that talks to the floor (``rejoinder.floor``), which
  derives every reported state.
- ``user_turns``: the microphone side (VAD, STT, endpointing, barge-in).
- ``realtime_driver`` and friends: sessions on realtime/duplex models.
"""

from ..models.claims import close_shared, shared
from .agent import Agent
from .agent_task import AgentTask
from .client_delegation import ClientDelegation
from .events import (
    AgentStateChangedEvent,
    AwayTimerEvent,
    BackgroundToolFinishedEvent,
    CloseEvent,
    ConversationItemAddedEvent,
    DTMFEvent,
    ErrorEvent,
    FunctionToolsExecutedEvent,
    MetricsCollectedEvent,
    SessionStartedEvent,
    SpeculationEvent,
    SpeechCreatedEvent,
    UserInputTranscribedEvent,
    UserStateChangedEvent,
    UserTurnDiscardedEvent,
)
from .keypad import CollectDigits, Digits
from .run_context import RunContext
from .run_result import RunResult
from .session import AgentSession
from .speech import SpeechHandle
from .timeline import Timeline
from .timeline_events import Owed
from .tools import FunctionTool, function_tool
from .turn_state import ObligationExpiredError

__all__ = [
    "Agent",
    "AgentSession",
    "AgentStateChangedEvent",
    "AgentTask",
    "AwayTimerEvent",
    "BackgroundToolFinishedEvent",
    "ClientDelegation",
    "CloseEvent",
    "CollectDigits",
    "ConversationItemAddedEvent",
    "DTMFEvent",
    "Digits",
    "ErrorEvent",
    "FunctionTool",
    "FunctionToolsExecutedEvent",
    "MetricsCollectedEvent",
    "ObligationExpiredError",
    "Owed",
    "RunContext",
    "RunResult",
    "SessionStartedEvent",
    "SpeculationEvent",
    "SpeechCreatedEvent",
    "SpeechHandle",
    "Timeline",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "UserTurnDiscardedEvent",
    "close_shared",
    "function_tool",
    "shared",
]
