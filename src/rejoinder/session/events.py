"""Session events and the emitter that delivers them.

Times in ``created_at`` are event-loop seconds (``loop.time()``), the clock every decision
in the session is made on, so tests on virtual time see exact values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._dataclass import dataclass
from ..floor import AgentState, UserState
from ..models import ChatItem, FunctionCall, FunctionCallOutput, Metrics

if TYPE_CHECKING:
    from .speech.handle import SpeechHandle

logger = logging.getLogger("rejoinder")

EventName = Literal[
    "session_started",
    "agent_state_changed",
    "user_state_changed",
    "user_input_transcribed",
    "conversation_item_added",
    "speech_created",
    "function_tools_executed",
    "metrics_collected",
    "error",
    "close",
    "dtmf",
    "user_turn_discarded",
    "speculation",
    "background_tool_finished",
    "away_timer",
    "answered_by",
]

AnsweredBy = Literal["human", "machine", "screening", "unknown"]
"""Who answered a call the agent placed: a person, an answering machine or voicemail,
a call-screening assistant (the phone asking the agent to say who is calling), or not
known (no decision in time, or the detector could not tell)."""


@dataclass(frozen=True, slots=True)
class SessionStartedEvent:
    """The session started: its slots (microphone, speaker) are read from here on; its
    first agent is entering (the agent stays ``initializing`` until it has)."""

    created_at: float
    type: Literal["session_started"] = "session_started"


@dataclass(frozen=True, slots=True)
class AgentStateChangedEvent:
    """``agent_state_changed``: the agent's state changed (``initializing``,
    ``listening``, ``thinking``, ``speaking``; docs/state-model.md says what each
    promises). ``created_at`` is the loop time of the change."""

    old_state: AgentState
    new_state: AgentState
    created_at: float
    type: Literal["agent_state_changed"] = "agent_state_changed"


@dataclass(frozen=True, slots=True)
class UserStateChangedEvent:
    """``user_state_changed``: the user's state changed (``listening``, ``speaking``,
    ``away``)."""

    old_state: UserState
    new_state: UserState
    created_at: float
    type: Literal["user_state_changed"] = "user_state_changed"


@dataclass(frozen=True, slots=True)
class UserInputTranscribedEvent:
    """``user_input_transcribed``: the recognizer's words for the user's turn, interim
    (``is_final`` False: the turn so far, replaced by the next) or final."""

    transcript: str
    is_final: bool
    type: Literal["user_input_transcribed"] = "user_input_transcribed"


@dataclass(frozen=True, slots=True)
class ConversationItemAddedEvent:
    """``conversation_item_added``: an item was added to ``session.history``: a message
    (the agent's, once it was delivered, with only what was heard if it was
    interrupted), a tool call or output, a handoff."""

    item: ChatItem
    type: Literal["conversation_item_added"] = "conversation_item_added"


@dataclass(frozen=True, slots=True)
class SpeechCreatedEvent:
    """``speech_created``: the agent will say something: a reply, ``say()``, a tool's
    follow-up. ``source`` says what made it (``"say"``, ``"generate_reply"``,
    ``"tool_reply"``, ...), ``user_initiated`` whether the application asked for it
    rather than a user's turn; the handle follows it to its end."""

    speech_handle: SpeechHandle
    source: str
    user_initiated: bool
    type: Literal["speech_created"] = "speech_created"


@dataclass(frozen=True, slots=True)
class FunctionToolsExecutedEvent:
    """``function_tools_executed``: the tool calls of one model step returned (their
    first result: a tool released to the background by ``ctx.update`` counts as returned
    then); ``function_call_outputs`` holds each call's output, in the same order."""

    function_calls: list[FunctionCall]
    function_call_outputs: list[FunctionCallOutput | None]
    type: Literal["function_tools_executed"] = "function_tools_executed"


@dataclass(frozen=True, slots=True)
class MetricsCollectedEvent:
    """``metrics_collected``: one measurement, taken where the work happened (a model
    call, a synthesis, a recognition, the latency of a turn)."""

    metrics: Metrics
    """One typed metric (``rj.LLMMetrics``, ``rj.TTSMetrics``, ...; see
    ``rejoinder.models.metrics``); ``metrics.to_dict()`` is its JSON payload."""
    type: Literal["metrics_collected"] = "metrics_collected"


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """``error``: something failed, and the session went on (or, when ``recoverable`` is
    False, is closing). ``source`` says where: ``"llm"``, ``"stt"``, ``"tts"``,
    ``"tool"``, ``"output"`` (a text sink or audio output that raised), ``"watchdog"``
    (an obligation outlived its deadline), ``"turn_detection"``, ``"realtime"``,
    ``"delegation"``, ``"session"``, ..."""

    error: BaseException
    source: str
    recoverable: bool
    type: Literal["error"] = "error"


@dataclass(frozen=True, slots=True)
class DTMFEvent:
    """``dtmf``: the caller pressed a key on a phone call."""

    digit: str
    """One key: ``0``-``9``, ``*``, ``#`` or ``A``-``D``."""
    created_at: float
    type: Literal["dtmf"] = "dtmf"


@dataclass(frozen=True, slots=True)
class UserTurnDiscardedEvent:
    """What the user said was dropped, not answered (it ended while a reply that may not
    be interrupted was playing)."""

    text: str
    reason: str
    created_at: float
    type: Literal["user_turn_discarded"] = "user_turn_discarded"


@dataclass(frozen=True, slots=True)
class SpeculationEvent:
    """A speculative (preemptive) reply was started, used for the turn it guessed, or
    dropped (the turn turned out different, an interruption, a switch)."""

    event: Literal["started", "used", "dropped"]
    reason: str
    created_at: float
    type: Literal["speculation"] = "speculation"


@dataclass(frozen=True, slots=True)
class BackgroundToolFinishedEvent:
    """A tool released to the background (its reply went on) returned its final result."""

    name: str
    call_id: str
    is_error: bool
    created_at: float
    type: Literal["background_tool_finished"] = "background_tool_finished"


@dataclass(frozen=True, slots=True)
class AwayTimerEvent:
    """The user-away timer was armed (nothing is owed and the user is quiet: ``away`` at
    ``deadline`` unless something happens) or cancelled."""

    armed: bool
    deadline: float | None
    created_at: float
    type: Literal["away_timer"] = "away_timer"


@dataclass(frozen=True, slots=True)
class AnsweredByEvent:
    """Who answered the call (``session.push_answered_by``): from the phone provider's own
    detection (``source="provider"``) or from listening to the call (``"audio"``). Several
    may come for one call: a later one refines an earlier ``unknown``, and ``beep`` comes
    once a machine's greeting ended with its beep (the moment to leave a message)."""

    answered_by: AnsweredBy
    source: Literal["provider", "audio"]
    created_at: float
    beep: bool = False
    """A machine's beep was heard (or the provider reported the greeting's end)."""
    detail: str = ""
    """Why, in words (for logs): "greeting 4.2 s", "beep at 1 kHz", a screening phrase."""
    type: Literal["answered_by"] = "answered_by"


@dataclass(frozen=True, slots=True)
class CloseEvent:
    """``close``: the session closed, for ``reason`` (``aclose(reason=...)``,
    ``shutdown(reason=...)``, ``"call ended"``, ``"connection lost"``...); ``error``
    when a failure closed it."""

    reason: str
    error: BaseException | None = None
    type: Literal["close"] = "close"


Callback = Callable[[Any], object]
C = TypeVar("C", bound=Callback)


@dataclass
class EventEmitter:
    """Synchronous fan-out. A failing callback is logged and never breaks the session."""

    _handlers: dict[str, list[Callback]] = field(default_factory=dict)
    _taps: list[tuple[frozenset[str], Callable[[str, object], object]]] = field(
        default_factory=list
    )

    def on(self, name: EventName, callback: C | None = None) -> Any:
        """Register ``callback`` for ``name``; without a callback, return a decorator."""
        if callback is None:

            def decorator(fn: C) -> C:
                self.on(name, fn)
                return fn

            return decorator
        self._handlers.setdefault(name, []).append(callback)
        return callback

    def tap(self, names: frozenset[str], callback: Callable[[str, object], object]) -> None:
        """Register ``callback(name, event)`` for each of the events ``names``, before
        their handlers (the session's own recorders: one callback for all their kinds)."""
        self._taps.append((names, callback))

    def off(self, name: EventName, callback: Callback) -> None:
        handlers = self._handlers.get(name, [])
        if callback in handlers:
            handlers.remove(callback)

    def emit(self, name: EventName, event: object) -> None:
        for names, tap in self._taps:
            if name in names:
                try:
                    tap(name, event)
                except Exception:
                    logger.exception("recording %r failed", name)
        handlers = self._handlers.get(name)
        if not handlers:
            return
        for callback in tuple(handlers):
            try:
                callback(event)
            except Exception:
                logger.exception("callback for %r failed", name)
