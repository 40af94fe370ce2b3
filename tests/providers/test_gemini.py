"""google.LLM over real sockets to the loopback Gemini server (virtual time): the request
the API accepts (systemInstruction, alternating contents, every functionCall answered
in the next content, schemas in Gemini's subset, images), thought signatures sent back,
the stream (text, parallel calls, finish reasons, usage), retries before the first chunk,
clear errors for garbage, and whole sessions."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import rejoinder as rj
from rejoinder.models import (
    ChatChunk,
    ChatContext,
    ImageContent,
    NamedToolChoice,
    ToolDefinition,
)
from rejoinder.models.chat import FunctionCall
from rejoinder.providers import google
from rejoinder.providers._timeout import Timeout
from rejoinder.providers.google import _convert
from rejoinder.providers.google._stream import CallMemory, CallRecord
from rejoinder.testing import StateTimeline, advance
from rejoinder.testing.gemini_server import (
    Call,
    CutConnection,
    ErrorReply,
    GeminiServer,
    Pause,
    RawData,
    StreamReply,
    blocked_prompt,
    blocked_reply,
    chunk,
    encode_event,
    error_event,
    reply,
    request_problem,
)

from .._samples import run_example
from ._servers import call, closing_factory, collect, context, fail, output, serving, user_says

pytestmark = pytest.mark.looptime(noop_cycles=2000)

KEY = "gemini-test-key"
WEATHER = ToolDefinition(
    "get_weather",
    "Get the weather.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


server = serving(GeminiServer, api_key=KEY)


@pytest.fixture
async def make_llm(server: GeminiServer) -> AsyncIterator[Any]:
    async for factory in closing_factory(
        google.LLM, model="gemini-test", base_url=server.base_url, api_key=KEY
    ):
        yield factory


def shape(contents: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each content's role and its parts, as ``kind:detail`` strings."""
    out = []
    for content in contents:
        parts = []
        for part in content["parts"]:
            kind = next(k for k in part if k != "thoughtSignature")
            value = part[kind]
            detail = value if kind == "text" else value.get("args") or value.get("response")
            parts.append(f"{kind}:{json.dumps(detail) if not isinstance(detail, str) else detail}")
        out.append((content["role"], parts))
    return out


def text_of(chunks: list[ChatChunk]) -> str:
    return "".join(c.delta for c in chunks)


# -- the request ----------------------------------------------------------------------------


def test_parallel_calls_share_one_model_content_and_their_responses_come_first() -> None:
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
    system, contents = _convert.to_system_and_contents(ctx)
    assert system == {"parts": [{"text": "Be brief."}]}
    paris, rome = 'functionCall:{"city": "Paris"}', 'functionCall:{"city": "Rome"}'
    sunny, rain = 'functionResponse:{"output": "sunny"}', 'functionResponse:{"output": "rain"}'
    assert shape(contents) == [
        ("user", ["text:Weather in Paris and Rome?"]),
        ("model", ["text:Let me look.", paris, rome]),
        ("user", [sunny, rain, "text:and hurry"]),
        ("model", ["text:Sunny in Paris, rain in Rome."]),
        ("user", ["text:Thanks"]),
    ]
    assert contents[2]["parts"][0]["functionResponse"]["name"] == "get_weather"
    assert request_problem({"contents": contents}) is None


def test_sequential_calls_are_separate_steps_and_a_failed_tool_is_an_error_response() -> None:
    ctx = context(
        ("user", "Plan my day"),
        call("a"),
        output("a", "boom", error=True),
        call("b", arguments='{"city": "Oslo"}'),  # the model called again, no words between
        output("b"),
    )
    _, contents = _convert.to_system_and_contents(ctx)
    assert shape(contents) == [
        ("user", ["text:Plan my day"]),
        ("model", ['functionCall:{"city": "Paris"}']),
        ("user", ['functionResponse:{"error": "boom"}']),
        ("model", ['functionCall:{"city": "Oslo"}']),
        ("user", ['functionResponse:{"output": "sunny"}']),
    ]
    # Neither step came from this LLM: each first call gets the documented stand-in.
    signatures = [p.get("thoughtSignature") for c in contents for p in c["parts"]]
    assert signatures.count(_convert.SKIP_SIGNATURE) == 2


def test_a_call_without_its_output_and_an_output_without_its_call_are_left_out() -> None:
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
    _, contents = _convert.to_system_and_contents(ctx)
    assert shape(contents) == [
        ("user", ["text:Weather?"]),
        ("model", ["text:Checking."]),
        ("user", ["text:Never mind."]),
        ("model", ['functionCall:{"city": "Paris"}']),
        ("user", ['functionResponse:{"output": "sunny"}']),
    ]
    assert request_problem({"contents": contents}) is None


def test_the_conversation_starts_and_ends_with_the_user_and_has_no_empty_text() -> None:
    ctx = context(
        ("system", "Greet."),
        ("assistant", "Hello! How can I help?"),
        ("user", "   "),
        ("developer", "Now offer the menu."),
    )
    system, contents = _convert.to_system_and_contents(ctx)
    assert system == {"parts": [{"text": "Greet."}]}
    assert shape(contents) == [
        ("user", [f"text:{_convert.CONVERSATION_STARTS}"]),
        ("model", ["text:Hello! How can I help?"]),
        ("user", ["text:Now offer the menu."]),  # mid-conversation instructions stay in place
    ]
    _, only_agent = _convert.to_system_and_contents(context(("assistant", "Hi.")))
    assert shape(only_agent)[-1] == ("user", [f"text:{_convert.GO_ON}"])
    none, empty = _convert.to_system_and_contents(context(("system", " ")))
    assert none is None and shape(empty) == [("user", [f"text:{_convert.CONVERSATION_STARTS}"])]


def test_arguments_that_are_not_an_object_still_make_a_valid_call() -> None:
    ctx = context(
        ("user", "x"),
        call("a", arguments="not json"),
        call("b", arguments=""),
        call("c", arguments="[1, 2]"),
        output("a", "bad arguments", error=True),
        output("b"),
        output("c"),
    )
    _, contents = _convert.to_system_and_contents(ctx)
    args = [p["functionCall"]["args"] for p in contents[1]["parts"]]
    assert args == [{"arguments": "not json"}, {}, {"arguments": [1, 2]}]


def test_the_request_has_the_generation_config_tools_and_tool_choice() -> None:
    llm = google.LLM(
        model="models/gemini-test",
        api_key="k",
        max_output_tokens=300,
        temperature=0.2,
        top_p=0.9,
        thinking_budget=0,
        extra_body={"generationConfig": {"candidateCount": 1}, "safetySettings": []},
    )
    assert llm.model == "gemini-test" and llm.provider == "google"
    assert llm.url.endswith("/v1beta/models/gemini-test:streamGenerateContent?alt=sse")
    body = llm.build_request(user_says(), [WEATHER], NamedToolChoice("get_weather"))
    assert body["generationConfig"] == {
        "maxOutputTokens": 300,
        "temperature": 0.2,
        "topP": 0.9,
        "thinkingConfig": {"thinkingBudget": 0},
        "candidateCount": 1,
    }
    assert body["safetySettings"] == []
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Get the weather.",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {"city": {"type": "STRING"}},
                        "required": ["city"],
                    },
                }
            ]
        }
    ]
    named = {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
    assert body["toolConfig"] == {"functionCallingConfig": named}
    assert request_problem(body) is None
    modes = [
        _convert.to_tool_config(c)["functionCallingConfig"] for c in ("auto", "required", "none")
    ]
    assert modes == [{"mode": "AUTO"}, {"mode": "ANY"}, {"mode": "NONE"}]
    # Each definition is converted once; a new definition (a toolset changed) anew.
    again = llm.build_request(user_says(), [WEATHER])
    assert (
        again["tools"][0]["functionDeclarations"][0] is body["tools"][0]["functionDeclarations"][0]
    )
    renamed = ToolDefinition("get_forecast", WEATHER.description, WEATHER.parameters)
    changed = llm.build_request(user_says(), [renamed])
    assert changed["tools"][0]["functionDeclarations"][0]["name"] == "get_forecast"
    plain = google.LLM(api_key="k").build_request(user_says())
    assert "tools" not in plain and "toolConfig" not in plain and "generationConfig" not in plain
    with pytest.raises(ValueError, match="max_output_tokens"):
        google.LLM(api_key="k", max_output_tokens=0)


def test_the_key_comes_from_gemini_api_key_then_google_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    assert google.LLM()._auth_headers() == {"x-goog-api-key": "google-key"}
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-key")
    assert google.LLM()._auth_headers() == {"x-goog-api-key": "gemini-key"}
    assert google.LLM(api_key="given")._auth_headers() == {"x-goog-api-key": "given"}
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://proxy:8080/")
    assert google.LLM().base_url == "http://proxy:8080/v1beta"


# -- schemas --------------------------------------------------------------------------------


class Address(BaseModel):
    street: str
    city: str | None = None


class Node(BaseModel):
    name: str
    children: list[Node] = []


@rj.function_tool
async def book(
    address: Address,
    unit: Literal["c", "f"],
    floor: Literal[1, 2, 3],
    tags: dict[str, int],
    pair: tuple[int, str],
    anything: Any,
    tree: Node,
    note: str | None = None,
) -> str:
    """Book a visit.

    Args:
        address: where
        unit: units
        floor: which floor
        tags: free-form tags
        pair: a pair
        anything: whatever
        tree: a tree
        note: a note
    """
    return "booked"


def test_a_pydantic_schema_becomes_one_gemini_accepts() -> None:
    raw = book.definition.parameters
    assert "$defs" in raw  # the nested models are references in our JSON Schema
    declaration = {"name": "book", "parameters": raw}
    refused = request_problem(
        {
            "contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "tools": [{"functionDeclarations": [declaration]}],
        }
    )
    assert refused is not None and "unknown name" in refused  # as sent, the API says 400
    converted = _convert.to_schema(raw)
    props = converted["properties"]
    assert props["address"]["properties"]["city"] == {"type": "STRING", "nullable": True}
    assert props["address"]["required"] == ["street"]
    assert props["unit"] == {"type": "STRING", "enum": ["c", "f"], "description": "units"}
    assert (
        props["floor"]["type"] == "INTEGER" and "One of: 1, 2, 3." in props["floor"]["description"]
    )
    assert props["tags"]["type"] == "OBJECT" and "properties" not in props["tags"]
    assert props["pair"]["items"] == {"anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]}
    assert props["anything"]["type"] == "STRING"
    recursive = props["tree"]["properties"]["children"]["items"]
    assert recursive["type"] == "OBJECT" and "properties" not in recursive
    assert props["note"]["nullable"] is True
    assert set(converted["required"]) == {
        "address",
        "unit",
        "floor",
        "tags",
        "pair",
        "anything",
        "tree",
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "x"}]}],
        "tools": _convert.to_tools([book.definition]),
    }
    assert request_problem(body) is None
    assert "additionalProperties" not in json.dumps(body) and "$ref" not in json.dumps(body)


def test_schema_odds_and_ends() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "email": {"type": "string", "format": "email", "title": "Email", "default": "x"},
            "when": {"type": "string", "format": "date-time"},
            "kind": {"const": "fixed"},
            "either": {"type": ["integer", "string", "null"]},
            "ref": {"allOf": [{"$ref": "#/definitions/Thing"}], "description": "the thing"},
            "missing": {"$ref": "#/$defs/Nowhere"},
            "list": {"type": "array"},
            "empty": {"type": "object", "properties": {}},
        },
        "required": ["email", "ghost"],
        "definitions": {"Thing": {"type": "object", "properties": {"n": {"type": "number"}}}},
    }
    out = _convert.to_schema(schema)
    props = out["properties"]
    assert props["email"] == {"type": "STRING"}
    assert props["when"] == {"type": "STRING", "format": "date-time"}
    assert props["kind"] == {"type": "STRING", "enum": ["fixed"]}
    assert props["either"] == {
        "anyOf": [{"type": "INTEGER"}, {"type": "STRING"}],
        "nullable": True,
    }
    assert props["ref"] == {
        "type": "OBJECT",
        "properties": {"n": {"type": "NUMBER"}},
        "description": "the thing",
    }
    assert props["missing"]["type"] == "STRING"
    assert props["list"] == {"type": "ARRAY", "items": {"type": "STRING"}}
    assert props["empty"] == {"type": "OBJECT"}
    assert out["required"] == ["email"]
    no_args = ToolDefinition("ping", "Ping.")
    assert _convert.to_tools([no_args]) == [
        {"functionDeclarations": [{"name": "ping", "description": "Ping."}]}
    ]


json_schemas = st.recursive(
    st.sampled_from(
        [
            {"type": "string", "format": "uri"},
            {"type": "integer", "minimum": 0},
            {"type": ["number", "null"]},
            {"enum": [1, "a", None]},
            {},
            {"$ref": "#/$defs/Loop"},
            {"type": "array"},
        ]
    ),
    lambda inner: st.one_of(
        st.builds(
            lambda p: {"type": "object", "properties": p, "additionalProperties": True},
            st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
        ),
        st.builds(lambda i: {"type": "array", "items": i, "title": "T"}, inner),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=12,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(json_schemas)
def test_any_json_schema_converts_to_one_the_api_accepts(schema: dict[str, Any]) -> None:
    root = {
        "type": "object",
        "properties": {"x": schema},
        "$defs": {"Loop": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Loop"}}}},
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "x"}]}],
        "tools": _convert.to_tools([ToolDefinition("t", "T.", root)]),
    }
    assert request_problem(body) is None


# Any order of messages, calls (answered or not, in any order) and images.
context_items = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["user", "assistant", "system", "developer"]),
            st.sampled_from(["", "  ", "hello", "ok"]),
            st.booleans(),
        ),
        st.tuples(st.just("call"), st.integers(0, 4)),
        st.tuples(st.just("output"), st.integers(0, 4), st.booleans()),
    ),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(context_items)
def test_any_context_makes_a_request_the_api_accepts(steps: list[tuple[Any, ...]]) -> None:
    ctx = ChatContext()
    for step in steps:
        if step[0] == "call":
            ctx.items.append(call(f"c{step[1]}"))
        elif step[0] == "output":
            ctx.items.append(output(f"c{step[1]}", error=step[2]))
        else:
            images = [ImageContent.from_bytes(PNG)] if step[2] else []
            ctx.add_message(role=step[0], content=step[1], images=images)
    # c0 and c3 were streamed by this LLM, signed; the server knows their signatures.
    memory = CallMemory()
    memory.remember("c0", CallRecord(signature="c2lnMA=="))
    memory.remember("c3", CallRecord(gemini_id="fc-3", signature="c2lnMw=="))
    signed = {"name": "get_weather", "args": {"city": "Paris"}}
    signatures = {"c2lnMA==": signed, "c2lnMw==": {**signed, "id": "fc-3"}}
    system, contents = _convert.to_system_and_contents(ctx, memory)
    body: dict[str, Any] = {"contents": contents}
    if system is not None:
        body["systemInstruction"] = system
    assert request_problem(body, signatures) is None


# -- images ---------------------------------------------------------------------------------


async def test_images_go_before_the_text_as_inline_data_and_file_data(
    server: GeminiServer, make_llm: Any
) -> None:
    server.add(StreamReply(reply("A cat.")))
    cat = "https://example.com/cat.jpg?size=large"
    ctx = ChatContext()
    ctx.add_message(
        role="user",
        content="What is this?",
        images=[
            ImageContent.from_bytes(PNG),
            ImageContent.from_url(cat),
            ImageContent.from_url("https://example.com/picture"),
            ImageContent.from_url("https://example.com/A.WEBP#top"),
        ],
    )
    assert text_of(await collect(make_llm().chat(ctx))) == "A cat."
    parts = server.requests[0]["contents"][0]["parts"]
    assert parts == [
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(PNG).decode()}},
        {"fileData": {"fileUri": cat, "mimeType": "image/jpeg"}},
        {"fileData": {"fileUri": "https://example.com/picture"}},
        {"fileData": {"fileUri": "https://example.com/A.WEBP#top", "mimeType": "image/webp"}},
        {"text": "What is this?"},
    ]
    assert server.rejected == []


# -- the stream -----------------------------------------------------------------------------


async def test_text_streams_with_the_key_header_the_model_path_and_usage(
    server: GeminiServer, make_llm: Any
) -> None:
    server.add(
        StreamReply(
            reply("Hello", " there.", prompt_tokens=2060, cached_tokens=2048, thoughts_tokens=7)
        )
    )
    chunks = await collect(make_llm().chat(user_says()))
    assert text_of(chunks) == "Hello there."
    assert chunks[0].info is not None and chunks[0].info.provider == "google"
    assert chunks[0].info.model == "gemini-test" and chunks[0].info.retries == 0
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (2060, 12, 2048)
    assert server.headers[0]["x-goog-api-key"] == KEY and "Authorization" not in server.headers[0]
    assert server.models == ["gemini-test"]
    assert server.requests[0]["systemInstruction"] == {"parts": [{"text": "You are brief."}]}


async def test_parallel_calls_come_at_once_with_stable_ids_or_geminis_own(
    server: GeminiServer, make_llm: Any
) -> None:
    calls = (Call("get_weather", {"city": "Paris"}), Call("get_weather", {"city": "Rome"}))
    server.add(StreamReply(reply("Checking.", *calls), write_size=7))  # split at odd places
    server.add(StreamReply(reply(*calls)))
    server.add(StreamReply(reply(Call("get_weather", {}, id="fc-77"))))
    llm = make_llm()
    first, second, third = [
        [c for chunk in await collect(llm.chat(user_says(), [WEATHER])) for c in chunk.tool_calls]
        for _ in range(3)
    ]
    assert [(c.name, c.arguments) for c in first] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_weather", '{"city": "Rome"}'),
    ]
    ids = [c.call_id for c in first + second]
    assert len(set(ids)) == 4 and all(i.startswith("call_") for i in ids)
    assert first[0].call_id[:-2] == first[1].call_id[:-2]  # one stream's ids share a stem
    assert [(c.call_id, c.arguments) for c in third] == [("fc-77", "{}")]


async def test_thought_signatures_and_gemini_ids_are_sent_back_on_their_parts(
    server: GeminiServer, make_llm: Any
) -> None:
    # A thinking model: parallel calls (the first signed), then a second step, signed too.
    server.add(
        StreamReply(
            reply(
                "Let me look.",
                Call("get_weather", {"city": "Paris"}, signature="c2lnLTE="),
                Call("get_weather", {"city": "Rome"}, id="fc-2"),
            )
        ),
        StreamReply(reply(Call("get_weather", {"city": "Oslo"}, signature="c2lnLTI="))),
        StreamReply(reply("Sunny everywhere.")),
    )
    llm = make_llm()
    ctx = user_says("Weather in Paris, Rome, then Oslo?")
    for _ in range(3):
        chunks = await collect(llm.chat(ctx, [WEATHER]))
        if text_of(chunks):
            ctx.add_message(role="assistant", content=text_of(chunks))
        made = [c for chunk in chunks for c in chunk.tool_calls]
        ctx.items.extend(FunctionCall(c.call_id, c.name, c.arguments) for c in made)
        ctx.items.extend(output(c.call_id) for c in made)
    assert server.rejected == [] and len(server.requests) == 3
    contents = server.requests[2]["contents"]
    model_parts = [c["parts"] for c in contents if c["role"] == "model"]
    assert [p.get("thoughtSignature") for p in model_parts[0]] == [None, "c2lnLTE=", None]
    assert model_parts[0][2]["functionCall"]["id"] == "fc-2"
    assert contents[2]["parts"][1]["functionResponse"]["id"] == "fc-2"
    assert model_parts[1][0]["thoughtSignature"] == "c2lnLTI="
    # The server would have refused the request had the signature been dropped...
    dropped = json.loads(json.dumps(server.requests[2]))
    del dropped["contents"][1]["parts"][1]["thoughtSignature"]
    assert "missing a thought_signature" in str(request_problem(dropped, server.signatures))
    # ...or put on the wrong call.
    moved = json.loads(json.dumps(server.requests[2]))
    moved["contents"][3]["parts"][0]["thoughtSignature"] = "c2lnLTE="
    assert "another part" in str(request_problem(moved, server.signatures))

    def first_signatures(body: dict[str, Any]) -> list[str | None]:
        return [
            next(p for p in c["parts"] if "functionCall" in p).get("thoughtSignature")
            for c in body["contents"]
            if any("functionCall" in p for p in c["parts"])
        ]

    # Another LLM instance (an agent's own, current after a handoff) sends them back too:
    # the memory is the process's.
    other = make_llm().build_request(ctx, [WEATHER])
    assert first_signatures(other) == ["c2lnLTE=", "c2lnLTI="]
    assert request_problem(other, server.signatures) is None
    # Steps no instance streamed (another provider's): the stand-in keeps it valid.
    stranger = make_llm()
    stranger.call_memory = CallMemory()
    body = stranger.build_request(ctx, [WEATHER])
    assert first_signatures(body) == [_convert.SKIP_SIGNATURE, _convert.SKIP_SIGNATURE]
    assert request_problem(body, server.signatures) is None


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (ErrorReply(429, "Resource has been exhausted", retry_after=1), "429"),
        (ErrorReply(500, "An internal error has occurred."), "500"),
        (ErrorReply(503, "The model is overloaded.", type="UNAVAILABLE"), "503"),
        (StreamReply([error_event(503, "UNAVAILABLE")]), "error event before any text"),
        (StreamReply([CutConnection()]), "cut before the headers"),
        (StreamReply([{"usageMetadata": {"promptTokenCount": 3}}, CutConnection()]), "cut early"),
        (StreamReply(reply(finish_reason="MALFORMED_FUNCTION_CALL")), "malformed call"),
    ],
)
async def test_a_transient_failure_before_the_first_chunk_is_tried_again(
    server: GeminiServer, make_llm: Any, first: Any, why: str
) -> None:
    server.add(first, StreamReply(reply("Recovered.")))
    llm = make_llm(retry_backoff=0.1)
    chunks = await collect(llm.chat(user_says()))
    assert text_of(chunks) == "Recovered.", why
    assert chunks[0].info is not None and chunks[0].info.retries == 1
    assert llm.retries == 1 and len(server.requests) == 2


def free_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_refused_connection_is_retried_until_the_server_is_up() -> None:
    port = free_port()
    llm = google.LLM(
        model="gemini-test",
        base_url=f"http://127.0.0.1:{port}/v1beta",
        api_key=KEY,
        retry_backoff=10.0,
        retry_backoff_cap=10.0,
    )
    try:
        task = asyncio.create_task(collect(llm.chat(user_says())))
        while llm.retries == 0:  # the first try was refused; the retry waits >= 5 s
            await advance(0.1)
        async with GeminiServer([StreamReply(reply("up"))], port=port) as server:
            assert text_of(await task) == "up"
            assert len(server.requests) == 1
    finally:
        await llm.aclose()


async def test_a_failure_after_text_was_yielded_is_not_retried(
    server: GeminiServer, make_llm: Any
) -> None:
    server.add(StreamReply([chunk({"text": "Half a sent"}), error_event(503, "UNAVAILABLE")]))
    server.add(StreamReply([chunk({"text": "Half a sent"}), CutConnection()]))
    server.add(StreamReply([chunk({"text": "Half a sent"})]))  # ends with no finishReason
    llm = make_llm()
    for expected in ("UNAVAILABLE", "connection", "before a finishReason"):
        received, error = await fail(llm.chat(user_says()))
        assert text_of(received) == "Half a sent"
        assert expected in str(error)
    assert len(server.requests) == 3 and llm.retries == 0


@pytest.mark.parametrize(
    ("reply_", "expected", "status"),
    [
        (ErrorReply(400, "Request contains an invalid argument."), "invalid argument", 400),
        (ErrorReply(403, "The caller does not have permission"), "permission", 403),
        (ErrorReply(404, "models/gemini-nope is not found"), "is not found", 404),
        (StreamReply([RawData("data: {not json\r\n\r\n")]), "not JSON", None),
        (StreamReply([RawData(b"data: \xff\xfe\r\n\r\n")]), "UTF-8", None),
        (StreamReply([{"candidates": "many"}]), "non-empty list", None),
        (StreamReply([chunk({"functionCall": {"args": {}}})]), "without a name", None),
        (StreamReply([chunk({"functionCall": {"name": "f", "args": [1]}})]), "args", None),
        (ErrorReply(200, body={"candidates": []}), "instead of an event stream", 200),
        (StreamReply([error_event(400, "INVALID_ARGUMENT", "bad")]), "bad", 400),
        (StreamReply([blocked_prompt("PROHIBITED_CONTENT")]), "blocked the prompt", None),
        (StreamReply([blocked_reply("SAFETY")]), "HARM_CATEGORY_DANGEROUS_CONTENT", None),
        (StreamReply(reply("Once upon", finish_reason="RECITATION")), "RECITATION", None),
        (StreamReply(reply(finish_reason="OTHER")), "without a reply", None),
    ],
)
async def test_garbage_blocks_and_final_errors_are_clear_and_not_retried(
    server: GeminiServer, make_llm: Any, reply_: Any, expected: str, status: int | None
) -> None:
    server.add(reply_)
    _, error = await fail(make_llm().chat(user_says()))
    assert expected in str(error)
    assert error.status == status and error.retryable is False
    assert len(server.requests) == 1


async def test_a_wrong_or_missing_key_is_refused_with_the_apis_message(
    server: GeminiServer,
) -> None:
    wrong = google.LLM(model="gemini-test", base_url=server.base_url, api_key="wrong")
    _, error = await fail(wrong.chat(user_says()))
    assert error.status == 400 and "API key not valid" in str(error)
    missing = google.LLM(model="gemini-test", base_url=server.base_url, api_key="")
    _, error = await fail(missing.chat(user_says()))
    assert error.status == 403 and "unregistered callers" in str(error)
    await wrong.aclose()
    await missing.aclose()


async def test_max_tokens_keeps_the_reply_and_unknown_parts_are_skipped(
    server: GeminiServer, make_llm: Any
) -> None:
    server.add(
        StreamReply(
            [
                chunk({"text": "I thought", "thought": True}, {"text": "Yes"}),
                chunk({"executableCode": {"code": "1"}}, {"text": ", and"}),
                {"usageMetadata": {"promptTokenCount": 3}},
                *reply(" no.", finish_reason="MAX_TOKENS"),
            ]
        )
    )
    chunks = await collect(make_llm().chat(user_says()))
    assert text_of(chunks) == "Yes, and no."


async def test_a_silent_server_times_out_after_the_read_limit(
    server: GeminiServer, make_llm: Any, looptime: float
) -> None:
    server.add(StreamReply([chunk({"text": "Hi"}), Pause(3600), *reply("late")]))
    llm = make_llm(timeout=Timeout(connect=5, read=5))
    start = float(looptime)
    received, error = await fail(llm.chat(user_says()))
    assert text_of(received) == "Hi" and "timed out" in str(error)
    assert 5 <= float(looptime) - start < 7


def test_the_call_memory_forgets_the_oldest_past_its_limit() -> None:
    memory = CallMemory(limit=3)
    for n in range(5):
        memory.remember(f"c{n}", CallRecord(signature=f"s{n}"))
    assert len(memory) == 3 and "c1" not in memory
    assert memory.get("c4") == CallRecord(signature="s4")


def test_events_are_written_as_the_api_writes_them() -> None:
    assert encode_event({"a": 1}) == b'data: {"a": 1}\r\n\r\n'


# -- whole sessions -------------------------------------------------------------------------


@rj.function_tool
async def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: the city name
    """
    return f"sunny in {city}"


async def test_a_session_answers_with_a_tool_and_the_follow_up_carries_its_result(
    server: GeminiServer,
) -> None:
    server.add(
        StreamReply(
            reply("Let me check.", Call("get_weather", {"city": "Oslo"}, signature="c2ln"))
        ),
        StreamReply(reply("It is sunny in Oslo.", prompt_tokens=1600, cached_tokens=1500)),
    )
    llm = google.LLM(model="gemini-test", base_url=server.base_url, api_key=KEY)
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    metrics: list[Any] = []
    session.on("metrics_collected", lambda ev: metrics.append(ev.metrics))
    timeline = StateTimeline(session)
    await session.start(rj.Agent(instructions="You report weather.", tools=[get_weather]))
    result = await session.run(user_input="Weather in Oslo?")
    assert result.final_output == "It is sunny in Oslo."
    follow_up = server.requests[1]
    assert follow_up["systemInstruction"] == {"parts": [{"text": "You report weather."}]}
    assert shape(follow_up["contents"]) == [
        ("user", ["text:Weather in Oslo?"]),
        ("model", ["text:Let me check.", 'functionCall:{"city": "Oslo"}']),
        ("user", ['functionResponse:{"output": "sunny in Oslo"}']),
    ]
    assert follow_up["contents"][1]["parts"][1]["thoughtSignature"] == "c2ln"
    assert server.rejected == []
    llm_metrics = [m for m in metrics if m["type"] == "llm"]
    assert [m["cached_tokens"] for m in llm_metrics] == [0, 1500]
    assert session.agent_state == "listening" and "thinking" in timeline.agent_states()
    await session.aclose()


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ErrorReply(400, "Request payload size exceeds the limit"), "payload size"),
        (StreamReply([chunk({"text": "Half a sen"}), CutConnection()]), "connection"),
        (StreamReply([chunk({"text": "Half a sen"}), error_event()]), "UNAVAILABLE"),
        (StreamReply([blocked_reply("SAFETY")]), "withheld the reply"),
        (StreamReply([RawData("data: [1, 2]\r\n\r\n")]), "not an object"),
    ],
)
async def test_a_session_whose_provider_fails_returns_to_listening_and_goes_on(
    server: GeminiServer, failure: Any, said: str
) -> None:
    server.add(failure, StreamReply(reply("Recovered.")))
    llm = google.LLM(model="gemini-test", base_url=server.base_url, api_key=KEY)
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    errors: list[rj.ErrorEvent] = []
    session.on("error", errors.append)
    await session.start(rj.Agent(instructions="x"))
    await session.run(user_input="hi")
    assert len(errors) == 1 and said in str(errors[0].error)
    assert session.agent_state == "listening"
    assert (await session.run(user_input="again")).final_output == "Recovered."
    await session.aclose()


def test_the_sample_runs_offline_against_the_loopback_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    out = run_example("gemini_agent.py", "Weather in Oslo?")
    assert "tools: ['get_weather']" in out
    assert "(1024 cached)" in out and "light rain in Oslo" in out
