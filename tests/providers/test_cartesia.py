"""cartesia.TTS against the loopback TTS WebSocket server, over real sockets on 127.0.0.1,
on virtual time (see test_openai_chat.py for why the marker is enough). The word matcher
on its own: test_cartesia_words.py."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.models.tts import TTSError, WordTiming
from rejoinder.providers import cartesia
from rejoinder.providers.cartesia._wire import letters
from rejoinder.testing import Delay, MemoryAudioOutput, ScriptedLLM, advance
from rejoinder.testing.cartesia_server import (
    CartesiaServer,
    Context,
    Cut,
    Garbage,
    Refuse,
    SendError,
    Stall,
)

from .._samples import run_example
from ._servers import SENTENCE, collect_frames, collect_stream, serving, stream_deltas, synthesize

pytestmark = pytest.mark.looptime(noop_cycles=2000)

KEY = "sk_car_test"
VOICE = "a0e99841-438c-4a64-b679-ae501e7d6091"
TEXT = SENTENCE


server = serving(CartesiaServer, api_key=KEY, chars_per_chunk=7)


def make_tts(server: CartesiaServer, **options: Any) -> cartesia.TTS:
    options.setdefault("retry_backoff", 0.01)
    options.setdefault("api_key", KEY)
    return cartesia.TTS(voice_id=VOICE, base_url=server.base_url, **options)


def contexts(server: CartesiaServer, connection: int = 0) -> list[Context]:
    return list(server.connections[connection].contexts.values())


def assert_timed_like_the_server(got: list[WordTiming], context: Context) -> None:
    """The words as written, at the times the server reported for them (the text has no
    word the server leaves out, so they pair one to one)."""
    assert [letters(w.word) for w in got] == [letters(w) for w, _, _ in context.words]
    for mine, (_, start, end) in zip(got, context.words, strict=True):
        assert (mine.start, mine.end) == pytest.approx((start, end))


# -- the wire -------------------------------------------------------------------------------


async def test_handshake_headers_and_requests(server: CartesiaServer) -> None:
    tts = make_tts(
        server,
        sample_rate=16000,
        model="sonic-2",
        language="fr",
        max_buffer_delay_ms=0,
        generation_config={"speed": 1.1},
    )
    assert tts.url == f"{server.base_url}/tts/websocket"
    frames, _ = await synthesize(tts, "Bonjour à tous.")
    [connection] = server.connections
    assert connection.query == {}  # the key travels in a header, never in the URL
    assert connection.headers["X-API-Key"] == KEY
    assert connection.headers["Cartesia-Version"] == cartesia.tts.API_VERSION
    [context] = contexts(server)
    common = {
        "model_id": "sonic-2",
        "voice": {"mode": "id", "id": VOICE},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 16000},
        "context_id": context.context_id,
        "add_timestamps": True,
        "language": "fr",
        "max_buffer_delay_ms": 0,
        "generation_config": {"speed": 1.1},
    }
    assert connection.messages == [
        {**common, "transcript": "Bonjour à tous.", "continue": True},
        {**common, "transcript": "", "continue": False},
    ]
    assert context.ended == "done"
    assert {f.sample_rate for f in frames} == {16000}
    assert sum(f.duration for f in frames) == pytest.approx(context.audio_seconds)


async def test_frames_and_words_as_written_follow_the_servers_audio(
    server: CartesiaServer,
) -> None:
    tts = make_tts(server)
    frames, words = await synthesize(tts)
    [context] = contexts(server)
    assert context.chunks == 8  # 54 characters, 7 a chunk: words are cut between chunks
    assert [f.samples_per_channel for f in frames[:-1]] == [480] * (len(frames) - 1)
    assert sum(f.duration for f in frames) == pytest.approx(len(TEXT) * 0.05)
    # The server reports "Hello", "there", "stream"; the words come back as written.
    assert [w for w, _, _ in context.words][:2] == ["Hello", "there"]
    assert [w.word for w in words] == TEXT.split()
    assert_timed_like_the_server(words, context)
    assert (words[-1].start, words[-1].end) == pytest.approx((2.35, 2.7))


async def test_streamed_deltas_are_sent_verbatim_in_whole_words(server: CartesiaServer) -> None:
    tts = make_tts(server)
    items = await stream_deltas(tts, ["  Hel", "lo wo", "rld,  how ", "are", " you?"])
    [connection] = server.connections
    # Joined verbatim by the server: leading space dropped, inner spaces kept.
    assert [m["transcript"] for m in connection.messages] == [
        "Hello ",
        "world,  how ",
        "are ",
        "you?",
        "",
    ]
    [context] = contexts(server)
    assert context.transcript == "Hello world,  how are you?"
    words = [item for item in items if isinstance(item, WordTiming)]
    assert [w.word for w in words] == ["Hello", "world,", "how", "are", "you?"]
    assert_timed_like_the_server(words, context)


async def test_text_without_spaces_is_sent_clause_by_clause(server: CartesiaServer) -> None:
    tts = make_tts(server, language="zh")
    stream = tts.stream()
    for delta in ["你好，", "世界。再", "见"]:
        stream.push_text(delta)
    stream.end_input()
    words = await collect_stream(stream)
    await stream.aclose()
    await tts.aclose()
    transcripts = [m["transcript"] for m in server.connections[0].messages]
    assert transcripts == ["你好，", "世界。", "再见", ""]
    assert "".join(w.word for w in words) == "你好，世界。再见"


async def test_flush_voices_the_text_before_the_input_ends(server: CartesiaServer) -> None:
    tts = make_tts(server)
    stream = tts.stream()
    source = aiter(stream)
    stream.push_text("Hi there ")  # no sentence end: the server holds it (3 s by default)
    first = asyncio.ensure_future(anext(source))
    await advance(1.0)
    assert not first.done()
    stream.flush()
    assert isinstance(await asyncio.wait_for(first, 5), AudioFrame)
    [context] = contexts(server)
    assert (context.generations, context.flushes) == (["Hi there "], 1)
    stream.end_input()
    rest = [item async for item in source]
    await stream.aclose()
    await tts.aclose()
    assert [w.word for w in rest if isinstance(w, WordTiming)] == ["Hi", "there"]
    assert context.ended == "done"


async def test_streams_share_one_connection_one_context_each(server: CartesiaServer) -> None:
    tts = make_tts(server)
    await tts.warm_up()  # connected before the first reply
    assert (len(server.connections), tts.connects) == (1, 1)
    first, second = await asyncio.gather(
        synthesize(tts, "One two three.", close=False),
        synthesize(tts, "Four five six seven.", close=False),
    )
    _, third = await synthesize(tts, "Eight.", close=False)
    await tts.aclose()
    assert (len(server.connections), tts.connects) == (1, 1)
    one, two, three = contexts(server)
    assert [one.transcript, two.transcript, three.transcript] == [
        "One two three.",
        "Four five six seven.",
        "Eight.",
    ]
    # Multiplexed: each stream got its own context's audio and words, nothing else.
    assert sum(f.duration for f in first[0]) == pytest.approx(one.audio_seconds)
    assert sum(f.duration for f in second[0]) == pytest.approx(two.audio_seconds)
    assert [w.word for w in second[1]] == ["Four", "five", "six", "seven."]
    assert [w.word for w in third] == ["Eight."]


async def test_an_interrupted_stream_cancels_its_context_and_the_socket_stays(
    server: CartesiaServer,
) -> None:
    server.chunk_delay = 0.1
    tts = make_tts(server)
    stream = tts.stream()
    stream.push_text(TEXT)
    stream.end_input()
    source = aiter(stream)
    assert isinstance(await asyncio.wait_for(anext(source), 5), AudioFrame)
    await stream.aclose()  # the user interrupted
    await advance(0.5)
    [connection] = server.connections
    [context] = contexts(server)
    assert connection.cancelled == [context.context_id]
    assert connection.messages[-1] == {"context_id": context.context_id, "cancel": True}
    assert context.chunks < 8  # the server stopped voicing it
    assert server.open_sockets == 1
    _, words = await synthesize(tts, "Next reply.")  # a new context, same socket
    assert [w.word for w in words] == ["Next", "reply."]
    assert (len(server.connections), len(connection.contexts)) == (1, 2)


# -- failures -------------------------------------------------------------------------------


async def test_a_refused_key_is_not_retried(server: CartesiaServer) -> None:
    tts = make_tts(server, api_key="wrong")
    with pytest.raises(TTSError, match=r"HTTP 401: the API key was refused") as caught:
        await synthesize(tts)
    assert not caught.value.retryable
    assert (server.refused, server.connections, tts.retries) == (1, [], 0)


async def test_503_twice_then_it_works(server: CartesiaServer) -> None:
    server.script(Refuse(503), Refuse(503, retry_after=0.5))
    tts = make_tts(server)
    frames, words = await synthesize(tts)
    assert (server.refused, tts.retries, len(server.connections)) == (2, 2, 1)
    [context] = contexts(server)
    assert sum(f.duration for f in frames) == pytest.approx(context.audio_seconds)
    assert [w.word for w in words] == TEXT.split()


async def test_429_gives_up_after_the_retries(server: CartesiaServer) -> None:
    server.script(*[Refuse(429, "Too many concurrent requests")] * 3)
    tts = make_tts(server, max_retries=2)
    with pytest.raises(TTSError, match=r"HTTP 429.*gave up after 2 retries") as caught:
        await synthesize(tts)
    assert caught.value.retryable
    assert server.refused == 3


async def test_unreachable_then_reachable(server: CartesiaServer) -> None:
    port = server.port
    await server.aclose()
    tts = make_tts(server, retry_backoff=0.5, retry_backoff_cap=0.5)
    task = asyncio.ensure_future(synthesize(tts))
    await advance(0.1)  # the first connect was refused: waiting to retry
    assert not task.done()
    async with CartesiaServer(api_key=KEY, port=port) as again:
        _, words = await asyncio.wait_for(task, 10)
        assert len(again.connections) == 1
    assert tts.retries >= 1
    assert [w.word for w in words] == TEXT.split()


async def test_a_drop_before_any_audio_is_retried_with_the_text(server: CartesiaServer) -> None:
    server.script(Cut(after=0))
    tts = make_tts(server)
    _, words = await synthesize(tts)
    assert (tts.retries, tts.connects) == (1, 2)
    assert [contexts(server, i)[0].transcript for i in (0, 1)] == [TEXT, TEXT]
    assert [w.word for w in words] == TEXT.split()


async def test_a_drop_mid_audio_ends_the_iteration(server: CartesiaServer) -> None:
    server.script(Cut(after=3))
    tts = make_tts(server, timeout=30.0)
    frames: list[AudioFrame] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TTSError, match="closed the connection before the end") as caught:
        await collect_frames(tts, frames)
    assert caught.value.retryable
    assert loop.time() - started < 1.0  # not the 30 s read timeout
    assert sum(f.duration for f in frames) <= 3 * 7 * 0.05 + 1e-9
    assert (len(server.connections), tts.retries) == (1, 0)  # audio was yielded: no retry
    _, words = await synthesize(tts, "Again.")  # the next stream reconnects
    assert ([w.word for w in words], tts.connects) == (["Again."], 2)


async def test_a_server_error_before_audio_is_retried_on_a_new_context(
    server: CartesiaServer,
) -> None:
    server.script(SendError(after=0, status_code=500))
    tts = make_tts(server)
    _, words = await synthesize(tts)
    [connection] = server.connections  # the socket survived the context's error
    failed, retried = contexts(server)
    assert (failed.ended, retried.ended, tts.retries) == ("error", "done", 1)
    assert connection.cancelled == []  # an ended context is not cancelled again
    assert [w.word for w in words] == TEXT.split()


async def test_a_client_error_is_not_retried() -> None:
    async with CartesiaServer(api_key=KEY, faults=(SendError(
        after=0, status_code=400, title="Invalid model", message="The model is not valid.",
        error_code="model_not_found",
    ),)) as server:  # fmt: skip
        tts = make_tts(server, api_version="2026-03-01")
        with pytest.raises(TTSError) as caught:
            await synthesize(tts)
    assert str(caught.value) == (
        "Cartesia reported an error: Invalid model: The model is not valid. (400, model_not_found)"
    )
    assert (caught.value.retryable, tts.retries) == (False, 0)


async def test_an_error_frame_after_audio_ends_the_stream(server: CartesiaServer) -> None:
    server.script(SendError(after=2, status_code=503, title="Overloaded", message="Try later."))
    tts = make_tts(server, api_version="2024-11-13")  # errors in the older "error" field
    frames: list[AudioFrame] = []
    with pytest.raises(TTSError, match=r"Overloaded: Try later\. \(503") as caught:
        await collect_frames(tts, frames)
    assert caught.value.retryable  # another engine may take over
    assert sum(f.duration for f in frames) <= 2 * 7 * 0.05 + 1e-9
    assert (tts.retries, len(contexts(server))) == (0, 1)
    await tts.aclose()


async def test_garbage_raises_without_yielding_it(server: CartesiaServer) -> None:
    bad_chunk = '{"type": "chunk", "data": "not*base64", "context_id": "<context_id>"}'
    bad_words = (
        '{"type": "timestamps", "context_id": "<context_id>",'
        ' "word_timestamps": {"words": ["a"], "start": [0], "end": "x"}}'
    )
    server.script(Garbage(after=2), Garbage(after=1, data=bad_chunk))
    server.script(Garbage(after=1, data=bad_words))
    for expected, connects in (
        ("not JSON", 1),
        ("malformed audio chunk", 2),
        ("malformed word timestamps", 3),
    ):
        frames: list[AudioFrame] = []
        tts = make_tts(server)
        with pytest.raises(TTSError, match=expected):
            await collect_frames(tts, frames)
        await tts.aclose()
        [context] = contexts(server, connects - 1)
        assert sum(f.duration for f in frames) <= context.audio_seconds + 1e-9
    # Garbage that names the context fails that stream and cancels its context.
    assert [len(c.cancelled) for c in server.connections] == [0, 1, 1]


async def test_aclose_mid_stream_returns_promptly(server: CartesiaServer) -> None:
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
    assert server.connections[0].cancelled == [contexts(server)[0].context_id]
    await tts.aclose()


async def test_a_silent_server_times_out_once_the_input_ended(server: CartesiaServer) -> None:
    server.script(Stall(after=0))
    tts = make_tts(server, timeout=5.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TTSError, match=r"no audio from Cartesia for 5\.0s") as caught:
        await synthesize(tts, close=False)
    assert caught.value.retryable
    assert loop.time() - started == pytest.approx(5.0, abs=0.1)
    await advance(0.1)
    assert server.open_sockets == 0  # a silent connection is not trusted again
    _, words = await synthesize(tts, "Back.")
    assert ([w.word for w in words], tts.connects) == (["Back."], 2)


async def test_a_socket_the_server_closed_when_idle_is_opened_again() -> None:
    async with CartesiaServer(api_key=KEY, idle_timeout=10.0) as server:
        tts = make_tts(server)
        await synthesize(tts, "First.", close=False)
        await advance(11.0)
        assert server.connections[0].closed_with == (1000, "idle timeout")
        _, words = await synthesize(tts, "Second.")
    assert [w.word for w in words] == ["Second."]
    assert (tts.connects, tts.retries) == (2, 0)  # noticed the close: nothing failed


async def test_a_stream_waiting_for_text_outlives_its_socket() -> None:
    async with CartesiaServer(api_key=KEY, idle_timeout=10.0) as server:
        tts = make_tts(server)
        stream = tts.stream()
        reader = asyncio.ensure_future(collect_stream(stream))
        await advance(0.1)
        assert tts.connects == 1  # connected before the text, as the reference advises
        await advance(11.0)  # the model thinks; the server closes the idle socket
        assert server.open_sockets == 0
        stream.push_text("Late answer.")
        stream.end_input()
        words = await asyncio.wait_for(reader, 5)
        await stream.aclose()
        await tts.aclose()
    assert [w.word for w in words] == ["Late", "answer."]
    assert (tts.connects, tts.retries) == (2, 0)


async def test_close_releases_everything(server: CartesiaServer) -> None:
    server.chunk_delay = 1.0
    tts = make_tts(server)
    stream = tts.stream()
    stream.push_text(TEXT)
    stream.end_input()
    reader = asyncio.ensure_future(collect_stream(stream))
    await advance(1.5)
    await tts.aclose()  # the session ends while a reply is being voiced
    with pytest.raises(TTSError, match="connection was closed"):
        await asyncio.wait_for(reader, 2)
    await stream.aclose()
    await advance(0.1)
    assert server.open_sockets == 0
    assert tts._connection is None and tts._session is None
    assert all(task.done() for task in asyncio.all_tasks() if "Connection._read" in repr(task))


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        cartesia.TTS(voice_id="v", sample_rate=12345)
    with pytest.raises(ValueError, match="max_buffer_delay_ms"):
        cartesia.TTS(voice_id="v", max_buffer_delay_ms=9000)


def test_the_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARTESIA_API_KEY", "from-env")
    monkeypatch.setenv("CARTESIA_BASE_URL", "https://proxy.example/")
    tts = cartesia.TTS(voice_id="v")
    assert (tts._api_key, tts.url) == ("from-env", "wss://proxy.example/tts/websocket")


# -- in a session ---------------------------------------------------------------------------


async def test_an_interrupted_reply_keeps_exactly_the_words_heard() -> None:
    reply: list[str | Delay] = [
        "One, two, ",
        Delay(0.1),
        "three, four, fi",
        "ve, six, seven, eight, nine, ten.",
    ]
    # Chunks come at a real-time pace (0.3 s of audio every 0.25 s), so the server is
    # still voicing the reply when the user interrupts.
    async with CartesiaServer(api_key=KEY, chars_per_chunk=6, chunk_delay=0.25) as server:
        tts = make_tts(server)
        speaker = MemoryAudioOutput(24000)
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([reply]), tts=tts, user_away_timeout=None
        )
        session.output.audio = speaker
        await session.start(rj.Agent(instructions="voice"))
        try:
            session.generate_reply(user_input="count")
            await advance(1.75)
            await session.interrupt()
            position = speaker.played_seconds
        finally:
            await session.aclose()
            await tts.aclose()
    [context] = contexts(server)
    # The server read the words without their commas...
    heard = [w for w, start, end in context.words if (start + end) / 2 <= position]
    assert heard == ["One", "two", "three", "four", "five"]
    # ...and the history keeps them as written. "five," ends at 1.4 s; "six," is at 1.55.
    last = session.history.items[-1]
    assert isinstance(last, rj.ChatMessage)
    assert (last.content, last.interrupted) == ("One, two, three, four, five,", True)
    # The text was all in at 0.1 s, the first chunk came 0.25 s later: 1.4 s was played
    # when the user interrupted at 1.75 s.
    assert position == pytest.approx(1.4, abs=0.021)
    assert server.connections[0].cancelled == [context.context_id]
    assert context.ended == "cancelled"  # stopped before it voiced the rest
    assert context.audio_seconds < len(context.transcript) * 0.05


def test_the_sample_runs_offline_against_the_loopback_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CARTESIA_API_KEY", raising=False)
    out = run_example("cartesia_voice.py")
    said = re.search(r"heard before the interruption: (.*)", out)
    assert said is not None, out
    assert said.group(1).startswith("I'm a rule-based demo")
    assert "cancelled contexts: 1" in out
