"""openai.LLM against the loopback Chat Completions server, over a real socket on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import subprocess
import sys
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Iterator

import aiohttp
import pytest

from rejoinder.models import (
    AgentHandoff,
    ChatChunk,
    ChatContext,
    FunctionCall,
    FunctionCallOutput,
    LLMError,
    NamedToolChoice,
    ToolCallRequest,
    ToolChoice,
    ToolDefinition,
    Usage,
)
from rejoinder.models.fallback import FallbackLLM
from rejoinder.providers import _json, openai
from rejoinder.providers._http import error_message_from_body
from rejoinder.providers.openai._stream import _stream_error
from rejoinder.providers.openai.chat import SSEDecoder, StreamAssembler
from rejoinder.testing.openai_chat_server import (
    CutConnection,
    ErrorReply,
    OpenAIChatServer,
    Pause,
    RawData,
    StreamReply,
    chunk,
    encode_event,
    text_chunks,
    tool_call_delta,
    usage_chunk,
)

# Virtual time (looptime) stays on for these socket tests, on purpose. The loopback server
# runs in the test's own event loop, and loopback TCP delivers a write to the peer socket
# before the writer's send() returns, so whenever the loop polls, the I/O that tests wait
# for is already readable: looptime only fast-forwards when every task waits on a timer
# (a server Pause, a client timeout), which is exactly the virtual time a test wants (a
# 5 s read timeout or a 30 s pause cost nothing). looptime polls `noop_cycles` times
# before it jumps the clock; raising that from 42 gives a connect handshake or a
# kernel-deferred delivery a few milliseconds of margin at no cost when I/O is flowing.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

WEATHER = ToolDefinition(
    name="get_weather",
    description="Look up the weather.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city name"}},
        "required": ["city"],
    },
)
TIME = ToolDefinition(name="get_time", description="The current time.")


@pytest.fixture
async def server() -> AsyncIterator[OpenAIChatServer]:
    async with OpenAIChatServer() as srv:
        yield srv


@pytest.fixture
async def llm(server: OpenAIChatServer) -> AsyncIterator[openai.LLM]:
    model = openai.LLM(model="test-model", base_url=server.base_url, api_key="sk-test")
    yield model
    await model.aclose()


@pytest.fixture
async def llm_once(server: OpenAIChatServer) -> AsyncIterator[openai.LLM]:
    """An LLM that does not retry: for tests of how one failed request is reported."""
    model = openai.LLM(model="m", base_url=server.base_url, api_key="sk-test", max_retries=0)
    yield model
    await model.aclose()


def user_says(text: str = "Hi") -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content=text)
    return ctx


async def collect(stream: AsyncIterator[ChatChunk]) -> list[ChatChunk]:
    return [c async for c in stream]


async def fail(stream: AsyncIterator[ChatChunk]) -> tuple[list[ChatChunk], LLMError]:
    """Iterate until the stream raises; return what came before and the error."""
    received: list[ChatChunk] = []
    try:
        async for c in stream:
            received.append(c)
    except LLMError as error:
        return received, error
    raise AssertionError(f"no LLMError; the stream ended normally after {received!r}")


def text_of(chunks: list[ChatChunk]) -> str:
    return "".join(c.delta for c in chunks)


# -- streaming -----------------------------------------------------------------------------


async def test_streams_text_deltas_as_they_arrive(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(StreamReply(text_chunks("Hel", "lo", " there")))
    chunks = await collect(llm.chat(user_says()))
    assert [c.delta for c in chunks] == ["Hel", "lo", " there"]
    assert all(c.tool_calls == () and c.usage is None for c in chunks)


async def test_each_delta_is_yielded_before_the_next_one_is_sent(
    server: OpenAIChatServer, llm: openai.LLM, looptime: float
) -> None:
    # The server pauses for 30 s (virtual) after the first delta: the delta must not wait.
    server.add(StreamReply([chunk(content="first"), Pause(30), *text_chunks("second")]))
    stream = llm.chat(user_says())
    start = float(looptime)
    first = await anext(stream)
    assert first.delta == "first"
    assert float(looptime) - start < 1
    rest = await collect(stream)
    assert text_of(rest) == "second"


async def test_request_body_converts_the_chat_context(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    ctx = ChatContext()
    ctx.add_message(role="system", content="You are terse.")
    ctx.add_message(role="developer", content="Use metric units.")
    ctx.add_message(role="user", content="Weather in Oslo and the time?")
    ctx.add_message(role="assistant", content="Let me check.")
    ctx.append(FunctionCall(call_id="call_1", name="get_weather", arguments='{"city":"Oslo"}'))
    ctx.append(FunctionCall(call_id="call_2", name="get_time", arguments=""))
    ctx.append(FunctionCallOutput(call_id="call_1", name="get_weather", output="sunny, 21"))
    ctx.append(AgentHandoff(old_agent_id="a", new_agent_id="b"))
    ctx.append(FunctionCallOutput(call_id="call_2", name="get_time", output="12:00"))
    ctx.add_message(role="assistant", content="Sunny, 21 degrees; it is noon.")
    ctx.add_message(role="user", content="Thanks")
    server.add(StreamReply(text_chunks("ok")))

    await collect(llm.chat(ctx, tools=[WEATHER, TIME]))

    [body] = server.requests
    assert body["model"] == "test-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "temperature" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "Use metric units."},
        {"role": "user", "content": "Weather in Oslo and the time?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "assistant", "content": "Sunny, 21 degrees; it is noon."},
        {"role": "user", "content": "Thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Look up the weather.",
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": "The current time.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    assert body["tool_choice"] == "auto"
    [headers] = server.headers
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["Content-Type"] == "application/json"


async def test_calls_without_an_output_yet_are_left_out(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    # The API rejects an unanswered tool call, and an answer without its call.
    ctx = user_says("go")
    ctx.append(FunctionCall(call_id="call_a", name="get_time", arguments="{}"))
    ctx.append(FunctionCall(call_id="call_b", name="get_time", arguments="{}"))
    ctx.add_message(role="user", content="hurry")
    ctx.append(FunctionCallOutput(call_id="call_b", name="get_time", output="noon"))
    ctx.append(FunctionCallOutput(call_id="call_zzz", name="get_time", output="orphan"))
    server.add(StreamReply(text_chunks("ok")))

    await collect(llm.chat(ctx, tools=[TIME]))

    assert server.requests[0]["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "noon"},
        {"role": "user", "content": "hurry"},
    ]


@pytest.mark.parametrize(
    ("tool_choice", "wire"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        (NamedToolChoice("get_weather"), {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
async def test_tool_choice_variants(
    server: OpenAIChatServer, llm: openai.LLM, tool_choice: ToolChoice, wire: object
) -> None:
    server.add(StreamReply(text_chunks("ok")))
    await collect(llm.chat(user_says(), tools=[WEATHER], tool_choice=tool_choice))
    assert server.requests[0]["tool_choice"] == wire


async def test_no_tools_sends_neither_tools_nor_tool_choice(server: OpenAIChatServer) -> None:
    llm = openai.LLM(
        model="m2",
        base_url=server.base_url + "/",
        api_key="",
        temperature=0.2,
        extra_headers={"X-Trace": "abc"},
        extra_body={"seed": 7},
    )
    server.add(StreamReply(text_chunks("ok")))
    try:
        await collect(llm.chat(user_says(), tools=[], tool_choice="required"))
    finally:
        await llm.aclose()
    [body] = server.requests
    assert "tools" not in body
    assert "tool_choice" not in body
    assert body["model"] == "m2"
    assert body["temperature"] == 0.2
    assert body["seed"] == 7
    [headers] = server.headers
    assert "Authorization" not in headers  # an empty key means no key (local servers)
    assert headers["X-Trace"] == "abc"


async def test_parallel_tool_calls_assembled_from_interleaved_fragments(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(
        StreamReply(
            [
                chunk(role="assistant", content="Checking."),
                chunk(tool_calls=[tool_call_delta(0, call_id="call_w", name="get_weather")]),
                chunk(tool_calls=[tool_call_delta(0, arguments='{"ci')]),
                chunk(tool_calls=[tool_call_delta(1, call_id="call_t", name="get_time")]),
                chunk(tool_calls=[tool_call_delta(0, arguments='ty": "Os')]),
                chunk(tool_calls=[tool_call_delta(1, arguments="{")]),
                chunk(
                    tool_calls=[
                        tool_call_delta(0, arguments='lo"}'),
                        tool_call_delta(1, arguments="}"),
                    ]
                ),
                chunk(finish_reason="tool_calls"),
                usage_chunk(30, 12),
            ]
        )
    )
    chunks = await collect(llm.chat(user_says(), tools=[WEATHER, TIME]))

    assert text_of(chunks) == "Checking."
    calls = [c for c in chunks if c.tool_calls]
    assert len(calls) == 1, "all calls are released together, once, at finish_reason"
    assert calls[0].tool_calls == (
        ToolCallRequest(call_id="call_w", name="get_weather", arguments='{"city": "Oslo"}'),
        ToolCallRequest(call_id="call_t", name="get_time", arguments="{}"),
    )
    assert chunks[-1].usage == Usage(prompt_tokens=30, completion_tokens=12)
    assert chunks.index(calls[0]) < len(chunks) - 1


async def test_tool_calls_released_at_done_when_no_finish_reason(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(StreamReply([chunk(tool_calls=[tool_call_delta(0, call_id="c1", name="get_time")])]))
    chunks = await collect(llm.chat(user_says(), tools=[TIME]))
    assert [c.tool_calls for c in chunks] == [(ToolCallRequest("c1", "get_time", "{}"),)]


async def test_usage_chunk(server: OpenAIChatServer, llm: openai.LLM) -> None:
    server.add(StreamReply([*text_chunks("Hi"), usage_chunk(prompt_tokens=9, completion_tokens=2)]))
    chunks = await collect(llm.chat(user_says()))
    assert text_of(chunks) == "Hi"
    assert [c.usage for c in chunks if c.usage] == [Usage(prompt_tokens=9, completion_tokens=2)]


# -- HTTP errors ---------------------------------------------------------------------------


async def test_http_401_is_not_retryable_and_carries_the_server_message() -> None:
    async with OpenAIChatServer([StreamReply(text_chunks("never"))], api_key="right") as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="wrong")
        try:
            received, error = await fail(llm.chat(user_says()))
        finally:
            await llm.aclose()
    assert received == []
    assert error.status == 401
    assert error.retryable is False
    assert "401" in str(error)
    assert "Incorrect API key provided." in str(error)
    assert "wrong" not in str(error)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_http_429_and_5xx_are_retryable(
    server: OpenAIChatServer, llm_once: openai.LLM, status: int
) -> None:
    server.add(
        ErrorReply(status, "The server had an error processing your request.", "server_error")
    )
    received, error = await fail(llm_once.chat(user_says()))
    assert received == []
    assert error.status == status
    assert error.retryable is True
    assert f"HTTP {status}" in str(error)
    assert "The server had an error processing your request." in str(error)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": "model 'llama9' not found"}, "model 'llama9' not found"),  # Ollama
        ({"detail": "Not Found"}, "Not Found"),  # FastAPI-based servers
        ("upstream overloaded", "upstream overloaded"),  # plain text
    ],
)
async def test_error_bodies_of_other_servers(
    server: OpenAIChatServer, llm: openai.LLM, body: object, message: str
) -> None:
    server.add(ErrorReply(404, body=body))
    _, error = await fail(llm.chat(user_says()))
    assert error.status == 404
    assert error.retryable is False
    assert message in str(error)


async def test_error_object_inside_the_stream(server: OpenAIChatServer, llm: openai.LLM) -> None:
    server.add(
        StreamReply(
            [chunk(content="Hi"), {"error": {"message": "overloaded", "type": "server_error"}}],
            done=False,
        )
    )
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "Hi"
    assert "overloaded" in str(error)
    assert error.retryable is True


# -- broken connections and streams --------------------------------------------------------


async def test_connection_cut_mid_stream(server: OpenAIChatServer, llm: openai.LLM) -> None:
    server.add(StreamReply([chunk(content="Hel"), chunk(content="lo"), CutConnection()]))
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "Hello"
    assert "connection lost mid-stream" in str(error)
    assert error.retryable is True
    assert not isinstance(error, aiohttp.ClientError)


async def test_connection_cut_before_the_response(
    server: OpenAIChatServer, llm_once: openai.LLM
) -> None:
    server.add(StreamReply([CutConnection()]))
    _, error = await fail(llm_once.chat(user_says()))
    assert "closed the connection before responding" in str(error)
    assert error.retryable is True


async def test_connection_refused() -> None:
    with socket.socket() as sock:  # find a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = openai.LLM(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    try:
        _, error = await fail(llm.chat(user_says()))
    finally:
        await llm.aclose()
    assert "cannot connect" in str(error)
    assert "connection refused" in str(error)
    assert f"127.0.0.1:{port}" in str(error)
    assert error.retryable is True


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("data: {not json\n\n", "not JSON"),
        ('data: {"choices": {"index": 0}}\n\n', "`choices` is not a list"),
        ('data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n', "`delta.content`"),
        ("data: [1, 2]\n\n", "not a JSON object"),
        ('data: {"choices": [], "usage": {"prompt_tokens": "9"}}\n\n', "`usage`"),
    ],
)
async def test_malformed_chunk(
    server: OpenAIChatServer, llm: openai.LLM, raw: str, problem: str
) -> None:
    server.add(StreamReply([chunk(content="ok"), RawData(raw), *text_chunks("never")]))
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "ok"
    assert "malformed chunk" in str(error)
    assert problem in str(error)
    assert error.retryable is False


async def test_stream_ending_without_done_or_finish_reason_is_an_error(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(StreamReply(text_chunks("Hel", finish_reason=None), done=False))
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "Hel"
    assert "ended before the model finished" in str(error)
    assert error.retryable is True


async def test_stream_ending_after_finish_reason_without_done_is_accepted(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(
        StreamReply(
            [
                chunk(tool_calls=[tool_call_delta(0, call_id="c1", name="get_time")]),
                chunk(finish_reason="tool_calls"),
            ],
            done=False,
        )
    )
    chunks = await collect(llm.chat(user_says(), tools=[TIME]))
    assert [c.tool_calls for c in chunks] == [(ToolCallRequest("c1", "get_time", "{}"),)]


async def test_read_timeout_on_a_silent_server(server: OpenAIChatServer, looptime: float) -> None:
    # Virtual time: the server goes quiet for an hour; the client gives up after 5 s.
    llm = openai.LLM(model="m", base_url=server.base_url, timeout=openai.Timeout(connect=5, read=5))
    server.add(StreamReply([chunk(content="Hi"), Pause(3600), *text_chunks("late")]))
    start = float(looptime)
    try:
        received, error = await fail(llm.chat(user_says()))
    finally:
        await llm.aclose()
    assert text_of(received) == "Hi"
    assert "timed out" in str(error)
    assert error.retryable is True
    assert 5 <= float(looptime) - start < 7


async def test_json_reply_instead_of_a_stream_is_an_error(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    # An HTTP 200 with a JSON body (e.g. a proxy's error page) is not a stream.
    server.add(ErrorReply(200, body={"error": {"message": "streaming is disabled"}}))
    _, error = await fail(llm.chat(user_says()))
    assert "instead of an event stream" in str(error)
    assert "streaming is disabled" in str(error)


# -- SSE framing ---------------------------------------------------------------------------


@pytest.mark.parametrize("write_size", [1, 2, 3, 7, 64])
async def test_sse_lines_split_at_odd_byte_boundaries(
    server: OpenAIChatServer, llm: openai.LLM, write_size: int
) -> None:
    server.add(
        StreamReply(
            [
                RawData(": keep-alive comment\r\n\r\n"),
                chunk(role="assistant", content=""),
                chunk(content="Grüße, "),  # multi-byte UTF-8 split mid-character
                RawData("\n"),  # a stray blank line
                chunk(content="世界 🌍"),
                chunk(tool_calls=[tool_call_delta(0, call_id="c1", name="get_weather")]),
                chunk(tool_calls=[tool_call_delta(0, arguments='{"city": "Zürich"}')]),
                chunk(finish_reason="tool_calls"),
                usage_chunk(3, 4),
            ],
            write_size=write_size,
        )
    )
    chunks = await collect(llm.chat(user_says(), tools=[WEATHER]))
    assert text_of(chunks) == "Grüße, 世界 🌍"
    assert [c.tool_calls for c in chunks if c.tool_calls] == [
        (ToolCallRequest("c1", "get_weather", '{"city": "Zürich"}'),)
    ]
    assert [c.usage for c in chunks if c.usage] == [Usage(3, 4)]


def _sample_stream() -> bytes:
    return b"".join(
        [
            b"\xef\xbb\xbf: comment\r\n\r\n",
            b"event: message\r\nid: 1\r\n",
            encode_event(chunk(content="a\u00e9\u4e16")).replace(b"\n", b"\r\n"),
            b'data: {"choices": []\r',  # a CR line ending...
            b"data: }\r\r",  # ...and a two-line data field
            encode_event(chunk(content="b")),
            encode_event("[DONE]"),
        ]
    )


def _expected_events() -> list[str]:
    return [
        json.dumps(chunk(content="a\u00e9\u4e16")),
        '{"choices": []\n}',
        json.dumps(chunk(content="b")),
        "[DONE]",
    ]


def _split_everywhere(data: bytes) -> Iterator[list[bytes]]:
    for i in range(len(data) + 1):
        for j in range(i, min(len(data), i + 5) + 1):
            yield [data[:i], data[i:j], data[j:]]


def test_sse_decoder_is_independent_of_read_boundaries() -> None:
    data = _sample_stream()
    for pieces in _split_everywhere(data):
        decoder = SSEDecoder()
        events: list[str] = []
        for piece in pieces:
            events += decoder.feed(piece)
        events += decoder.flush()
        assert events == _expected_events(), pieces


def test_sse_decoder_byte_by_byte_and_unterminated_last_event() -> None:
    decoder = SSEDecoder()
    events: list[str] = []
    for byte in b'data: {"x": 1}\n\ndata: last':
        events += decoder.feed(bytes([byte]))
    assert events == ['{"x": 1}']
    assert decoder.flush() == ["last"]


def test_sse_decoder_rejects_invalid_utf8() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        SSEDecoder().feed(b"data: \xff\xfe\n\n")


# -- assembler details ---------------------------------------------------------------------


def test_tool_calls_without_index_and_with_object_arguments() -> None:
    # Some OpenAI-compatible servers omit `index` or send `arguments` as an object.
    assembler = StreamAssembler()
    events = [
        {"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "f"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"x":'}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "1}"}}]}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"id": "b", "function": {"name": "g", "arguments": {"y": 2}}}
                        ]
                    }
                }
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    ]
    out = [assembler.feed(json.dumps(e)) for e in events]
    assert out[:4] == [None, None, None, None]
    assert out[4] == ChatChunk(
        tool_calls=(ToolCallRequest("a", "f", '{"x":1}'), ToolCallRequest("b", "g", '{"y": 2}'))
    )
    assert assembler.end() is None


def test_tool_call_without_a_name_is_malformed() -> None:
    assembler = StreamAssembler()
    assembler.feed(json.dumps(chunk(tool_calls=[tool_call_delta(0, arguments="{}")])))
    with pytest.raises(LLMError, match="no name"):
        assembler.feed(json.dumps(chunk(finish_reason="tool_calls")))


def test_missing_call_id_gets_one() -> None:
    assembler = StreamAssembler()
    assembler.feed(json.dumps(chunk(tool_calls=[tool_call_delta(0, name="f")])))
    out = assembler.feed("[DONE]")
    assert out is not None
    [call] = out.tool_calls
    assert call.call_id.startswith("call_")


# -- lifecycle -----------------------------------------------------------------------------


async def test_consumer_may_stop_early_and_the_llm_stays_usable(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(
        StreamReply([chunk(content="one"), Pause(3600), *text_chunks("two")]),
        StreamReply(text_chunks("again")),
    )
    stream = llm.chat(user_says())
    assert (await anext(stream)).delta == "one"
    assert isinstance(stream, AsyncGenerator)
    await stream.aclose()
    assert text_of(await collect(llm.chat(user_says()))) == "again"
    assert len(server.requests) == 2


async def test_cancellation_propagates_and_is_not_turned_into_llm_error(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(StreamReply([chunk(content="one"), Pause(3600), *text_chunks("two")]))
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in llm.chat(user_says()):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_chat_builds_the_request_when_called(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    ctx = user_says("before")
    stream = llm.chat(ctx)
    ctx.add_message(role="user", content="after")  # too late for this request
    server.add(StreamReply(text_chunks("ok")))
    await collect(stream)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "before"}]


async def test_aclose_is_idempotent_and_leaves_a_given_session_open(
    server: OpenAIChatServer,
) -> None:
    async with aiohttp.ClientSession() as session:
        llm = openai.LLM(model="m", base_url=server.base_url, http_session=session)
        server.add(StreamReply(text_chunks("ok")))
        assert text_of(await collect(llm.chat(user_says()))) == "ok"
        await llm.aclose()
        await llm.aclose()
        assert not session.closed

    own = openai.LLM(model="m", base_url=server.base_url)
    await own.aclose()  # never used: nothing to close
    server.add(StreamReply(text_chunks("ok")), StreamReply(text_chunks("again")))
    await collect(own.chat(user_says()))
    await own.aclose()
    await own.aclose()
    # Used after aclose: a new session is made (and closed again).
    assert text_of(await collect(own.chat(user_says()))) == "again"
    await own.aclose()


def test_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    llm = openai.LLM(model="llama3.2")
    assert llm.base_url == "http://localhost:11434/v1"
    assert llm.model == "llama3.2"
    assert llm.provider == "openai"
    assert llm._headers()["Authorization"] == "Bearer sk-env"

    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    llm = openai.LLM()
    assert llm.base_url == "https://api.openai.com/v1"
    assert "Authorization" not in llm._headers()


def test_importing_the_provider_does_not_import_aiohttp() -> None:
    code = "import sys, rejoinder.providers.openai; sys.exit('aiohttp' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert result.returncode == 0, result.stderr.decode()


def test_usage_repeated_in_every_chunk_is_reported_once_with_the_last_total() -> None:
    assembler = StreamAssembler()
    running = [
        chunk(content="a", usage={"prompt_tokens": 5, "completion_tokens": 1}),
        chunk(content="b", usage={"prompt_tokens": 5, "completion_tokens": 2}),
        chunk(finish_reason="stop", usage={"prompt_tokens": 5, "completion_tokens": 2}),
    ]
    out = [assembler.feed(json.dumps(c)) for c in running]
    assert out == [ChatChunk(delta="a"), ChatChunk(delta="b"), None]
    assert assembler.feed("[DONE]") == ChatChunk(usage=Usage(5, 2))


def test_choice_with_null_index_is_the_first_choice() -> None:
    assembler = StreamAssembler()
    out = assembler.feed(json.dumps({"choices": [{"index": None, "delta": {"content": "x"}}]}))
    assert out == ChatChunk(delta="x")
    second = {"choices": [{"index": 1, "delta": {"content": "ignored"}}]}
    assert assembler.feed(json.dumps(second)) is None


# -- malformed beyond parsing: depth --------------------------------------------------------

DEEP = "[" * 10_000 + "]" * 10_000  # too deep for Python's recursive JSON parser


async def test_a_deeply_nested_chunk_is_a_malformed_chunk_not_a_recursion_error(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    deep_chunk = '{"choices": [{"index": 0, "delta": {"content": ' + DEEP + "}}]}"
    server.add(
        StreamReply([chunk(content="ok"), RawData(f"data: {deep_chunk}\n\n"), *text_chunks("x")])
    )
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "ok"
    assert "malformed chunk" in str(error) and "nested too deeply" in str(error)
    assert not error.retryable
    assert len(str(error)) < 1000  # the excerpt is short


async def test_a_deeply_nested_first_chunk_fails_without_retrying(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(StreamReply([RawData(f"data: {DEEP}\n\n")]), StreamReply(text_chunks("never")))
    received, error = await fail(llm.chat(user_says()))
    assert received == [] and "nested too deeply" in str(error)
    assert len(server.requests) == 1 and llm.retries == 0


async def test_a_deeply_nested_error_body_still_reports_the_status(
    server: OpenAIChatServer, llm: openai.LLM
) -> None:
    server.add(ErrorReply(400, body=DEEP))  # sent as text; not readable as JSON
    _, error = await fail(llm.chat(user_says()))
    assert error.status == 400 and "HTTP 400" in str(error)
    assert len(str(error)) < 1000


def test_values_too_deep_to_serialize_again_are_malformed() -> None:
    # Parsed at a shallow stack, re-serialized deeper: json.dumps may overflow where
    # json.loads did not. Built directly here, as deep as it takes.
    deep: object = []
    for _ in range(100_000):
        deep = [deep]
    error = _stream_error(deep)
    assert isinstance(error, LLMError) and "nested too deeply" in str(error)
    body = b'{"error": ' + DEEP.encode() + b"}"
    assert error_message_from_body(body).startswith('{"error": [[[')
    with pytest.raises(ValueError, match="too deeply"):
        _json.dumps(deep)
    with pytest.raises(ValueError, match="too deeply"):
        _json.loads(DEEP)


# -- closing --------------------------------------------------------------------------------


async def test_aclose_closes_the_http_session_and_nothing_is_reported_unclosed(
    server: OpenAIChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    llm = openai.LLM(model="m", base_url=server.base_url, api_key="k")
    server.add(StreamReply(text_chunks("ok")), StreamReply(text_chunks("again")))
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
        warnings.simplefilter("always")
        assert text_of(await collect(llm.chat(user_says()))) == "ok"
        first = llm._session
        assert first is not None and not first.closed
        await llm.aclose()
        assert first.closed
        # A later chat opens a new session, closed again by the next aclose.
        assert text_of(await collect(llm.chat(user_says()))) == "again"
        second = llm._session
        assert second is not None and second is not first
        await llm.aclose()
        assert second.closed
        del first, second
        gc.collect()
        await asyncio.sleep(0)
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert [r for r in caplog.records if "nclosed" in r.getMessage()] == []


async def test_fallback_llm_aclose_closes_every_openai_llm(server: OpenAIChatServer) -> None:
    first = openai.LLM(model="a", base_url=server.base_url, api_key="k", max_retries=0)
    second = openai.LLM(model="b", base_url=server.base_url, api_key="k")
    fallback = FallbackLLM([first, second], probe=False)
    server.add(ErrorReply(500), StreamReply(text_chunks("from b")))
    assert text_of(await collect(fallback.chat(user_says()))) == "from b"
    sessions = [first._session, second._session]
    assert all(s is not None and not s.closed for s in sessions)
    await fallback.aclose()
    assert all(s is not None and s.closed for s in sessions)
