"""Helpers the tests against the loopback provider servers share: audio to push and how
to push it (speech-to-text), what a synthesis yields (text-to-speech), a chat context,
its tool calls and a streamed reply collected (LLMs), a factory of clients closed after
the test, and the ``server`` fixture."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, TypeVar

import pytest

from rejoinder.models import ChatChunk, ChatContext, LLMError
from rejoinder.models.audio import AudioFrame
from rejoinder.models.chat import FunctionCall, FunctionCallOutput
from rejoinder.models.tts import TTS, WordTiming
from rejoinder.testing import speech_frame

# -- speech to text -------------------------------------------------------------------------


class _Pushed(Protocol):
    def push(self, frame: AudioFrame, on_interim: Callable[[str], Any]) -> Any: ...


def speech(seconds: float, rate: int = 16000) -> list[AudioFrame]:
    """``seconds`` of loud tone in 20 ms frames: what the servers hear as speech."""
    return [speech_frame(0.02, rate) for _ in range(round(seconds / 0.02))]


def stereo_speech(seconds: float) -> list[AudioFrame]:
    """``speech`` at 48 kHz in two channels: what a client must resample and mix down."""
    import numpy as np

    return [
        AudioFrame(np.repeat(frame.data, 2), 48000, num_channels=2)
        for frame in speech(seconds, rate=48000)
    ]


def silence(seconds: float) -> list[AudioFrame]:
    """``seconds`` of silence in 20 ms frames at 16 kHz."""
    return [AudioFrame.silence(0.02, 16000) for _ in range(round(seconds / 0.02))]


async def say(
    stt: _Pushed, frames: list[AudioFrame], interims: list[str] | None = None
) -> list[AudioFrame]:
    """Push frames in real (virtual) time, as the session does while the user speaks."""
    sink = interims if interims is not None else []
    for frame in frames:
        stt.push(frame, sink.append)
        await asyncio.sleep(frame.duration)
    return frames


# -- text to speech -------------------------------------------------------------------------

SENTENCE = "Hello there, this is a longer sentence for the stream."


async def synthesize(
    tts: TTS, text: str = SENTENCE, *, close: bool = True
) -> tuple[list[AudioFrame], list[WordTiming]]:
    """The frames and word timings of one synthesis; ``tts`` closed after, unless not
    ``close``."""
    frames: list[AudioFrame] = []
    words: list[WordTiming] = []
    try:
        async for item in tts.synthesize(text):
            (frames if isinstance(item, AudioFrame) else words).append(item)  # type: ignore[arg-type]
    finally:
        if close:
            await tts.aclose()
    return frames, words


async def collect_frames(tts: TTS, frames: list[AudioFrame], text: str = SENTENCE) -> None:
    """Append the synthesis' frames to ``frames`` as they come (a test cancels it midway)."""
    async for item in tts.synthesize(text):
        if isinstance(item, AudioFrame):
            frames.append(item)


async def stream_deltas(tts: Any, deltas: list[str]) -> list[AudioFrame | WordTiming]:
    """Push ``deltas`` into a new stream of ``tts`` 0.1 s apart (as an LLM writes them)
    while reading it, end the input, and close the stream and ``tts``: what it yielded."""
    from rejoinder.testing import advance

    stream = tts.stream()
    items: list[AudioFrame | WordTiming] = []

    async def read() -> None:
        async for item in stream:
            items.append(item)

    reader = asyncio.ensure_future(read())
    for delta in deltas:
        stream.push_text(delta)
        await advance(0.1)
    stream.end_input()
    await asyncio.wait_for(reader, 10)
    await stream.aclose()
    await tts.aclose()
    return items


async def collect_stream(stream: Any) -> list[WordTiming]:
    """The word timings of a streaming synthesis."""
    return [item async for item in stream if isinstance(item, WordTiming)]


# -- LLMs -----------------------------------------------------------------------------------


def context(*items: Any) -> ChatContext:
    """A chat context of ``(role, text)`` messages and chat items, in order."""
    ctx = ChatContext()
    for item in items:
        if isinstance(item, tuple):
            ctx.add_message(role=item[0], content=item[1])
        else:
            ctx.items.append(item)
    return ctx


def user_says(text: str = "Hi") -> ChatContext:
    return context(("system", "You are brief."), ("user", text))


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> Any:
    return FunctionCall(call_id=call_id, name=name, arguments=arguments)


def output(call_id: str, text: str = "sunny", *, error: bool = False) -> Any:
    return FunctionCallOutput(call_id=call_id, name="get_weather", output=text, is_error=error)


async def collect(stream: AsyncIterator[ChatChunk]) -> list[ChatChunk]:
    return [chunk async for chunk in stream]


async def fail(stream: AsyncIterator[ChatChunk]) -> tuple[list[ChatChunk], LLMError]:
    """The chunks before the ``LLMError`` that must end ``stream``, and the error."""
    received: list[ChatChunk] = []
    try:
        async for chunk in stream:
            received.append(chunk)
    except LLMError as error:
        return received, error
    raise AssertionError(f"no LLMError; the stream ended normally after {received!r}")


# -- clients closed after the test ----------------------------------------------------------

ClientT = TypeVar("ClientT")


async def closing_factory(
    make: Callable[..., ClientT], **defaults: Any
) -> AsyncIterator[Callable[..., ClientT]]:
    """For a fixture: ``make(**options)`` with ``defaults`` filled in, every client made
    closed when the test ends."""
    made: list[Any] = []

    def factory(**options: Any) -> ClientT:
        for name, value in defaults.items():
            options.setdefault(name, value)
        client = make(**options)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.aclose()


def unused_port() -> int:
    """A port on 127.0.0.1 nobody listens on (it was free a moment ago): a client's
    connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the server ------------------------------------------------------------------------------

ServerT = TypeVar("ServerT", bound=AbstractAsyncContextManager[Any])


def serving(make: Callable[..., ServerT], **options: Any) -> Any:
    """A ``server`` fixture: ``make(**options)`` started for the test and closed after it.
    In a test module: ``server = serving(GeminiLiveServer)``."""

    @pytest.fixture(name="server")
    async def server() -> AsyncIterator[ServerT]:
        async with make(**options) as started:
            yield started

    return server
