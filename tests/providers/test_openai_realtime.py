"""openai.Realtime against the loopback Realtime server, over a real WebSocket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from rejoinder.models import AgentHandoff, ChatContext, FunctionCall, FunctionCallOutput
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    BackendResponseEnded,
    BackendResponseStarted,
    ConnectionLost,
    ContinuationFailed,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    Reconnected,
    ReplyRefused,
    ToolCallRequested,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from rejoinder.models.tools import ToolDefinition
from rejoinder.providers.openai.realtime import OpenAIRealtimeSession, Realtime
from rejoinder.testing import advance, now
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

from ._servers import unused_port

# Virtual time (looptime), as in test_openai_chat.py: the loopback server runs in the
# test's loop and loopback TCP delivers writes before send() returns, so the clock only
# jumps when every task waits on a timer (a backoff, a timeout, an `advance`). A larger
# `noop_cycles` gives the WebSocket handshake a margin before the clock may jump.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

WEATHER = ToolDefinition(
    name="get_weather",
    description="Look up the weather.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


class Client:
    """A started session and a bounded reader over its events."""

    def __init__(self, session: OpenAIRealtimeSession) -> None:
        self.session = session
        self._events = session.events().__aiter__()

    async def next(self, within: float = 5.0) -> RealtimeEvent:
        async with asyncio.timeout(within):
            return await anext(self._events)

    async def take(self, count: int) -> list[RealtimeEvent]:
        return [await self.next() for _ in range(count)]

    async def until(self, kind: type[Any]) -> list[RealtimeEvent]:
        """Events up to and including the first ``kind``."""
        events = [await self.next()]
        while not isinstance(events[-1], kind):
            events.append(await self.next())
        return events

    async def rest(self, within: float = 30.0) -> list[RealtimeEvent]:
        """Every event until the iterator ends."""
        async with asyncio.timeout(within):
            return [event async for event in self._events]


Open = Callable[..., Awaitable[Client]]


@pytest.fixture
async def server() -> AsyncIterator[OpenAIRealtimeServer]:
    async with OpenAIRealtimeServer() as srv:
        yield srv


@pytest.fixture
async def open_session(server: OpenAIRealtimeServer) -> AsyncIterator[Open]:
    sessions: list[OpenAIRealtimeSession] = []

    async def factory(
        *,
        instructions: str = "Be brief.",
        tools: tuple[ToolDefinition, ...] = (WEATHER,),
        history: Callable[[], ChatContext] = ChatContext,
        before_start: Callable[[OpenAIRealtimeSession], None] | None = None,
        **options: Any,
    ) -> Client:
        model = make_model(server, **options)
        session = model.session()
        sessions.append(session)
        if before_start is not None:
            before_start(session)
        await session.start(RealtimeConfig(instructions, tools, history))
        return Client(session)

    yield factory
    for session in sessions:
        await session.aclose()


def make_model(server: OpenAIRealtimeServer, **options: Any) -> Realtime:
    options.setdefault("api_key", "sk-test")
    return Realtime(base_url=server.base_url, **options)


def kinds(events: list[RealtimeEvent]) -> list[str]:
    return [type(event).__name__ for event in events]


def tone(seconds: float, rate: int, channels: int = 1) -> AudioFrame:
    t = np.arange(round(seconds * rate)) / rate
    mono = (np.sin(2 * np.pi * 300 * t) * 6000).astype(np.int16)
    return AudioFrame(np.repeat(mono, channels), rate, channels)


def output(call_id: str, text: str = "sunny") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, name="get_weather", output=text)


async def tool_response(
    server: OpenAIRealtimeServer, client: Client, calls: list[str], status: str = "completed"
) -> list[ToolCallRequested]:
    """A response with these function calls, ended with ``status``; the calls reported."""
    await server.response_created("resp_1")
    for call_id in calls:
        await server.function_call("resp_1", call_id, "get_weather", '{"city": "Paris"}')
    await server.response_done("resp_1", status=status)
    events = await client.until(BackendResponseEnded)
    return [event for event in events if isinstance(event, ToolCallRequested)]


# -- connecting and configuring -------------------------------------------------------------


async def test_connects_with_model_and_key_and_configures_the_session(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    await open_session(instructions="You are a weather bot.", voice="cedar")
    connection = server.connections[0]
    assert connection.model == "gpt-realtime"
    assert connection.headers["Authorization"] == "Bearer sk-test"
    assert "OpenAI-Beta" not in connection.headers  # GA, not the beta protocol
    session = server.received[0]["session"]
    assert server.received[0]["type"] == "session.update"
    assert session["type"] == "realtime"
    assert session["output_modalities"] == ["audio"]
    assert session["instructions"] == "You are a weather bot."
    audio_in, audio_out = session["audio"]["input"], session["audio"]["output"]
    assert audio_in["format"] == {"type": "audio/pcm", "rate": 24000}
    assert audio_in["turn_detection"]["type"] == "server_vad"
    assert audio_in["turn_detection"]["interrupt_response"] is True
    assert audio_in["turn_detection"]["create_response"] is True
    assert audio_in["transcription"] == {"model": "gpt-4o-mini-transcribe"}
    assert audio_out == {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "cedar"}
    assert session["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Look up the weather.",
            "parameters": WEATHER.parameters,
        }
    ]
    assert session["tool_choice"] == "auto"


async def test_history_is_seeded_as_items_after_the_session_update(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    history = ChatContext()
    history.add_message(role="system", content="The user is called Ada.")
    history.add_message(role="user", content="Weather in Paris?")
    history.append(AgentHandoff(old_agent_id=None, new_agent_id="weather"))
    history.append(FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"Paris"}'))
    history.append(FunctionCallOutput(call_id="c1", name="get_weather", output="sunny"))
    history.add_message(role="assistant", content="It is sunny.")
    await open_session(history=lambda: history)
    await server.wait_for("conversation.item.create", count=5)
    assert server.received_types() == ["session.update"] + ["conversation.item.create"] * 5
    items = [event["item"] for event in server.received[1:]]
    assert items[0] == {
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "The user is called Ada."}],
    }
    assert items[1]["role"] == "user"
    assert items[1]["content"] == [{"type": "input_text", "text": "Weather in Paris?"}]
    assert items[2]["role"] == "system" and "get_weather" in items[2]["content"][0]["text"]
    assert items[3]["role"] == "system" and "sunny" in items[3]["content"][0]["text"]
    assert items[4]["content"] == [{"type": "output_text", "text": "It is sunny."}]


async def test_audio_pushed_before_start_is_sent_once_configured(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    history = ChatContext()
    history.add_message(role="user", content="Hi")

    def push(session: OpenAIRealtimeSession) -> None:
        for _ in range(35):  # 350 ms of 16 kHz stereo, 10 ms at a time
            session.push_audio(tone(0.01, 16000, channels=2))

    await open_session(history=lambda: history, before_start=push)
    await server.wait_for("input_audio_buffer.append", count=3)
    types = server.received_types()
    assert types[:2] == ["session.update", "conversation.item.create"]
    assert set(types[2:]) == {"input_audio_buffer.append"}
    for event in server.of_type("input_audio_buffer.append"):
        pcm = base64.b64decode(event["audio"])
        assert len(pcm) == 4800  # 100 ms of 24 kHz mono int16
        assert np.abs(np.frombuffer(pcm, "<i2")).max() > 1000  # the tone, not silence


async def test_start_refused_with_401_is_fatal() -> None:
    async with OpenAIRealtimeServer(api_key="sk-right") as server:
        session = make_model(server, api_key="sk-wrong").session()
        with pytest.raises(RealtimeError) as caught:
            await session.start(RealtimeConfig("x"))
        assert caught.value.fatal
        assert "401" in str(caught.value)
        assert server.refused == 1
        assert await Client(session).rest() == []


async def test_fatal_error_before_session_created_fails_start() -> None:
    async with OpenAIRealtimeServer(session_created=False) as server:
        session = make_model(server).session()
        start = asyncio.create_task(session.start(RealtimeConfig("x")))
        await server.wait_connected()
        await server.error("Incorrect API key provided.", code="invalid_api_key")
        with pytest.raises(RealtimeError, match="Incorrect API key") as caught:
            await start
        assert caught.value.fatal and caught.value.code == "invalid_api_key"


async def test_rejected_session_update_fails_start() -> None:
    async with OpenAIRealtimeServer(answer_session_update=False) as server:
        session = make_model(server).session()
        start = asyncio.create_task(session.start(RealtimeConfig("x")))
        update = await server.wait_for("session.update")
        await server.error("Invalid tool schema.", event_id=update["event_id"])
        with pytest.raises(RealtimeError, match="Invalid tool schema") as caught:
            await start
        assert not caught.value.fatal


async def test_start_is_bounded_by_connect_timeout() -> None:
    async with OpenAIRealtimeServer(session_created=False) as server:
        session = make_model(server, connect_timeout=3.0).session()
        started = now()
        with pytest.raises(RealtimeError, match=r"timed out after 3\.0s") as caught:
            await session.start(RealtimeConfig("x"))
        assert not caught.value.fatal
        assert 3.0 <= now() - started < 4.0


async def test_nothing_listening_is_a_non_fatal_start_error() -> None:
    port = unused_port()
    model = Realtime(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test")
    with pytest.raises(RealtimeError, match="cannot connect") as caught:
        await model.session().start(RealtimeConfig("x"))
    assert not caught.value.fatal


def test_base_url_defaults_to_openai_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8080/v1/")
    assert Realtime(api_key="k").url == "ws://localhost:8080/v1/realtime?model=gpt-realtime"
    explicit = Realtime(api_key="k", base_url="https://example.test/v1")
    assert explicit.url == "wss://example.test/v1/realtime?model=gpt-realtime"
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # empty: unset
    assert Realtime(api_key="k").url == "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert Realtime(api_key="k").url == "wss://api.openai.com/v1/realtime?model=gpt-realtime"


async def test_a_session_connects_where_openai_base_url_points(
    server: OpenAIRealtimeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    session = Realtime(api_key="sk-test").session()
    await session.start(RealtimeConfig("x"))
    try:
        assert len(server.connections) == 1
    finally:
        await session.aclose()


def test_a_missing_api_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        Realtime()
    assert Realtime(api_key="k").url == "wss://api.openai.com/v1/realtime?model=gpt-realtime"


def test_importing_the_provider_does_not_import_aiohttp_or_numpy() -> None:
    code = (
        "import sys, rejoinder.providers.openai.realtime;"
        "sys.exit(sorted({'aiohttp', 'numpy', 'soxr'} & set(sys.modules)) or None)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()


# -- responses ------------------------------------------------------------------------------


async def test_a_spoken_response_reports_audio_and_transcript_in_order(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.audio("resp_1", "item_1", seconds=0.3)
    await server.transcript("resp_1", "item_1", "Hello there")
    await server.audio_done("resp_1", "item_1")
    await server.response_done("resp_1")
    events = await client.until(BackendResponseEnded)
    assert kinds(events) == [
        "BackendResponseStarted",
        "AgentAudioStarted",
        "AgentAudio",
        "AgentAudio",
        "AgentAudio",
        "Transcript",
        "AgentAudioEnded",
        "BackendResponseEnded",
    ]
    assert events[0] == BackendResponseStarted("resp_1")
    assert events[5] == Transcript("assistant", "Hello there")
    assert events[-1] == BackendResponseEnded("resp_1", "completed", expects_answer=False)
    for event in events[2:5]:
        assert isinstance(event, AgentAudio)
        frame = event.frame
        assert (frame.sample_rate, frame.num_channels) == (24000, 1)
        assert frame.duration == pytest.approx(0.1)
        assert np.abs(frame.data).max() > 1000


async def test_response_done_ends_audio_that_never_got_its_done_event(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.audio("resp_1", "item_1", seconds=0.1)
    await server.response_done("resp_1", status="failed", error="The server had an error.")
    events = await client.until(BackendResponseEnded)
    assert kinds(events)[-2:] == ["AgentAudioEnded", "BackendResponseEnded"]
    assert events[-1] == BackendResponseEnded("resp_1", "failed", error="The server had an error.")


async def test_user_speech_and_its_transcription(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.speech_started()
    await server.speech_stopped()
    await server.input_transcription("item_u1", "What's the weather?")
    await server.input_transcription_failed("item_u2", "audio unintelligible")
    events = await client.take(5)
    assert events[:4] == [
        UserSpeechStarted(),
        Transcript("user", "What's the weather?"),
        UserTurnEnded("What's the weather?"),
        UserTurnEnded(""),
    ]
    assert isinstance(events[4], ProviderError) and not events[4].error.fatal
    assert "unintelligible" in str(events[4].error)


async def test_without_transcription_a_committed_turn_ends_with_no_text(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session(input_transcription_model=None)
    assert server.received[0]["session"]["audio"]["input"]["transcription"] is None
    await server.speech_started()
    await server.speech_stopped()
    await server.committed("item_u1")
    assert await client.take(2) == [UserSpeechStarted(), UserTurnEnded("")]


# -- tool calls -----------------------------------------------------------------------------


async def test_tool_call_round_trip_sends_the_output_and_one_response_create(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    calls = await tool_response(server, client, ["call_1"])
    assert len(calls) == 1  # reported once, though both the arguments and the item finished
    call = calls[0].call
    assert (call.call_id, call.name, call.arguments) == (
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    fate = client.session.submit_tool_output(output("call_1"), reply_required=True)
    assert fate == "continue"
    await server.wait_for("response.create")
    await advance(1.0)
    assert server.received_types()[-2:] == ["conversation.item.create", "response.create"]
    assert server.received[-2]["item"] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "sunny",
    }
    assert len(server.of_type("response.create")) == 1


async def test_outputs_that_need_no_reply_send_no_response_create(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await tool_response(server, client, ["call_1", "call_2"])
    assert client.session.submit_tool_output(output("call_1"), reply_required=False) == "silent"
    assert client.session.submit_tool_output(output("call_2"), reply_required=False) == "silent"
    await server.wait_for("conversation.item.create", count=2)
    await advance(1.0)
    assert server.of_type("response.create") == []


async def test_two_calls_get_one_response_create_once_both_outputs_are_in(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    calls = await tool_response(server, client, ["call_1", "call_2"])
    assert [c.call.call_id for c in calls] == ["call_1", "call_2"]
    assert client.session.submit_tool_output(output("call_1"), reply_required=True) == "continue"
    await server.wait_for("conversation.item.create")
    await advance(1.0)
    assert server.of_type("response.create") == []  # call_2 is still running
    # The batch is now complete and an earlier output wanted a reply.
    assert client.session.submit_tool_output(output("call_2"), reply_required=False) == "continue"
    await server.wait_for("response.create")
    await advance(1.0)
    assert server.received_types()[-3:] == [
        "conversation.item.create",
        "conversation.item.create",
        "response.create",
    ]
    assert len(server.of_type("response.create")) == 1


async def test_outputs_submitted_while_the_response_runs_continue_when_it_completes(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.function_call("resp_1", "call_1", "get_weather")
    await client.until(ToolCallRequested)
    assert client.session.submit_tool_output(output("call_1"), reply_required=True) == "continue"
    await server.wait_for("conversation.item.create")
    await advance(1.0)
    assert server.of_type("response.create") == []
    await server.response_done("resp_1")
    await server.wait_for("response.create")
    await advance(1.0)
    assert len(server.of_type("response.create")) == 1


async def test_outputs_for_a_cancelled_response_are_silent(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await tool_response(server, client, ["call_1"], status="cancelled")
    assert client.session.submit_tool_output(output("call_1"), reply_required=True) == "silent"
    await server.wait_for("conversation.item.create")
    await advance(1.0)
    assert server.of_type("response.create") == []


async def test_a_promised_continuation_fails_when_the_response_is_cancelled(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.function_call("resp_1", "call_1", "get_weather")
    await client.until(ToolCallRequested)
    assert client.session.submit_tool_output(output("call_1"), reply_required=True) == "continue"
    await server.response_done("resp_1", status="cancelled")
    events = await client.take(2)
    assert events[0] == BackendResponseEnded("resp_1", "cancelled")
    assert isinstance(events[1], ContinuationFailed) and "cancelled" in events[1].error
    await advance(1.0)
    assert server.of_type("response.create") == []


async def test_a_rejected_continuation_is_reported(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await tool_response(server, client, ["call_1"])
    client.session.submit_tool_output(output("call_1"), reply_required=True)
    create = await server.wait_for("response.create")
    await server.error(
        "Conversation already has an active response.",
        code="conversation_already_has_active_response",
        event_id=create["event_id"],
    )
    events = await client.take(2)
    assert isinstance(events[0], ProviderError) and not events[0].error.fatal
    assert events[1] == ContinuationFailed(None, "Conversation already has an active response.")


async def test_a_rejected_generate_reply_is_refused(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    client.session.generate_reply("Greet the user.")
    create = await server.wait_for("response.create")
    assert isinstance(create["event_id"], str)
    await server.error(
        "Conversation already has an active response.",
        code="conversation_already_has_active_response",
        event_id=create["event_id"],
    )
    events = await client.take(2)
    assert isinstance(events[0], ProviderError) and not events[0].error.fatal
    assert events[1] == ReplyRefused("Conversation already has an active response.")


@pytest.mark.parametrize("refused", ["conversation.item.create", "response.create"])
async def test_a_rejected_send_user_text_is_refused_once(
    server: OpenAIRealtimeServer, open_session: Open, refused: str
) -> None:
    client = await open_session()
    client.session.send_user_text("Hello?")
    await server.wait_for("response.create")
    item, create = server.received[1:]
    first, second = (item, create) if refused == "conversation.item.create" else (create, item)
    await server.error("refused", event_id=first["event_id"])
    await server.error("refused again", event_id=second["event_id"])
    events = await client.take(3)
    assert kinds(events) == ["ProviderError", "ReplyRefused", "ProviderError"]
    assert events[1] == ReplyRefused("refused")


async def test_a_started_response_accepts_the_oldest_reply_request(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    client.session.generate_reply()
    client.session.generate_reply()
    await server.wait_for("response.create", count=2)
    first, second = server.of_type("response.create")
    await server.response_created("resp_1")
    assert await client.next() == BackendResponseStarted("resp_1")
    # The first request was accepted: an error naming it now refuses nothing.
    await server.error("late", event_id=first["event_id"])
    await server.error("busy", event_id=second["event_id"])
    events = await client.take(3)
    assert kinds(events) == ["ProviderError", "ProviderError", "ReplyRefused"]
    assert events[2] == ReplyRefused("busy")


async def test_an_error_for_other_events_refuses_no_reply(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    client.session.add_context("The user is on a train.")
    client.session.generate_reply()
    await server.wait_for("response.create")
    context = server.of_type("conversation.item.create")[0]
    await server.error("bad item", event_id=context["event_id"])
    await server.error("no id")
    assert kinds(await client.take(2)) == ["ProviderError", "ProviderError"]
    await advance(1.0)
    await server.response_created("resp_1")
    assert await client.next() == BackendResponseStarted("resp_1")


# -- barge-in -------------------------------------------------------------------------------


async def test_audio_interrupted_cancels_and_truncates_what_was_heard(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.audio("resp_1", "item_1", seconds=0.5)
    await client.take(7)
    client.session.audio_interrupted(0.25)
    cancel = await server.wait_for("response.cancel")
    truncate = await server.wait_for("conversation.item.truncate")
    assert cancel["response_id"] == "resp_1"
    assert (truncate["item_id"], truncate["content_index"], truncate["audio_end_ms"]) == (
        "item_1",
        0,
        250,
    )
    # What the server sent before it saw the cancel must not play.
    await server.audio("resp_1", "item_1", seconds=0.2)
    await server.transcript("resp_1", "item_1", "and then")
    await server.response_done("resp_1", status="cancelled", reason="client_cancelled")
    events = await client.until(BackendResponseEnded)
    assert events == [AgentAudioEnded(), BackendResponseEnded("resp_1", "cancelled")]


async def test_an_interruption_after_the_response_truncates_the_last_item_only(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    for response_id, item_id in (("resp_1", "item_1"), ("resp_2", "item_2")):
        await server.response_created(response_id)
        await server.audio(response_id, item_id, seconds=0.3)
        await server.audio_done(response_id, item_id)
        await server.response_done(response_id)
        await client.until(BackendResponseEnded)
    client.session.audio_interrupted(5.0)  # the player reports more than was sent
    truncate = await server.wait_for("conversation.item.truncate")
    assert (truncate["item_id"], truncate["audio_end_ms"]) == ("item_2", 300)
    await advance(1.0)
    assert server.of_type("response.cancel") == []  # nothing was running
    client.session.audio_interrupted(0.1)  # already truncated: nothing more to send
    await advance(1.0)
    assert len(server.of_type("conversation.item.truncate")) == 1


# -- other client events --------------------------------------------------------------------


async def test_context_instructions_tools_replies_and_typed_text(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    session = client.session
    session.add_context("The user is on a train.")
    session.update_instructions("Be very brief.")
    session.update_tools([])
    session.generate_reply("Greet the user.")
    session.send_user_text("Hello?")
    await server.wait_for("response.create", count=2)
    events = server.received[1:]
    assert [e["type"] for e in events] == [
        "conversation.item.create",
        "session.update",
        "session.update",
        "response.create",
        "conversation.item.create",
        "response.create",
    ]
    assert events[0]["item"]["role"] == "system"
    assert events[0]["item"]["content"][0]["text"] == "The user is on a train."
    assert events[1]["session"] == {"type": "realtime", "instructions": "Be very brief."}
    assert events[2]["session"] == {"type": "realtime", "tools": [], "tool_choice": "auto"}
    assert events[3]["response"] == {"instructions": "Greet the user."}
    assert events[4]["item"]["content"] == [{"type": "input_text", "text": "Hello?"}]
    assert "response" not in events[5]


async def test_without_server_vad_generate_reply_commits_the_audio_first(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session(turn_detection=None)
    assert server.received[0]["session"]["audio"]["input"]["turn_detection"] is None
    client.session.push_audio(tone(0.2, 24000))
    client.session.generate_reply()
    await server.wait_for("response.create")
    assert server.received_types()[1:] == [
        "input_audio_buffer.append",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "response.create",
    ]


# -- robustness -----------------------------------------------------------------------------


async def test_malformed_and_unknown_server_events_do_not_stop_the_session(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.send_raw("this is not JSON")
    await server.send_raw("[1, 2, 3]")
    await server.send({"type": "response.something_new", "payload": 1})
    await server.send(
        {
            "type": "response.output_audio.delta",
            "response_id": "resp_0",
            "item_id": "item_0",
            "delta": "%%% not base64 %%%",
        }
    )
    await server.send({"type": "response.created", "response": "not an object"})
    await server.error("Unknown parameter: 'foo'.", code="unknown_parameter")
    await server.response_created("resp_1")
    events = await client.until(BackendResponseStarted)
    assert kinds(events) == ["ProviderError"] * 5 + ["BackendResponseStarted"]
    errors = [e.error for e in events if isinstance(e, ProviderError)]
    assert not any(error.fatal for error in errors)
    assert "not JSON" in str(errors[0]) and "not a JSON object" in str(errors[1])
    assert "base64" in str(errors[2]) and "response" in str(errors[3])
    assert errors[4].code == "unknown_parameter"
    assert len(server.connections) == 1


DEEP = "[" * 10_000 + "]" * 10_000  # too deep for Python's recursive JSON parser


async def test_a_deeply_nested_message_is_malformed_and_the_session_goes_on(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.send_raw('{"type": "response.created", "response": ' + DEEP + "}")
    await server.send_raw(DEEP)
    # Shallow enough to parse, but a list where the type should be: ignored.
    await server.send_raw('{"type": ' + "[" * 500 + "]" * 500 + "}")
    await server.response_created("resp_1")
    events = await client.until(BackendResponseStarted)
    assert kinds(events) == ["ProviderError", "ProviderError", "BackendResponseStarted"]
    errors = [e.error for e in events if isinstance(e, ProviderError)]
    assert all("nested too deeply" in str(e) and not e.fatal for e in errors)
    assert all(len(str(e)) < 1000 for e in errors)
    assert len(server.connections) == 1


async def test_a_deeply_nested_message_during_set_up_does_not_fail_start() -> None:
    async with OpenAIRealtimeServer(answer_session_update=False) as server:
        session = make_model(server).session()
        start = asyncio.create_task(session.start(RealtimeConfig("x")))
        await server.wait_for("session.update")
        await server.send_raw(DEEP)
        await server.send({"type": "session.updated", "session": {"id": "sess_1"}})
        await start
        client = Client(session)
        error = await client.next()
        assert isinstance(error, ProviderError) and "nested too deeply" in str(error.error)
        await session.aclose()


async def test_a_fatal_error_ends_the_session(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.error("You exceeded your quota.", code="insufficient_quota")
    events = await client.rest()
    assert kinds(events) == ["ProviderError", "ConnectionLost"]
    assert isinstance(events[0], ProviderError)
    assert events[0].error.fatal and events[0].error.code == "insufficient_quota"
    assert isinstance(events[1], ConnectionLost) and not events[1].reconnecting
    await advance(5.0)
    assert len(server.connections) == 1


async def test_a_dropped_connection_reconnects_and_reseeds_the_history(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    history = ChatContext()
    history.add_message(role="user", content="Hi")
    client = await open_session(history=lambda: history)
    client.session.update_instructions("Now in French.")
    await server.wait_for("session.update", count=2)
    await server.response_created("resp_1")
    await client.next()
    history.add_message(role="assistant", content="Bonjour !")
    await server.drop()
    lost = await client.next()
    assert isinstance(lost, ConnectionLost) and lost.reconnecting
    client.session.push_audio(tone(0.3, 24000))  # dropped: the old turn is gone
    client.session.add_context("Sent after the drop.")  # queued for the new connection
    assert await client.next() == Reconnected("sess_2")
    second = await server.wait_connected(2)
    await server.wait_for("conversation.item.create", count=4)
    assert [e["type"] for e in second.received] == ["session.update"] + [
        "conversation.item.create"
    ] * 3
    assert second.received[0]["session"]["instructions"] == "Now in French."
    texts = [e["item"]["content"][0]["text"] for e in second.received[1:]]
    assert texts == ["Hi", "Bonjour !", "Sent after the drop."]
    # The new connection works; the old response is forgotten.
    await server.response_created("resp_2")
    assert await client.next() == BackendResponseStarted("resp_2")


async def test_reconnecting_gives_up_after_the_configured_attempts(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session(max_reconnect_attempts=2, reconnect_backoff=0.5)
    server.refuse(503)
    started = now()
    await server.drop()
    events = await client.rest()
    assert kinds(events) == ["ConnectionLost", "ProviderError", "ConnectionLost"]
    first, error, last = events
    assert isinstance(first, ConnectionLost) and first.reconnecting
    assert isinstance(error, ProviderError) and error.error.fatal
    assert "503" in str(error.error) and "2 reconnect attempts failed" in str(error.error)
    assert isinstance(last, ConnectionLost) and not last.reconnecting
    assert server.refused == 2
    assert 1.5 <= now() - started < 3.0  # 0.5 s, then 1 s of backoff


async def test_a_fatal_refusal_stops_reconnecting_at_once(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session(max_reconnect_attempts=3)
    server.refuse(401)  # e.g. the key was revoked while the session ran
    await server.drop()
    events = await client.rest()
    assert kinds(events) == ["ConnectionLost", "ProviderError", "ConnectionLost"]
    error = events[1]
    assert isinstance(error, ProviderError) and error.error.fatal
    assert "1 reconnect attempt failed" in str(error.error) and error.error.code == "http_401"
    assert server.refused == 1


async def test_aclose_is_bounded_idempotent_and_leaves_no_task(
    server: OpenAIRealtimeServer, open_session: Open
) -> None:
    client = await open_session()
    await server.response_created("resp_1")
    await server.audio("resp_1", "item_1", seconds=0.2)
    started = now()
    await client.session.aclose()
    await client.session.aclose()
    assert now() - started < 3.0
    assert [e for e in await client.rest() if isinstance(e, ConnectionLost)] == []
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("openai-realtime")] == []
    await advance(2.0)
    assert server.connections[0].closed
    # Calls after close are ignored, not errors.
    client.session.push_audio(tone(0.2, 24000))
    assert client.session.submit_tool_output(output("call_1"), reply_required=True) == "silent"


async def test_aclose_while_connecting_fails_start() -> None:
    async with OpenAIRealtimeServer(session_created=False) as server:
        session = make_model(server).session()
        start = asyncio.create_task(session.start(RealtimeConfig("x")))
        await server.wait_connected()
        await session.aclose()
        with pytest.raises(RealtimeError, match="closed while connecting"):
            await start
        assert [t for t in asyncio.all_tasks() if t.get_name().startswith("openai-realtime")] == []
