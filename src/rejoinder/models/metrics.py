"""Typed metrics: what each part of a session measured, one frozen dataclass per kind.

The session emits one of these in every ``metrics_collected`` event (``ev.metrics``) and
sums them per model in ``session.usage`` (``UsageSummary``). Every metric has:

- ``type``: which kind it is (``llm``, ``tts``, ``stt``, ``eou``, ``realtime``,
  ``voice_latency``), also the ``type`` field of ``to_dict()``;
- ``timestamp``: event-loop seconds (``loop.time()``) when it was measured, the clock the
  whole session runs on (exact under virtual time in tests);
- ``label`` (the implementing class, ``package.module.Class``), ``model`` and ``provider``
  where the component reports them (``None`` otherwise).

Durations are in seconds, measured on the same clock. ``to_dict()`` is the JSON-ready
payload the client protocol's ``metrics`` message carries.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal, TypeAlias

from .._dataclass import dataclass

__all__ = [
    "EOUMetrics",
    "LLMMetrics",
    "Metrics",
    "RealtimeMetrics",
    "STTMetrics",
    "TTSMetrics",
    "UsageSummary",
    "VoiceLatencyMetrics",
    "label_of",
]


def label_of(component: object) -> str:
    """``package.module.Class`` of a model or engine: the ``label`` of its metrics."""
    kind = type(component)
    return f"{kind.__module__}.{kind.__qualname__}"


class _Fields:
    """``to_dict()`` and read access by name (``m["ttft"]``, as the untyped payload of
    earlier versions allowed) for the metric dataclasses below."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """Every field by name, ``type`` included; values are JSON-ready (str, int,
        float, bool, None)."""
        return {name: getattr(self, name) for name in _field_names(type(self))}

    def __getitem__(self, name: str) -> Any:
        if name not in _field_names(type(self)):
            raise KeyError(name)
        return getattr(self, name)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    """A metric class's field names, worked out once (every turn records its metrics)."""
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind))
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMMetrics(_Fields):
    """One chat-model generation (one reply, or one tool follow-up), emitted when its
    stream ended."""

    type: Literal["llm"] = "llm"
    timestamp: float
    """When the stream ended."""
    label: str
    model: str | None = None
    """The model that produced the reply (behind a ``FallbackLLM``: the one that served)."""
    provider: str | None = None
    speech_id: str
    ttft: float | None
    """From the request (the reply starting to generate) to the first text delta; ``None``
    when the reply had no text (only tool calls)."""
    duration: float
    """From the request to the end of the stream."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = None
    """Prompt tokens served from the provider's cache, when it reports them."""
    retries: int = 0
    """Transient failures the client retried before the first chunk."""
    fallback_from: str | None = None
    """Behind a ``FallbackLLM``: the model that was tried first and failed."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class TTSMetrics(_Fields):
    """The synthesis of one speech (all its sentences), emitted when synthesis ended
    (finished, failed, or stopped by an interruption)."""

    type: Literal["tts"] = "tts"
    timestamp: float
    label: str
    model: str | None = None
    provider: str | None = None
    speech_id: str
    ttfb: float | None
    """From the first text handed to the TTS to its first audio frame; ``None`` when it
    produced no audio."""
    duration: float
    """From the first text handed to the TTS to its last frame (or the stop)."""
    characters: int
    """Characters handed to the TTS."""
    audio_duration: float
    """Seconds of audio the TTS produced (before resampling to the output)."""
    streamed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class STTMetrics(_Fields):
    """The final recognition of one utterance."""

    type: Literal["stt"] = "stt"
    timestamp: float
    """When the final transcript was in."""
    label: str
    model: str | None = None
    provider: str | None = None
    audio_duration: float
    """Seconds of audio in the utterance (pre-roll and the VAD's trailing silence included)."""
    latency: float
    """From the end of the utterance's audio (the VAD ended it) to the final transcript."""
    streamed: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class EOUMetrics(_Fields):
    """End of the user's turn, emitted when the turn was committed."""

    type: Literal["eou"] = "eou"
    timestamp: float
    """When the turn was committed."""
    label: str = "rejoinder.session.UserTurns"
    model: str | None = None
    provider: str | None = None
    end_of_utterance_delay: float
    """From the end of the user's speech (when the silence began) to the turn being
    committed."""
    transcription_delay: float
    """From the end of the user's speech to its final transcript."""
    end_of_turn_probability: float | None = None
    """The turn detector's last verdict on the turn (``None`` without one)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RealtimeMetrics(_Fields):
    """One realtime response, emitted when the provider reported it done. Token counts
    are what the provider reported (0 or ``None`` where it did not)."""

    type: Literal["realtime"] = "realtime"
    timestamp: float
    label: str
    model: str | None = None
    provider: str | None = None
    response_id: str
    status: str = "completed"
    input_tokens: int = 0
    output_tokens: int = 0
    input_text_tokens: int | None = None
    input_audio_tokens: int | None = None
    output_text_tokens: int | None = None
    output_audio_tokens: int | None = None
    cached_tokens: int | None = None
    ttft: float | None = None
    """From the response starting to its first agent audio, when both were seen."""
    duration: float | None = None
    """From the response starting to its end, when its start was seen."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class VoiceLatencyMetrics(_Fields):
    """What the user waited, once per user turn: from the end of their speech to the first
    agent audio they *heard* after it (the output reported it playing)."""

    type: Literal["voice_latency"] = "voice_latency"
    timestamp: float
    """When that audio was first heard."""
    label: str = "rejoinder.session.AgentSession"
    model: str | None = None
    provider: str | None = None
    speech_id: str | None
    """The speech that was heard (``None`` for a realtime model's audio)."""
    latency: float
    """``timestamp`` minus ``user_speech_ended_at``."""
    user_speech_ended_at: float
    """When the user's speech ended (the silence began), in loop seconds."""


Metrics: TypeAlias = (
    LLMMetrics | TTSMetrics | STTMetrics | EOUMetrics | RealtimeMetrics | VoiceLatencyMetrics
)
"""Any metric a ``metrics_collected`` event carries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageSummary(_Fields):
    """What one model consumed over a session: the sums of its metrics."""

    model: str
    """The model name (its ``label`` when it reports none)."""
    provider: str | None = None
    llm_requests: int = 0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    llm_cached_tokens: int = 0
    llm_retries: int = 0
    tts_characters: int = 0
    tts_audio_duration: float = 0.0
    stt_audio_duration: float = 0.0
    realtime_input_tokens: int = 0
    realtime_output_tokens: int = 0
    realtime_input_audio_tokens: int = 0
    realtime_output_audio_tokens: int = 0
    realtime_cached_tokens: int = 0
