"""assemblyai.STT against the loopback AssemblyAI server, over real sockets on 127.0.0.1,
on virtual time (see test_openai_realtime.py for why the marker is enough)."""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.stt import StreamingSTT, STTError
from rejoinder.providers import assemblyai
from rejoinder.providers.assemblyai import _wire
from rejoinder.testing import (
    MemoryAudioInput,
    ScriptedLLM,
    ScriptedTTS,
    ScriptedVAD,
    now,
    speech_frame,
)
from rejoinder.testing.assemblyai_server import AssemblyAIServer, Fault, Said

from ._servers import say, serving, silence, speech, stereo_speech, unused_port

pytestmark = pytest.mark.looptime(noop_cycles=200)

KEY = "aai-test-key"
HELLO = "Hello there, how are you?"
SECOND = "Book a table for two."
CHUNK_BYTES = 1600  # 50 ms at 16 kHz, 16-bit mono
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "assemblyai_agent.py"


server = serving(AssemblyAIServer, api_key=KEY, transcripts=[HELLO, SECOND])


def make_stt(server: AssemblyAIServer, **options: Any) -> assemblyai.STT:
    options.setdefault("retry_backoff", 0.01)
    return assemblyai.STT(base_url=server.base_url, api_key=KEY, **options)


def plain(text: str) -> list[str]:
    return [word.strip(".,?!").lower() for word in text.split()]


async def test_query_headers_and_audio_in_50_ms_messages(server: AssemblyAIServer) -> None:
    stt = make_stt(server, keyterms_prompt=["rejoinder"], extra_query={"language_detection": True})
    assert isinstance(stt, StreamingSTT)
    try:
        frames = await say(stt, speech(0.62))  # 12.4 chunks: the last one is padded
        assert await stt.recognize(frames) == HELLO
        assert stt.session_id is not None and stt.session_id.startswith("test-")
    finally:
        await stt.aclose()
    [connection] = server.connections
    assert connection.query == {
        "speech_model": "universal-streaming-english",
        "sample_rate": "16000",
        "encoding": "pcm_s16le",
        "format_turns": "true",
        "keyterms_prompt": '["rejoinder"]',
        "language_detection": "true",
    }
    assert connection.headers["Authorization"] == KEY
    assert set(connection.chunk_seconds) == {0.05}
    pcm = b"".join(frame.to_pcm() for frame in frames)
    assert len(connection.audio) == 13 * CHUNK_BYTES
    assert connection.audio == pcm + bytes(13 * CHUNK_BYTES - len(pcm))  # silence pads it
    assert connection.control_types() == ["ForceEndpoint", "Terminate"]
    assert connection.sent[0]["type"] == "Begin" and connection.sent[-1]["type"] == "Termination"


async def test_partials_then_the_formatted_final_on_force_endpoint(
    server: AssemblyAIServer,
) -> None:
    stt = make_stt(server)
    interims: list[str] = []
    try:
        frames = await say(stt, speech(0.6), interims)
        # One word per 100 ms of speech, as the partials reveal them (unformatted).
        words = plain(HELLO)
        assert interims == [" ".join(words[:count]) for count in range(1, 6)]
        started = now()
        assert await stt.recognize(frames) == HELLO  # formatted: format_turns=true
        assert now() - started < 0.05  # forced, not waited for
    finally:
        await stt.aclose()
    ends = [turn for turn in server.connections[0].turns() if turn["end_of_turn"]]
    assert [turn["turn_is_formatted"] for turn in ends] == [False, True]


async def test_without_format_turns_the_final_is_the_unformatted_turn(
    server: AssemblyAIServer,
) -> None:
    stt = make_stt(server, format_turns=False)
    try:
        assert await stt.recognize(await say(stt, speech(0.6))) == " ".join(plain(HELLO))
    finally:
        await stt.aclose()
    assert server.connections[0].query["format_turns"] == "false"
    assert not any(turn["turn_is_formatted"] for turn in server.connections[0].turns())


async def test_the_end_of_turn_confidence_reaches_the_transcript() -> None:
    said = Said(HELLO, end_of_turn_confidence=0.83, word_confidence=0.7)
    async with AssemblyAIServer(api_key=KEY, transcripts=[said]) as server:
        stt = make_stt(server)
        try:
            transcript = await stt.transcribe(await say(stt, speech(0.6)))
        finally:
            await stt.aclose()
    assert transcript == rj.Transcript(
        HELLO, confidence=0.7, last_word_confidence=0.7, end_of_turn_probability=0.83
    )


async def test_a_turn_the_server_ended_itself_settles_at_once(server: AssemblyAIServer) -> None:
    # 0.5 s of silence: the server's turn model (confident) ends the turn after 0.4 s;
    # then it goes mute, so the ForceEndpoint that follows is never answered.
    server.add_faults(Fault("mute", after_bytes=22 * CHUNK_BYTES))
    stt = make_stt(server)
    try:
        first = await say(stt, speech(0.6) + silence(0.5))
        started = now()
        assert await stt.recognize(first) == HELLO
        assert now() - started < 0.05
    finally:
        await stt.aclose()
    [connection] = server.connections
    ends = [turn for turn in connection.turns() if turn["end_of_turn"]]
    assert [turn["turn_is_formatted"] for turn in ends] == [False, True]
    assert connection.control_types() == ["ForceEndpoint", "Terminate"]


async def test_a_late_answer_never_reaches_the_next_utterance(server: AssemblyAIServer) -> None:
    stt = make_stt(server, format_turns=False)
    heard: list[str] = []
    try:
        await say(stt, speech(0.3), heard)
        stt.reset()  # its turn ends after this: the answer belongs to the dropped utterance
        second: list[str] = []
        frames = await say(stt, speech(0.6), second)
        assert await stt.recognize(frames) == " ".join(plain(SECOND))
    finally:
        await stt.aclose()
    assert heard and all(text in " ".join(plain(HELLO)) for text in heard)
    assert second and all("hello" not in text for text in second)
    first_end = next(t for t in server.connections[0].turns() if t["end_of_turn"])
    assert first_end["transcript"] == " ".join(plain(HELLO))  # it came, and was dropped


async def test_two_turns_in_one_utterance_are_joined() -> None:
    async with AssemblyAIServer(api_key=KEY, transcripts=["First part.", "Second part."]) as srv:
        stt = make_stt(srv)
        interims: list[str] = []
        try:
            frames = await say(stt, speech(0.3) + silence(0.5) + speech(0.3), interims)
            assert await stt.recognize(frames) == "First part. Second part."
        finally:
            await stt.aclose()
    assert interims[-1] == "First part. second part"  # the ended turn, then the partial


async def test_update_turn_detection_is_sent_in_order_and_kept_for_new_connections(
    server: AssemblyAIServer,
) -> None:
    stt = make_stt(server)
    try:
        stt.update_turn_detection(max_turn_silence=2000)  # no connection yet: the URL only
        assert "max_turn_silence=2000" in stt.url
        assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
        # A threshold over the server's 0.8: the pause no longer ends the turn by itself.
        stt.update_turn_detection(end_of_turn_confidence_threshold=0.9)
        frames = await say(stt, speech(0.6) + silence(0.5))
        assert await stt.recognize(frames) == SECOND
    finally:
        await stt.aclose()
    [connection] = server.connections
    assert connection.query["max_turn_silence"] == "2000"
    update = {"type": "UpdateConfiguration", "end_of_turn_confidence_threshold": 0.9}
    assert connection.controls == [
        {"type": "ForceEndpoint"},
        update,
        {"type": "ForceEndpoint"},
        {"type": "Terminate"},
    ]
    assert "end_of_turn_confidence_threshold=0.9" in stt.url


async def test_an_utterance_without_words_settles_empty_after_no_words_timeout() -> None:
    async with AssemblyAIServer(api_key=KEY, transcripts=[]) as server:  # hears only noise
        stt = make_stt(server, no_words_timeout=0.3)
        try:
            frames = await say(stt, speech(0.4))
            started = now()
            assert await stt.recognize(frames) == ""
            assert now() - started == pytest.approx(0.3, abs=0.02)
        finally:
            await stt.aclose()
    assert server.connections[0].turns() == []


async def test_recognize_without_push_streams_the_frames(server: AssemblyAIServer) -> None:
    stt = make_stt(server)
    try:
        frames = speech(0.4) + silence(0.1)
        assert await stt.recognize(frames) == HELLO
        assert await stt.recognize([]) == ""
    finally:
        await stt.aclose()
    connection = server.connections[0]
    assert len(connection.audio) == 10 * CHUNK_BYTES
    assert connection.control_types() == ["ForceEndpoint", "Terminate"]


async def test_frames_are_resampled_and_mixed_down(server: AssemblyAIServer) -> None:
    stt = make_stt(server)
    try:
        stereo = stereo_speech(0.5)
        assert await stt.recognize(stereo) == HELLO
    finally:
        await stt.aclose()
    seconds = len(server.connections[0].audio) / 2 / 16000
    assert seconds == pytest.approx(0.5, abs=0.05)
    assert set(server.connections[0].chunk_seconds) == {0.05}


async def test_reset_drops_the_utterance_in_progress(server: AssemblyAIServer) -> None:
    stt = make_stt(server)
    heard: list[str] = []
    try:
        await say(stt, speech(0.3), heard)
        assert heard  # partials of the first utterance
        stt.reset()
        await say(stt, silence(0.1))
        frames = await say(stt, speech(0.6))
        assert await stt.recognize(frames) == SECOND
    finally:
        await stt.aclose()
    assert server.connections[0].control_types()[:2] == ["ForceEndpoint", "ForceEndpoint"]


async def test_aclose_sends_terminate_and_is_idempotent(server: AssemblyAIServer) -> None:
    stt = make_stt(server)
    await say(stt, speech(0.2))
    await stt.aclose()
    await stt.aclose()
    [connection] = server.connections
    assert connection.control_types() == ["Terminate"]
    assert connection.sent[-1]["type"] == "Termination"
    assert connection.closed and connection.close_code == 1000
    with pytest.raises(STTError, match="closed"):
        await stt.recognize(speech(0.1))


async def test_aclose_without_a_connection_does_not_hang() -> None:
    stt = assemblyai.STT(base_url="ws://127.0.0.1:9/v3", api_key=KEY)
    await stt.aclose()
    assert stt.retries == 0


async def test_wrong_key_is_a_401_and_not_retried(server: AssemblyAIServer) -> None:
    stt = assemblyai.STT(base_url=server.base_url, api_key="wrong", retry_backoff=0.01)
    try:
        with pytest.raises(STTError, match=r"HTTP 401.*check the API key") as caught:
            await stt.recognize(speech(0.3))
        assert not caught.value.retryable
        assert stt.retries == 0
    finally:
        await stt.aclose()
    assert server.refused == [401]
    assert server.connections == []


async def test_a_session_closed_1008_before_begin_is_not_retried(
    server: AssemblyAIServer,
) -> None:
    server.end_sessions(1008, "Unauthorized Connection: insufficient balance")
    stt = make_stt(server)
    try:
        with pytest.raises(STTError, match="1008 Unauthorized Connection") as caught:
            await stt.recognize(speech(0.3))
        assert not caught.value.retryable
        assert stt.retries == 0
    finally:
        await stt.aclose()
    assert server.refused == [1008]


async def test_too_many_sessions_and_503_are_retried_then_it_works(
    server: AssemblyAIServer,
) -> None:
    server.end_sessions(3009, "Unauthorized Connection: Too many concurrent sessions")
    server.refuse(503, times=1, message="Service overloaded.")
    stt = make_stt(server)
    try:
        assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
        assert stt.retries == 2
    finally:
        await stt.aclose()
    assert server.refused == [503, 3009]
    assert len(server.connections) == 2 and server.connections[0].audio == b""


async def test_retries_give_up_with_a_retryable_error(server: AssemblyAIServer) -> None:
    server.refuse(429, times=3, message="Too many requests.")
    stt = make_stt(server, max_retries=2)
    try:
        with pytest.raises(STTError, match=r"429.*gave up after 2") as caught:
            await stt.recognize(speech(0.3))
        assert caught.value.retryable
    finally:
        await stt.aclose()


async def test_connection_refused_is_a_retryable_error() -> None:
    port = unused_port()
    stt = assemblyai.STT(base_url=f"ws://127.0.0.1:{port}/v3", api_key=KEY, max_retries=0)
    try:
        with pytest.raises(STTError, match="cannot connect") as caught:
            await stt.recognize(speech(0.2))
        assert caught.value.retryable
    finally:
        await stt.aclose()


async def test_drop_mid_utterance_fails_it_and_the_next_one_works(
    server: AssemblyAIServer,
) -> None:
    server.add_faults(Fault("drop", after_bytes=5 * CHUNK_BYTES))
    stt = make_stt(server)
    try:
        with pytest.raises(STTError, match="connection to AssemblyAI was lost") as caught:
            await stt.recognize(await say(stt, speech(0.6)))
        assert caught.value.retryable
        assert await stt.recognize(await say(stt, speech(0.6))) == SECOND
    finally:
        await stt.aclose()
    assert len(server.connections) == 2
    assert len(server.connections[0].audio) == 5 * CHUNK_BYTES


@pytest.mark.parametrize(
    ("fault", "expected", "retryable"),
    [
        (Fault("close", after_bytes=4 * CHUNK_BYTES), "3005 Session Cancelled", True),
        (
            Fault("close", after_bytes=4 * CHUNK_BYTES, close_code=1008, reason="Unauthorized"),
            "1008 Unauthorized",
            False,
        ),
    ],
)
async def test_an_error_close_mid_utterance_fails_clearly_and_nothing_is_stuck(
    server: AssemblyAIServer, fault: Fault, expected: str, retryable: bool
) -> None:
    server.add_faults(fault)
    stt = make_stt(server)
    try:
        with pytest.raises(STTError, match=expected) as caught:
            await stt.recognize(await say(stt, speech(0.6)))
        assert caught.value.retryable is retryable
        assert await stt.recognize(await say(stt, speech(0.6))) == SECOND
    finally:
        await stt.aclose()
    assert len(server.connections) == 2
    assert server.connections[0].close_code == fault.close_code


async def test_garbage_messages_are_ignored(
    server: AssemblyAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_faults(Fault("garbage", after_bytes=CHUNK_BYTES))
    stt = make_stt(server)
    try:
        with caplog.at_level(logging.INFO, logger="rejoinder.providers.assemblyai"):
            assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
    finally:
        await stt.aclose()
    assert "malformed" in caplog.text
    assert "Mystery" in caplog.text


async def test_a_stalled_server_gives_the_words_so_far_after_finalize_timeout(
    server: AssemblyAIServer,
) -> None:
    server.add_faults(Fault("mute", after_bytes=8 * CHUNK_BYTES))
    stt = make_stt(server, finalize_timeout=1.5)
    try:
        frames = await say(stt, speech(0.6))
        started = now()
        assert await stt.recognize(frames) == "hello there how"
        assert now() - started == pytest.approx(1.5, abs=0.05)
    finally:
        await stt.aclose()


def test_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSEMBLYAI_API_KEY", raising=False)
    monkeypatch.delenv("ASSEMBLYAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="API key"):
        assemblyai.STT()
    with pytest.raises(ValueError, match="chunk_ms"):
        assemblyai.STT(api_key=KEY, chunk_ms=20)
    with pytest.raises(ValueError, match="end_of_turn_confidence_threshold"):
        assemblyai.STT(api_key=KEY, end_of_turn_confidence_threshold=1.5)
    with pytest.raises(ValueError, match="max_turn_silence"):
        assemblyai.STT(api_key=KEY, max_turn_silence=0.5)  # type: ignore[arg-type]
    monkeypatch.setenv("ASSEMBLYAI_API_KEY", "from-env")
    monkeypatch.setenv("ASSEMBLYAI_BASE_URL", "https://streaming.eu.assemblyai.com/v3/")
    stt = assemblyai.STT(
        end_of_turn_confidence_threshold=0.7, min_end_of_turn_silence_when_confident=160
    )
    assert stt.url.startswith("wss://streaming.eu.assemblyai.com/v3/ws?speech_model=")
    assert "end_of_turn_confidence_threshold=0.7" in stt.url
    assert "min_end_of_turn_silence_when_confident=160" in stt.url
    assert "max_turn_silence" not in stt.url


# -- the wire, fuzzed -----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
TURN_FIELDS = st.fixed_dictionaries(
    {"type": st.just("Turn")},
    optional={
        "turn_order": JSON,
        "transcript": JSON,
        "words": st.lists(
            st.fixed_dictionaries({}, optional={"text": JSON, "end": JSON, "confidence": JSON}),
            max_size=3,
        )
        | JSON,
        "end_of_turn": JSON,
        "end_of_turn_confidence": JSON,
    },
)


@given(message=TURN_FIELDS | JSON | st.text(max_size=30))
def test_parse_takes_any_text_and_raises_only_value_error(message: object) -> None:
    text = message if isinstance(message, str) else json.dumps(message)
    try:
        parsed = _wire.parse(text)
    except ValueError:
        return
    if isinstance(parsed, _wire.Turn):
        confidence = parsed.end_of_turn_confidence
        assert confidence is None or 0.0 <= confidence <= 1.0
        assert all(isinstance(word.end, float) for word in parsed.words)


@given(pieces=st.lists(st.binary(max_size=5000).map(lambda b: b[: len(b) // 2 * 2]), max_size=8))
def test_the_chunker_sends_every_byte_in_whole_chunks(pieces: list[bytes]) -> None:
    chunker = _wire.Chunker(CHUNK_BYTES)
    sent = [chunk for piece in pieces for chunk in chunker.push(piece)]
    tail = chunker.tail()
    audio = b"".join(pieces)
    assert all(len(chunk) == CHUNK_BYTES for chunk in [*sent, *([tail] if tail else [])])
    joined = b"".join(sent) + tail
    assert joined[: len(audio)] == audio and set(joined[len(audio) :]) <= {0}
    assert len(joined) - len(audio) < CHUNK_BYTES and chunker.pending == 0


# -- in a session ---------------------------------------------------------------------------


def voice_session(stt: assemblyai.STT) -> tuple[rj.AgentSession[Any], MemoryAudioInput]:
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM(lambda _: ["Answer."]),
        stt=stt,
        tts=ScriptedTTS(),
        vad=ScriptedVAD(min_silence=0.3),
        user_away_timeout=None,
    )
    session.input.audio = mic
    return session, mic


async def test_session_commits_the_assemblyai_transcript(server: AssemblyAIServer) -> None:
    stt = make_stt(server)
    session, mic = voice_session(stt)
    heard: list[tuple[str, bool]] = []
    session.on("user_input_transcribed", lambda ev: heard.append((ev.transcript, ev.is_final)))
    await session.start(rj.Agent(instructions="voice"))
    try:
        for _ in range(40):
            await mic.push(speech_frame(0.02))
        await mic.push_silence(2.0)
        user = [m.content for m in session.history.messages() if m.role == "user"]
        assert user == [HELLO]
        finals = [text for text, final in heard if final]
        assert finals == [HELLO]
        interims = [text for text, final in heard if not final]
        assert interims[0] == "hello" and interims[-1] == " ".join(plain(HELLO))
    finally:
        await session.aclose()
        await stt.aclose()


@pytest.mark.parametrize(
    ("end_of_turn_confidence", "ends_after"),
    [
        (0.9, 0.3),  # the recognizer is sure: as soon as the VAD ended the utterance
        (0.1, 1.0),  # it hears an unfinished turn: the 1 s hold, not 0.4
    ],
)
async def test_the_session_ends_the_turn_sooner_when_the_recognizer_is_sure(
    end_of_turn_confidence: float, ends_after: float
) -> None:
    said = Said("What time is it?", end_of_turn_confidence=end_of_turn_confidence)
    async with AssemblyAIServer(api_key=KEY, transcripts=[said]) as server:
        stt = make_stt(server)
        session, mic = voice_session(stt)
        thinking: list[float] = []
        session.on(
            "agent_state_changed",
            lambda ev: thinking.append(now()) if ev.new_state == "thinking" else None,
        )
        await session.start(rj.Agent(instructions="voice"))
        try:
            started = now()
            for _ in range(50):
                await mic.push(speech_frame(0.02))
            await mic.push_silence(2.0)
            assert [t - started for t in thinking] == [pytest.approx(1.0 + ends_after, abs=0.03)]
            assert [m.content for m in session.history.messages() if m.role == "user"] == [
                "What time is it?"
            ]
        finally:
            await session.aclose()
            await stt.aclose()


async def test_the_sample_runs_offline_against_the_loopback_server(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("assemblyai_agent_sample", SAMPLE)
    assert spec is not None and spec.loader is not None
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    await sample.offline()  # on virtual time: the scripted microphone's seconds are free
    out = capsys.readouterr().out
    assert "  partial: what's the weather in paris\n" in out
    assert 'final: "What\'s the weather in Paris?" (end of turn probability 0.92)' in out
    assert "user: What's the weather in Paris?\nturn ended 0.3 s after" in out
    assert "user: Thanks, and in Rome\nturn ended 1.0 s after" in out
    assert "assistant: In Paris today" in out
