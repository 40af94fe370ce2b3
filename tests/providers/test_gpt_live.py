"""GPTLive against the loopback GPT-Live server, over a real WebSocket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import numpy as np
import pytest

from rejoinder.models import (
    AgentHandoff,
    ChatContext,
    FunctionCall,
    FunctionCallOutput,
    ToolDefinition,
)
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    ConnectionLost,
    ContinuationFailed,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    Reconnected,
    ReplyRefused,
    ToolCallRequested,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from rejoinder.providers.openai.gpt_live import GPTLive, GPTLiveSession
from rejoinder.testing import advance, now
from rejoinder.testing.gpt_live_server import GPTLiveServer

from ._live import Recorder
from ._servers import serving

# Real sockets on virtual time: see test_openai_chat.py for why this marker is enough.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

E = TypeVar("E")

WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
WEATHER_WIRE = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": WEATHER.parameters,
}


Connect = Callable[..., Awaitable[tuple[GPTLiveSession, Recorder]]]


server = serving(GPTLiveServer)


@pytest.fixture
async def connect(server: GPTLiveServer) -> AsyncIterator[Connect]:
    """Start a GPTLive session against the server; closed (and checked) after the test."""
    opened: list[tuple[GPTLiveSession, Recorder]] = []

    async def factory(
        config: RealtimeConfig | None = None, **options: Any
    ) -> tuple[GPTLiveSession, Recorder]:
        options.setdefault("api_key", "sk-test")
        session = GPTLive(base_url=server.base_url, **options).session()
        recorder = Recorder(session)
        opened.append((session, recorder))
        await session.start(config or RealtimeConfig(instructions="Be brief.", tools=[WEATHER]))
        return session, recorder

    yield factory
    for session, recorder in opened:
        await session.aclose()
        await recorder.wait_ended()
    assert gpt_live_tasks() == []


def gpt_live_tasks() -> list[asyncio.Task[Any]]:
    return [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("gpt-live") and not task.done()
    ]


def output(call_id: str, text: str = "sunny", name: str = "get_weather") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, name=name, output=text)


async def one_call(
    server: GPTLiveServer, recorder: Recorder, call_id: str = "call_1", *, complete: bool = True
) -> None:
    """dlg_1/resp_1 makes one get_weather call (and completes, unless told not to)."""
    await server.delegation("dlg_1")
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", call_id, "get_weather", {"city": "Paris"})
    await recorder.wait_for(ToolCallRequested)
    if complete:
        await server.response_completed("dlg_1", "resp_1")
        await recorder.wait_for(BackendResponseEnded)


def pcm_frame(seconds: float, rate: int = 24000, value: int = 0x800) -> AudioFrame:
    return AudioFrame(np.full(round(seconds * rate), value, np.int16), rate)


# -- the model: URL, headers, options --------------------------------------------------------

AZURE = "wss://res.openai.azure.com"


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("https://api.openai.com/v1", "wss://api.openai.com/v1/live/sessions"),
        ("http://127.0.0.1:8080/v1/", "ws://127.0.0.1:8080/v1/live/sessions"),
        ("https://gw.example.com/v1/live/sessions?x=1", "wss://gw.example.com/v1/live/sessions"),
        ("https://res.openai.azure.com", f"{AZURE}/openai/v1/live/sessions"),
        ("https://res.openai.azure.com/openai/", f"{AZURE}/openai/v1/live/sessions"),
        ("https://res.openai.azure.com/openai/v1", f"{AZURE}/openai/v1/live/sessions"),
        ("https://res.openai.azure.com/gateway", f"{AZURE}/gateway/live/sessions"),
    ],
)
def test_websocket_url_from_the_base_url(base_url: str, url: str) -> None:
    assert GPTLive(api_key="k", base_url=base_url).url == url


def test_base_url_defaults_to_openai_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1/")
    assert GPTLive(api_key="k").url == "ws://127.0.0.1:8080/v1/live/sessions"
    assert GPTLive(api_key="k", base_url="https://x.test/v1").url == "wss://x.test/v1/live/sessions"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://res.openai.azure.com")
    assert GPTLive(api_key="k").headers["api-key"] == "k"  # Azure is recognized from it too
    monkeypatch.setenv("OPENAI_BASE_URL", "")  # empty: unset
    assert GPTLive(api_key="k").url == "wss://api.openai.com/v1/live/sessions"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert GPTLive(api_key="k").url == "wss://api.openai.com/v1/live/sessions"


async def test_a_session_connects_where_openai_base_url_points(
    server: GPTLiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    session = GPTLive(api_key="k").session()
    await session.start(RealtimeConfig(instructions="x"))
    assert server.connections == 1
    await session.aclose()


def test_openai_sends_a_bearer_key_and_azure_an_api_key_header() -> None:
    openai_headers = GPTLive(api_key="sk-1").headers
    assert openai_headers["Authorization"] == "Bearer sk-1"
    azure = GPTLive(api_key="az-1", base_url="https://res.openai.azure.com").headers
    assert azure["api-key"] == "az-1"
    assert "Authorization" not in azure


def test_options_are_checked_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="delegation must be 'responses' or 'client'"):
        GPTLive(api_key="k", delegation="backend")  # type: ignore[arg-type]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        GPTLive()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    model = GPTLive()
    assert model.headers["Authorization"] == "Bearer sk-env"
    assert (model.duplex, model.sample_rate, model.provider) == (True, 24000, "openai")
    with pytest.raises(ValueError, match="base_url"):
        GPTLive(base_url="ftp://example.com")
    with pytest.raises(ValueError, match="burst_pause_after"):
        GPTLive(api_key="k", burst_pause_after=1.0, burst_end_silence=0.8)


def test_importing_the_client_loads_neither_aiohttp_nor_numpy() -> None:
    code = (
        "import sys, rejoinder, rejoinder.providers.openai.gpt_live; "
        "print(sorted(m for m in ('aiohttp', 'numpy', 'soxr') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- start-up ------------------------------------------------------------------------------


async def test_session_start_carries_the_whole_configuration(
    server: GPTLiveServer, connect: Connect
) -> None:
    history = ChatContext()
    history.add_message(role="system", content="Caller is a returning customer.")
    history.add_message(role="user", content="Hi again.")
    history.add_message(role="assistant", content="Welcome back!")
    history.append(FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"Oslo"}'))
    history.append(AgentHandoff(old_agent_id="a", new_agent_id="b"))
    history.append(FunctionCallOutput(call_id="c1", name="get_weather", output="sunny"))
    history.add_message(role="user", content="   ")  # nothing to say: left out
    config = RealtimeConfig(
        instructions="You are a concise phone assistant.",
        tools=[WEATHER],
        history=lambda: history,
    )
    await connect(
        config,
        voice="cedar",
        backend_model="gpt-5.6-luna",
        backend_instructions="Use tools for facts.",
        reasoning={"effort": "low"},
        text={"verbosity": "low"},
        service_tier="priority",
        max_output_tokens=1024,
    )

    start = server.received[0]
    assert start["type"] == "session.start"
    assert isinstance(start["event_id"], str)
    developer, user, assistant = "developer", "user", "assistant"
    assert start["session"] == {
        "model": "gpt-live-1",
        "instructions": "You are a concise phone assistant.",
        "input": [
            message(developer, "input_text", "Caller is a returning customer."),
            message(user, "input_text", "Hi again."),
            message(assistant, "output_text", "Welcome back!"),
            message(
                developer,
                "input_text",
                'Earlier the tool get_weather was called with arguments {"city":"Oslo"}.',
            ),
            message(developer, "input_text", "The tool get_weather returned: sunny"),
        ],
        "audio": {"format": {"type": "audio/pcm", "rate": 24000}, "output": {"voice": "cedar"}},
        "delegation": {
            "type": "responses",
            "responses": {
                "model": "gpt-5.6-luna",
                "instructions": "Use tools for facts.",
                "tools": [WEATHER_WIRE],
                "tool_choice": "auto",
                "parallel_tool_calls": True,
                "reasoning": {"effort": "low"},
                "text": {"verbosity": "low"},
                "service_tier": "priority",
                "max_output_tokens": 1024,
            },
        },
    }
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def message(role: str, part: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


async def test_optional_fields_are_left_out_not_null(
    server: GPTLiveServer, connect: Connect
) -> None:
    await connect(RealtimeConfig(instructions=""), parallel_tool_calls=None)
    session = server.received[0]["session"]
    assert set(session) == {"model", "audio", "delegation"}
    assert session["delegation"]["responses"] == {"tool_choice": "auto"}


async def test_startup_history_keeps_the_newest_128_items(
    server: GPTLiveServer, connect: Connect
) -> None:
    history = ChatContext()
    for n in range(200):
        history.add_message(role="user", content=f"message {n}")
    await connect(RealtimeConfig(instructions="x", history=lambda: history))
    items = server.received[0]["session"]["input"]
    assert len(items) == 128
    assert items[0]["content"][0]["text"] == "message 72"
    assert items[-1]["content"][0]["text"] == "message 199"


async def test_everything_waits_for_session_started(server: GPTLiveServer) -> None:
    server.answer_start = False
    session = GPTLive(api_key="k", base_url=server.base_url).session()
    recorder = Recorder(session)
    session.add_context("before start")
    starting = asyncio.create_task(session.start(RealtimeConfig(instructions="x")))
    await server.wait_for("session.start")
    session.push_audio(pcm_frame(0.1))
    session.generate_reply()
    await advance(1)
    assert server.received_types() == ["session.start"]  # §4.1: nothing before started

    await server.session_started()
    await starting
    await server.wait_for("session.commentary.append")
    assert server.received_types() == [
        "session.start",
        "session.thinking.append",
        "session.input_audio.append",
        "session.commentary.append",
    ]
    await session.aclose()
    await recorder.wait_ended()


async def test_start_times_out_when_the_service_never_starts(server: GPTLiveServer) -> None:
    server.answer_start = False
    session = GPTLive(api_key="k", base_url=server.base_url, connect_timeout=3).session()
    recorder = Recorder(session)
    began = now()
    with pytest.raises(RealtimeError, match="within 3") as caught:
        await session.start(RealtimeConfig(instructions="x"))
    assert not caught.value.fatal
    assert 3 <= now() - began < 4
    await recorder.wait_ended()
    assert gpt_live_tasks() == []
    await session.aclose()


@pytest.mark.parametrize(
    ("error", "fatal"),
    [
        ({"type": "invalid_request_error", "code": "invalid_api_key", "message": "bad key"}, True),
        ({"type": "insufficient_quota", "code": "renamed_code", "message": "no quota"}, True),
        ({"type": "invalid_request_error", "code": "bad_voice", "message": "no voice"}, False),
    ],
)
async def test_a_refused_start_raises(
    server: GPTLiveServer, error: dict[str, str], fatal: bool
) -> None:
    server.start_error = error
    session = GPTLive(api_key="k", base_url=server.base_url).session()
    with pytest.raises(RealtimeError, match=error["message"]) as caught:
        await session.start(RealtimeConfig(instructions="x"))
    assert caught.value.fatal is fatal
    await session.aclose()


async def test_a_rejected_handshake_is_a_clear_error(server: GPTLiveServer) -> None:
    server.refuse_connections = True
    session = GPTLive(api_key="k", base_url=server.base_url).session()
    with pytest.raises(RealtimeError, match="HTTP 503"):
        await session.start(RealtimeConfig(instructions="x"))
    await session.aclose()


# -- backend tool round trips (§4.3, §6) -----------------------------------------------------


async def test_one_tool_call_round_trip(server: GPTLiveServer, connect: Connect) -> None:
    session, recorder = await connect()
    await one_call(server, recorder)
    assert recorder.of(BackendResponseStarted) == [BackendResponseStarted("resp_1", "dlg_1")]
    [request] = recorder.of(ToolCallRequested)
    assert request.delegation_id == "dlg_1"
    assert (request.call.call_id, request.call.name) == ("call_1", "get_weather")
    assert json.loads(request.call.arguments) == {"city": "Paris"}
    assert recorder.of(BackendResponseEnded) == [
        BackendResponseEnded("resp_1", "completed", "dlg_1", expects_answer=False)
    ]

    assert session.submit_tool_output(output("call_1", '{"temp_c":18}'), reply_required=True) == (
        "continue"
    )
    create = await server.wait_for("response.create")
    item = server.of_type("response.item.create")[0]
    assert item["item"] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": '{"temp_c":18}',
    }
    assert server.received_types()[-2:] == ["response.item.create", "response.create"]
    assert set(create) == {"type", "event_id"}

    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    ended = await recorder.wait_for(BackendResponseEnded, count=2)
    assert ended == BackendResponseEnded("resp_2", "completed", "dlg_1", expects_answer=True)
    await advance(1)
    assert len(server.of_type("response.create")) == 1
    assert recorder.of(ProviderError) == []


async def test_parallel_calls_get_exactly_one_response_create(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.response_created("dlg_2", "resp_3")
    await server.function_call("dlg_2", "call_2", "get_weather", {"city": "Paris"})
    await server.function_call("dlg_2", "call_3", "get_weather", {"city": "Rome"})
    await server.response_completed("dlg_2", "resp_3")
    await recorder.wait_for(BackendResponseEnded)

    assert session.submit_tool_output(output("call_3", "24"), reply_required=True) == "continue"
    await server.wait_for("response.item.create")
    await advance(1)
    assert server.of_type("response.create") == []  # a partial batch is refused (§6.2)

    assert session.submit_tool_output(output("call_2", "18"), reply_required=True) == "continue"
    await server.wait_for("response.create")
    await advance(1)
    assert server.received_types()[1:] == [
        "response.item.create",
        "response.item.create",
        "response.create",
    ]
    assert recorder.of(ProviderError) == []  # the faithful server refused nothing


async def test_an_output_before_response_completed_waits_for_it(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder, complete=False)
    assert session.submit_tool_output(output("call_1"), reply_required=True) == "continue"
    await server.wait_for("response.item.create")  # sent at once (§4.3 step 5)
    await advance(1)
    assert server.of_type("response.create") == []  # not while the response runs

    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await advance(1)
    assert len(server.of_type("response.create")) == 1


async def test_reply_required_false_still_continues(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder)
    assert session.submit_tool_output(output("call_1"), reply_required=False) == "continue"
    await server.wait_for("response.create")


@pytest.mark.parametrize("ending", ["failed", "incomplete"])
async def test_outputs_for_discarded_calls_become_silent_context(
    server: GPTLiveServer, connect: Connect, ending: str
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder, complete=False)
    if ending == "failed":
        await server.response_failed("dlg_1", "resp_1", "backend exploded")
    else:
        await server.response_incomplete("dlg_1", "resp_1", "max_output_tokens")
    ended = await recorder.wait_for(BackendResponseEnded)
    assert (ended.status, ended.expects_answer) == (ending, False)
    assert ended.error is not None
    assert ("backend exploded" if ending == "failed" else "max_output_tokens") in ended.error

    assert session.submit_tool_output(output("call_1", "sunny"), reply_required=True) == "silent"
    thinking = await server.wait_for("session.thinking.append")
    assert thinking["delegation_id"] == "dlg_1"
    assert "get_weather" in thinking["content"]
    assert "sunny" in thinking["content"]
    await advance(1)
    assert server.of_type("response.item.create") == []
    assert server.of_type("response.create") == []
    assert recorder.of(ProviderError) == []


async def test_an_output_sent_before_its_response_failed_leads_nowhere(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder, complete=False)
    assert session.submit_tool_output(output("call_1"), reply_required=True) == "continue"
    await server.wait_for("response.item.create")
    await server.response_failed("dlg_1", "resp_1", "backend exploded")
    failed = await recorder.wait_for(ContinuationFailed)
    assert failed == ContinuationFailed("dlg_1", "backend exploded")
    ended = recorder.events.index(recorder.of(BackendResponseEnded)[0])
    assert ended < recorder.events.index(failed)
    await advance(1)
    assert server.of_type("response.create") == []


async def test_an_output_for_an_unknown_call_is_silent_and_clipped(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    long_output = "word " * 2000
    fate = session.submit_tool_output(output("call_nope", long_output), reply_required=True)
    assert fate == "silent"
    thinking = await server.wait_for("session.thinking.append")
    assert "delegation_id" in thinking
    assert thinking["delegation_id"] is None
    assert len(thinking["content"]) <= 1500
    assert thinking["content"].endswith("[truncated]")


async def test_calls_are_dispatched_once_and_only_when_completed(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_0", "get_weather", "{}", status="in_progress")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
    await server.response_completed("dlg_1", "resp_1")
    await recorder.wait_for(BackendResponseEnded)
    assert [r.call.call_id for r in recorder.of(ToolCallRequested)] == ["call_1"]


async def test_a_call_outside_any_response_is_open(server: GPTLiveServer, connect: Connect) -> None:
    session, recorder = await connect()
    await server.function_call("dlg_9", "call_9", "get_weather", {"city": "Lima"})
    request = await recorder.wait_for(ToolCallRequested)
    assert request.delegation_id == "dlg_9"
    assert session.submit_tool_output(output("call_9"), reply_required=True) == "continue"
    await server.wait_for("response.create")


async def test_the_minimal_fake_shape_without_response_ids_works(
    server: GPTLiveServer, connect: Connect
) -> None:
    """§7: backend events carrying only ``type`` (and ``item``), no response snapshot."""
    _, recorder = await connect()
    for kind in ("response.created", "response.completed"):
        await server.send({"type": "response.event", "delegation_id": "d", "event": {"type": kind}})
    started = await recorder.wait_for(BackendResponseStarted)
    ended = await recorder.wait_for(BackendResponseEnded)
    assert ended.response_id == started.response_id
    assert ended.expects_answer


# -- errors ------------------------------------------------------------------------------------


async def test_an_error_for_the_response_create_fails_the_continuation(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder)
    session.submit_tool_output(output("call_1"), reply_required=True)
    create = await server.wait_for("response.create")
    await server.error("busy", code="conflict", client_event_id=create["event_id"])
    failed = await recorder.wait_for(ContinuationFailed)
    assert failed.delegation_id == "dlg_1"
    assert "busy" in failed.error
    [error] = recorder.of(ProviderError)
    assert not error.error.fatal
    assert error.error.code == "conflict"


async def test_an_error_without_id_ends_the_running_response(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.response_created("dlg_1", "resp_1")
    await server.error("max output tokens reached")
    ended = await recorder.wait_for(BackendResponseEnded)
    assert (ended.response_id, ended.status) == ("resp_1", "failed")
    assert ended.error is not None
    assert "max output tokens" in ended.error
    assert not (await recorder.wait_for(ProviderError)).error.fatal

    await server.response_completed("dlg_1", "resp_1")  # late: already ended
    await server.speech(0.1, 1.0)
    await recorder.wait_for(AgentAudioEnded)
    assert len(recorder.of(BackendResponseEnded)) == 1


async def test_an_error_without_id_fails_a_pending_continuation(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await one_call(server, recorder)
    session.submit_tool_output(output("call_1"), reply_required=True)
    await server.wait_for("response.create")
    await server.error("backend unavailable")
    failed = await recorder.wait_for(ContinuationFailed)
    assert failed.delegation_id == "dlg_1"


async def test_a_refused_output_fails_its_delegation(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.response_created("dlg_2", "resp_3")
    await server.function_call("dlg_2", "call_2", "get_weather", {"city": "Paris"})
    await server.function_call("dlg_2", "call_3", "get_weather", {"city": "Rome"})
    await server.response_completed("dlg_2", "resp_3")
    await recorder.wait_for(BackendResponseEnded)
    session.submit_tool_output(output("call_2"), reply_required=True)
    item = await server.wait_for("response.item.create")
    await server.error("no such call", client_event_id=item["event_id"])
    assert (await recorder.wait_for(ContinuationFailed)).delegation_id == "dlg_2"
    # The refused call no longer holds back the batch: the other output continues.
    session.submit_tool_output(output("call_3"), reply_required=True)
    await server.wait_for("response.create")


async def test_a_refused_generate_reply_is_reported(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    session.generate_reply("Greet the caller.")
    append = await server.wait_for("session.commentary.append")
    await server.error("too long", code="invalid_value", client_event_id=append["event_id"])
    refused = await recorder.wait_for(ReplyRefused)
    assert "too long" in refused.error
    [error] = recorder.of(ProviderError)
    assert (error.error.fatal, error.error.code) == (False, "invalid_value")
    # The same id again names nothing any more: reported, not refused twice.
    await server.error("again", client_event_id=append["event_id"])
    await recorder.wait_for(ProviderError, count=2)
    assert len(recorder.of(ReplyRefused)) == 1


@pytest.mark.parametrize("refused", ["session.thinking.append", "session.commentary.append"])
async def test_a_refused_send_user_text_is_reported_once(
    server: GPTLiveServer, connect: Connect, refused: str
) -> None:
    session, recorder = await connect()
    session.send_user_text("what time is it?")
    await server.wait_for("session.commentary.append")
    [event] = server.of_type(refused)
    await server.error("refused", client_event_id=event["event_id"])
    assert "refused" in (await recorder.wait_for(ReplyRefused)).error
    # The other event of the same request names nothing any more.
    [other] = [e for e in server.received[1:] if e["type"] != refused]
    await server.error("also refused", client_event_id=other["event_id"])
    await recorder.wait_for(ProviderError, count=2)
    assert len(recorder.of(ReplyRefused)) == 1


async def test_refusals_match_only_reply_requests_and_only_the_last_32(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    session.add_context("The caller is on a train.")
    for _ in range(33):
        session.generate_reply()
    await server.wait_for("session.commentary.append", count=33)
    context = server.of_type("session.thinking.append")[0]
    appends = server.of_type("session.commentary.append")
    await server.error("context refused", client_event_id=context["event_id"])
    await server.error("oldest refused", client_event_id=appends[0]["event_id"])
    await server.error("newest refused", client_event_id=appends[-1]["event_id"])
    await recorder.wait_for(ProviderError, count=3)
    [refused] = recorder.of(ReplyRefused)
    assert "newest refused" in refused.error


async def test_a_non_fatal_error_is_reported_and_the_session_goes_on(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.error("something odd", code="odd")
    error = await recorder.wait_for(ProviderError)
    assert (error.error.fatal, error.error.code) == (False, "odd")
    await server.speech(0.1, 1.0)
    await recorder.wait_for(AgentAudioEnded)
    assert recorder.of(BackendResponseEnded) == []
    assert recorder.of(ConnectionLost) == []


@pytest.mark.parametrize(
    ("code", "kind"),
    [("insufficient_quota", None), ("some_new_code", "billing_hard_limit_reached")],
)
async def test_a_fatal_error_ends_the_session(
    server: GPTLiveServer, connect: Connect, code: str, kind: str | None
) -> None:
    _, recorder = await connect()
    await server.speech(0.1, 0.2)  # a burst is open when the session dies
    await recorder.wait_for(AgentAudio)
    await server.error("out of money", code=code, type=kind)
    await recorder.wait_ended()
    error, lost = recorder.events[-3], recorder.events[-1]
    assert isinstance(error, ProviderError)
    assert error.error.fatal
    assert isinstance(recorder.events[-2], AgentAudioEnded)
    assert lost == ConnectionLost(str(error.error), reconnecting=False)
    await advance(2)
    assert server.connections == 1  # no reconnect


async def test_malformed_frames_are_reported_and_skipped(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.send_raw("{not json")
    await server.send_raw("[1, 2, 3]")
    await server.send_binary(b"\x00\x01")
    await server.send({"type": "session.brand_new", "surprise": True})
    await server.send({"type": "session.output_transcript.delta", "delta": "Hi", "extra": [1]})
    await server.send({"type": "session.output_audio.delta", "delta": "@@not base64@@"})
    await server.send({"type": "session.output_audio.delta", "delta": "AAAA"})  # 3 bytes
    await server.send({"type": "session.thinking.appended", "client_event_id": "x"})
    await server.speech(0.1, 1.0)
    await recorder.wait_for(AgentAudioEnded)
    errors = recorder.of(ProviderError)
    assert len(errors) == 4
    assert not any(error.error.fatal for error in errors)
    assert recorder.of(Transcript) == [Transcript("assistant", "Hi")]
    assert recorder.of(ConnectionLost) == []


DEEP = "[" * 10_000 + "]" * 10_000  # too deep for Python's recursive JSON parser


async def test_deeply_nested_and_reshaped_frames_are_reported_and_skipped(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.send_raw(DEEP)
    await server.send_raw('{"type": "session.output_audio.delta", "delta": ' + DEEP + "}")
    # Reshaped fields that once raised TypeError (a list is not hashable): no crash.
    await server.send({"type": "error", "error": {"code": ["x"], "type": {"a": 1}}})
    await server.send({"type": "response.event", "event": {"type": ["response.done"]}})
    await server.speech(0.1, 1.0)
    await recorder.wait_for(AgentAudioEnded)
    errors = [event.error for event in recorder.of(ProviderError)]
    assert len(errors) == 3
    assert ["nested too deeply" in str(e) for e in errors] == [True, True, False]
    assert not any(e.fatal for e in errors)
    assert all(len(str(e)) < 1000 for e in errors)
    assert recorder.of(ConnectionLost) == []


async def test_a_deeply_nested_frame_before_session_started_does_not_fail_start(
    server: GPTLiveServer,
) -> None:
    server.answer_start = False
    session = GPTLive(api_key="k", base_url=server.base_url).session()
    starting = asyncio.create_task(session.start(RealtimeConfig(instructions="x")))
    await server.wait_connected()
    await server.send_raw(DEEP)
    await server.session_started()
    await starting
    assert session.session_id == "session_1"
    await session.aclose()


# -- reconnecting (§4.8) ------------------------------------------------------------------------


async def test_a_dropped_connection_reconnects_with_the_history_reseeded(
    server: GPTLiveServer, connect: Connect
) -> None:
    history = ChatContext()
    history.add_message(role="user", content="first")
    config = RealtimeConfig(instructions="old", tools=[WEATHER], history=lambda: history)
    session, recorder = await connect(config)
    await one_call(server, recorder)
    await server.input_transcript("are you there", 100, 600)
    await recorder.wait_for(UserSpeechStarted)

    history.add_message(role="user", content="second")
    session.update_instructions("new")
    session.update_tools([])
    await server.drop()
    lost = await recorder.wait_for(ConnectionLost)
    assert lost.reconnecting
    assert (await recorder.wait_for(Reconnected)).session_id == "session_2"
    # The open user turn ended before the loss was reported.
    assert recorder.of(UserTurnEnded) == [UserTurnEnded("are you there")]
    assert recorder.events.index(recorder.of(UserTurnEnded)[0]) < recorder.events.index(lost)

    start = server.received_on(2)[0]
    assert start["type"] == "session.start"
    texts = [item["content"][0]["text"] for item in start["session"]["input"]]
    assert texts == ["first", "second"]
    assert start["session"]["instructions"] == "new"
    assert "tools" not in start["session"]["delegation"]["responses"]

    # The old connection's call cannot be answered on the new one.
    assert session.submit_tool_output(output("call_1"), reply_required=True) == "silent"
    await server.wait_for("session.thinking.append")
    assert server.received_types(2) == ["session.start", "session.thinking.append"]


async def test_a_session_closed_by_the_service_reconnects(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.response_created("dlg_1", "resp_1")  # busy: what ran is lost
    await server.usage(3.5)
    await server.session_closed("expired", seconds=4.0)
    lost = await recorder.wait_for(ConnectionLost)
    assert lost.reconnecting
    assert "expired" in lost.reason
    await recorder.wait_for(Reconnected)
    assert session.recycles == 0
    await server.usage(1.0)
    await advance(0.5)
    assert session.usage_seconds == 5.0
    assert session.session_id == "session_2"


async def test_giving_up_after_max_reconnect_attempts(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(max_reconnect_attempts=3, reconnect_backoff=0.5)
    server.refuse_connections = True
    began = now()
    await server.drop()
    await recorder.wait_ended()
    assert 1.5 <= now() - began < 2.5  # retries at once, after 0.5 s and after 1 s
    first, error, last = recorder.events[-3:]
    assert isinstance(first, ConnectionLost) and first.reconnecting
    assert isinstance(error, ProviderError) and error.error.fatal
    assert "3 attempt" in str(error.error)
    assert isinstance(last, ConnectionLost) and not last.reconnecting


async def test_no_reconnect_when_attempts_are_zero(server: GPTLiveServer, connect: Connect) -> None:
    _, recorder = await connect(max_reconnect_attempts=0)
    await server.drop()
    await recorder.wait_ended()
    error, lost = recorder.events[-2:]
    assert isinstance(error, ProviderError) and error.error.fatal
    assert isinstance(lost, ConnectionLost) and not lost.reconnecting
    assert server.connections == 1


async def test_aclose_during_a_reconnect_backoff_is_prompt(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(reconnect_backoff=60)
    server.refuse_connections = True
    await server.drop()
    await recorder.wait_for(ConnectionLost)
    await advance(1)
    began = now()
    await session.aclose()
    assert now() - began < 1
    await recorder.wait_ended()
    assert gpt_live_tasks() == []


async def test_input_audio_is_dropped_while_reconnecting(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(reconnect_backoff=5)
    server.refuse_connections = True
    await server.drop()
    await recorder.wait_for(ConnectionLost)
    await advance(1)  # the first, immediate attempt was refused; the next is 5 s away
    session.push_audio(pcm_frame(0.5))
    session.add_context("kept for the new connection")
    assert session.dropped_audio_chunks == 5
    server.refuse_connections = False
    await recorder.wait_for(Reconnected, within=10)
    await server.wait_for("session.thinking.append")
    assert server.received_types(2) == ["session.start", "session.thinking.append"]


# -- closing ----------------------------------------------------------------------------------


async def test_aclose_sends_session_close_and_ends_the_events(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await session.aclose()
    await recorder.wait_ended()
    assert server.received_types()[-1] == "session.close"
    assert recorder.of(ConnectionLost) == []
    assert gpt_live_tasks() == []
    await session.aclose()  # idempotent
    session.push_audio(pcm_frame(0.1))  # ignored after close
    session.add_context("ignored")


async def test_aclose_is_bounded_when_the_server_never_answers(
    server: GPTLiveServer, connect: Connect
) -> None:
    server.answer_close = False
    session, recorder = await connect(close_timeout=2)
    began = now()
    await asyncio.gather(session.aclose(), session.aclose())
    assert 2 <= now() - began < 5
    await recorder.wait_ended()
    assert gpt_live_tasks() == []


# -- media ------------------------------------------------------------------------------------


async def test_output_audio_is_cut_into_bursts(server: GPTLiveServer, connect: Connect) -> None:
    _, recorder = await connect()
    await server.speech(0.1, then_silence=1.0)
    await server.speech(0.2, then_silence=1.0)
    await recorder.wait_for(AgentAudioEnded, count=2)
    markers = [e for e in recorder.events if isinstance(e, AgentAudioStarted | AgentAudioEnded)]
    assert markers == [
        AgentAudioStarted(0),
        AgentAudioEnded(100),
        AgentAudioStarted(1100),
        AgentAudioEnded(1300),
    ]
    samples = sum(e.frame.samples_per_channel for e in recorder.of(AgentAudio))
    assert samples == 7200  # speech only: no silence inside or after the bursts


async def test_transcripts_keep_their_timeline_and_skip_empty_deltas(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.output_transcript("", 0, 10)
    await server.output_transcript("Let me check.", 3100, 3800)
    await server.output_transcript(" Done.")
    await recorder.wait_for(Transcript, count=2)
    assert recorder.of(Transcript) == [
        Transcript("assistant", "Let me check.", 3100, 3800),
        Transcript("assistant", " Done.", None, None),
    ]


async def test_a_user_turn_ends_after_pushed_silence(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(user_turn_silence=0.8)
    await server.input_transcript("", 0, 100)
    await server.input_transcript("What's the weather", 1200, 2000)
    await server.input_transcript(" in Paris?", 2000, 2700)
    await recorder.wait_for(Transcript, count=2)
    assert len(recorder.of(UserSpeechStarted)) == 1
    assert recorder.events[0] == UserSpeechStarted()

    session.push_audio(pcm_frame(0.7))
    await advance(5)  # wall time does not end a turn: pushed audio does
    assert recorder.of(UserTurnEnded) == []
    session.push_audio(pcm_frame(0.1))
    assert (await recorder.wait_for(UserTurnEnded)).text == "What's the weather in Paris?"


async def test_a_gap_on_the_timeline_splits_user_turns(
    server: GPTLiveServer, connect: Connect
) -> None:
    _, recorder = await connect(user_turn_silence=0.8)
    await server.input_transcript("Hi.", 0, 500)
    await server.input_transcript(" Me again.", 1200, 1600)  # 700 ms gap: same turn
    await server.input_transcript("Next", 2500, 2800)  # 900 ms gap: a new turn
    await recorder.wait_for(Transcript, count=3)
    turns = [e for e in recorder.events if isinstance(e, UserSpeechStarted | UserTurnEnded)]
    assert turns == [UserSpeechStarted(), UserTurnEnded("Hi. Me again."), UserSpeechStarted()]


async def test_input_audio_goes_out_in_100_ms_chunks_at_24_khz(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    session.push_audio(pcm_frame(0.25))
    await server.wait_for("session.input_audio.append", count=2)
    await advance(0.5)
    chunks = server.of_type("session.input_audio.append")
    assert len(chunks) == 2  # the last 50 ms wait for the next push
    assert all(set(chunk) == {"type", "audio"} for chunk in chunks)
    assert [len(chunk["audio"]) for chunk in chunks] == [6400, 6400]
    pcm = np.frombuffer(base64.b64decode(chunks[0]["audio"]), "<i2")
    assert np.all(pcm == 0x800)


async def test_input_audio_is_resampled_from_16_khz_stereo(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    t = np.arange(16000) / 16000
    tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)
    stereo = np.repeat(tone, 2)
    for start in range(0, 16000, 320):  # 20 ms frames
        session.push_audio(AudioFrame(stereo[start * 2 : (start + 320) * 2].copy(), 16000, 2))
    await server.wait_for("session.input_audio.append", count=9)
    await advance(0.5)
    chunks = server.of_type("session.input_audio.append")
    assert 9 <= len(chunks) <= 10  # soxr holds back a few ms
    for chunk in chunks:
        assert len(base64.b64decode(chunk["audio"])) == 4800  # 2400 samples of 24 kHz
    pcm = np.frombuffer(base64.b64decode(chunks[5]["audio"]), "<i2").astype(np.float64)
    assert 7000 < np.abs(pcm).max() < 9000


# -- commands -------------------------------------------------------------------------------


async def test_context_instructions_tools_and_replies_go_out_as_appends(
    server: GPTLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    session.add_context("The caller is on a train.")
    session.update_instructions("Speak French.")
    session.update_tools([WEATHER])
    session.generate_reply("Greet the caller.")
    session.send_user_text("what time is it?")
    await server.wait_for("session.commentary.append", count=2)
    thinking, instructions, update, reply, typed, answer = server.received[1:]
    for event in (thinking, instructions, reply, typed, answer):
        assert event["delegation_id"] is None
        assert isinstance(event["event_id"], str)
    assert thinking["type"] == "session.thinking.append"
    assert thinking["content"] == "The caller is on a train."
    assert instructions["type"] == "session.instructions.append"
    assert instructions["content"].endswith("Speak French.")
    assert update["session"] == {
        "delegation": {"type": "responses", "responses": {"tools": [WEATHER_WIRE]}}
    }
    assert reply["type"] == "session.commentary.append"
    assert "now" in reply["content"]
    assert reply["content"].endswith("Greet the caller.")
    assert typed["type"] == "session.thinking.append"
    assert typed["content"] == "user: what time is it?"
    assert answer["type"] == "session.commentary.append"


# -- the loopback server's own faithfulness ----------------------------------------------------


async def test_the_server_refuses_partial_batches_and_discarded_outputs(
    server: GPTLiveServer,
) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{server.base_url}/live/sessions")
        await ws.send_json({"type": "session.start", "session": {"model": "m"}})
        assert (await ws.receive_json())["type"] == "session.started"
        await server.response_created("d", "r1")
        await server.function_call("d", "c1", "f", {})
        await server.function_call("d", "c2", "f", {})
        await server.response_completed("d", "r1")
        await server.response_created("d", "r2")
        await server.function_call("d", "c3", "f", {})
        await server.response_failed("d", "r2")
        for _ in range(7):  # the scripted backend events above
            await ws.receive_json()
        output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
        await ws.send_json({"type": "response.item.create", "event_id": "o1", "item": output})
        await ws.send_json({"type": "response.create", "event_id": "rc1"})
        refused = await ws.receive_json()
        assert refused["error"]["client_event_id"] == "rc1"
        discarded = {**output, "call_id": "c3"}
        await ws.send_json({"type": "response.item.create", "event_id": "o3", "item": discarded})
        assert (await ws.receive_json())["error"]["client_event_id"] == "o3"
        await ws.close()
