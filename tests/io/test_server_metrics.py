"""``GET /metrics``: the app's own Prometheus registry, fed by the gate and by every
session's events, over a real socket on 127.0.0.1 in real time (scripted models)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.admission import SessionGate
from rejoinder.io.app import GATE, METRICS
from rejoinder.io.protocol import ErrorMessage, TranscriptMessage
from rejoinder.io.server_metrics import ServerMetrics
from rejoinder.models.chat import ChatMessage
from rejoinder.models.metrics import LLMMetrics, TTSMetrics, VoiceLatencyMetrics
from rejoinder.session.events import ConversationItemAddedEvent, ErrorEvent
from rejoinder.session.turn_state import ObligationExpiredError
from rejoinder.testing import Fail, ScriptedTTS, speech_frame

from ._client import VoiceClient, scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

MIC = 16000
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by name and labels (the text must parse as Prometheus text)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


Start = Callable[..., Awaitable[tuple[TestServer, SessionGate[Connection]]]]


@pytest.fixture
async def serve() -> AsyncIterator[Start]:
    servers: list[TestServer] = []

    async def start(
        replies: list[list[Any]], transcripts: list[str], max_sessions: int | None = None
    ) -> tuple[TestServer, SessionGate[Connection]]:
        make = scripted_session(replies, transcripts, lambda: ScriptedTTS(seconds_per_char=0.02))

        async def entrypoint(conn: Connection) -> None:
            await conn.serve(make(), rj.Agent(instructions="test"))

        app = create_app(entrypoint, max_sessions=max_sessions, webrtc=False, page=False)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return server, app[GATE]

    yield start
    for server in servers:
        await server.close()


async def scrape(http: aiohttp.ClientSession, server: TestServer) -> Samples:
    async with http.get(server.make_url("/metrics")) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(await response.text())


async def test_one_spoken_turn_is_counted_with_its_latencies(serve: Start) -> None:
    server, gate = await serve([["Hello there."]], ["Hi."])
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.make_url("/ws")) as ws:
            client = VoiceClient(ws, MIC, jitter=0.1)
            await client.start()
            await client.silence(0.2)
            await client.speak(speech_frame(0.5, MIC).to_pcm())
            await client.wait_for(
                lambda m: isinstance(m, TranscriptMessage) and m.role == "agent", 10
            )
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            during = await scrape(http, server)
            await client.close()
        await asyncio.wait_for(gate.wait_idle(), 10)
        after = await scrape(http, server)

    assert value(during, "rejoinder_sessions_live") == 1
    assert value(during, "rejoinder_transport_sessions", transport="websocket") == 1
    assert value(during, "rejoinder_sessions_started_total") == 1
    assert value(during, "rejoinder_turns_total") == 1
    assert value(during, "rejoinder_voice_latency_seconds_count") == 1
    # The user's silence to the reply heard: endpointing, the scripted models and the
    # client's jitter buffer (0.1 s) at least, well under a few seconds here.
    assert 0.1 < value(during, "rejoinder_voice_latency_seconds_sum") < 3.0
    assert value(during, "rejoinder_voice_latency_seconds_bucket", le="+Inf") == 1
    assert value(during, "rejoinder_llm_ttft_seconds_count") == 1
    assert value(during, "rejoinder_tts_ttfb_seconds_count") >= 1
    assert value(during, "rejoinder_errors_total", source="llm") == 0
    assert value(after, "rejoinder_sessions_live") == 0
    assert value(after, "rejoinder_transport_sessions", transport="websocket") == 0
    assert value(after, "rejoinder_sessions_started_total") == 1
    assert value(after, "rejoinder_turns_total") == 1


async def test_an_error_event_counts_under_its_source(serve: Start) -> None:
    server, gate = await serve([[Fail("no model today")]], [])
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.make_url("/ws")) as ws:
            client = VoiceClient(ws, MIC)
            await client.start()
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            await ws.send_json({"type": "text", "text": "Hello?"})
            await client.wait_for(lambda m: isinstance(m, ErrorMessage), 5)
            samples = await scrape(http, server)
            await client.close()
        await asyncio.wait_for(gate.wait_idle(), 10)

    assert value(samples, "rejoinder_errors_total", source="llm") == 1
    assert value(samples, "rejoinder_turns_total") == 1  # a typed input is a turn too


async def test_refused_sessions_and_the_drain_are_counted(serve: Start) -> None:
    server, gate = await serve([["Hello."]], ["Hi."], max_sessions=1)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.make_url("/ws")) as ws:
            client = VoiceClient(ws, MIC)
            await client.start()
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(server.make_url("/ws"))
            assert refused.value.status == 503
            samples = await scrape(http, server)
            gate.stop_admitting()
            draining = await scrape(http, server)
            async with http.get(server.make_url("/healthz")) as response:
                assert response.status == 503
                assert (await response.json())["status"] == "draining"
            await client.close()
        await asyncio.wait_for(gate.wait_idle(), 10)

    assert value(samples, "rejoinder_sessions_refused_total") == 1
    assert value(samples, "rejoinder_sessions_started_total") == 1
    assert value(samples, "rejoinder_draining") == 0
    assert value(draining, "rejoinder_draining") == 1


async def test_two_apps_in_one_process_keep_separate_counts(serve: Start) -> None:
    first, first_gate = await serve([["Hello."]], [])
    second, _ = await serve([["Hello."]], [])
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(first.make_url("/ws")) as ws:
            client = VoiceClient(ws, MIC)
            await client.start()
            await client.until(lambda: client.states()[-1][1] == "listening", 5)
            await ws.send_json({"type": "text", "text": "Hello?"})
            await client.wait_for(
                lambda m: isinstance(m, TranscriptMessage) and m.role == "agent", 10
            )
            await client.close()
        await asyncio.wait_for(first_gate.wait_idle(), 10)
        one = await scrape(http, first)
        other = await scrape(http, second)

    assert value(one, "rejoinder_sessions_started_total") == 1
    assert value(one, "rejoinder_turns_total") == 1
    assert value(one, "rejoinder_llm_ttft_seconds_count") == 1
    assert value(other, "rejoinder_sessions_started_total") == 0
    assert value(other, "rejoinder_turns_total") == 0
    assert value(other, "rejoinder_llm_ttft_seconds_count") == 0
    assert first.app[METRICS].registry is not second.app[METRICS].registry


class FakeSession:
    """Just the event subscription of a session (and a timeline, when given)."""

    def __init__(self, timeline: Any = None) -> None:
        self.handlers: dict[str, list[Callable[[Any], None]]] = {}
        if timeline is not None:
            self.timeline = timeline

    def on(self, name: str, callback: Callable[[Any], None]) -> None:
        self.handlers.setdefault(name, []).append(callback)

    def off(self, name: str, callback: Callable[[Any], None]) -> None:
        self.handlers[name].remove(callback)

    def emit(self, name: str, event: Any) -> None:
        for callback in list(self.handlers.get(name, [])):
            callback(event)


class FakeTimeline:
    def __init__(self) -> None:
        self.expired: list[dict[str, Any]] = []

    def entries(self, *kinds: str) -> list[dict[str, Any]]:
        return list(self.expired) if "ob_expired" in kinds else []


def samples_of(metrics: ServerMetrics) -> Samples:
    return parse(metrics.render().decode())


def test_typed_and_dict_payloads_watchdogs_and_unsubscribing() -> None:
    metrics = ServerMetrics(SessionGate())
    session = FakeSession()
    metrics.observe(session)  # type: ignore[arg-type]
    payloads: list[Any] = [
        {"type": "llm", "speech_id": "s", "ttft": 0.25, "duration": 1.0, "retries": 0},
        LLMMetrics(timestamp=1.0, label="x", speech_id="s", ttft=0.5, duration=1.0),
        LLMMetrics(timestamp=1.0, label="x", speech_id="s", ttft=None, duration=1.0),
        TTSMetrics(
            timestamp=1.0,
            label="x",
            speech_id="s",
            ttfb=0.08,
            duration=1.0,
            characters=5,
            audio_duration=1.0,
        ),
        VoiceLatencyMetrics(timestamp=2.0, speech_id="s", latency=0.9, user_speech_ended_at=1.1),
        {"type": "stt", "latency": 0.3},  # not a voice latency
        None,
    ]
    for payload in payloads:
        session.emit("metrics_collected", rj.MetricsCollectedEvent(payload))
    session.emit(
        "conversation_item_added",
        ConversationItemAddedEvent(ChatMessage(role="user", content="hi")),
    )
    session.emit(
        "conversation_item_added",
        ConversationItemAddedEvent(ChatMessage(role="assistant", content="hello")),
    )
    expired = ObligationExpiredError("tool obligation 'lookup' expired")
    session.emit("error", ErrorEvent(expired, source="watchdog", recoverable=True))
    session.emit("error", ErrorEvent(RuntimeError("x"), source="tts", recoverable=True))
    session.emit("close", None)
    assert session.handlers == {name: [] for name in session.handlers}
    session_after = samples_of(metrics)
    assert value(session_after, "rejoinder_llm_ttft_seconds_count") == 2
    assert value(session_after, "rejoinder_llm_ttft_seconds_sum") == pytest.approx(0.75)
    assert value(session_after, "rejoinder_llm_ttft_seconds_bucket", le="0.3") == 1
    assert value(session_after, "rejoinder_tts_ttfb_seconds_count") == 1
    assert value(session_after, "rejoinder_voice_latency_seconds_count") == 1
    assert value(session_after, "rejoinder_voice_latency_seconds_sum") == pytest.approx(0.9)
    assert value(session_after, "rejoinder_turns_total") == 1
    assert value(session_after, "rejoinder_errors_total", source="watchdog") == 1
    assert value(session_after, "rejoinder_errors_total", source="tts") == 1
    assert value(session_after, "rejoinder_obligations_expired_total", kind="tool") == 1

    # A session with a timeline: the kind comes from its ob_expired entry.
    timeline = FakeTimeline()
    other = FakeSession(timeline)
    stop = metrics.observe(other)  # type: ignore[arg-type]
    timeline.expired.append({"t": 1.0, "kind": "ob_expired", "id": 7, "ob": "hold"})
    other.emit("error", ErrorEvent(TimeoutError("?"), source="watchdog", recoverable=True))
    stop()
    stop()  # idempotent
    other.emit("error", ErrorEvent(RuntimeError("late"), source="tts", recoverable=True))
    final = samples_of(metrics)
    assert value(final, "rejoinder_obligations_expired_total", kind="hold") == 1
    assert value(final, "rejoinder_errors_total", source="tts") == 1


def test_constant_labels_go_on_every_sample_of_both_hosts() -> None:
    from rejoinder.io.asgi import create_asgi_app

    labels = {"replica": "r-1", "region": "eu"}
    plain = ServerMetrics(SessionGate())
    labelled = ServerMetrics(SessionGate(), labels=labels)
    plain.turns.inc()
    labelled.turns.inc()

    def samples(metrics: ServerMetrics) -> list[Any]:
        text = metrics.render().decode()
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    assert all(s.labels.items() >= labels.items() for s in samples(labelled))
    assert not any("replica" in s.labels for s in samples(plain))

    # the same samples and values, labels aside (creation times differ by microseconds)
    def values(metrics: ServerMetrics) -> list[tuple[str, float]]:
        return sorted((s.name, s.value) for s in samples(metrics) if "_created" not in s.name)

    assert values(labelled) == values(plain)

    async def entrypoint(conn: Connection) -> None:
        raise AssertionError("not called")

    for app_metrics in (
        create_app(entrypoint, metrics_labels=labels)[METRICS],
        create_asgi_app(entrypoint, metrics_labels=labels).state.metrics,
    ):
        assert all(s.labels.items() >= labels.items() for s in samples(app_metrics))
