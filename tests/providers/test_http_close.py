"""aclose ends what an HTTP client has in flight, over real sockets on 127.0.0.1, on
virtual time: a request waiting for its headers, a retry waiting out its backoff, a
response being read (aiohttp alone leaves that reader waiting forever, its read timeout
dropped). Each ends at once with an error that is not retried, and nothing is sent after
aclose. The conformance suites check the read case for every provider
(tests/conformance)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from rejoinder.models import ChatContext, LLMError
from rejoinder.models.audio import AudioFrame
from rejoinder.models.stt import STTError
from rejoinder.models.tts import TTSError
from rejoinder.providers import openai
from rejoinder.testing import now, speech_frame
from rejoinder.testing.openai_audio_server import ErrorReply as AudioError
from rejoinder.testing.openai_audio_server import OpenAIAudioServer, SpeechReply, tone
from rejoinder.testing.openai_chat_server import ErrorReply, OpenAIChatServer, Pause, StreamReply

pytestmark = pytest.mark.looptime(noop_cycles=2000)


def user_says() -> ChatContext:
    ctx = ChatContext()
    ctx.add_message(role="user", content="Hi")
    return ctx


async def chat(llm: openai.LLM) -> str:
    return "".join([chunk.delta async for chunk in llm.chat(user_says())])


async def closed_midway(
    work: Awaitable[Any], close: Callable[[], Awaitable[None]], after: float
) -> tuple[BaseException, float]:
    """Start ``work``, close its client ``after`` seconds in; what ``work`` raised and how
    long after the close it did."""
    task = asyncio.ensure_future(work)
    await asyncio.sleep(after)
    assert not task.done()
    closed_at = now()
    await close()
    with pytest.raises((LLMError, STTError, TTSError)) as raised:
        async with asyncio.timeout(30):
            await task
    return raised.value, now() - closed_at


@pytest.fixture
async def chat_server() -> AsyncIterator[OpenAIChatServer]:
    async with OpenAIChatServer() as server:
        yield server


async def test_a_request_waiting_for_its_headers_ends(chat_server: OpenAIChatServer) -> None:
    chat_server.add(StreamReply([Pause(3600)]))
    llm = openai.LLM(model="m", base_url=chat_server.base_url, timeout=60)
    error, waited = await closed_midway(chat(llm), llm.aclose, after=2)
    assert isinstance(error, LLMError) and not error.retryable
    assert "its HTTP session was closed" in str(error)
    assert waited < 1
    assert len(chat_server.requests) == 1  # not retried


async def test_a_retry_waiting_out_its_backoff_ends(chat_server: OpenAIChatServer) -> None:
    chat_server.add(ErrorReply(503, "overloaded"), StreamReply([]))
    llm = openai.LLM(model="m", base_url=chat_server.base_url, retry_backoff=8, retry_backoff_cap=8)
    error, waited = await closed_midway(chat(llm), llm.aclose, after=1)
    assert isinstance(error, LLMError) and not error.retryable
    assert "503" in str(error) and "not retried: openai.LLM was closed" in str(error)
    assert waited < 1
    await asyncio.sleep(10)
    assert len(chat_server.requests) == 1  # the backoff ended: no request after aclose


async def test_a_stream_being_read_ends(chat_server: OpenAIChatServer) -> None:
    chat_server.add(
        StreamReply([{"choices": [{"index": 0, "delta": {"content": "Hi"}}]}, Pause(3600)])
    )
    llm = openai.LLM(model="m", base_url=chat_server.base_url, timeout=60)
    error, waited = await closed_midway(chat(llm), llm.aclose, after=2)
    assert isinstance(error, LLMError) and not error.retryable
    assert "stopped: openai.LLM was closed" in str(error)
    assert waited < 1


def utterance() -> list[AudioFrame]:
    return [speech_frame(0.02, 16000) for _ in range(20)]


async def test_speech_clients_end_their_backoff_and_reads() -> None:
    async with OpenAIAudioServer() as server:
        server.add_transcripts(AudioError(503))
        stt = openai.STT(base_url=server.base_url, retry_backoff=8, retry_backoff_cap=8)
        error, waited = await closed_midway(stt.recognize(utterance()), stt.aclose, after=1)
        assert isinstance(error, STTError) and "not retried: openai.STT was closed" in str(error)
        assert waited < 1

        server.add_speech(SpeechReply(tone(1.0), chunk_size=4800, chunk_delay=1.0))
        tts = openai.TTS(base_url=server.base_url, timeout=60)

        async def speak() -> None:
            async for _ in tts.synthesize("Hello."):
                pass

        error, waited = await closed_midway(speak(), tts.aclose, after=2.5)
        assert isinstance(error, TTSError) and not error.retryable
        assert "stopped: openai.TTS was closed" in str(error)
        assert waited < 1
        assert len(server.transcription_requests) == 1
        assert len(server.speech_requests) == 1
