"""OpenTelemetry traces of a session (optional: ``pip install 'rejoinder[otel]'``).

``trace_session(session)``, called before ``session.start``, subscribes to the session's
public events and turns them into spans::

    rejoinder.session      attach .. close (rejoinder.session.id, rejoinder.agent.id)
      rejoinder.turn       a final transcript or typed input .. the agent is ``listening``
                           again (the end of a turn, as for ``session.run``)
        rejoinder.stt      one recognized utterance (its audio and its recognition)
        rejoinder.llm      one chat-model generation, or one realtime response
        rejoinder.tts      the synthesis of one speech
        rejoinder.tool     a FunctionCall on record .. its FunctionCallOutput
        rejoinder.handoff  an AgentHandoff .. the new agent speaks or listens

Work outside a user turn (a greeting, a ``say()``) hangs off the session span. State
changes are span events (``agent_state``, ``user_state``, with ``old`` and ``new``) on the
current turn span, or the session span between turns; an ``error`` event is an exception
event and an ERROR status there, and a tool output that ``is_error`` makes its span ERROR.

LLM, TTS and STT spans come from ``metrics_collected``. A metric describes an operation
that already ended, so its span gets explicit times: end = its ``timestamp`` (or when it
arrived), start = end - its duration. Other metrics (``eou``, ``voice_latency``) are span
events. Each scalar field of a metric is an attribute ``rejoinder.<type>.<field>``.

Attribute names follow the OpenTelemetry GenAI semantic conventions (status Development),
https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/ (inference and execute
tool spans): ``gen_ai.operation.name`` (``chat``, ``execute_tool``), ``gen_ai.request.model``,
``gen_ai.provider.name`` (and the older ``gen_ai.system``), ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``, ``gen_ai.usage.cache_read.input_tokens``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``gen_ai.agent.id``,
``gen_ai.conversation.id``, ``error.type``. Content (transcripts, tool arguments and
results) is recorded only with ``capture_content=True``.

Times are event-loop seconds turned into epoch nanoseconds by one offset taken at attach,
so on virtual time a span's duration is exact.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import _extras
from .models.chat import AgentHandoff, FunctionCall, FunctionCallOutput
from .session.events import ErrorEvent

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

    from .session.events import (
        AgentStateChangedEvent,
        CloseEvent,
        ConversationItemAddedEvent,
        FunctionToolsExecutedEvent,
        MetricsCollectedEvent,
        SpeechCreatedEvent,
        UserInputTranscribedEvent,
        UserStateChangedEvent,
    )
    from .session.session import AgentSession

__all__ = ["SessionTrace", "trace_session"]

_attached: weakref.WeakSet[AgentSession[Any]] = weakref.WeakSet()


def trace_session(
    session: AgentSession[Any], tracer: Tracer | None = None, *, capture_content: bool = False
) -> SessionTrace:
    """Trace ``session`` (attach before ``session.start``) with ``tracer``, by default
    ``opentelemetry.trace.get_tracer("rejoinder")``. A session is traced once at a time:
    attaching again before the first trace closed raises ``RuntimeError``. With
    ``capture_content`` transcripts and tool arguments and outputs are recorded too."""
    with _extras.needed("otel", "rejoinder.telemetry"):
        from opentelemetry import trace
    from .session.session import AgentSession

    if not isinstance(session, AgentSession):
        raise TypeError(f"trace_session() needs an rj.AgentSession, got {type(session).__name__}")
    if session in _attached:
        raise RuntimeError("this session is already traced (close that SessionTrace first)")
    loop = asyncio.get_running_loop()
    _attached.add(session)
    return SessionTrace(
        session, tracer or trace.get_tracer("rejoinder"), loop, capture_content=capture_content
    )


class SessionTrace:
    """The spans of one session. Ends them all on the session's ``close`` event or on
    ``close()``; ``span`` is the session span (add attributes of your own to it)."""

    def __init__(
        self,
        session: AgentSession[Any],
        tracer: Tracer,
        loop: asyncio.AbstractEventLoop,
        *,
        capture_content: bool = False,
    ) -> None:
        self._session = session
        self._tracer = tracer
        self._loop = loop
        self._content = capture_content
        self._offset_ns = time.time_ns() - round(loop.time() * 1e9)
        self.session_id: str = session.id
        ids = {"rejoinder.session.id": self.session_id, "gen_ai.conversation.id": self.session_id}
        self.span: Span = tracer.start_span(
            "rejoinder.session", attributes=ids, start_time=self._ns(loop.time())
        )
        self._turn: Span | None = None
        self._turns = 0
        self._tools: dict[str, Span] = {}
        self._handoffs: list[Span] = []
        self._pending_stt: list[tuple[str, dict[str, Any]]] = []
        self._agents: list[str] = []
        self._closed = False
        self._handlers: dict[str, Callable[[Any], None]] = {
            "agent_state_changed": self._on_agent_state,
            "user_state_changed": self._on_user_state,
            "user_input_transcribed": self._on_transcribed,
            "conversation_item_added": self._on_item,
            "speech_created": self._on_speech,
            "function_tools_executed": self._on_tools_executed,
            "metrics_collected": self._on_metrics,
            "error": self._on_error,
            "close": self._on_close,
        }
        for name, callback in self._handlers.items():
            session.on(name, callback)  # type: ignore[arg-type]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop tracing: unsubscribe and end every open span now (idempotent)."""
        self._finish(self._loop.time())

    def _ns(self, loop_seconds: float) -> int:
        return self._offset_ns + round(loop_seconds * 1e9)

    @property
    def _target(self) -> Span:
        return self._turn if self._turn is not None else self.span

    def _child(
        self,
        name: str,
        start: float,
        attributes: Mapping[str, AttributeValue],
        *,
        parent: Span | None = None,
        client: bool = False,
    ) -> Span:
        from opentelemetry.trace import SpanKind, set_span_in_context

        return self._tracer.start_span(
            name,
            context=set_span_in_context(parent or self._target),
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
            attributes=attributes,
            start_time=self._ns(start),
        )

    def _note_agent(self) -> str | None:
        """The current agent's id (recorded on the session span the first time)."""
        try:
            agent_id: str = self._session.current_agent.id
        except RuntimeError:  # not started yet
            return self._agents[-1] if self._agents else None
        if not self._agents:
            self.span.set_attribute("rejoinder.agent.id", agent_id)
            self.span.set_attribute("gen_ai.agent.id", agent_id)
        if not self._agents or self._agents[-1] != agent_id:
            self._agents.append(agent_id)
        return agent_id

    def _on_agent_state(self, ev: AgentStateChangedEvent) -> None:
        self._note_agent()
        at = ev.created_at
        self._target.add_event(
            "agent_state", {"old": ev.old_state, "new": ev.new_state}, timestamp=self._ns(at)
        )
        if ev.new_state == "listening" or (ev.new_state, ev.old_state) == ("speaking", "thinking"):
            # The new agent entered: it speaks, or has nothing to say.
            for span in self._handoffs:
                span.end(end_time=self._ns(at))
            self._handoffs.clear()
        if ev.new_state == "listening" and self._turn is not None:
            self._turn.end(end_time=self._ns(at))
            self._turn = None

    def _on_user_state(self, ev: UserStateChangedEvent) -> None:
        change = {"old": ev.old_state, "new": ev.new_state}
        self._target.add_event("user_state", change, timestamp=self._ns(ev.created_at))

    def _on_transcribed(self, ev: UserInputTranscribedEvent) -> None:
        if not ev.is_final:
            return
        now = self._loop.time()
        text: dict[str, AttributeValue] = {"transcript": ev.transcript} if self._content else {}
        if self._turn is not None:  # more input before the agent was listening again
            self._turn.add_event("user_input", text, timestamp=self._ns(now))
            return
        self._turns += 1
        attributes: dict[str, AttributeValue] = {"rejoinder.turn.index": self._turns}
        agent_id = self._note_agent()
        if agent_id is not None:
            attributes["rejoinder.agent.id"] = agent_id
        if self._content:
            attributes["rejoinder.user.transcript"] = ev.transcript
        self._turn = self._child("rejoinder.turn", now, attributes, parent=self.span)
        pending, self._pending_stt = self._pending_stt, []
        for kind, metric in pending:  # recognized just before the turn opened
            self._metric_span(kind, metric, now)

    def _on_item(self, ev: ConversationItemAddedEvent) -> None:
        item, now = ev.item, self._loop.time()
        if isinstance(item, FunctionCall):
            attributes = _tool(item)
            if self._content:
                attributes["gen_ai.tool.call.arguments"] = item.arguments
            previous = self._tools.pop(item.call_id, None)
            if previous is not None:
                previous.end(end_time=self._ns(now))
            self._tools[item.call_id] = self._child("rejoinder.tool", now, attributes)
        elif isinstance(item, FunctionCallOutput):
            self._end_tool(item, now)
        elif isinstance(item, AgentHandoff):
            attributes = {
                "rejoinder.handoff.new_agent_id": item.new_agent_id,
                "gen_ai.agent.id": item.new_agent_id,
            }
            if item.old_agent_id is not None:
                attributes["rejoinder.handoff.old_agent_id"] = item.old_agent_id
            self._handoffs.append(self._child("rejoinder.handoff", now, attributes))
            if not self._agents or self._agents[-1] != item.new_agent_id:
                self._agents.append(item.new_agent_id)

    def _end_tool(self, output: FunctionCallOutput, now: float) -> None:
        span = self._tools.pop(output.call_id, None)
        if span is None:  # its call was never seen: an instant span
            span = self._child("rejoinder.tool", now, _tool(output))
        if self._content:
            span.set_attribute("gen_ai.tool.call.result", output.output)
        if output.is_error:
            from opentelemetry.trace import StatusCode

            span.set_attribute("error.type", "tool_error")
            span.set_status(StatusCode.ERROR, output.output)
        span.end(end_time=self._ns(now))

    def _on_speech(self, ev: SpeechCreatedEvent) -> None:
        speech = {"speech_id": ev.speech_handle.id, "source": ev.source}
        at = self._ns(self._loop.time())
        self._target.add_event("speech_created", speech, timestamp=at)

    def _on_tools_executed(self, ev: FunctionToolsExecutedEvent) -> None:
        now = self._loop.time()
        for output in ev.function_call_outputs:  # normally ended by their items already
            if output is not None and output.call_id in self._tools:
                self._end_tool(output, now)

    def _on_metrics(self, ev: MetricsCollectedEvent) -> None:
        metric = _as_dict(ev.metrics)
        if metric is None:
            return
        kind = str(metric.get("type", "metrics"))
        if kind == "stt" and self._turn is None:
            self._pending_stt.append((kind, metric))  # its turn opens with the transcript
        else:
            self._metric_span(kind, metric, self._loop.time())

    def _metric_span(self, kind: str, metric: dict[str, Any], now: float) -> None:
        end = _number(metric.get("timestamp"), now)
        attributes: dict[str, AttributeValue] = {
            f"rejoinder.{kind}.{key}": value
            for key, value in metric.items()
            if key not in ("type", "timestamp") and isinstance(value, str | bool | int | float)
        }
        name = {"llm": "llm", "realtime": "llm", "tts": "tts", "stt": "stt"}.get(kind)
        if name is None:
            plain = {k.rsplit(".", 1)[-1]: v for k, v in attributes.items()}
            self._target.add_event(kind, plain, timestamp=self._ns(end))
            return
        took = _number(metric.get("duration"), 0.0)
        if kind == "stt":  # the utterance's audio, then its recognition
            took = _number(metric.get("audio_duration"), 0.0) + _number(metric.get("latency"), 0.0)
        if name == "llm":
            attributes.update(self._llm_attributes(metric))
        span = self._child(f"rejoinder.{name}", end - took, attributes, client=name == "llm")
        span.end(end_time=self._ns(end))

    def _llm_attributes(self, metric: dict[str, Any]) -> dict[str, AttributeValue]:
        llm = self._model()
        model = metric.get("model") or getattr(llm, "model", None)
        provider = metric.get("provider") or getattr(llm, "provider", None)
        attributes: dict[str, AttributeValue] = {"gen_ai.operation.name": "chat"}
        if isinstance(model, str):
            attributes["gen_ai.request.model"] = model
        if isinstance(provider, str):
            attributes["gen_ai.provider.name"] = provider
            attributes["gen_ai.system"] = provider
        for name, keys in (
            ("gen_ai.usage.input_tokens", ("prompt_tokens", "input_tokens")),
            ("gen_ai.usage.output_tokens", ("completion_tokens", "output_tokens")),
            ("gen_ai.usage.cache_read.input_tokens", ("cached_tokens",)),
        ):
            for key in keys:
                value = metric.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    attributes[name] = value
                    break
        return attributes

    def _model(self) -> object:
        """The model replies are generated with now: the agent's own, else the session's."""
        try:
            own = self._session.current_agent.llm
        except RuntimeError:
            own = None
        return own if own is not None else self._session.llm

    def _on_error(self, ev: ErrorEvent) -> None:
        from opentelemetry.trace import StatusCode

        at = self._ns(self._loop.time())
        what: dict[str, AttributeValue] = {
            "rejoinder.error.source": ev.source,
            "rejoinder.error.recoverable": ev.recoverable,
        }
        for span in {self._target, self._target if ev.recoverable else self.span}:
            span.record_exception(ev.error, what, timestamp=at)
            span.set_status(StatusCode.ERROR, f"{ev.source}: {ev.error}")

    def _on_close(self, ev: CloseEvent) -> None:
        self.span.set_attribute("rejoinder.close.reason", ev.reason)
        if ev.error is not None:
            self._on_error(ErrorEvent(ev.error, source="close", recoverable=False))
        self._finish(self._loop.time())

    def _finish(self, at: float) -> None:
        if self._closed:
            return
        self._closed = True
        for name, callback in self._handlers.items():
            self._session.off(name, callback)  # type: ignore[arg-type]
        _attached.discard(self._session)
        end = self._ns(at)
        for span in (*self._tools.values(), *self._handoffs):
            span.set_attribute("rejoinder.unfinished", True)
            span.end(end_time=end)
        self._tools.clear()
        self._handoffs.clear()
        pending, self._pending_stt = self._pending_stt, []
        for kind, metric in pending:
            self._metric_span(kind, metric, at)
        if self._turn is not None:
            self._turn.set_attribute("rejoinder.unfinished", True)
            self._turn.end(end_time=end)
            self._turn = None
        if self._agents:
            self.span.set_attribute("rejoinder.agent.ids", list(self._agents))
        self.span.set_attribute("rejoinder.turn.count", self._turns)
        self.span.end(end_time=end)


def _tool(item: FunctionCall | FunctionCallOutput) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": item.name,
        "gen_ai.tool.call.id": item.call_id,
        "gen_ai.tool.type": "function",
    }


def _as_dict(metrics: object) -> dict[str, Any] | None:
    """The payload of a metric: a typed metric (its ``to_dict()``) or a dict."""
    to_dict = getattr(metrics, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
        return dict(value) if isinstance(value, Mapping) else None
    return dict(metrics) if isinstance(metrics, Mapping) else None


def _number(value: object, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default
