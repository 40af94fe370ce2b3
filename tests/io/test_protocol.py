"""The protocol core with junk: whatever the text, a typed message or a ``ProtocolError``
(with a known code), never another exception; typed messages round-trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rejoinder.io.protocol import (
    MAX_TEXT_CHARS,
    AgentStateMessage,
    Clear,
    ErrorCode,
    ErrorMessage,
    MetricsMessage,
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
    json_safe,
    parse_client_message,
    parse_server_message,
)

CODES = {v for k, v in vars(ErrorCode).items() if k.isupper()}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
types = st.sampled_from(["start", "played", "text", "clear", "ready", "", "START", "x"])
fields = st.sampled_from(["type", "sample_rate", "samples", "cleared", "text", "extra"])
messages = st.dictionaries(fields, json_values | types, max_size=5) | st.builds(
    lambda t, rest: {"type": t, **rest}, types, st.dictionaries(fields, json_values, max_size=4)
)


def check(text: str) -> None:
    try:
        message = parse_client_message(text)
    except ProtocolError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        assert error.code in CODES
        assert isinstance(error.message, str) and error.message
        return
    assert isinstance(message, Start | Played | UserText)
    assert parse_client_message(encode(message)) == message


@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    check(text)


@given(json_values)
def test_random_json(value: Any) -> None:
    check(json.dumps(value))


@given(messages)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_random_messages(value: dict[str, Any]) -> None:
    check(json.dumps(value))


@given(st.integers(min_value=1, max_value=60_000), st.sampled_from(["[", '{"a":']))
@settings(max_examples=30)
def test_deep_nesting(depth: int, opener: str) -> None:
    check(opener * depth)
    closer = "]" if opener == "[" else "}"
    check(opener * depth + "1" + closer * depth)


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"played","samples":' + "9" * 5000 + "}",  # over Python's digit limit
        '{"type":"played","samples":1e999}',
        '{"type":"played","samples":NaN}',
        '{"type":"played","samples":-1}',
        '{"type":"played","samples":' + str(2**64) + "}",
        '{"type":"start","sample_rate":true}',
        '{"type":"start","sample_rate":16000.0}',
        '{"type":"start","sample_rate":[16000]}',
        '{"type":"text","text":""}',
        '{"type":"text","text":' + json.dumps("a" * 9000) + "}",
        '{"type":null}',
        '{"type":["start"]}',
        "[" * 30000 + "]" * 30000,  # valid JSON, nested past the parser's recursion limit
        '{"type":"played","samples":1,"x":' + "[" * 20000 + "]" * 20000 + "}",
        "\ud800",
        "\x00",
        " " * (MAX_TEXT_CHARS + 1),
    ],
)
def test_edge_cases(text: str) -> None:
    with pytest.raises(ProtocolError):
        parse_client_message(text)


def test_valid_messages() -> None:
    assert parse_client_message('{"type":"start","sample_rate":48000}') == Start(sample_rate=48000)
    played = parse_client_message('{"type":"played","samples":10,"cleared":true,"x":1}')
    assert played == Played(samples=10, cleared=True)  # unknown fields are ignored
    assert parse_client_message('{"type":"text","text":"hi"}') == UserText(text="hi")


def test_unknown_type_has_its_own_code() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message('{"type":"wave"}')
    assert caught.value.code == ErrorCode.UNKNOWN_TYPE


@pytest.mark.parametrize(
    "message",
    [
        Ready(sample_rate=24000),
        Clear(),
        AgentStateMessage(state="speaking"),
        UserStateMessage(state="away"),
        TranscriptMessage(role="agent", text="hi", final=True, interrupted=True),
        TranscriptMessage(role="user", text="h", final=False),
        ToolMessage(name="lookup", call_id="c1", status="finished", error=False),
        MetricsMessage(metrics={"ttft": 0.1, "nested": {"a": [1, None]}}),
        TimelineMessage(entry={"t": 1.19, "kind": "ob_flag", "id": 1, "flag": "audible"}),
        ErrorMessage(code="unknown_type", message="no"),
    ],
)
def test_server_messages_round_trip(message: Any) -> None:
    text = encode(message)
    assert json.loads(text)["type"] == message.type
    assert parse_server_message(text) == message
    assert "null" not in text or isinstance(message, MetricsMessage)  # unset fields left out


def test_start_asks_for_the_timeline_only_when_told() -> None:
    start = parse_client_message('{"type":"start","sample_rate":16000}')
    assert isinstance(start, Start) and start.timeline is False
    start = parse_client_message('{"type":"start","sample_rate":16000,"timeline":true}')
    assert start == Start(sample_rate=16000, timeline=True)
    assert json.loads(encode(start)) == {"type": "start", "sample_rate": 16000, "timeline": True}
    for junk in ('"yes"', "1", "null", "[]"):
        with pytest.raises(ProtocolError) as caught:
            parse_client_message('{"type":"start","sample_rate":16000,"timeline":' + junk + "}")
        assert caught.value.code == ErrorCode.INVALID_MESSAGE


def test_a_timeline_message_keeps_the_entry_whole() -> None:
    text = (
        '{"type":"timeline","x":1,"entry":{"t":0.984,"kind":"ob_opened","id":1,'
        '"ob":"reply","owner":"a","label":null,"committed":true,"future":[1,{"a":2}]}}'
    )
    message = parse_server_message(text)
    assert isinstance(message, TimelineMessage)
    assert message.entry["label"] is None and message.entry["future"] == [1, {"a": 2}]
    assert parse_server_message(encode(message)) == message  # nulls inside the entry stay
    unknown = parse_server_message('{"type":"timeline","entry":{"t":0,"kind":"new_kind"}}')
    assert isinstance(unknown, TimelineMessage)  # a reader skips kinds it does not know


@pytest.mark.parametrize(
    "entry",
    [
        None,
        [],
        "ob_opened",
        {},
        {"kind": "ob_opened"},
        {"t": "1", "kind": "ob_opened"},
        {"t": True, "kind": "ob_opened"},
        {"t": 1e999, "kind": "ob_opened"},
        {"t": 1.0},
        {"t": 1.0, "kind": 3},
    ],
)
def test_a_timeline_message_without_an_entry_is_invalid(entry: Any) -> None:
    text = (
        json.dumps({"type": "timeline", "entry": entry})
        if entry is not None
        else ('{"type":"timeline"}')
    )
    with pytest.raises(ProtocolError) as caught:
        parse_server_message(text)
    assert caught.value.code == ErrorCode.INVALID_MESSAGE


def test_a_client_cannot_send_a_timeline_message() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message('{"type":"timeline","entry":{"t":0,"kind":"agent_state"}}')
    assert caught.value.code == ErrorCode.UNKNOWN_TYPE


@given(json_values)
def test_json_safe_makes_metrics_encodable(value: Any) -> None:
    safe = json_safe({"v": value, "obj": object()})
    text = encode(MetricsMessage(metrics=safe))
    json.loads(text)
