"""google.Live against the loopback Gemini Live server, over a real WebSocket on 127.0.0.1:
the setup, audio both ways, model and user turns, transcripts, barge-in and blocking tool
calls. A misbehaving server is test_gemini_live_faults.py; replacing connections,
test_gemini_live_resume.py; non-blocking functions, test_gemini_live_nonblocking.py."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
import pytest

from rejoinder.models import AgentHandoff, ChatContext, FunctionCall, FunctionCallOutput
from rejoinder.models.audio import AudioFrame
from rejoinder.models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    RealtimeConfig,
    ResponseUsage,
    ToolCallRequested,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from rejoinder.models.tools import ToolDefinition
from rejoinder.providers.google.live import GeminiLiveSession, Live
from rejoinder.testing import ScriptedVAD, advance
from rejoinder.testing.gemini_live_server import GeminiLiveServer

from ._live import Recorder
from ._servers import serving

# Real sockets on virtual time, as in test_openai_realtime.py: the clock only jumps when
# every task waits on a timer, and noop_cycles gives the handshake a margin.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

E = TypeVar("E")

WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
NOTE = ToolDefinition(name="take_note", description="Write a note.")


Connect = Callable[..., Awaitable[tuple[GeminiLiveSession, Recorder]]]


def live_tasks() -> list[asyncio.Task[Any]]:
    return [
        task
        for task in asyncio.all_tasks()
        if task.get_name().startswith("gemini-live") and not task.done()
    ]


def make_connect(
    server: GeminiLiveServer, opened: list[tuple[GeminiLiveSession, Recorder]]
) -> Connect:
    async def factory(
        config: RealtimeConfig | None = None, **options: Any
    ) -> tuple[GeminiLiveSession, Recorder]:
        options.setdefault("api_key", "test-key")
        session = Live(base_url=server.base_url, **options).session()
        recorder = Recorder(session)
        opened.append((session, recorder))
        await session.start(config or RealtimeConfig(instructions="Be brief.", tools=[WEATHER]))
        return session, recorder

    return factory


server = serving(GeminiLiveServer)


def connecting() -> Any:
    """The ``connect`` fixture: start sessions against the server; closed (and checked
    for leftovers) after the test. In a test module: ``connect = connecting()``."""

    @pytest.fixture(name="connect")
    async def connect(server: GeminiLiveServer) -> AsyncIterator[Connect]:
        opened: list[tuple[GeminiLiveSession, Recorder]] = []
        yield make_connect(server, opened)
        for session, recorder in opened:
            await session.aclose()
            await recorder.wait_ended()
        assert live_tasks() == []

    return connect


connect = connecting()


def tone(seconds: float, rate: int, channels: int = 1) -> AudioFrame:
    t = np.arange(round(seconds * rate)) / rate
    mono = (np.sin(2 * np.pi * 300 * t) * 6000).astype(np.int16)
    return AudioFrame(np.repeat(mono, channels), rate, channels)


def output(call_id: str, text: str = "sunny", name: str = "get_weather") -> FunctionCallOutput:
    return FunctionCallOutput(call_id=call_id, name=name, output=text)


# -- connecting and the setup ---------------------------------------------------------------


async def test_setup_comes_first_with_the_model_voice_tools_and_transcription(
    server: GeminiLiveServer, connect: Connect
) -> None:
    await connect(voice="Kore", language="en-GB", non_blocking={"take_note": "silent"})
    connection = server.connections[0]
    assert connection.query["key"] == "test-key"  # the key goes in the query
    assert server.kinds() == ["setup"]
    setup = server.setups[0]
    assert setup["model"] == "models/gemini-2.5-flash-native-audio-preview-12-2025"
    assert setup["generationConfig"] == {
        "responseModalities": ["AUDIO"],
        "speechConfig": {
            "voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}},
            "languageCode": "en-GB",
        },
    }
    assert setup["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    (weather,) = setup["tools"][0]["functionDeclarations"]
    assert weather["name"] == "get_weather"
    assert weather["parameters"]["properties"] == {"city": {"type": "STRING"}}
    assert "additionalProperties" not in weather["parameters"]  # the API refuses it
    assert "behavior" not in weather  # blocking
    assert setup["realtimeInputConfig"] == {"automaticActivityDetection": {"disabled": False}}
    assert setup["inputAudioTranscription"] == {} and setup["outputAudioTranscription"] == {}
    assert setup["sessionResumption"] == {}  # handles asked for from the start
    assert setup["contextWindowCompression"] == {"slidingWindow": {}}


async def test_non_blocking_functions_are_declared_so(
    server: GeminiLiveServer, connect: Connect
) -> None:
    await connect(
        RealtimeConfig(instructions="x", tools=[WEATHER, NOTE]),
        non_blocking={"take_note": "silent", "not_offered": "when_idle"},
    )
    weather, note = server.setups[0]["tools"][0]["functionDeclarations"]
    assert "behavior" not in weather
    assert note == {"name": "take_note", "description": "Write a note.", "behavior": "NON_BLOCKING"}


async def test_history_is_seeded_after_the_setup_as_uncompleted_turns(
    server: GeminiLiveServer, connect: Connect
) -> None:
    history = ChatContext()
    history.add_message(role="system", content="The caller is Ada.")
    history.add_message(role="user", content="Weather in Paris?")
    history.append(AgentHandoff(old_agent_id=None, new_agent_id="weather"))
    history.append(FunctionCall(call_id="c1", name="get_weather", arguments='{"city":"Paris"}'))
    history.append(FunctionCallOutput(call_id="c1", name="get_weather", output="sunny"))
    history.add_message(role="assistant", content="It is sunny.")
    await connect(RealtimeConfig(instructions="x", history=lambda: history))
    await server.wait_for("clientContent")
    assert server.kinds() == ["setup", "clientContent"]
    content = server.of_kind("clientContent")[0]["clientContent"]
    assert content["turnComplete"] is False  # context, not a question
    turns = content["turns"]
    assert [turn["role"] for turn in turns] == ["user", "model"]  # same roles merged
    user_texts = [part["text"] for part in turns[0]["parts"]]
    assert user_texts[0] == "(Context: The caller is Ada.)"
    assert user_texts[1] == "Weather in Paris?"
    assert "get_weather" in user_texts[2] and "sunny" in user_texts[3]
    assert turns[1]["parts"] == [{"text": "It is sunny."}]


async def test_microphone_audio_goes_out_as_16_khz_chunks_of_100_ms(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    for _ in range(25):  # 500 ms of 48 kHz stereo, 20 ms at a time
        session.push_audio(tone(0.02, 48000, channels=2))
    await server.wait_for("realtimeInput.audio", count=4)
    chunks = server.of_kind("realtimeInput.audio")
    assert {c["realtimeInput"]["audio"]["mimeType"] for c in chunks} == {"audio/pcm;rate=16000"}
    for chunk in chunks:
        pcm = base64.b64decode(chunk["realtimeInput"]["audio"]["data"])
        assert len(pcm) == 3200  # 100 ms of 16 kHz mono int16
        assert np.abs(np.frombuffer(pcm, "<i2")).max() > 1000  # the tone, not silence


def test_a_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ValueError, match="GEMINI_API_KEY"):
        Live()
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")
    assert Live().url.endswith("BidiGenerateContent?key=…")  # the key is never shown
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert "from-gemini" in Live().session()._s.url
    assert "from-gemini" not in repr(Live()) and "from-gemini" not in repr(Live().session())


def test_the_host_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    assert Live(api_key="k").url == f"wss://generativelanguage.googleapis.com{path}?key=…"
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", "http://localhost:9000/")
    assert Live(api_key="k").url == f"ws://localhost:9000{path}?key=…"
    assert Live(api_key="k", base_url="https://proxy.test").url.startswith("wss://proxy.test/ws/")
    assert Live(api_key="k", model="models/gemini-x").model == "gemini-x"


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="vad="):
        Live(api_key="k", activity_detection=None)
    with pytest.raises(ValueError, match="activity_detection=None"):
        Live(api_key="k", vad=ScriptedVAD())
    with pytest.raises(ValueError, match="non_blocking\\['search'\\]"):
        Live(api_key="k", non_blocking={"search": "later"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="recycle_after"):
        Live(api_key="k", recycle_after=0)


def test_importing_the_provider_does_not_import_aiohttp_or_numpy() -> None:
    code = (
        "import sys, rejoinder.providers.google.live;"
        "sys.exit(sorted({'aiohttp', 'numpy', 'soxr'} & set(sys.modules)) or None)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=False)
    assert result.returncode == 0, result.stderr.decode()


# -- the model's turns ----------------------------------------------------------------------


async def test_a_spoken_turn_reports_its_facts_in_order(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.output_transcript("Hello there.")
    await server.audio(0.3)
    await server.generation_complete()
    await server.turn_complete(usage={"promptTokenCount": 40, "responseTokenCount": 12})
    await recorder.wait_for(BackendResponseEnded)
    assert recorder.kinds() == [
        "BackendResponseStarted",
        "Transcript",
        "AgentAudioStarted",
        "AgentAudio",
        "AgentAudio",
        "AgentAudio",
        "AgentAudioEnded",
        "BackendResponseEnded",
    ]
    started = recorder.of(BackendResponseStarted)[0]
    assert recorder.of(Transcript) == [Transcript("assistant", "Hello there.")]
    for event in recorder.of(AgentAudio):
        assert (event.frame.sample_rate, event.frame.num_channels) == (24000, 1)
        assert event.frame.duration == pytest.approx(0.1)
    assert recorder.of(BackendResponseEnded) == [
        BackendResponseEnded(
            started.response_id,
            "completed",
            usage=ResponseUsage(input_tokens=40, output_tokens=12),
        )
    ]


async def test_text_frames_are_read_as_well_as_binary_ones(
    server: GeminiLiveServer, connect: Connect
) -> None:
    server.binary_frames = False
    _, recorder = await connect()
    await server.answer("Hi.", seconds=0.1)
    await recorder.wait_for(BackendResponseEnded)
    assert recorder.of(Transcript) == [Transcript("assistant", "Hi.")]


async def test_the_users_turn_ends_when_the_model_answers(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.input_transcript(" What's the")
    await server.input_transcript(" weather?")
    await server.answer("Sunny.", seconds=0.1)
    await server.input_transcript(" In Paris.")  # late: the model already answered
    await recorder.wait_for(Transcript, count=4)
    assert recorder.kinds()[:4] == [
        "UserSpeechStarted",
        "Transcript",
        "Transcript",
        "UserTurnEnded",
    ]
    assert recorder.of(UserTurnEnded) == [UserTurnEnded("What's the weather?")]
    assert recorder.events[4] == BackendResponseStarted("turn_1_1")
    assert recorder.of(Transcript)[-1] == Transcript("user", " In Paris.")
    assert len(recorder.of(UserSpeechStarted)) == 1  # a late word does not barge in
    for _ in range(12):  # 1.2 s of audio later, words are a new turn
        session.push_audio(AudioFrame.silence(0.1, 16000))
    await server.input_transcript("Thanks.")
    await recorder.wait_for(UserSpeechStarted, count=2)


async def test_a_users_turn_with_no_answer_ends_after_silence(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect(user_turn_silence=1.0)
    await server.input_transcript("Hmm.")
    await recorder.wait_for(UserSpeechStarted)
    for _ in range(9):
        session.push_audio(AudioFrame.silence(0.1, 16000))
    await advance(0.1)
    assert recorder.of(UserTurnEnded) == []
    session.push_audio(AudioFrame.silence(0.1, 16000))
    assert await recorder.wait_for(UserTurnEnded) == UserTurnEnded("Hmm.")


async def test_a_finished_transcription_ends_the_users_turn(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.input_transcript("Thanks.", finished=True)
    assert await recorder.wait_for(UserTurnEnded) == UserTurnEnded("Thanks.")


async def test_interrupted_is_the_user_barging_in_and_cancels_the_turn(
    server: GeminiLiveServer, connect: Connect
) -> None:
    _, recorder = await connect()
    await server.audio(0.3)
    await server.interrupted()
    await server.turn_complete()
    await server.input_transcript("Stop.")
    await server.audio(0.1)  # the next turn
    await recorder.wait_for(AgentAudioStarted, count=2)
    assert recorder.kinds() == [
        "BackendResponseStarted",
        "AgentAudioStarted",
        "AgentAudio",
        "AgentAudio",
        "AgentAudio",
        "UserSpeechStarted",  # first, so the session cuts playback before the end
        "AgentAudioEnded",
        "BackendResponseEnded",
        "Transcript",
        "UserTurnEnded",
        "BackendResponseStarted",
        "AgentAudioStarted",
        "AgentAudio",
    ]
    assert recorder.of(BackendResponseEnded)[0].status == "cancelled"
    assert recorder.of(UserTurnEnded) == [UserTurnEnded("Stop.")]


async def test_audio_cut_by_the_session_mutes_the_rest_of_its_turn(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.audio(0.2)
    await recorder.wait_for(AgentAudio, count=2)
    session.audio_interrupted(0.15)
    await recorder.wait_for(AgentAudioEnded)
    await server.output_transcript("and then")
    await server.audio(0.2)  # generated before the server heard the user
    await server.interrupted()
    await recorder.wait_for(BackendResponseEnded)
    assert recorder.kinds()[-2:] == ["UserSpeechStarted", "BackendResponseEnded"]
    assert len(recorder.of(AgentAudio)) == 2
    assert recorder.of(Transcript) == []


async def test_requests_context_and_typed_text_are_client_content(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    session.add_context("The caller is on a train.")
    session.generate_reply("Greet the caller.")
    session.generate_reply()
    session.send_user_text("Hello?")
    await server.wait_for("clientContent", count=4)
    assert server.client_texts() == [
        ("user", "The caller is on a train.", False),
        ("user", "Greet the caller.", True),
        ("user", "Hello?", True),
    ]
    plain = server.of_kind("clientContent")[2]["clientContent"]
    assert plain == {"turnComplete": True}  # answer what is there


async def test_a_request_answered_with_nothing_is_an_empty_turn(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.turn_complete()  # unasked: nothing to report
    session.generate_reply()
    await server.wait_for("clientContent")
    await server.turn_complete()
    started = await recorder.wait_for(BackendResponseStarted)
    assert recorder.events == [
        started,
        BackendResponseEnded(started.response_id, "completed"),
    ]


# -- blocking tool calls --------------------------------------------------------------------


async def test_blocking_calls_end_their_turn_and_answer_together(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.output_transcript("Let me check.")
    await server.audio(0.2)
    await server.tool_call(("c1", "get_weather", {"city": "Paris"}), ("c2", "get_weather", {}))
    await recorder.wait_for(BackendResponseEnded)
    calls = [event.call for event in recorder.of(ToolCallRequested)]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("c1", "get_weather", '{"city": "Paris"}'),
        ("c2", "get_weather", "{}"),
    ]
    # The model waits for the results: its turn is over once the calls are owed.
    assert recorder.kinds()[-4:] == [
        "ToolCallRequested",
        "ToolCallRequested",
        "AgentAudioEnded",
        "BackendResponseEnded",
    ]
    assert recorder.of(BackendResponseEnded) == [BackendResponseEnded("turn_1_1", "completed")]
    assert session.submit_tool_output(output("c1"), reply_required=False) == "continue"
    await advance(0.5)
    assert server.of_kind("toolResponse") == []  # one message for the whole batch
    error = FunctionCallOutput(call_id="c2", name="get_weather", output="no city", is_error=True)
    assert session.submit_tool_output(error, reply_required=True) == "continue"
    message = await server.wait_for("toolResponse")
    assert message["toolResponse"]["functionResponses"] == [
        {"id": "c1", "name": "get_weather", "response": {"output": "sunny"}},
        {"id": "c2", "name": "get_weather", "response": {"error": "no city"}},
    ]
    await server.answer("Sunny in Paris.")
    assert await recorder.wait_for(BackendResponseStarted, count=2) == BackendResponseStarted(
        "turn_1_2"
    )
    # A second result for a call is not sent again; a repeated call is reported once.
    assert session.submit_tool_output(output("c1"), reply_required=True) == "silent"
    await server.tool_call(("c1", "get_weather", {}))
    await advance(0.5)
    assert len(recorder.of(ToolCallRequested)) == 2
    assert len(server.of_kind("toolResponse")) == 1


async def test_a_continuation_answered_with_nothing_is_an_empty_turn(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, recorder = await connect()
    await server.tool_call(("c1", "get_weather", {"city": "Oslo"}))
    await recorder.wait_for(BackendResponseEnded)
    await server.turn_complete()  # some models end the call's turn too: nothing to report
    await advance(0.2)
    assert len(recorder.of(BackendResponseEnded)) == 1
    session.submit_tool_output(output("c1"), reply_required=True)
    await server.wait_for("toolResponse")
    await server.turn_complete()  # the model said nothing after the result
    await recorder.wait_for(BackendResponseEnded, count=2)
    assert recorder.kinds()[-2:] == ["BackendResponseStarted", "BackendResponseEnded"]


async def test_a_withdrawn_call_gets_no_result(server: GeminiLiveServer, connect: Connect) -> None:
    session, recorder = await connect()
    await server.tool_call(("c1", "get_weather", {"city": "Oslo"}), ("c2", "get_weather", {}))
    await recorder.wait_for(ToolCallRequested, count=2)
    await server.tool_call_cancellation("c1", "unknown")
    await advance(0.2)
    assert session.submit_tool_output(output("c1"), reply_required=True) == "silent"
    assert session.submit_tool_output(output("c2"), reply_required=True) == "continue"
    message = await server.wait_for("toolResponse")
    assert [entry["id"] for entry in message["toolResponse"]["functionResponses"]] == ["c2"]
    assert server.of_kind("clientContent") == []


async def test_a_result_for_a_call_of_another_connection_goes_in_as_a_note(
    server: GeminiLiveServer, connect: Connect
) -> None:
    session, _ = await connect()
    assert session.submit_tool_output(output("c_old"), reply_required=False) == "silent"
    assert session.submit_tool_output(output("c_old2", "rain"), reply_required=True) == "continue"
    await server.wait_for("clientContent", count=2)
    assert server.client_texts() == [
        ("user", "(The tool get_weather returned: sunny)", False),
        ("user", "(The tool get_weather returned: rain)", True),
    ]
    assert server.of_kind("toolResponse") == []
