"""UsageCollector: what each model consumed over a session (``session.usage``).

It listens to the session's ``metrics_collected`` events and sums them per model: LLM
requests, tokens (prompt, completion, cached) and retries; TTS characters and seconds of
audio; STT seconds of audio; realtime input/output tokens. Timing metrics (end of
utterance, voice latency) are not usage and are left out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..models.metrics import LLMMetrics, RealtimeMetrics, STTMetrics, TTSMetrics, UsageSummary

if TYPE_CHECKING:
    from .events import MetricsCollectedEvent


class UsageCollector:
    """Sums a session's metrics per model. ``UsageCollector(session)`` subscribes to the
    session's ``metrics_collected`` events (anything with an ``on(name, callback)``);
    ``add(metric)`` sums one by hand."""

    def __init__(self, session: Any = None) -> None:
        self._summaries: dict[str, UsageSummary] = {}
        if session is not None:
            session.on("metrics_collected", self._collected)

    @property
    def usage(self) -> dict[str, UsageSummary]:
        """One summary per model, by model name (its ``label`` when it reports none), in
        the order the models were first used."""
        return dict(self._summaries)

    def _collected(self, ev: MetricsCollectedEvent) -> None:
        self.add(ev.metrics)

    def add(self, metric: object) -> None:
        if isinstance(metric, LLMMetrics):
            self._sum(
                metric.model or metric.label,
                metric.provider,
                llm_requests=1,
                llm_prompt_tokens=metric.prompt_tokens,
                llm_completion_tokens=metric.completion_tokens,
                llm_cached_tokens=metric.cached_tokens or 0,
                llm_retries=metric.retries,
            )
        elif isinstance(metric, TTSMetrics):
            self._sum(
                metric.model or metric.label,
                metric.provider,
                tts_characters=metric.characters,
                tts_audio_duration=metric.audio_duration,
            )
        elif isinstance(metric, STTMetrics):
            self._sum(
                metric.model or metric.label,
                metric.provider,
                stt_audio_duration=metric.audio_duration,
            )
        elif isinstance(metric, RealtimeMetrics):
            self._sum(
                metric.model or metric.label,
                metric.provider,
                realtime_input_tokens=metric.input_tokens,
                realtime_output_tokens=metric.output_tokens,
                realtime_input_audio_tokens=metric.input_audio_tokens or 0,
                realtime_output_audio_tokens=metric.output_audio_tokens or 0,
                realtime_cached_tokens=metric.cached_tokens or 0,
            )

    def _sum(self, model: str, provider: str | None, **amounts: float) -> None:
        summary = self._summaries.get(model) or UsageSummary(model=model, provider=provider)
        totals = {name: getattr(summary, name) + value for name, value in amounts.items()}
        if summary.provider is None and provider is not None:
            totals["provider"] = provider
        self._summaries[model] = replace(summary, **totals)
