"""elevenlabs.TTS against the loopback stream-input server, over real sockets on 127.0.0.1,
on virtual time (see test_openai_chat.py for why the marker is enough)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.models.tts import TTSError, WordTiming
from rejoinder.providers import elevenlabs
from rejoinder.providers.elevenlabs.tts import KEEPALIVE_INTERVAL
from rejoinder.testing import Delay, MemoryAudioOutput, MemoryTextOutput, ScriptedLLM, advance
from rejoinder.testing.elevenlabs_server import (
    Cut,
    ElevenLabsServer,
    Garbage,
    Refuse,
    SendError,
    Stall,
)

from ._servers import SENTENCE, collect_frames, collect_stream, serving, stream_deltas, synthesize

pytestmark = pytest.mark.looptime(noop_cycles=2000)

KEY = "xi-test"
TEXT = SENTENCE


server = serving(ElevenLabsServer, api_key=KEY, chars_per_message=7)


def make_tts(server: ElevenLabsServer, **options: Any) -> elevenlabs.TTS:
    options.setdefault("retry_backoff", 0.01)
    options.setdefault("api_key", KEY)
    return elevenlabs.TTS(voice_id="voice-1", base_url=server.base_url, **options)


def server_words(server: ElevenLabsServer, index: int = 0) -> list[WordTiming]:
    return [WordTiming(*word) for word in server.connections[index].words]


def assert_same_words(got: list[WordTiming], expected: list[WordTiming]) -> None:
    assert [w.word for w in got] == [w.word for w in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.start == pytest.approx(theirs.start)
        assert mine.end == pytest.approx(theirs.end)


async def test_url_headers_and_messages(server: ElevenLabsServer) -> None:
    tts = make_tts(
        server,
        sample_rate=16000,
        model="eleven_turbo_v2_5",
        language_code="en",
        voice_settings={"stability": 0.5, "similarity_boost": 0.8},
        chunk_length_schedule=[50, 120],
    )
    assert tts.url.startswith(f"{server.base_url}/text-to-speech/voice-1/stream-input?")
    frames, _ = await synthesize(tts, "Hello there.")
    [connection] = server.connections
    assert connection.voice_id == "voice-1"
    assert connection.query == {
        "model_id": "eleven_turbo_v2_5",
        "output_format": "pcm_16000",
        "language_code": "en",
    }
    assert connection.headers["xi-api-key"] == KEY
    assert connection.messages == [
        {
            "text": " ",
            "voice_settings": {"stability": 0.5, "similarity_boost": 0.8},
            "generation_config": {"chunk_length_schedule": [50, 120]},
        },
        {
            "text": "Hello ",
        },
        {"text": "there. ", "flush": True},
        {"text": ""},
    ]
    assert connection.closed_with == (1000, "")
    assert {f.sample_rate for f in frames} == {16000}


async def test_frames_and_word_timings_follow_the_servers_audio(server: ElevenLabsServer) -> None:
    tts = make_tts(server)
    frames, words = await synthesize(tts)
    [connection] = server.connections
    assert connection.audio_messages == 8  # 55 characters, 7 a message: words are cut
    assert [f.samples_per_channel for f in frames[:-1]] == [480] * (len(frames) - 1)
    assert sum(f.duration for f in frames) == pytest.approx(connection.audio_seconds)
    assert sum(f.duration for f in frames) == pytest.approx(len(TEXT + " ") * 0.05)
    assert_same_words(words, server_words(server))
    assert [w.word for w in words] == TEXT.split()
    # Placed in the stream, not in each message: "stream." starts 47 characters in.
    assert words[-1].word == "stream."
    assert (words[-1].start, words[-1].end) == pytest.approx((2.35, 2.7))


async def test_sample_rate_22050_joins_samples_across_messages() -> None:
    async with ElevenLabsServer(seconds_per_char=0.03, chars_per_message=3) as server:
        tts = make_tts(server, sample_rate=22050, api_key=None)
        frames, words = await synthesize(tts, "Odd sized audio chunks.")
    assert [f.samples_per_channel for f in frames[:-1]] == [441] * (len(frames) - 1)
    # 662 samples per character: messages of 3974 bytes, not whole frames.
    assert sum(f.samples_per_channel for f in frames) == 662 * len("Odd sized audio chunks. ")
    assert_same_words(words, server_words(server))


async def test_streamed_deltas_split_mid_word_are_sent_as_whole_words(
    server: ElevenLabsServer,
) -> None:
    tts = make_tts(server)
    items = await stream_deltas(tts, ["Hel", "lo wo", "rld, how ", "are", " you?"])
    [connection] = server.connections
    assert [m["text"] for m in connection.messages[1:]] == [
        "Hello ",
        "world, how ",
        "are ",
        "you? ",
        "",
    ]
    words = [item for item in items if isinstance(item, WordTiming)]
    assert [w.word for w in words] == ["Hello", "world,", "how", "are", "you?"]
    assert_same_words(words, server_words(server))


async def test_flush_voices_a_short_text_before_the_input_ends(server: ElevenLabsServer) -> None:
    tts = make_tts(server)
    stream = tts.stream()
    source = aiter(stream)
    stream.push_text("Hi there ")  # far below the first schedule length (120)
    first = asyncio.ensure_future(anext(source))
    await advance(1.0)
    assert not first.done()  # buffered by the server
    stream.flush()
    assert isinstance(await asyncio.wait_for(first, 5), WordTiming)
    assert server.connections[0].generations == ["Hi there "]
    stream.end_input()
    rest = [item async for item in source]
    await stream.aclose()
    await tts.aclose()
    assert sum(f.duration for f in rest if isinstance(f, AudioFrame)) == pytest.approx(0.45)


async def test_a_refused_key_is_not_retried(server: ElevenLabsServer) -> None:
    tts = make_tts(server, api_key="wrong")
    with pytest.raises(TTSError, match=r"HTTP 401: the API key was refused") as caught:
        await synthesize(tts)
    assert not caught.value.retryable
    assert (server.refused, server.connections, tts.retries) == (1, [], 0)


async def test_a_wrong_key_in_the_first_message_is_a_close_1008() -> None:
    async with ElevenLabsServer(api_key=KEY) as server:
        tts = make_tts(server, api_key=None)
        with pytest.raises(TTSError, match=r"code 1008: Invalid API key") as caught:
            await synthesize(tts)
    assert not caught.value.retryable
    assert len(server.connections) == 1


async def test_503_twice_then_it_works(server: ElevenLabsServer) -> None:
    server.script(Refuse(503), Refuse(503, retry_after=0.5))
    tts = make_tts(server)
    frames, words = await synthesize(tts)
    assert (server.refused, tts.retries, len(server.connections)) == (2, 2, 1)
    assert sum(f.duration for f in frames) == pytest.approx(server.connections[0].audio_seconds)
    assert len(words) == len(TEXT.split())


async def test_429_gives_up_after_the_retries(server: ElevenLabsServer) -> None:
    server.script(*[Refuse(429, "Too many concurrent requests")] * 3)
    tts = make_tts(server, max_retries=2)
    with pytest.raises(TTSError, match=r"HTTP 429.*gave up after 2 retries") as caught:
        await synthesize(tts)
    assert caught.value.retryable
    assert server.refused == 3


async def test_a_drop_before_any_audio_is_retried_with_the_text(server: ElevenLabsServer) -> None:
    server.script(Cut(after=0))
    tts = make_tts(server)
    _, words = await synthesize(tts)
    assert tts.retries == 1
    assert [c.text for c in server.connections] == [f"{TEXT} "] * 2
    assert [w.word for w in words] == TEXT.split()


async def test_a_drop_mid_audio_ends_the_iteration(server: ElevenLabsServer) -> None:
    server.script(Cut(after=3))
    tts = make_tts(server, timeout=30.0)
    frames: list[AudioFrame] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TTSError, match="closed the connection before the end") as caught:
        await collect_frames(tts, frames)
    await tts.aclose()
    assert caught.value.retryable
    assert loop.time() - started < 1.0  # not the 30 s read timeout
    assert sum(f.duration for f in frames) <= 3 * 7 * 0.05 + 1e-9
    assert len(server.connections) == 1  # audio was yielded: no retry


async def test_an_error_message_raises(server: ElevenLabsServer) -> None:
    server.script(SendError(after=1))
    tts = make_tts(server)
    with pytest.raises(TTSError, match=r"exceeds your quota.*quota_exceeded") as caught:
        await synthesize(tts)
    assert not caught.value.retryable
    assert len(server.connections) == 1


async def test_garbage_raises_without_yielding_it(server: ElevenLabsServer) -> None:
    server.script(Garbage(after=2), Garbage(after=1, data='{"audio": "not*base64", "x": 1}'))
    for expected in ("not JSON", "malformed audio message"):
        frames: list[AudioFrame] = []
        tts = make_tts(server)
        with pytest.raises(TTSError, match=expected):
            await collect_frames(tts, frames)
        await tts.aclose()
        audio = server.connections[-1].audio_seconds
        assert sum(f.duration for f in frames) <= audio + 1e-9


async def test_aclose_mid_stream_returns_promptly(server: ElevenLabsServer) -> None:
    server.script(Stall(after=2))
    tts = make_tts(server)
    stream = tts.stream()
    stream.push_text(TEXT)
    stream.end_input()
    source = aiter(stream)
    assert await asyncio.wait_for(anext(source), 5) is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    await stream.aclose()
    assert loop.time() - started < 1.5
    await advance(0.1)
    assert server.connections[0].closed_with is None  # the client closed it
    assert not server._sockets  # and the server saw it go
    await tts.aclose()


# A loop whose clock is far from zero, as a real one is: the read deadline is a point in
# loop time, and a clock starting at 0 made a relative delay read as one.
@pytest.mark.parametrize(
    "clock",
    [
        pytest.param(0.0, marks=pytest.mark.looptime(noop_cycles=2000, start=0)),
        pytest.param(1e5, marks=pytest.mark.looptime(noop_cycles=2000, start=1e5)),
    ],
)
async def test_a_silent_server_times_out_once_the_input_ended(
    server: ElevenLabsServer, clock: float
) -> None:
    server.script(Stall(after=0))
    tts = make_tts(server, timeout=5.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TTSError, match=r"no audio from ElevenLabs for 5\.0s") as caught:
        await synthesize(tts)
    assert caught.value.retryable
    assert loop.time() - started == pytest.approx(5.0, abs=0.1)


async def test_keep_alive_outlasts_the_inactivity_timeout(server: ElevenLabsServer) -> None:
    tts = make_tts(server)
    stream = tts.stream()
    reader = asyncio.ensure_future(collect_stream(stream))
    stream.push_text("Slow ")
    await advance(45.0)  # the model thinks: more than twice the server's 20 s
    stream.push_text("model.")
    stream.end_input()
    words = await asyncio.wait_for(reader, 10)
    await stream.aclose()
    await tts.aclose()
    assert [w.word for w in words] == ["Slow", "model."]
    keep_alives = [m for m in server.connections[0].messages[1:] if m == {"text": " "}]
    assert len(keep_alives) == int(45.0 // KEEPALIVE_INTERVAL)


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        elevenlabs.TTS(voice_id="v", sample_rate=12345)
    with pytest.raises(ValueError, match="chunk_length_schedule"):
        elevenlabs.TTS(voice_id="v", chunk_length_schedule=[10])


# -- in a session ---------------------------------------------------------------------------


async def test_an_interrupted_reply_keeps_exactly_the_words_heard() -> None:
    reply: list[str | Delay] = [
        "One two ",
        Delay(0.1),
        "three four fi",
        "ve six seven eight nine ten.",
    ]
    async with ElevenLabsServer(api_key=KEY, chars_per_message=6) as server:
        tts = make_tts(server, chunk_length_schedule=[50])
        speaker = MemoryAudioOutput(24000)
        transcript = MemoryTextOutput()
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([reply]), tts=tts, user_away_timeout=None
        )
        session.output.audio = speaker
        session.output.transcription = transcript
        items: list[rj.ChatMessage] = []
        session.on("conversation_item_added", lambda e: items.append(e.item))
        await session.start(rj.Agent(instructions="voice"))
        try:
            session.generate_reply(user_input="count")
            await advance(1.5)
            await session.interrupt()
            position = speaker.played_seconds
        finally:
            await session.aclose()
            await tts.aclose()
    heard = [w for w in server_words(server) if (w.start + w.end) / 2 <= position]
    # "One two three four five six " is 28 characters: 1.4 s; "seven" ends at 1.65.
    assert [w.word for w in heard] == ["One", "two", "three", "four", "five", "six"]
    last = session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("One two three four five six", True)
    assert items[-1].content == last.content  # the event reports what was heard
    # The whole text was in at 0.1 s (below the 50-character schedule until the end of
    # the input flushed it): 1.4 s of it was played when the user interrupted at 1.5 s.
    assert position == pytest.approx(1.4, abs=0.021)
    assert server.connections[0].text == "One two three four five six seven eight nine ten. "
