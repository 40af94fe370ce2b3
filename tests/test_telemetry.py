"""rejoinder.telemetry: the span tree of a session, on virtual time, with the SDK's
in-memory exporter (the global tracer provider is never set)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, Tracer

import rejoinder as rj
from rejoinder.models.metrics import LLMMetrics, STTMetrics, TTSMetrics
from rejoinder.session.events import MetricsCollectedEvent
from rejoinder.telemetry import trace_session
from rejoinder.testing import ScriptedLLM, ToolCall

NS = 1_000_000_000


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("rejoinder-test")


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return sorted(
        (s for s in exporter.get_finished_spans() if s.name == name),
        key=lambda s: (s.start_time or 0, s.end_time or 0),
    )


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = spans(exporter, name)
    return span


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def duration(span: ReadableSpan) -> int:
    assert span.start_time is not None and span.end_time is not None
    return span.end_time - span.start_time


def state_events(span: ReadableSpan, name: str = "agent_state") -> list[tuple[Any, Any]]:
    return [
        (e.attributes["old"], e.attributes["new"])
        for e in span.events
        if e.name == name and e.attributes is not None
    ]


class Helper(rj.Agent):
    instructions = "You help."

    @rj.function_tool
    async def slow(self) -> str:
        """Take two seconds."""
        await asyncio.sleep(2)
        return "done"

    @rj.function_tool
    async def refuse(self) -> str:
        """Always fails."""
        raise rj.ToolError("not allowed")

    @rj.function_tool
    async def transfer(self) -> rj.Agent:
        """Hand over to billing."""
        return Billing()


class Billing(rj.Agent):
    instructions = "You do billing."

    async def on_enter(self) -> None:
        self.session.say("Billing here.")


async def test_a_tool_turn_gives_session_turn_llm_tool_llm(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([["Let me check.", ToolCall("slow")], ["Done."]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        await session.run(user_input="How long?")
    session_span = one(exporter, "rejoinder.session")
    turn = one(exporter, "rejoinder.turn")
    tool = one(exporter, "rejoinder.tool")
    first, follow_up = spans(exporter, "rejoinder.llm")
    assert parent_of(session_span) is None
    assert parent_of(turn) == span_id(session_span)
    assert {parent_of(first), parent_of(tool), parent_of(follow_up)} == {span_id(turn)}
    assert session_span.attributes is not None
    assert session_span.attributes["rejoinder.agent.id"] == "Helper"
    assert session_span.attributes["rejoinder.turn.count"] == 1
    assert session_span.attributes["rejoinder.close.reason"] == "closed"
    # Virtual time: the tool slept exactly 2 s, and the turn lasted as long.
    assert duration(tool) == 2 * NS
    assert duration(turn) == 2 * NS
    assert first.start_time == turn.start_time and follow_up.end_time == turn.end_time
    assert tool.attributes is not None and dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "slow",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
    }
    assert tool.status.status_code is StatusCode.UNSET
    for span in (first, follow_up):
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "scripted"
        assert span.attributes["gen_ai.provider.name"] == "rejoinder.testing"
        assert span.attributes["gen_ai.system"] == "rejoinder.testing"
    assert state_events(turn) == [
        ("initializing", "thinking"),  # asked for right after start(): no listening first
        ("thinking", "speaking"),
        ("speaking", "thinking"),
        ("thinking", "speaking"),
        ("speaking", "listening"),
    ]
    assert state_events(session_span) == []


async def test_a_failing_tool_has_an_error_status(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([[ToolCall("refuse")], ["Sorry."]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        await session.run(user_input="Do it.")
    tool = one(exporter, "rejoinder.tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "not allowed"
    assert tool.attributes is not None and tool.attributes["error.type"] == "tool_error"


async def test_an_error_event_marks_the_turn(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([])  # no response left: an LLMError for the reply
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        await session.run(user_input="Hello?")
    turn = one(exporter, "rejoinder.turn")
    assert turn.status.status_code is StatusCode.ERROR
    (exception,) = [e for e in turn.events if e.name == "exception"]
    assert exception.attributes is not None
    assert str(exception.attributes["exception.type"]).endswith("LLMError")
    assert exception.attributes["rejoinder.error.source"] == "llm"
    assert one(exporter, "rejoinder.session").status.status_code is StatusCode.UNSET


async def test_a_handoff_span_lasts_until_the_new_agent_speaks(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([[ToolCall("transfer")]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        await session.run(user_input="Billing, please.")
    turn = one(exporter, "rejoinder.turn")
    handoff = one(exporter, "rejoinder.handoff")
    assert parent_of(handoff) == span_id(turn)
    assert handoff.attributes is not None
    assert handoff.attributes["rejoinder.handoff.old_agent_id"] == "Helper"
    assert handoff.attributes["rejoinder.handoff.new_agent_id"] == "Billing"
    assert handoff.attributes["gen_ai.agent.id"] == "Billing"
    assert handoff.end_time is not None and turn.end_time is not None
    assert handoff.end_time <= turn.end_time
    session_span = one(exporter, "rejoinder.session")
    assert session_span.attributes is not None
    assert tuple(session_span.attributes["rejoinder.agent.ids"]) == ("Helper", "Billing")  # type: ignore[arg-type]


async def test_two_turns_give_two_turn_spans(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([["One."], ["Two."]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        await session.run(user_input="first")
        await asyncio.sleep(5)
        await session.run(user_input="second")
    first, second = spans(exporter, "rejoinder.turn")
    assert [t.attributes and t.attributes["rejoinder.turn.index"] for t in (first, second)] == [
        1,
        2,
    ]
    assert second.start_time is not None and first.start_time is not None
    assert second.start_time - first.start_time == 5 * NS
    llms = spans(exporter, "rejoinder.llm")
    assert [parent_of(s) for s in llms] == [span_id(first), span_id(second)]


async def test_attaching_twice_is_an_error(tracer: Tracer) -> None:
    async with rj.AgentSession(llm=ScriptedLLM([]), user_away_timeout=None) as session:
        trace = trace_session(session, tracer)
        with pytest.raises(RuntimeError, match="already traced"):
            trace_session(session, tracer)
        trace.close()
        trace_session(session, tracer).close()  # after a close it may be traced again
    with pytest.raises(TypeError):
        trace_session("session", tracer)  # type: ignore[arg-type]


async def test_closing_the_trace_ends_open_spans(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    gate = asyncio.Event()

    class Waiter(rj.Agent):
        instructions = "You wait."

        @rj.function_tool
        async def wait(self) -> str:
            """Wait for the gate."""
            await gate.wait()
            return "opened"

    llm = ScriptedLLM([[ToolCall("wait")], ["Opened."]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace = trace_session(session, tracer)
        await session.start(Waiter())
        run = asyncio.ensure_future(session.run(user_input="Wait."))
        await asyncio.sleep(3)
        trace.close()
        assert trace.closed
        ended = {s.name: s for s in exporter.get_finished_spans()}
        assert {"rejoinder.session", "rejoinder.turn", "rejoinder.tool"} <= set(ended)
        for name in ("rejoinder.turn", "rejoinder.tool"):
            assert ended[name].attributes is not None
            assert ended[name].attributes["rejoinder.unfinished"] is True
        assert duration(ended["rejoinder.tool"]) == 3 * NS
        count = len(exporter.get_finished_spans())
        gate.set()
        await run
    assert len(exporter.get_finished_spans()) == count  # nothing more after the close


async def test_the_session_closing_ends_open_spans(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    class Stuck(rj.Agent):
        instructions = "You hang."

        @rj.function_tool
        async def hang(self) -> str:
            """Never returns."""
            await asyncio.Event().wait()
            return ""

    session = rj.AgentSession(llm=ScriptedLLM([[ToolCall("hang")]]), user_away_timeout=None)
    trace = trace_session(session, tracer)
    await session.start(Stuck())
    session.generate_reply(user_input="Go.")
    await asyncio.sleep(1)
    await session.aclose(reason="bye")
    assert trace.closed
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["rejoinder.llm", "rejoinder.session", "rejoinder.tool", "rejoinder.turn"]
    session_span = one(exporter, "rejoinder.session")
    assert session_span.attributes is not None
    assert session_span.attributes["rejoinder.close.reason"] == "bye"
    assert duration(session_span) == 1 * NS
    # The session ends the hung call with an interrupted output before it closes.
    tool = one(exporter, "rejoinder.tool")
    assert duration(tool) == 1 * NS
    assert tool.status.status_code is StatusCode.ERROR
    assert duration(one(exporter, "rejoinder.turn")) == 1 * NS


async def test_typed_metrics_give_timed_spans_with_usage(
    exporter: InMemorySpanExporter, tracer: Tracer
) -> None:
    llm = ScriptedLLM([["Hi."]])
    async with rj.AgentSession(llm=llm, user_away_timeout=None) as session:
        trace_session(session, tracer)
        await session.start(Helper())
        loop = asyncio.get_running_loop()
        await asyncio.sleep(10)
        now = loop.time()
        emit = session._events.emit  # the session's own emitter, as its parts report metrics
        # Recognized just before the transcript: it belongs to the turn that follows.
        stt = STTMetrics(timestamp=now, label="x.STT", audio_duration=1.5, latency=0.25)
        emit("metrics_collected", MetricsCollectedEvent(stt))
        await session.run(user_input="hello")
        end = loop.time()
        for metric in (
            LLMMetrics(
                timestamp=end,
                label="x.LLM",
                model="gpt-test",
                provider="openai",
                speech_id="speech_1",
                ttft=0.2,
                duration=0.75,
                prompt_tokens=12,
                completion_tokens=5,
            ),
            TTSMetrics(
                timestamp=end,
                label="x.TTS",
                speech_id="speech_1",
                ttfb=0.1,
                duration=0.5,
                characters=3,
                audio_duration=0.4,
            ),
        ):
            emit("metrics_collected", MetricsCollectedEvent(metric))
        # The untyped payload of earlier versions; a metric with no span is an event.
        latency = {"type": "voice_latency", "timestamp": end, "latency": 0.5}
        emit("metrics_collected", MetricsCollectedEvent(latency))  # type: ignore[arg-type]
    turn = one(exporter, "rejoinder.turn")
    stt_span = one(exporter, "rejoinder.stt")
    assert parent_of(stt_span) == span_id(turn)
    assert duration(stt_span) == 1.75 * NS
    assert stt_span.attributes is not None and stt_span.attributes["rejoinder.stt.latency"] == 0.25
    (typed,) = [
        s
        for s in spans(exporter, "rejoinder.llm")
        if s.attributes and "x.LLM" in s.attributes.values()
    ]
    assert duration(typed) == 0.75 * NS
    assert typed.attributes is not None
    assert typed.attributes["gen_ai.request.model"] == "gpt-test"
    assert typed.attributes["gen_ai.provider.name"] == "openai"
    assert typed.attributes["gen_ai.usage.input_tokens"] == 12
    assert typed.attributes["gen_ai.usage.output_tokens"] == 5
    assert typed.attributes["rejoinder.llm.ttft"] == 0.2
    (event,) = [e for e in one(exporter, "rejoinder.session").events if e.name == "voice_latency"]
    assert event.attributes is not None and dict(event.attributes) == {"latency": 0.5}
    tts = one(exporter, "rejoinder.tts")
    assert duration(tts) == 0.5 * NS
    assert tts.attributes is not None and tts.attributes["rejoinder.tts.characters"] == 3


async def test_default_tracer_and_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    async with rj.AgentSession(llm=ScriptedLLM([]), user_away_timeout=None) as session:
        trace_session(session).close()  # the global (no-op) tracer: nothing breaks
        monkeypatch.setitem(sys.modules, "opentelemetry", None)
        monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
        with pytest.raises(ImportError, match=r"pip install 'rejoinder\[otel\]'"):
            trace_session(session)
