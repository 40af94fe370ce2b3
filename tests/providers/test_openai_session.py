"""A whole session on the real OpenAI-compatible client over a loopback socket: provider
failures end the turn with an error event and the agent returns to listening."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import rejoinder as rj
from rejoinder.providers import openai
from rejoinder.testing import (
    CutConnection,
    ErrorReply,
    OpenAIChatServer,
    RawData,
    StateTimeline,
    StreamReply,
)
from rejoinder.testing.openai_chat_server import chunk, text_chunks, tool_call_delta

# Real sockets on virtual time: see test_openai_chat.py for why this marker is enough.
pytestmark = pytest.mark.looptime(noop_cycles=2000)


@rj.function_tool
async def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


@pytest.fixture
async def server() -> AsyncIterator[OpenAIChatServer]:
    async with OpenAIChatServer([]) as srv:
        yield srv


async def start(
    server: OpenAIChatServer, max_retries: int = 3
) -> tuple[rj.AgentSession[None], StateTimeline, list[rj.ErrorEvent]]:
    llm = openai.LLM(
        model="test-model", base_url=server.base_url, api_key="test", max_retries=max_retries
    )
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    session.output.transcription = rj.MemoryTextOutput()
    timeline = StateTimeline(session)
    errors: list[rj.ErrorEvent] = []
    session.on("error", errors.append)
    await session.start(rj.Agent(instructions="Be helpful.", tools=[get_weather]))
    return session, timeline, errors


async def test_tool_round_trip_over_the_wire(server: OpenAIChatServer) -> None:
    server.add(
        StreamReply(
            [
                chunk(role="assistant", content="Checking. "),
                chunk(tool_calls=[tool_call_delta(0, call_id="call_1", name="get_weather")]),
                chunk(tool_calls=[tool_call_delta(0, arguments='{"city": ')]),
                chunk(tool_calls=[tool_call_delta(0, arguments='"Oslo"}')]),
                chunk(finish_reason="tool_calls"),
            ]
        ),
        StreamReply(text_chunks("It is sunny in Oslo.")),
    )
    session, timeline, errors = await start(server)
    result = await session.run(user_input="Weather in Oslo?")
    await session.aclose()

    assert result.final_output == "It is sunny in Oslo."
    assert [o.output for o in result.function_call_outputs] == ["sunny in Oslo"]
    assert errors == []
    assert timeline.agent_states()[1:] == [
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    # The follow-up request carried the call and its output in the wire format.
    follow_up = server.requests[1]["messages"]
    assert follow_up[-2]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert follow_up[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Oslo"}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (ErrorReply(500, "The server had an error"), "500"),
        (ErrorReply(401, "Incorrect API key provided."), "Incorrect API key"),
        (StreamReply([chunk(role="assistant", content="Hal"), CutConnection()]), "connection"),
        (
            StreamReply([chunk(role="assistant", content="Hal"), RawData("data: {oops\n\n")]),
            "malformed",
        ),
    ],
    ids=["http-500", "http-401", "cut-mid-stream", "malformed-chunk"],
)
async def test_provider_failures_end_the_turn(
    server: OpenAIChatServer, reply: StreamReply | ErrorReply, message: str
) -> None:
    server.add(reply, StreamReply(text_chunks("Recovered.")))
    # No retries: the failure must reach the session (a retry would serve "Recovered.").
    session, timeline, errors = await start(server, max_retries=0)

    await session.run(user_input="hello")
    assert [e.source for e in errors] == ["llm"]
    assert isinstance(errors[0].error, rj.LLMError)
    assert message.lower() in str(errors[0].error).lower()
    assert session.agent_state == "listening"
    assert timeline.agent_states()[-1] == "listening"

    # The session is still usable: the next turn works.
    result = await session.run(user_input="again")
    assert result.final_output == "Recovered."
    await session.aclose()


async def test_session_aclose_closes_the_llms_http_session(server: OpenAIChatServer) -> None:
    """The README's pattern (``async with rj.AgentSession(llm=openai.LLM(...))``) leaves
    no open HTTP session behind ("Unclosed client session")."""
    server.add(StreamReply(text_chunks("Hello.")))
    session, _, errors = await start(server)
    llm = session.llm
    assert isinstance(llm, openai.LLM)
    result = await session.run(user_input="hi")
    assert result.final_output == "Hello."
    http = llm._session
    assert http is not None and not http.closed
    await session.aclose()
    assert http.closed
    assert errors == []


async def test_a_model_shared_by_two_sessions_closes_with_the_last_one(
    server: OpenAIChatServer,
) -> None:
    server.add(StreamReply(text_chunks("One.")), StreamReply(text_chunks("Two.")))
    llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="test")
    first: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    second: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    await first.start(rj.Agent(instructions="a"))
    await second.start(rj.Agent(instructions="b"))
    assert (await first.run(user_input="hi")).final_output == "One."
    await first.aclose()
    # The other session still talks through it.
    assert (await second.run(user_input="hi")).final_output == "Two."
    http = llm._session
    assert http is not None and not http.closed
    await second.aclose()
    assert http.closed


async def test_a_retried_429_shows_in_the_reply_metrics(server: OpenAIChatServer) -> None:
    server.add(
        ErrorReply(429, "Rate limit reached.", "requests", "rate_limit_exceeded", retry_after=1),
        StreamReply(text_chunks("Hello.")),
    )
    session, _, errors = await start(server)
    metrics: list[dict[str, object]] = []
    session.on("metrics_collected", lambda ev: metrics.append(ev.metrics))
    result = await session.run(user_input="hi")
    assert result.final_output == "Hello."
    assert [m["retries"] for m in metrics if m["type"] == "llm"] == [1]
    assert errors == []
    await session.aclose()
