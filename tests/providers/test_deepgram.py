"""deepgram.STT against the loopback Deepgram server, over real sockets on 127.0.0.1, on
virtual time (see test_openai_realtime.py for why the marker is enough)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models.stt import StreamingSTT, STTError
from rejoinder.providers import deepgram
from rejoinder.testing import (
    MemoryAudioInput,
    ScriptedLLM,
    ScriptedTTS,
    ScriptedVAD,
    advance,
    now,
    speech_frame,
)
from rejoinder.testing.deepgram_server import DeepgramServer, Fault

from ._servers import say, serving, silence, speech, stereo_speech, unused_port

pytestmark = pytest.mark.looptime(noop_cycles=200)

KEY = "dg-test-key"
HELLO = "Hello there, how are you?"
SECOND = "Book a table for two."
FRAME_BYTES = 640  # 20 ms at 16 kHz, 16-bit mono


server = serving(DeepgramServer, api_key=KEY, transcripts=[HELLO, SECOND])


def make_stt(server: DeepgramServer, **options: Any) -> deepgram.STT:
    options.setdefault("retry_backoff", 0.01)
    return deepgram.STT(base_url=server.base_url, api_key=KEY, **options)


async def test_query_and_headers(server: DeepgramServer) -> None:
    stt = make_stt(server, extra_query={"keyterm": "rejoinder", "diarize": False})
    assert isinstance(stt, StreamingSTT)
    try:
        frames = await say(stt, speech(0.6))
        assert await stt.recognize(frames) == HELLO
    finally:
        await stt.aclose()
    [connection] = server.connections
    assert connection.query == {
        "model": "nova-3",
        "language": "en",
        "encoding": "linear16",
        "sample_rate": "16000",
        "channels": "1",
        "interim_results": "true",
        "endpointing": "300",
        "smart_format": "true",
        "punctuate": "true",
        "keyterm": "rejoinder",
        "diarize": "false",
    }
    assert connection.headers["Authorization"] == f"Token {KEY}"
    assert len(connection.audio) == 30 * FRAME_BYTES
    assert connection.audio == b"".join(frame.to_pcm() for frame in frames)


async def test_interim_words_then_the_final_from_finalize(server: DeepgramServer) -> None:
    stt = make_stt(server)
    interims: list[str] = []
    try:
        frames = await say(stt, speech(0.6), interims)
        # One word per 100 ms of speech, revealed as it is heard.
        words = HELLO.split()
        assert interims == [" ".join(words[:count]) for count in range(1, 6)]
        assert await stt.recognize(frames) == HELLO
    finally:
        await stt.aclose()
    connection = server.connections[0]
    assert connection.control_types()[-2:] == ["Finalize", "CloseStream"]
    finals = [m for m in connection.sent if m["type"] == "Results" and m["is_final"]]
    assert finals[0]["from_finalize"] is True
    assert finals[0]["channel"]["alternatives"][0]["transcript"] == HELLO


async def test_speech_final_ends_the_wait_and_late_answers_do_not_leak(
    server: DeepgramServer,
) -> None:
    stt = make_stt(server)
    try:
        first = await say(stt, speech(0.6) + silence(0.4))  # endpointing: 300 ms
        started = now()
        assert await stt.recognize(first) == HELLO
        assert now() - started < 0.05  # the speech_final answer was enough
        # The answer to this Finalize (an empty from_finalize result) comes late and
        # must not be credited to the next utterance.
        second = await say(stt, speech(0.6))
        assert await stt.recognize(second) == SECOND
    finally:
        await stt.aclose()
    [connection] = server.connections
    results = [m for m in connection.sent if m["type"] == "Results" and m["is_final"]]
    assert [m["speech_final"] for m in results[:2]] == [True, False]
    late = results[1]
    assert late["from_finalize"] and late["channel"]["alternatives"][0]["transcript"] == ""


async def test_interims_join_this_utterances_finals() -> None:
    async with DeepgramServer(
        api_key=KEY, transcripts=["one two three four five"], segment_words=2
    ) as server:
        stt = make_stt(server)
        interims: list[str] = []
        try:
            frames = await say(stt, speech(0.6), interims)
            assert await stt.recognize(frames) == "one two three four five"
        finally:
            await stt.aclose()
    # Every interim is the utterance so far: its finals, then the words in progress.
    assert interims == [
        "one",
        "one two",
        "one two three",
        "one two three four",
        "one two three four five",
    ]
    sent = [m for m in server.connections[0].sent if m["type"] == "Results"]
    assert [m["is_final"] for m in sent] == [False, True, False, True, False, True]


async def test_recognize_without_push_streams_the_frames(server: DeepgramServer) -> None:
    stt = make_stt(server)
    try:
        frames = speech(0.4) + silence(0.1)
        assert await stt.recognize(frames) == HELLO
        assert await stt.recognize([]) == ""
    finally:
        await stt.aclose()
    connection = server.connections[0]
    assert len(connection.audio) == 25 * FRAME_BYTES
    assert connection.control_types() == ["Finalize", "CloseStream"]


async def test_frames_are_resampled_and_mixed_down(server: DeepgramServer) -> None:
    stt = make_stt(server)
    try:
        stereo = stereo_speech(0.5)
        assert await stt.recognize(stereo) == HELLO
    finally:
        await stt.aclose()
    seconds = len(server.connections[0].audio) / 2 / 16000
    assert seconds == pytest.approx(0.5, abs=0.005)


async def test_reset_drops_the_utterance_in_progress(server: DeepgramServer) -> None:
    stt = make_stt(server)
    heard: list[str] = []
    try:
        await say(stt, speech(0.3), heard)
        assert heard  # interims of the first utterance
        stt.reset()
        await say(stt, silence(0.1))
        frames = await say(stt, speech(0.6))
        assert await stt.recognize(frames) == SECOND
    finally:
        await stt.aclose()
    assert server.connections[0].control_types()[:2] == ["Finalize", "Finalize"]


async def test_keepalive_keeps_an_idle_connection_open() -> None:
    async with DeepgramServer(api_key=KEY, transcripts=[HELLO, SECOND], idle_timeout=10) as server:
        stt = make_stt(server, keepalive_interval=4.0)
        try:
            assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
            await advance(25.0)  # no audio: only KeepAlive
            assert await stt.recognize(await say(stt, speech(0.6))) == SECOND
        finally:
            await stt.aclose()
    [connection] = server.connections  # the same connection throughout
    assert connection.control_types().count("KeepAlive") == 6
    assert connection.close_code == 1000


async def test_idle_close_is_followed_by_a_new_connection() -> None:
    async with DeepgramServer(api_key=KEY, transcripts=[HELLO, SECOND], idle_timeout=3) as server:
        stt = make_stt(server, keepalive_interval=9.0)  # too rare for this server
        try:
            assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
            await advance(5.0)
            assert server.connections[0].close_code == 1011
            assert await stt.recognize(await say(stt, speech(0.6))) == SECOND
        finally:
            await stt.aclose()
    assert len(server.connections) == 2


async def test_aclose_sends_closestream_and_is_idempotent(server: DeepgramServer) -> None:
    stt = make_stt(server)
    await say(stt, speech(0.2))
    await stt.aclose()
    await stt.aclose()
    [connection] = server.connections
    assert connection.control_types() == ["CloseStream"]
    assert connection.sent[-1]["type"] == "Metadata"
    assert connection.closed and connection.close_code == 1000
    with pytest.raises(STTError, match="closed"):
        await stt.recognize(speech(0.1))


async def test_aclose_without_a_connection_does_not_hang() -> None:
    stt = deepgram.STT(base_url="ws://127.0.0.1:9/v1", api_key=KEY)
    await stt.aclose()
    assert stt.retries == 0


async def test_wrong_key_is_a_401_and_not_retried(server: DeepgramServer) -> None:
    stt = deepgram.STT(base_url=server.base_url, api_key="wrong", retry_backoff=0.01)
    try:
        with pytest.raises(STTError, match=r"HTTP 401: Invalid credentials") as caught:
            await stt.recognize(speech(0.3))
        assert not caught.value.retryable
        assert stt.retries == 0
    finally:
        await stt.aclose()
    assert server.refused == [401]
    assert server.connections == []


async def test_503_twice_then_success_is_retried(server: DeepgramServer) -> None:
    server.refuse(503, times=2, message="Service overloaded.")
    stt = make_stt(server)
    try:
        assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
        assert stt.retries == 2
    finally:
        await stt.aclose()
    assert server.refused == [503, 503]
    assert len(server.connections) == 1


async def test_retries_give_up_with_a_retryable_error(server: DeepgramServer) -> None:
    server.refuse(429, times=3, message="Too many requests.")
    stt = make_stt(server, max_retries=2)
    try:
        with pytest.raises(STTError, match=r"429: Too many requests.*gave up after 2") as caught:
            await stt.recognize(speech(0.3))
        assert caught.value.retryable
    finally:
        await stt.aclose()


async def test_connection_refused_is_a_retryable_error() -> None:
    port = unused_port()
    stt = deepgram.STT(base_url=f"ws://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
    try:
        with pytest.raises(STTError, match="cannot connect") as caught:
            await stt.recognize(speech(0.2))
        assert caught.value.retryable
    finally:
        await stt.aclose()


async def test_drop_mid_utterance_fails_it_and_the_next_one_works(
    server: DeepgramServer,
) -> None:
    server.add_faults(Fault("drop", after_bytes=10 * FRAME_BYTES))
    stt = make_stt(server)
    try:
        first = await say(stt, speech(0.6))
        with pytest.raises(STTError, match="connection to Deepgram was lost") as caught:
            await stt.recognize(first)
        assert caught.value.retryable
        assert await stt.recognize(await say(stt, speech(0.6))) == SECOND
    finally:
        await stt.aclose()
    assert len(server.connections) == 2
    assert len(server.connections[0].audio) == 10 * FRAME_BYTES


@pytest.mark.parametrize(
    ("fault", "expected", "retryable"),
    [
        (
            Fault("close", after_bytes=8 * FRAME_BYTES, reason="NET-0000", error="internal"),
            "internal",
            True,
        ),
        (
            Fault("close", after_bytes=8 * FRAME_BYTES, close_code=1008, reason="DATA-0000"),
            "1008 DATA-0000",
            False,
        ),
    ],
)
async def test_error_close_fails_clearly_and_nothing_is_stuck(
    server: DeepgramServer, fault: Fault, expected: str, retryable: bool
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


async def test_garbage_messages_are_ignored(
    server: DeepgramServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.add_faults(Fault("garbage", after_bytes=FRAME_BYTES))
    stt = make_stt(server)
    try:
        with caplog.at_level(logging.INFO, logger="rejoinder.providers.deepgram"):
            assert await stt.recognize(await say(stt, speech(0.6))) == HELLO
    finally:
        await stt.aclose()
    assert "malformed" in caplog.text
    assert "Mystery" in caplog.text


async def test_unanswered_finalize_returns_the_interim_after_the_timeout(
    server: DeepgramServer,
) -> None:
    server.add_faults(Fault("mute", after_bytes=16 * FRAME_BYTES))
    stt = make_stt(server, finalize_timeout=1.5)
    try:
        frames = await say(stt, speech(0.6))
        started = now()
        assert await stt.recognize(frames) == "Hello there, how"
        assert now() - started == pytest.approx(1.5, abs=0.05)
    finally:
        await stt.aclose()


def test_options_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPGRAM_API_KEY", raising=False)
    monkeypatch.delenv("DEEPGRAM_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="API key"):
        deepgram.STT()
    with pytest.raises(ValueError, match="keepalive_interval"):
        deepgram.STT(api_key=KEY, keepalive_interval=12)
    with pytest.raises(ValueError, match="interim_results"):
        deepgram.STT(api_key=KEY, interim_results=False, utterance_end_ms=1000)
    monkeypatch.setenv("DEEPGRAM_API_KEY", "from-env")
    monkeypatch.setenv("DEEPGRAM_BASE_URL", "https://dg.example/v1/")
    stt = deepgram.STT(endpointing_ms=None)
    assert stt.url.startswith("wss://dg.example/v1/listen?model=nova-3&")
    assert "endpointing=false" in stt.url


# -- in a session ---------------------------------------------------------------------------


async def test_session_commits_the_deepgram_transcript(server: DeepgramServer) -> None:
    stt = make_stt(server)
    llm = ScriptedLLM([["Hi! I am fine."]])
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm, stt=stt, tts=ScriptedTTS(), vad=ScriptedVAD(), user_away_timeout=None
    )
    session.input.audio = mic
    heard: list[tuple[str, bool]] = []
    session.on("user_input_transcribed", lambda ev: heard.append((ev.transcript, ev.is_final)))
    await session.start(rj.Agent(instructions="voice"))
    try:
        for _ in range(40):
            await mic.push(speech_frame(0.02))
        await mic.push_silence(2.0)
        user = [m.content for m in session.history.messages() if m.role == "user"]
        assert user == [HELLO]
        assert len(llm.calls) == 1
        finals = [text for text, final in heard if final]
        assert finals == [HELLO]
        first_final = heard.index((HELLO, True))
        interims = [text for text, final in heard[:first_final] if not final]
        assert interims and interims[0] == "Hello"
        assert all(not final for _, final in heard[:first_final])
    finally:
        await session.aclose()
        await stt.aclose()
