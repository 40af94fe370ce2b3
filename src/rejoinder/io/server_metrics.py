"""The server's Prometheus metrics (``GET /metrics``), one registry per application.

``ServerMetrics(gate)`` owns a ``CollectorRegistry`` of its own (never the process-wide
default), so two applications in one process (tests, a host serving two agents) keep
separate counts. What it exposes:

==========================================  ============================================
``rejoinder_sessions_live``                 gauge: sessions whose entry point is running
``rejoinder_sessions_started_total``        counter: sessions started
``rejoinder_sessions_refused_total``        counter: sessions refused (full, draining)
``rejoinder_draining``                      gauge: 1 once the server is draining
``rejoinder_transport_sessions``            gauge, ``transport``: live sessions by
                                            transport (``websocket``, ``webrtc``, ...)
``rejoinder_turns_total``                   counter: user turns the sessions took (a
                                            user message committed to the conversation:
                                            a spoken turn or a typed input)
``rejoinder_voice_latency_seconds``         histogram: end of the user's speech to the
                                            first agent audio heard
``rejoinder_llm_ttft_seconds``              histogram: LLM request to its first token
``rejoinder_tts_ttfb_seconds``              histogram: TTS request to its first audio
``rejoinder_errors_total``                  counter, ``source``: ``error`` events
``rejoinder_obligations_expired_total``     counter, ``kind``: a watchdog closed an
                                            obligation that stayed open too long
``rejoinder_sessions_detached``             gauge: sessions waiting for their client to
                                            resume (counted in ``sessions_live`` too)
``rejoinder_resumes_total``                 counter, ``outcome``: ``resumed`` (a client
                                            took its session back), ``expired`` (the
                                            grace ran out), ``evicted`` (too many were
                                            waiting), ``refused`` (a token named no
                                            session)
==========================================  ============================================

The first five are read from the ``SessionGate`` at scrape time, the last two (when the
app resumes sessions) from its ``ResumeRegistry``. The others are fed by
each session's events: ``observe(session)`` subscribes to them (the app puts it in every
connection's ``session_observers``) and unsubscribes when the session closes. Latencies
come from ``metrics_collected`` payloads, typed (``LLMMetrics.ttft``, ``TTSMetrics.ttfb``,
a voice-latency record's ``latency``) or plain dicts (``{"type": "llm", "ttft": ...}``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..models.chat import ChatMessage

if TYPE_CHECKING:
    from ..session import AgentSession
    from .admission import SessionGate
    from .connection import Connection
    from .resume import ResumeRegistry

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "ServerMetrics", "transport_counts"]

logger = logging.getLogger("rejoinder.io.server_metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of ``ServerMetrics.render()``."""

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
"""Histogram buckets (seconds) for voice latencies: a good reply starts within a second,
anything over five is broken (``+Inf`` is added)."""

_VOICE_KINDS = {"voice", "voice_latency", "latency", "turn", "e2e", "end_to_end"}
_VOICE_FIELDS = ("voice_latency", "latency", "e2e_latency", "end_to_end_latency")


def transport_counts(gate: SessionGate[Connection]) -> dict[str, int]:
    """Live sessions by transport."""
    return dict(Tally(conn.transport for conn in gate.connections))


class _GateCollector(Collector):
    """The session counts, read from the gate at scrape time."""

    def __init__(self, gate: SessionGate[Connection]) -> None:
        self._gate = gate

    def collect(self) -> Iterable[Metric]:
        gate = self._gate
        yield GaugeMetricFamily(
            "rejoinder_sessions_live", "Sessions whose entry point is running.", gate.live
        )
        yield CounterMetricFamily(
            "rejoinder_sessions_started",
            "Sessions started since the server started.",
            gate.started_total,
        )
        yield CounterMetricFamily(
            "rejoinder_sessions_refused",
            "Sessions refused (over the limit, or draining).",
            gate.refused_total,
        )
        yield GaugeMetricFamily(
            "rejoinder_draining", "1 once the server is draining.", int(gate.draining)
        )
        by_transport = GaugeMetricFamily(
            "rejoinder_transport_sessions", "Live sessions by transport.", labels=["transport"]
        )
        for transport, count in sorted(transport_counts(gate).items()):
            by_transport.add_metric([transport], count)
        yield by_transport


class _ResumeCollector(Collector):
    """The resuming counts, read from the registry at scrape time."""

    def __init__(self, resume: ResumeRegistry) -> None:
        self._resume = resume

    def collect(self) -> Iterable[Metric]:
        resume = self._resume
        yield GaugeMetricFamily(
            "rejoinder_sessions_detached",
            "Sessions waiting for their client to resume.",
            resume.detached,
        )
        outcomes = CounterMetricFamily(
            "rejoinder_resumes", "Sessions resumed, or not, by outcome.", labels=["outcome"]
        )
        outcomes.add_metric(["resumed"], resume.resumed_total)
        outcomes.add_metric(["expired"], resume.expired_total)
        outcomes.add_metric(["evicted"], resume.evicted_total)
        outcomes.add_metric(["refused"], resume.refused_total)
        yield outcomes


class ServerMetrics:
    """The metrics of one application (see the module docstring)."""

    def __init__(
        self,
        gate: SessionGate[Connection],
        *,
        labels: Mapping[str, str] | None = None,
        resume: ResumeRegistry | None = None,
    ) -> None:
        """``labels``: constant labels on every sample (a replica's name, a region), so
        several processes' metrics can be told apart where they are scraped together.
        ``resume``: the app's registry of sessions waiting for their client, if any."""
        self.registry = CollectorRegistry()
        self.registry.register(_GateCollector(gate))
        if resume is not None:
            self.registry.register(_ResumeCollector(resume))
        self._exposed = self.registry
        if labels:
            self._exposed = CollectorRegistry(auto_describe=False)
            self._exposed.register(_Labelled(self.registry, dict(labels)))
        reg = self.registry
        self.turns = Counter("rejoinder_turns", "User turns taken (spoken or typed).", registry=reg)
        self.voice_latency = Histogram(
            "rejoinder_voice_latency_seconds",
            "End of the user's speech to the first agent audio heard.",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.llm_ttft = Histogram(
            "rejoinder_llm_ttft_seconds",
            "LLM request to its first token.",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.tts_ttfb = Histogram(
            "rejoinder_tts_ttfb_seconds",
            "TTS request to its first audio.",
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.errors = Counter(
            "rejoinder_errors", "Session error events, by source.", ["source"], registry=reg
        )
        self.obligations_expired = Counter(
            "rejoinder_obligations_expired",
            "Obligations a watchdog closed (a stuck state caught), by kind.",
            ["kind"],
            registry=reg,
        )

    def render(self) -> bytes:
        """The metrics in the Prometheus text format (``CONTENT_TYPE``)."""
        return _generate_latest(self._exposed)

    # ------------------------------------------------------------ sessions

    def observe(self, session: AgentSession[Any]) -> Callable[[], None]:
        """Count ``session``'s events until it closes; returns a function that stops
        (idempotent; closing does it too)."""
        watch = _SessionWatch(self, session)
        return watch.detach

    def on_metrics(self, payload: Any) -> None:
        """One ``metrics_collected`` payload (typed or a dict)."""
        kind = _kind(payload)
        ttft = _seconds(_field(payload, "ttft"))
        if ttft is not None:
            self.llm_ttft.observe(ttft)
        ttfb = _seconds(_field(payload, "ttfb"))
        if ttfb is not None:
            self.tts_ttfb.observe(ttfb)
        for name in _VOICE_FIELDS:
            if name == "latency" and not (kind in _VOICE_KINDS or kind.startswith("voice")):
                continue  # a plain "latency" is the voice latency only in such a record
            latency = _seconds(_field(payload, name))
            if latency is not None:
                self.voice_latency.observe(latency)
                break

    def on_error(self, source: str, error: BaseException, kind: str | None = None) -> None:
        self.errors.labels(source=source or "unknown").inc()
        if source == "watchdog" or kind is not None:
            self.obligations_expired.labels(kind=kind or _expired_kind(error)).inc()


class _SessionWatch:
    """The subscriptions to one session's events."""

    def __init__(self, metrics: ServerMetrics, session: AgentSession[Any]) -> None:
        self._metrics = metrics
        self._session: AgentSession[Any] | None = session
        self._seen_expired: set[Any] = set()
        self._handlers: list[tuple[Any, Callable[[Any], None]]] = [
            ("conversation_item_added", self._item_added),
            ("metrics_collected", self._metrics_collected),
            ("error", self._error),
            ("close", self._closed),
        ]
        for name, handler in self._handlers:
            session.on(name, handler)

    def detach(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        for name, handler in self._handlers:
            session.off(name, handler)

    def _item_added(self, ev: Any) -> None:
        item = getattr(ev, "item", None)
        if isinstance(item, ChatMessage) and item.role == "user":
            self._metrics.turns.inc()

    def _metrics_collected(self, ev: Any) -> None:
        self._metrics.on_metrics(getattr(ev, "metrics", None))

    def _error(self, ev: Any) -> None:
        source = str(getattr(ev, "source", "") or "unknown")
        kind = self._timeline_kind() if source == "watchdog" else None
        self._metrics.on_error(source, getattr(ev, "error", None) or Exception(), kind)

    def _closed(self, _: Any) -> None:
        self.detach()

    def _timeline_kind(self) -> str | None:
        """The kind of the newest ``ob_expired`` entry not counted yet, when the session
        keeps a timeline."""
        try:
            timeline: Any = getattr(self._session, "timeline", None)
            expired = list(timeline.entries("ob_expired"))
        except Exception:  # no timeline (or not yet): the error's message names the kind
            return None
        for entry in reversed(expired):
            key = entry.get("id", id(entry)) if isinstance(entry, Mapping) else id(entry)
            if key in self._seen_expired:
                break
            self._seen_expired.add(key)
            kind = entry.get("ob") if isinstance(entry, Mapping) else None
            return str(kind) if kind else None
        return None


def _field(payload: Any, name: str) -> Any:
    if isinstance(payload, Mapping):
        return payload.get(name)
    return getattr(payload, name, None)


def _kind(payload: Any) -> str:
    kind = _field(payload, "type")
    if isinstance(kind, str) and kind:
        return kind.lower()
    name = type(payload).__name__.lower()
    return name.removesuffix("metrics") if name.endswith("metrics") else name


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _expired_kind(error: BaseException | None) -> str:
    """The obligation kind an ``ObligationExpiredError`` names ("reply obligation 'x'
    expired"), or ``"unknown"``."""
    kind = getattr(error, "kind", None)
    if kind:
        return str(getattr(kind, "value", kind))
    head, sep, _ = str(error).partition(" obligation ")
    return head.strip() if sep and head.strip() and " " not in head.strip() else "unknown"


class _Labelled(Collector):
    """Another registry's metrics with constant labels added to every sample."""

    def __init__(self, source: CollectorRegistry, labels: dict[str, str]) -> None:
        self._source = source
        self._labels = labels

    def collect(self) -> Iterable[Metric]:
        for metric in self._source.collect():
            out = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            for sample in metric.samples:
                out.add_sample(
                    sample.name,
                    {**self._labels, **sample.labels},
                    sample.value,
                    sample.timestamp,
                    sample.exemplar,
                )
            yield out
