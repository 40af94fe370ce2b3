"""The asyncio runtime: sessions, agents, speeches, tools.

Where things are decided, by folder:

- ``session.py``: ``AgentSession``, the public entry point (lifecycle, replies, events);
  ``context.py``: the narrow ``SessionContext`` every part is handed instead of the
  session; ``turn_state.py``: the only code that talks to the floor (``rejoinder.floor``),
  which derives every reported state; ``events.py``, ``timeline*.py``, ``metrics_emit.py``,
  ``usage.py``: what the session reports; ``engine.py``: the interface the session hands
  its calls to, with ``pipeline.py`` (a chat model, our hearing and TTS) and
  ``realtime/engine.py`` behind it; ``public_session.py``: the session as user code
  is handed it.
- ``agents/``: which agent is current and *every* switch (``agent_stack.py``: handoffs,
  ``update_agent``, ``AgentTask`` start and completion, nesting — one transaction, nowhere
  else); one running agent and its replies (``activity.py``).
- ``speech/``: a reply the agent owes (``SpeechHandle``), one at a time, and its delivery
  to the outputs with the truth of what was played.
- ``hearing/``: the user's side: turns (VAD, recognition), turn ends (``turn_end.py``),
  barge-in (``overlap.py``), keypad, mute, replies started early.
- ``tools/``: ``@function_tool``; one call on any path (``invocation.py``); the
  pipeline's calls and their obligations (``runner.py``).
- ``realtime/``: sessions on realtime and duplex models, where the provider hears and
  speaks.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ..models.claims import close_shared, shared
from .agents.agent import Agent, ClientDelegation
from .agents.agent_task import AgentTask
from .events import (
    AgentStateChangedEvent,
    AnsweredByEvent,
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
from .run_result import RunResult
from .session import AgentSession
from .speech.handle import SpeechHandle
from .timeline import Timeline
from .timeline_events import Owed
from .tools.function_tool import FunctionTool, function_tool
from .tools.run_context import RunContext
from .tools.tool import Tool, Toolset
from .turn_state import ObligationExpiredError

__all__ = [
    "Agent",
    "AgentSession",
    "AgentStateChangedEvent",
    "AgentTask",
    "AnsweredByEvent",
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
    "Tool",
    "Toolset",
    "UserInputTranscribedEvent",
    "UserStateChangedEvent",
    "UserTurnDiscardedEvent",
    "close_shared",
    "function_tool",
    "shared",
]


if TYPE_CHECKING:
    from .hearing.keypad import CollectDigits, Digits


# Keypad digits (``CollectDigits``) are for phone calls, and nothing else in the session
# imports them: they load on first use.
__getattr__ = lazy_names(
    __name__, globals(), {"CollectDigits": ".hearing.keypad", "Digits": ".hearing.keypad"}
)
