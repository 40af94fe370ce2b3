"""Measuring a session: the meters that build the typed metrics (``models.metrics``) and
emit them as ``metrics_collected`` events.

- ``LLMMeter``: one generation, from the request to the end of its stream.
- ``TTSMeter``: one speech's synthesis (given to its ``AudioDelivery``), from the first
  text handed to the TTS to its last frame; it also reports when the speech was first
  heard.
- ``SessionMeter``: one per session (``meter_for(ctx)``): emits, and pairs the end of the
  user's speech with the first agent audio heard after it (``VoiceLatencyMetrics``).

All times are ``loop.time()``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..models.metrics import (
    EOUMetrics,
    LLMMetrics,
    Metrics,
    RealtimeMetrics,
    STTMetrics,
    TTSMetrics,
    VoiceLatencyMetrics,
    label_of,
)
from .events import MetricsCollectedEvent

if TYPE_CHECKING:
    from ..models import LLM, ChatChunk, StreamInfo, Usage
    from ..models.realtime import BackendResponseEnded, ResponseUsage
    from .context import SessionContext
    from .events import EventEmitter


def meter_for(ctx: SessionContext) -> SessionMeter:
    """The session's meter (created on first use, kept on the context: a table keyed by
    the context would keep every session alive through the meter's own references)."""
    meter = ctx.meter
    if not isinstance(meter, SessionMeter):
        meter = ctx.meter = SessionMeter(ctx.events)
    return meter


def _now() -> float:
    return asyncio.get_running_loop().time()


def _model_of(component: object) -> tuple[str | None, str | None]:
    model = getattr(component, "model", None)
    provider = getattr(component, "provider", None)
    return (
        model if isinstance(model, str) else None,
        provider if isinstance(provider, str) and provider != "unknown" else None,
    )


class SessionMeter:
    def __init__(self, events: EventEmitter) -> None:
        self._events = events
        self._user_stopped_at: float | None = None
        """The end of the user's last committed speech, until agent audio is heard."""

    def emit(self, metrics: Metrics) -> None:
        self._events.emit("metrics_collected", MetricsCollectedEvent(metrics))

    # ------------------------------------------------------------ user turns

    def stt_done(
        self, stt: object, *, audio_duration: float, audio_ended_at: float, streamed: bool
    ) -> None:
        now = _now()
        model, provider = _model_of(stt)
        self.emit(
            STTMetrics(
                timestamp=now,
                label=label_of(stt),
                model=model,
                provider=provider,
                audio_duration=audio_duration,
                latency=now - audio_ended_at,
                streamed=streamed,
            )
        )

    def user_turn_committed(
        self,
        speech_ended_at: float,
        transcribed_at: float,
        *,
        end_of_turn_probability: float | None = None,
    ) -> None:
        """The user's turn was committed: end-of-utterance metrics, and the wait for the
        agent's first audio starts from ``speech_ended_at``."""
        now = _now()
        self.emit(
            EOUMetrics(
                timestamp=now,
                end_of_utterance_delay=now - speech_ended_at,
                transcription_delay=transcribed_at - speech_ended_at,
                end_of_turn_probability=end_of_turn_probability,
            )
        )
        self._user_stopped_at = speech_ended_at

    def user_speech_ended(self, at: float) -> None:
        """The user's speech ended (a realtime model took the turn): the wait for the
        agent's first audio starts from ``at``."""
        self._user_stopped_at = at

    # ------------------------------------------------------------ the agent

    def heard(self, speech_id: str | None) -> None:
        """Agent audio started playing for the listener."""
        stopped, self._user_stopped_at = self._user_stopped_at, None
        if stopped is None:
            return
        now = _now()
        self.emit(
            VoiceLatencyMetrics(
                timestamp=now,
                speech_id=speech_id,
                latency=now - stopped,
                user_speech_ended_at=stopped,
            )
        )

    def realtime_response(
        self,
        model: object,
        response_id: str,
        status: str,
        usage: ResponseUsage | None,
        *,
        started_at: float | None,
        first_audio_at: float | None,
    ) -> None:
        now = _now()
        name, provider = _model_of(model)
        ttft = None
        if started_at is not None and first_audio_at is not None:
            ttft = first_audio_at - started_at
        self.emit(
            RealtimeMetrics(
                timestamp=now,
                label=label_of(model),
                model=name,
                provider=provider,
                response_id=response_id,
                status=status,
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                input_text_tokens=usage.input_text_tokens if usage else None,
                input_audio_tokens=usage.input_audio_tokens if usage else None,
                output_text_tokens=usage.output_text_tokens if usage else None,
                output_audio_tokens=usage.output_audio_tokens if usage else None,
                cached_tokens=usage.cached_tokens if usage else None,
                ttft=ttft,
                duration=None if started_at is None else now - started_at,
            )
        )


class LLMMeter:
    """One generation: ``observe`` each chunk, then ``metrics()`` at the end."""

    def __init__(self, llm: LLM, speech_id: str) -> None:
        self._llm = llm
        self._speech_id = speech_id
        self._started = _now()
        self._first_token: float | None = None
        self._usage: Usage | None = None
        self._info: StreamInfo | None = None
        self._retries_before = _retries(llm)

    def observe(self, chunk: ChatChunk) -> None:
        if chunk.info is not None and self._info is None:
            self._info = chunk.info
        if chunk.delta and self._first_token is None:
            self._first_token = _now()
        if chunk.usage is not None:
            self._usage = chunk.usage

    def metrics(self) -> LLMMetrics:
        now = _now()
        info, usage = self._info, self._usage
        model, provider = _model_of(self._llm)
        label = label_of(self._llm)
        # Without stream info, what the client counted meanwhile (a client shared by
        # several sessions may count another's retries too).
        retries = _retries(self._llm) - self._retries_before
        fallback_from = None
        if info is not None:
            model = info.model or model
            provider = info.provider or provider
            label = info.label or label
            retries = info.retries
            fallback_from = info.fallback_from
        return LLMMetrics(
            timestamp=now,
            label=label,
            model=model,
            provider=provider,
            speech_id=self._speech_id,
            ttft=None if self._first_token is None else self._first_token - self._started,
            duration=now - self._started,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else None,
            retries=retries,
            fallback_from=fallback_from,
        )


def _retries(llm: LLM) -> int:
    count = getattr(llm, "retries", 0)
    return count if isinstance(count, int) else 0


class TTSMeter:
    """One speech's synthesis, reported by its ``AudioDelivery``."""

    def __init__(
        self, session: SessionMeter, tts: object, speech_id: str, *, streamed: bool
    ) -> None:
        self._session = session
        self._tts = tts
        self._speech_id = speech_id
        self._streamed = streamed
        self._requested: float | None = None
        self._first_audio: float | None = None
        self._last_audio: float | None = None
        self._characters = 0
        self._audio = 0.0
        self._ended = False
        self._heard = False

    def text_sent(self, text: str) -> None:
        if self._requested is None:
            self._requested = _now()
        self._characters += len(text)

    def audio(self, seconds: float) -> None:
        now = _now()
        if self._first_audio is None:
            self._first_audio = now
        self._last_audio = now
        self._audio += seconds

    def heard(self) -> None:
        if not self._heard:
            self._heard = True
            self._session.heard(self._speech_id)

    def ended(self) -> None:
        """Synthesis is over (finished, failed or stopped): emit, once, if any text was
        handed to the TTS."""
        if self._ended or self._requested is None:
            return
        self._ended = True
        model, provider = _model_of(self._tts)
        end = self._last_audio if self._last_audio is not None else _now()
        self._session.emit(
            TTSMetrics(
                timestamp=_now(),
                label=label_of(self._tts),
                model=model,
                provider=provider,
                speech_id=self._speech_id,
                ttfb=None if self._first_audio is None else self._first_audio - self._requested,
                duration=end - self._requested,
                characters=self._characters,
                audio_duration=self._audio,
                streamed=self._streamed,
            )
        )


def watch_delivery(ctx: SessionContext, delivery: object, speech_id: str) -> None:
    """Give an audio delivery its ``TTSMeter`` (a text delivery has nothing to measure)."""
    observe = getattr(delivery, "observe", None)
    if observe is None or ctx.tts is None:
        return
    from ..models.tts import StreamingTTS

    streamed = isinstance(ctx.tts, StreamingTTS)
    observe(TTSMeter(meter_for(ctx), ctx.tts, speech_id, streamed=streamed))


class RealtimeMeter:
    """A realtime connection's responses: when each started and first sent audio, and
    its usage once done (``RealtimeMetrics``); agent audio heard (voice latency)."""

    def __init__(self, ctx: SessionContext, model: object) -> None:
        self._session = meter_for(ctx)
        self._model = model
        self._started: dict[str, float] = {}
        self._first_audio: dict[str, float] = {}

    def response_started(self, response_id: str) -> None:
        self._started.setdefault(response_id, _now())

    def audio_started(self) -> None:
        """Agent audio began arriving: the first audio of every running response."""
        now = _now()
        for response_id in self._started:
            self._first_audio.setdefault(response_id, now)

    def response_ended(self, fact: BackendResponseEnded) -> None:
        self._session.realtime_response(
            self._model,
            fact.response_id,
            fact.status,
            fact.usage,
            started_at=self._started.pop(fact.response_id, None),
            first_audio_at=self._first_audio.pop(fact.response_id, None),
        )

    def user_turn_ended(self) -> None:
        self._session.user_speech_ended(_now())

    def heard(self) -> None:
        self._session.heard(None)
