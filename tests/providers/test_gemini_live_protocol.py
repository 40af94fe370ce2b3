"""The sans-I/O core of google.Live fuzzed with hypothesis: any interleaving of server
messages (well-formed, reshaped or junk) and session commands keeps the facts it reports
consistent (audio stretches, responses and user turns open and close in order, each call
reported once, each result sent once) and never raises."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rejoinder.models import FunctionCallOutput
from rejoinder.models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    RealtimeEvent,
    ToolCallRequested,
    UserSpeechStarted,
    UserTurnEnded,
)
from rejoinder.providers.google._live_protocol import LiveProtocol

NAMES = ["blocking", "idle", "interrupt", "silent"]
MODES = {"idle": "when_idle", "interrupt": "interrupt", "silent": "silent"}
IDS = ["c1", "c2", "c3"]
AUDIO = base64.b64encode(b"\x01\x00" * 240).decode()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def content(**fields: Any) -> dict[str, Any]:
    return {"serverContent": fields}


server_messages = st.one_of(
    st.just(
        content(
            modelTurn={
                "parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": AUDIO}}]
            }
        )
    ),
    st.just(content(modelTurn={"parts": [{"text": "thinking", "thought": True}]})),
    st.just(content(outputTranscription={"text": " words"})),
    st.builds(
        lambda text, finished: content(inputTranscription={"text": text, "finished": finished}),
        st.sampled_from(["", " hi", "yes"]),
        st.booleans(),
    ),
    st.just(content(interrupted=True)),
    st.just(content(generationComplete=True)),
    st.just(content(turnComplete=True)),
    st.builds(
        lambda calls: {"toolCall": {"functionCalls": calls}},
        st.lists(
            st.builds(
                lambda i, n, a: {"id": i, "name": n, "args": a},
                st.sampled_from(IDS),
                st.sampled_from(NAMES),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            ),
            max_size=3,
        ),
    ),
    st.builds(
        lambda ids: {"toolCallCancellation": {"ids": ids}},
        st.lists(st.sampled_from(IDS), max_size=3),
    ),
    st.builds(
        lambda resumable: {"sessionResumptionUpdate": {"newHandle": "h", "resumable": resumable}},
        st.booleans(),
    ),
    st.just({"goAway": {"timeLeft": "5s"}}),
    st.just({"usageMetadata": {"promptTokenCount": 3, "responseTokenCount": 4}}),
    st.builds(lambda value: {"serverContent": value}, json_values),
    st.builds(lambda value: {"toolCall": value}, json_values),
    json_values,
).map(json.dumps)

junk = st.one_of(st.text(max_size=20), st.binary(max_size=20))

commands = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(IDS), st.sampled_from(NAMES), st.booleans()),
    st.tuples(st.just("reply"), st.sampled_from([None, "Greet."])),
    st.tuples(st.just("context")),
    st.tuples(st.just("cut")),
    st.tuples(st.just("activity"), st.booleans()),
    st.tuples(st.just("audio"), st.integers(0, 40000)),
    st.tuples(st.just("tick"), st.floats(0, 20)),
)

steps = st.lists(
    st.one_of(
        server_messages.map(lambda m: ("message", m)),
        junk.map(lambda m: ("message", m)),
        commands,
    ),
    max_size=40,
)


class Checker:
    """Checks the facts as they come."""

    def __init__(self) -> None:
        self.events: list[RealtimeEvent] = []
        self.stretch_open = False
        self.responses: dict[str, bool] = {}
        """response id → still open."""
        self.user_open = False
        self.calls: set[str] = set()

    def __call__(self, event: RealtimeEvent) -> None:
        self.events.append(event)
        if isinstance(event, AgentAudioStarted):
            assert not self.stretch_open, "a stretch started inside another"
            self.stretch_open = True
        elif isinstance(event, AgentAudio):
            assert self.stretch_open, "audio outside a stretch"
        elif isinstance(event, AgentAudioEnded):
            assert self.stretch_open, "a stretch ended that never started"
            self.stretch_open = False
        elif isinstance(event, BackendResponseStarted):
            assert event.response_id not in self.responses, "a response started twice"
            if event.response_id.startswith("turn_"):
                open_turns = [r for r, o in self.responses.items() if o and r.startswith("turn_")]
                assert not open_turns, f"two model turns at once: {open_turns}"
            self.responses[event.response_id] = True
        elif isinstance(event, BackendResponseEnded):
            assert self.responses.get(event.response_id), "a response ended that is not open"
            self.responses[event.response_id] = False
        elif isinstance(event, UserSpeechStarted):
            assert not self.user_open, "a user turn started inside another"
            self.user_open = True
        elif isinstance(event, UserTurnEnded):
            assert self.user_open, "a user turn ended that never started"
            self.user_open = False
        elif isinstance(event, ToolCallRequested):
            assert event.call.call_id not in self.calls, "a call reported twice"
            self.calls.add(event.call.call_id)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps, vad=st.booleans())
def test_any_interleaving_keeps_the_facts_consistent(steps: list[Any], vad: bool) -> None:
    clock = [0.0]
    sent: list[dict[str, Any]] = []
    checker = Checker()
    protocol = LiveProtocol(
        checker,
        sent.append,
        non_blocking=MODES,  # type: ignore[arg-type]
        client_activity=vad,
        user_turn_silence=1.0,
        clock=lambda: clock[0],
    )
    continued: set[str] = set()
    for step in steps:
        kind = step[0]
        if kind == "message":
            protocol.receive(step[1])
        elif kind == "submit":
            _, call_id, name, reply = step
            fate = protocol.submit_tool_output(FunctionCallOutput(call_id, name, "out"), reply)
            assert fate in ("continue", "silent")
            if fate == "continue" and call_id in checker.calls:
                assert call_id not in continued, "one call continued twice"
                continued.add(call_id)
        elif kind == "reply":
            protocol.request_reply(step[1])
        elif kind == "context":
            protocol.add_context("note")
        elif kind == "cut":
            protocol.playback_cut()
        elif kind == "activity" and vad:
            (protocol.activity_started if step[1] else protocol.activity_ended)()
        elif kind == "audio":
            protocol.audio_pushed(step[1])
        elif kind == "tick":
            clock[0] += step[1]
        if protocol.quiet:
            open_turns = [r for r, o in checker.responses.items() if o and r.startswith("turn_")]
            assert not open_turns and not checker.user_open
    # Each result went out at most once, in one toolResponse entry.
    answered = [
        entry["id"]
        for message in sent
        if "toolResponse" in message
        for entry in message["toolResponse"]["functionResponses"]
    ]
    assert len(answered) == len(set(answered))
    protocol.end()
    assert not checker.stretch_open and not checker.user_open
