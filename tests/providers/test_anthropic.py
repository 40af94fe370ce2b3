"""anthropic.LLM over real sockets to the loopback Messages server (virtual time): the
request the API accepts (system prompt, alternating roles, every tool call answered in
the next message), the stream (text, parallel tool calls, usage with cached tokens),
retries before the first chunk, clear errors for garbage, and whole sessions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models import NamedToolChoice, ToolDefinition
from rejoinder.providers import anthropic
from rejoinder.providers.anthropic import _convert
from rejoinder.testing import StateTimeline
from rejoinder.testing.anthropic_server import (
    AnthropicServer,
    CutConnection,
    ErrorReply,
    RawData,
    StreamReply,
    ToolUse,
    encode_event,
    error_event,
    message,
    message_start,
)

from .._samples import run_example
from ._servers import call, closing_factory, collect, context, fail, output, serving, user_says

# Real sockets on virtual time, as for the OpenAI-compatible client.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

WEATHER = ToolDefinition(
    "get_weather",
    "Get the weather.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


server = serving(AnthropicServer, api_key="sk-ant-test")


@pytest.fixture
async def make_llm(server: AnthropicServer) -> AsyncIterator[Any]:
    async for factory in closing_factory(
        anthropic.LLM, model="claude-test", base_url=server.base_url, api_key="sk-ant-test"
    ):
        yield factory


# -- the request ----------------------------------------------------------------------------


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each message's role and its blocks, as ``type:key`` strings."""
    out = []
    for m in messages:
        blocks = []
        for b in m["content"]:
            key = b.get("text") or b.get("id") or b.get("tool_use_id")
            blocks.append(f"{b['type']}:{key}")
        out.append((m["role"], blocks))
    return out


def test_parallel_calls_share_one_message_and_their_results_come_first_in_the_next() -> None:
    ctx = context(
        ("system", "Be brief."),
        ("user", "Weather in Paris and Rome?"),
        ("assistant", "Let me look."),
        call("a"),
        call("b", arguments='{"city": "Rome"}'),
        ("user", "and hurry"),  # said while the tools ran
        output("b", "rain"),
        output("a"),
        ("assistant", "Sunny in Paris, rain in Rome."),
        ("user", "Thanks"),
    )
    system, messages = _convert.to_system_and_messages(ctx)
    assert system == [{"type": "text", "text": "Be brief."}]
    assert shape(messages) == [
        ("user", ["text:Weather in Paris and Rome?"]),
        ("assistant", ["text:Let me look.", "tool_use:a", "tool_use:b"]),
        ("user", ["tool_result:a", "tool_result:b", "text:and hurry"]),
        ("assistant", ["text:Sunny in Paris, rain in Rome."]),
        ("user", ["text:Thanks"]),
    ]
    assert messages[1]["content"][2]["input"] == {"city": "Rome"}
    assert messages[2]["content"][1]["content"] == "rain"


def test_sequential_calls_each_get_their_results_before_the_agent_speaks_again() -> None:
    ctx = context(
        ("user", "Plan my day"),
        call("a"),
        output("a", "boom", error=True),
        ("assistant", "The weather service failed; trying again."),
        call("b"),
        output("b"),
    )
    _, messages = _convert.to_system_and_messages(ctx)
    assert shape(messages) == [
        ("user", ["text:Plan my day"]),
        ("assistant", ["tool_use:a"]),
        ("user", ["tool_result:a"]),
        ("assistant", ["text:The weather service failed; trying again.", "tool_use:b"]),
        ("user", ["tool_result:b"]),
    ]
    assert messages[2]["content"][0]["is_error"] is True


def test_a_call_without_its_output_and_an_output_without_its_call_are_left_out() -> None:
    # An interrupted call (no output) and a stray output would each be an HTTP 400.
    ctx = context(
        ("user", "Weather?"),
        ("assistant", "Checking."),
        call("lost"),
        output("stray"),
        ("user", "Never mind."),
        call("twice"),
        output("twice"),
        output("twice", "again"),
    )
    _, messages = _convert.to_system_and_messages(ctx)
    assert shape(messages) == [
        ("user", ["text:Weather?"]),
        ("assistant", ["text:Checking."]),
        ("user", ["text:Never mind."]),
        ("assistant", ["tool_use:twice"]),
        ("user", ["tool_result:twice"]),
    ]
    ids = [b.get("id") or b.get("tool_use_id") for m in messages for b in m["content"]]
    assert "lost" not in ids and "stray" not in ids


def test_the_conversation_starts_and_ends_with_the_user_and_has_no_empty_text() -> None:
    # The agent greets first, then is asked to go on with nothing new from the user.
    ctx = context(
        ("system", "Greet."),
        ("assistant", "Hello! How can I help?"),
        ("user", "   "),
        ("developer", "Now offer the menu."),
    )
    system, messages = _convert.to_system_and_messages(ctx)
    assert [b["text"] for b in system] == ["Greet."]
    assert shape(messages) == [
        ("user", [f"text:{_convert.CONVERSATION_STARTS}"]),
        ("assistant", ["text:Hello! How can I help?"]),
        ("user", ["text:Now offer the menu."]),  # mid-conversation instructions stay in place
    ]
    _, only_agent = _convert.to_system_and_messages(context(("assistant", "Hi.")))
    assert shape(only_agent)[-1] == ("user", [f"text:{_convert.GO_ON}"])
    _, empty = _convert.to_system_and_messages(context(("system", "x")))
    assert shape(empty) == [("user", [f"text:{_convert.CONVERSATION_STARTS}"])]


def test_arguments_that_are_not_an_object_still_make_a_valid_tool_use() -> None:
    ctx = context(
        ("user", "x"),
        call("a", arguments="not json"),
        output("a", "bad arguments", error=True),
        call("b", arguments=""),
        output("b"),
        call("c", arguments="[1, 2]"),
        output("c"),
    )
    _, messages = _convert.to_system_and_messages(ctx)
    inputs = [b["input"] for b in messages[1]["content"]]
    assert inputs == [{"arguments": "not json"}, {}, {"arguments": [1, 2]}]


def test_the_request_caches_tools_system_and_conversation_and_maps_tool_choice() -> None:
    llm = anthropic.LLM(model="claude-test", api_key="k", max_tokens=300, temperature=0.2)
    body = llm.build_request(user_says(), [WEATHER], NamedToolChoice("get_weather"))
    assert body["model"] == "claude-test" and body["max_tokens"] == 300
    assert body["stream"] is True and body["temperature"] == 0.2
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Get the weather.",
            "input_schema": WEATHER.parameters,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    plain = anthropic.LLM(api_key="k", cache_prompt=False).build_request(user_says(), [WEATHER])
    assert "cache_control" not in json.dumps(plain)
    assert plain["tool_choice"] == {"type": "auto"}
    assert _convert.to_tool_choice("required") == {"type": "any"}
    assert _convert.to_tool_choice("none") == {"type": "none"}
    with pytest.raises(ValueError, match="max_tokens"):
        anthropic.LLM(api_key="k", max_tokens=0)


# -- the stream -----------------------------------------------------------------------------


async def test_text_streams_with_the_headers_usage_and_cached_tokens(
    server: AnthropicServer, make_llm: Any
) -> None:
    server.add(StreamReply(message("Hello", " there.", input_tokens=12, cache_read=2048)))
    chunks = await collect(make_llm().chat(user_says()))
    assert "".join(c.delta for c in chunks) == "Hello there."
    assert chunks[0].info is not None and chunks[0].info.provider == "anthropic"
    assert chunks[0].info.retries == 0
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (2060, 5, 2048)
    headers = server.headers[0]
    assert headers["x-api-key"] == "sk-ant-test" and headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in headers
    assert server.requests[0]["system"][0]["text"] == "You are brief."


async def test_parallel_tool_calls_come_whole_with_their_streamed_arguments(
    server: AnthropicServer, make_llm: Any
) -> None:
    server.add(
        StreamReply(
            message(
                "Checking.",
                ToolUse("toolu_1", "get_weather", '{"ci', 'ty": "Pa', 'ris"}'),
                ToolUse("toolu_2", "get_weather"),
            ),
            write_size=7,  # events split at odd places
        )
    )
    chunks = await collect(make_llm().chat(user_says(), [WEATHER]))
    calls = [call for c in chunks for call in c.tool_calls]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("toolu_1", "get_weather", '{"city": "Paris"}'),
        ("toolu_2", "get_weather", "{}"),
    ]
    assert "".join(c.delta for c in chunks) == "Checking."


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (ErrorReply(529, "Overloaded", type="overloaded_error"), "529"),
        (ErrorReply(429, "slow down", type="rate_limit_error", retry_after=1), "429"),
        (ErrorReply(500, "oops", type="api_error"), "500"),
        (StreamReply([message_start(), error_event("overloaded_error")]), "overloaded event"),
        (StreamReply([CutConnection()]), "cut before the headers"),
        (StreamReply([message_start(), CutConnection()]), "cut before any text"),
    ],
)
async def test_a_transient_failure_before_the_first_chunk_is_tried_again(
    server: AnthropicServer, make_llm: Any, first: Any, why: str
) -> None:
    server.add(first, StreamReply(message("Recovered.")))
    llm = make_llm(retry_backoff=0.1)
    chunks = await collect(llm.chat(user_says()))
    assert "".join(c.delta for c in chunks) == "Recovered.", why
    assert chunks[0].info is not None and chunks[0].info.retries == 1
    assert llm.retries == 1 and len(server.requests) == 2


async def test_a_failure_after_text_was_yielded_is_not_retried(
    server: AnthropicServer, make_llm: Any
) -> None:
    events = message("Half a sent")[:-3]  # stops before the text block ends
    server.add(StreamReply([*events, error_event("overloaded_error")]))
    server.add(StreamReply([*events, CutConnection()]))
    llm = make_llm()
    for expected in ("overloaded_error", "connection"):
        received, error = await fail(llm.chat(user_says()))
        assert "".join(c.delta for c in received) == "Half a sent"
        assert expected in str(error)
    assert len(server.requests) == 2 and llm.retries == 0


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (ErrorReply(400, "messages: roles must alternate", type="invalid_request_error"), "400"),
        (ErrorReply(401, "invalid x-api-key", type="authentication_error"), "x-api-key"),
        (StreamReply([RawData("event: x\ndata: {not json\n\n")]), "not JSON"),
        (StreamReply([{"type": "content_block_delta", "index": 0}]), "before message_start"),
        (StreamReply([message_start(), RawData(b"data: \xff\xfe\n\n")]), "UTF-8"),
        (
            StreamReply(
                [
                    message_start(),
                    {
                        "type": "content_block_delta",
                        "index": 3,
                        "delta": {"type": "input_json_delta", "partial_json": "{"},
                    },
                ]
            ),
            "outside a tool_use block",
        ),
        (ErrorReply(200, body={"id": "msg", "content": []}), "instead of an event stream"),
        (StreamReply([message_start(), error_event("invalid_request_error", "bad")]), "bad"),
    ],
)
async def test_garbage_and_final_errors_are_clear_and_not_retried(
    server: AnthropicServer, make_llm: Any, reply: Any, expected: str
) -> None:
    server.add(reply)
    _, error = await fail(make_llm().chat(user_says()))
    assert expected in str(error)
    assert len(server.requests) == 1


async def test_a_wrong_key_is_a_401_with_the_servers_message(server: AnthropicServer) -> None:
    llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="wrong")
    _, error = await fail(llm.chat(user_says()))
    assert error.status == 401 and "invalid x-api-key" in str(error)
    await llm.aclose()


async def test_unknown_events_and_blocks_are_skipped(
    server: AnthropicServer, make_llm: Any
) -> None:
    events = message("Yes.")
    extra = [
        {"type": "content_block_start", "index": 5, "content_block": {"type": "thinking"}},
        {"type": "content_block_delta", "index": 5, "delta": {"type": "thinking_delta"}},
        {"type": "content_block_stop", "index": 5},
        {"type": "some_future_event"},
    ]
    server.add(StreamReply([*events[:2], *extra, *events[2:]]))
    chunks = await collect(make_llm().chat(user_says()))
    assert "".join(c.delta for c in chunks) == "Yes."


def test_events_are_written_as_the_api_writes_them() -> None:
    assert encode_event({"type": "ping"}) == b'event: ping\ndata: {"type": "ping"}\n\n'


# -- whole sessions -------------------------------------------------------------------------


@rj.function_tool
async def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


async def test_a_session_answers_with_a_tool_and_the_follow_up_carries_its_result(
    server: AnthropicServer,
) -> None:
    server.add(
        StreamReply(
            message("Let me check.", ToolUse("toolu_9", "get_weather", '{"city": "Oslo"}'))
        ),
        StreamReply(message("It is sunny in Oslo.", cache_read=1500)),
    )
    llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="sk-ant-test")
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    metrics: list[Any] = []
    session.on("metrics_collected", lambda ev: metrics.append(ev.metrics))
    timeline = StateTimeline(session)
    await session.start(rj.Agent(instructions="You report weather.", tools=[get_weather]))
    result = await session.run(user_input="Weather in Oslo?")
    assert result.final_output == "It is sunny in Oslo."
    follow_up = server.requests[1]
    assert follow_up["system"][0]["text"] == "You report weather."
    assert shape(follow_up["messages"]) == [
        ("user", ["text:Weather in Oslo?"]),
        ("assistant", ["text:Let me check.", "tool_use:toolu_9"]),
        ("user", ["tool_result:toolu_9"]),
    ]
    assert follow_up["messages"][2]["content"][0]["content"] == "sunny in Oslo"
    llm_metrics = [m for m in metrics if m["type"] == "llm"]
    assert [m["cached_tokens"] for m in llm_metrics] == [0, 1500]
    assert session.agent_state == "listening" and "thinking" in timeline.agent_states()
    await session.aclose()


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ErrorReply(400, "prompt is too long", type="invalid_request_error"), "prompt is too long"),
        (StreamReply([*message("Half a sen")[:-3], CutConnection()]), "connection"),
        (StreamReply([*message("Half a sen")[:-3], error_event()]), "overloaded_error"),
        (StreamReply([message_start(), RawData("data: [[[\n\n")]), "not JSON"),
    ],
)
async def test_a_session_whose_provider_fails_returns_to_listening_and_goes_on(
    server: AnthropicServer, failure: Any, said: str
) -> None:
    server.add(failure, StreamReply(message("Recovered.")))
    llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="sk-ant-test")
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    errors: list[rj.ErrorEvent] = []
    session.on("error", errors.append)
    await session.start(rj.Agent(instructions="x"))
    await session.run(user_input="hi")
    assert len(errors) == 1 and said in str(errors[0].error)
    assert session.agent_state == "listening"
    assert (await session.run(user_input="again")).final_output == "Recovered."
    await session.aclose()


def test_the_sample_runs_offline_against_the_loopback_server() -> None:
    out = run_example("claude_agent.py", "Weather in Oslo?")
    assert "tools: ['get_weather']" in out
    assert "(1024 cached)" in out and "light rain in Oslo" in out
