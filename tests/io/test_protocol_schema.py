"""The protocol's JSON Schema and TypeScript types cannot drift from its pydantic models:
the committed clients/protocol.schema.json is what the models generate today, the
committed clients/js/src/protocol.gen.ts what the schema generates (when node and
json-schema-to-typescript are here), every message is in both, and the schema accepts
exactly what the parser accepts (the docs' examples, real server output, fuzzed input)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import rejoinder as rj
from rejoinder.io import Connection, create_app, protocol
from rejoinder.io.protocol import (
    AgentStateMessage,
    Clear,
    ErrorMessage,
    Interrupt,
    MetricsMessage,
    Mute,
    Played,
    ProtocolError,
    Ready,
    Start,
    TimelineMessage,
    ToolMessage,
    TranscriptMessage,
    UserStateMessage,
    UserText,
    encode,
    parse_client_message,
    parse_server_message,
)
from rejoinder.io.protocol_schema import (
    client_message_types,
    main,
    protocol_schema,
    render,
    server_message_types,
)
from rejoinder.testing import ScriptedLLM, ScriptedTTS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "clients" / "protocol.schema.json"
TS_FILE = ROOT / "clients" / "js" / "src" / "protocol.gen.ts"
GEN_SCRIPT = ROOT / "clients" / "js" / "scripts" / "gen-types.mjs"
REGENERATE = "python -m rejoinder.io.protocol_schema, then npm run gen:types in clients/js"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return protocol_schema()


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> Any:
    """A draft 2020-12 validator of the schema (which must itself be a valid schema)."""
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema (from the mcp extra) validates messages here"
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def all_message_models() -> list[type[BaseModel]]:
    """Every message class protocol.py defines (whether or not a union lists it)."""
    return [
        value
        for value in vars(protocol).values()
        if isinstance(value, type)
        and issubclass(value, protocol._Message)
        and value is not protocol._Message
    ]


# ------------------------------------------------------------- drift


def test_the_committed_schema_is_what_the_models_generate(schema: dict[str, Any]) -> None:
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    assert committed == render(schema), f"{SCHEMA_FILE} is stale: run {REGENERATE}"


def test_the_check_command_fails_on_a_stale_file_and_passes_once_written(tmp_path: Path) -> None:
    path = tmp_path / "protocol.schema.json"
    assert main(["--check", "--output", str(path)]) == 1  # missing
    path.write_text('{"stale": true}\n', encoding="utf-8")
    assert main(["--check", "--output", str(path)]) == 1
    assert main(["--output", str(path)]) == 0
    assert main(["--check", "--output", str(path)]) == 0
    assert json.loads(path.read_text(encoding="utf-8"))["title"] == "ProtocolMessage"


def test_the_committed_typescript_is_what_the_schema_generates() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the TypeScript types cannot be regenerated here")
    done = subprocess.run(
        [node, str(GEN_SCRIPT), "--stdout"],
        cwd=GEN_SCRIPT.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
        check=False,
    )
    if done.returncode == 2 and "is not installed" in done.stderr:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    committed = TS_FILE.read_text(encoding="utf-8")
    assert committed == done.stdout, f"{TS_FILE} is stale: run {REGENERATE}"


# --------------------------------------------------------- coverage


def test_every_message_of_protocol_py_is_in_the_schema_and_its_union(
    schema: dict[str, Any],
) -> None:
    defs = schema["$defs"]
    client, server = client_message_types(), server_message_types()
    models = all_message_models()
    assert len(models) == 16 and {*client.values(), *server.values()} == set(models)
    assert client.keys() == protocol._CLIENT_TYPES.keys()
    for union, members in (("ClientMessage", client), ("ServerMessage", server)):
        mapping = defs[union]["discriminator"]["mapping"]
        assert mapping == {tag: f"#/$defs/{m.__name__}" for tag, m in members.items()}
        assert [ref["$ref"] for ref in defs[union]["oneOf"]] == list(mapping.values())
    for model in models:
        model_schema = defs[model.__name__]
        assert list(model_schema["properties"]) == list(model.model_fields), model
        assert "type" in model_schema["required"]
        required = {n for n, f in model.model_fields.items() if f.is_required()} | {"type"}
        assert set(model_schema["required"]) == required, model


def test_codes_and_version_are_in_the_schema_with_their_names(schema: dict[str, Any]) -> None:
    defs = schema["$defs"]
    close = defs["CloseCode"]
    assert close["enum"] == [c.value for c in protocol.CloseCode]
    assert close["x-enum-varnames"] == [c.name for c in protocol.CloseCode]
    assert close["x-enum-descriptions"][0].startswith("The session ended")
    codes = {k: v for k, v in vars(protocol.ErrorCode).items() if k.isupper()}
    error = defs["ErrorCode"]
    assert dict(zip(error["x-enum-varnames"], error["enum"], strict=True)) == codes
    assert (
        "estimates playback"
        in error["x-enum-descriptions"][error["enum"].index("playback_reports")]
    )
    assert defs["PROTOCOL_VERSION"]["const"] == protocol.PROTOCOL_VERSION == 1


def test_docstrings_become_descriptions(schema: dict[str, Any]) -> None:
    defs = schema["$defs"]
    assert defs["Start"]["description"].startswith("First message: the microphone audio")
    timeline = defs["Start"]["properties"]["timeline"]["description"]
    assert timeline == "Send `timeline` messages: the floor's entries of the session timeline."
    rate = defs["Ready"]["properties"]["sample_rate"]["description"]
    assert rate == "Rate of the agent audio the server sends (PCM16LE mono)."
    assert "\n" not in defs["Played"]["description"]  # hard wraps joined, reST made Markdown
    assert "``" not in json.dumps(schema)
    assert not any("title" in p for d in defs.values() for p in d.get("properties", {}).values())


def test_the_typescript_declares_every_message_and_the_values() -> None:
    text = TS_FILE.read_text(encoding="utf-8")
    assert text.startswith("/* eslint-disable */\n// Generated: do not edit.")
    assert "npm run gen:types" in text.split("\n\n")[0]
    for model in all_message_models():
        assert f"export interface {model.__name__} {{" in text
        assert f'type: "{model.model_fields["type"].default}"' in text
    for name in ("ProtocolMessage", "ClientMessage", "ServerMessage"):
        assert f"export type {name} = " in text
    for code in protocol.CloseCode:
        assert f"  {code.name}: {code.value}," in text
    for name, value in vars(protocol.ErrorCode).items():
        if name.isupper():
            assert f'  {name}: "{value}",' in text
    assert f"export const PROTOCOL_VERSION = {protocol.PROTOCOL_VERSION};" in text


# ------------------------------------------------------- agreement


def doc_examples() -> Iterator[tuple[str, dict[str, Any]]]:
    """The JSON of every ``→``/``←`` line in docs/protocol.md."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    for arrow, body in re.findall(r"^(→|←) (\{.*\})\s*$", text, re.MULTILINE):
        yield arrow, json.loads(body)


def test_the_reference_examples_validate_and_parse(validator: Any) -> None:
    examples = list(doc_examples())
    assert len(examples) >= 30
    seen = set()
    for arrow, message in examples:
        validator.validate(message)
        parse = parse_client_message if arrow == "→" else parse_server_message
        assert parse(json.dumps(message)).type == message["type"]
        seen.add(message["type"])
    assert {"start", "played", "ready", "clear", "transcript", "timeline", "metrics"} <= seen


EVERY_MESSAGE: list[BaseModel] = [
    Start(sample_rate=16000, timeline=True, protocol=1, resume="tok"),
    Played(samples=2**53, cleared=True),
    UserText(text="x" * 8192),
    Mute(muted=False),
    Interrupt(),
    Ready(sample_rate=24000, session_id="s", resume_token="r", resume_grace=30.0, resumed=True),
    Clear(),
    AgentStateMessage(state="thinking"),
    UserStateMessage(state="away"),
    TranscriptMessage(role="agent", text="", final=True, interrupted=True),
    ToolMessage(name="lookup", call_id="c_final", status="finished", error=False),
    MetricsMessage(metrics={"type": "llm", "ttft": None, "nested": {"a": [1, 2.5]}}),
    TimelineMessage(entry={"t": 0, "kind": "ob_flag", "id": 1, "value": True}),
    ErrorMessage(code="session_error", message="boom", source="tts"),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_encoded_message_validates(validator: Any, message: Any) -> None:
    validator.validate(json.loads(encode(message)))
    # also with its optional fields spelled out as null, as the parser allows
    validator.validate(message.model_dump(mode="json"))


REJECTED = [
    {"sample_rate": 16000},
    {"type": "wave"},
    {"type": "start", "sample_rate": 100},
    {"type": "start", "sample_rate": "16000"},
    {"type": "start", "sample_rate": 16000, "protocol": 0},
    {"type": "start", "sample_rate": 16000, "resume": ""},
    {"type": "played", "samples": -1},
    {"type": "played", "samples": 2**53 + 1},
    {"type": "played", "samples": True},
    {"type": "text", "text": ""},
    {"type": "text", "text": "x" * 8193},
    {"type": "mute"},
    {"type": "mute", "muted": 1},
    {"type": "ready"},
    {"type": "agent_state", "state": "dozing"},
    {"type": "transcript", "role": "narrator", "text": "x", "final": True},
    {"type": "tool", "name": "x", "call_id": "c", "status": "running"},
    {"type": "metrics", "metrics": []},
    {"type": "timeline", "entry": {"kind": "x"}},
    {"type": "timeline", "entry": {"t": "soon", "kind": "x"}},
    {"type": "timeline", "entry": {"t": True, "kind": "x"}},
    {"type": "timeline", "entry": {"t": 1.0, "kind": 3}},
    {"type": "error", "code": "x"},
]


@pytest.mark.parametrize("message", REJECTED, ids=lambda m: str(m)[:50])
def test_what_the_parser_refuses_the_schema_refuses(validator: Any, message: Any) -> None:
    assert not _parses(message)
    assert not validator.is_valid(message)


def _parses(message: Any) -> bool:
    text = json.dumps(message)
    kind = message.get("type") if isinstance(message, dict) else None
    parse = parse_client_message if kind in protocol._CLIENT_TYPES else parse_server_message
    try:
        parse(text)
    except ProtocolError:
        return False
    return True


# Floats stay out: JSON Schema calls 16000.0 an integer, the strict parser does not (a
# client that sends one is told so by the server's error message).
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
TYPES = [*client_message_types(), *server_message_types(), "wave"]
FIELDS = sorted({name for model in all_message_models() for name in model.model_fields} - {"type"})
special = st.sampled_from(
    [16000, 8000, 96000, 0, -1, 2**53, "", "x", "listening", "agent", "started", True, False]
)
entries = st.fixed_dictionaries(
    {}, optional={"t": st.integers(-5, 5) | st.text(max_size=2), "kind": st.text(max_size=3)}
)
fuzzed = st.builds(
    lambda kind, rest: {"type": kind, **rest},
    st.sampled_from(TYPES),
    st.dictionaries(st.sampled_from(FIELDS), values | special | entries, max_size=5),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=fuzzed)
def test_the_schema_accepts_exactly_what_the_parser_accepts(
    validator: Any, message: dict[str, Any]
) -> None:
    assert validator.is_valid(message) == _parses(message), message


# ------------------------------------------------------ real output


@pytest.mark.looptime(False)
@pytest.mark.timeout(30)
async def test_every_text_frame_a_real_server_sends_validates(validator: Any) -> None:
    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([["Hello there."]]),
            tts=ScriptedTTS(seconds_per_char=0.005),
            user_away_timeout=None,
        )
        await conn.serve(session, rj.Agent(instructions="test"))

    server = TestServer(create_app(entrypoint), host="127.0.0.1")
    await server.start_server()
    frames: list[dict[str, Any]] = []
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(server.make_url("/ws")) as ws:
            await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000, "timeline": True}))
            played = 0
            async with asyncio.timeout(10):
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        played += len(msg.data) // 2  # plays at once: a fast speaker
                        await ws.send_str(json.dumps({"type": "played", "samples": played}))
                        continue
                    frames.append(json.loads(msg.data))
                    if frames[-1] == {"type": "agent_state", "state": "listening"} and not any(
                        f["type"] == "transcript" for f in frames
                    ):
                        await ws.send_str(json.dumps({"type": "text", "text": "Hi."}))
                        await ws.send_str(json.dumps({"type": "wave"}))  # an error back
                    if frames[-1].get("final") and frames[-1].get("role") == "agent":
                        break
    finally:
        await server.close()
    kinds = {f["type"] for f in frames}
    assert {"ready", "agent_state", "user_state", "transcript", "timeline", "error"} <= kinds
    for frame in frames:
        validator.validate(frame)
