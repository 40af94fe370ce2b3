"""Realtime (speech-to-speech) and duplex models: the provider-neutral interface.

A ``RealtimeModel`` goes in the ``llm=`` slot of ``AgentSession``. The session opens one
``RealtimeSession`` (one provider connection, reconnected by the provider as needed) and
keeps it across handoffs; the current agent's instructions and tools are pushed to it.

Providers never touch the floor. They report *protocol facts* as ``RealtimeEvent`` values
(a backend response started or ended, a tool call, agent audio started/ended, transcript
fragments with timeline positions, a lost connection) and the session maps those facts to
obligations (``backend_response``, ``provider_continuation``, ``answer``, ``tool``, ``reply``).
Calls from the session into a provider are synchronous and never block: the provider
queues what it must send. That lets the session hand one obligation over to the next in a
single step when, for example, a tool output makes the provider continue.

Two flavours, told apart by ``RealtimeModel.duplex``:

- *realtime* (e.g. the OpenAI Realtime API): the model answers in responses; when the user
  barges in, the session stops playback and tells the provider how much was heard.
- *duplex* (e.g. GPT-Live): audio flows both ways continuously and the model handles
  barge-in itself; the session never cuts its audio.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from .chat import ChatContext, FunctionCall, FunctionCallOutput
from .tools import ToolDefinition

if TYPE_CHECKING:
    from .audio import AudioFrame
    from .image import ImageContent


class RealtimeError(Exception):
    """A realtime provider failed. ``fatal``: the connection cannot be used again (bad
    key, no quota); retrying the same provider is pointless."""

    def __init__(self, message: str, *, fatal: bool = False, code: str | None = None) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.code = code


# ------------------------------------------------------------------ protocol facts


@dataclass(frozen=True, slots=True)
class BackendResponseStarted:
    """The provider started a response (GPT-Live: a backend ``response.created``)."""

    response_id: str
    delegation_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRequested:
    """A complete tool call; the session runs it and answers with ``submit_tool_output``.
    Reported at most once per ``call_id``."""

    call: FunctionCall
    delegation_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallCancelled:
    """The provider withdrew a call it asked for (Gemini Live's ``toolCallCancellation``:
    the turn that made it was cut off). The session stops the tool if it still runs and
    sends nothing for it; what it owed ends."""

    call_id: str


@dataclass(frozen=True, slots=True)
class ResponseUsage:
    """Token counts of one response, as the provider reported them (``None``: that split
    was not reported)."""

    input_tokens: int = 0
    output_tokens: int = 0
    input_text_tokens: int | None = None
    input_audio_tokens: int | None = None
    output_text_tokens: int | None = None
    output_audio_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class BackendResponseEnded:
    response_id: str
    status: Literal["completed", "failed", "incomplete", "cancelled"]
    delegation_id: str | None = None
    expects_answer: bool = False
    """The provider will now voice a result that has not been heard yet (GPT-Live: a
    response completed with no calls, so the voice model speaks its result). There is no
    event for "spoken", so the session waits for the next agent audio, for a bounded time."""
    error: str | None = None
    usage: ResponseUsage | None = None
    """What the response consumed, when the provider reports it (``response.done``)."""


@dataclass(frozen=True, slots=True)
class DelegationRequested:
    """The voice model handed work to the *application* (GPT-Live ``delegation="client"``):
    an answer is owed through ``answer_delegation`` with this id. The task is whatever
    the conversation says; no event on the wire closes it."""

    delegation_id: str


@dataclass(frozen=True, slots=True)
class ContinuationFailed:
    """A continuation the provider was asked for will not run (rejected, or an error that
    ends the pending work). Outputs already submitted for it led nowhere."""

    delegation_id: str | None
    error: str


@dataclass(frozen=True, slots=True)
class ReplyRefused:
    """The provider refused a ``generate_reply`` or ``send_user_text`` request (an error
    naming it): the reply it asked for will not come."""

    error: str


@dataclass(frozen=True, slots=True)
class AgentAudioStarted:
    """A stretch of agent speech begins; ``AgentAudio`` frames follow."""

    position_ms: int | None = None
    """Where it starts on the provider's output timeline, if known."""


@dataclass(frozen=True, slots=True)
class AgentAudio:
    frame: AudioFrame


@dataclass(frozen=True, slots=True)
class AgentAudioPaused:
    """The agent's audio has gone silent inside a stretch that may still resume: what was
    sent so far is all there is to play for now. Optional (providers that know where
    speech ends need not send it); the session then stops reporting ``speaking`` once
    the audio sent so far has played, but keeps the reply owed until the stretch ends."""

    position_ms: int | None = None


@dataclass(frozen=True, slots=True)
class AgentAudioCut:
    """The provider dropped the agent audio it sent that has not played yet (something of
    the application's pre-empted the reply: Gemini Live's ``INTERRUPT`` result, a typed
    message). The session stops playback at once, keeping what was heard, as on a
    barge-in; it is not the user speaking."""


@dataclass(frozen=True, slots=True)
class AgentAudioEnded:
    position_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Transcript:
    """A fragment of what the user or the agent said. Positions are a half-open span on
    the session's audio timeline, in ms, when the provider gives them."""

    role: Literal["user", "assistant"]
    text: str
    start_ms: int | None = None
    end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class UserSpeechStarted:
    """The provider heard the user start speaking (server VAD, or inferred)."""


@dataclass(frozen=True, slots=True)
class UserTurnEnded:
    """The user's turn is over; ``text`` is what they said (may be empty if unknown)."""

    text: str


@dataclass(frozen=True, slots=True)
class ProviderError:
    error: RealtimeError


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """The connection dropped. Everything the provider was doing is gone. ``reconnecting``:
    the provider is opening a new connection seeded with the history."""

    reason: str
    reconnecting: bool


@dataclass(frozen=True, slots=True)
class Reconnected:
    session_id: str | None = None


RealtimeEvent: TypeAlias = (
    BackendResponseStarted
    | DelegationRequested
    | ToolCallRequested
    | ToolCallCancelled
    | BackendResponseEnded
    | ContinuationFailed
    | ReplyRefused
    | AgentAudioStarted
    | AgentAudio
    | AgentAudioPaused
    | AgentAudioCut
    | AgentAudioEnded
    | Transcript
    | UserSpeechStarted
    | UserTurnEnded
    | ProviderError
    | ConnectionLost
    | Reconnected
)

ToolOutputFate: TypeAlias = Literal["continue", "silent"]
"""What the provider will do with a submitted tool output: ``continue``: it will run a
continuation and voice its result (now, or once the rest of the batch is in); ``silent``:
nothing will be said because of it (context only)."""


# ------------------------------------------------------------------ the interfaces


@dataclass(frozen=True, slots=True)
class RealtimeConfig:
    instructions: str
    tools: Sequence[ToolDefinition] = ()
    history: Callable[[], ChatContext] = field(default=ChatContext)
    """The conversation so far; read at start and again on every reconnect."""
    input_sample_rate: int | None = None
    """The rate of the audio the session will push (the microphone's), if known. A
    provider may pick its wire format from it: 8 kHz (a phone call) makes an
    ``audio_format="auto"`` OpenAI model use G.711, with no resampling either way."""


class RealtimeSession(ABC):
    """One live conversation with the provider."""

    @property
    def duplex(self) -> bool:
        """Full duplex: the model handles barge-in itself (``RealtimeModel.duplex``)."""
        return False

    @abstractmethod
    async def start(self, config: RealtimeConfig) -> None:
        """Connect and start. Raises ``RealtimeError`` when the provider refuses."""

    @abstractmethod
    def events(self) -> AsyncIterator[RealtimeEvent]:
        """The provider's facts, in order. Ends after ``aclose`` or a final disconnect."""

    @abstractmethod
    def push_audio(self, frame: AudioFrame) -> None:
        """Microphone audio, any rate (the provider resamples)."""

    @abstractmethod
    def submit_tool_output(
        self, output: FunctionCallOutput, *, reply_required: bool
    ) -> ToolOutputFate:
        """Answer a ``ToolCallRequested``. The return value is what the provider *will*
        do, which may differ from ``reply_required`` (GPT-Live always answers)."""

    @abstractmethod
    def add_context(self, text: str) -> None:
        """Silent context the model should know about; nothing is said because of it."""

    @abstractmethod
    def update_instructions(self, instructions: str) -> None: ...

    @abstractmethod
    def update_tools(self, tools: Sequence[ToolDefinition]) -> None: ...

    @abstractmethod
    def generate_reply(self, instructions: str | None = None) -> None:
        """Ask the model to speak now (optionally with one-off instructions)."""

    @abstractmethod
    def send_user_text(self, text: str) -> None:
        """A typed user message; the model answers it."""

    def add_image(self, image: ImageContent) -> None:
        """Show the model an image (``session.add_image``): it sees it with what the user
        says next. A model that cannot see says so."""
        raise RealtimeError(f"{type(self).__name__} does not take images")

    def set_input_muted(self, muted: bool) -> None:  # noqa: B027 - optional
        """The session muted (or unmuted) the microphone; it sends silence meanwhile.
        A provider with a mute control of its own applies it (and again after a
        reconnect)."""

    def answer_delegation(self, delegation_id: str | None, text: str) -> None:
        """Give the voice model the application's answer to a ``DelegationRequested``, to
        say in its own words. ``delegation_id`` ``None``: the delegation belonged to a
        lost connection, so the answer goes as plain speakable context."""
        raise RealtimeError(f"{type(self).__name__} has no client delegation")

    def audio_interrupted(self, heard_seconds: float) -> None:  # noqa: B027 - optional
        """Playback of the current agent audio was cut after ``heard_seconds`` (barge-in).
        Realtime providers cancel and truncate; duplex ones need nothing."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close cleanly (bounded). Idempotent."""


class RealtimeModel(ABC):
    """A speech-to-speech model: it hears the microphone and speaks itself, so a session
    on one needs no VAD, recognizer or voice (``AgentSession(llm=openai.Realtime())``).
    Each session opens its own ``RealtimeSession``, whose protocol facts the session turns
    into obligations (``docs/providers.md`` has the contract)."""

    duplex: bool = False
    """True: full duplex; the model takes turns and handles barge-in itself."""
    sample_rate: int = 24000
    """Rate of the agent audio it produces."""

    @property
    def model(self) -> str:
        """The model's name, as metrics and usage report it."""
        return type(self).__name__

    @property
    def provider(self) -> str:
        """The provider's name, as metrics report it."""
        return "unknown"

    @abstractmethod
    def session(self) -> RealtimeSession:
        """A new, unstarted session."""

    async def aclose(self) -> None:  # noqa: B027 - most models hold nothing to release
        """Release shared resources. Idempotent."""
