"""What the streaming TTS providers over a WebSocket (ElevenLabs, Cartesia) decide alike
about a stream, in one place:

* the engine (``WebSocketTTS``): frames of ``frame_ms`` of 16-bit PCM at one of the
  provider's rates, ``Timeout``, the retry policy, the ``Dialer`` and its HTTP session,
  the ``retries`` count, and ``synthesize`` as one stream given the whole text;
* the pump (``PumpedStream``): a task connects, sends and reads, and iteration takes what
  it queued, so ``aclose`` can always stop it by cancelling (an async generator suspended
  in another task could not be closed); a failure or a bug ends the iteration with a
  ``TTSError``, never a hang;
* which failures a stream is tried again after (``Transient``), as the retry policy
  allows, and only before any of its audio was delivered: a new try would repeat what was
  heard;
* how long the server may be silent: without limit while the input is open (the model may
  be thinking), ``Timeout.read`` once it ended;
* what a server message that is not a JSON object means (the stream cannot go on), and
  what a connection closed before the end of the audio means (fatal for a close code that
  says the request is wrong, otherwise a drop another connection may get past).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..models.tts import StreamingTTS, TTSError, TTSStream, WordTiming
from . import _json
from ._retry import RetryPolicy
from ._timeout import Timeout
from ._ws import FATAL_CLOSE_CODES, Dialer, TryAgain, with_retries

if TYPE_CHECKING:
    import aiohttp

    from ..models.audio import AudioFrame

__all__ = [
    "CLOSE_TIMEOUT",
    "PumpedStream",
    "Transient",
    "WebSocketTTS",
    "close_failure",
    "parse_message",
]

CLOSE_TIMEOUT = 1.0
"""Seconds a close or a cancel may take before it is given up on."""
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a message of base64 audio may be large

M = TypeVar("M")


class Transient(TTSError, TryAgain):
    """A failure the stream may be tried again after, if nothing was delivered yet: a
    ``TTSError`` (retryable) for whoever sees it, a ``TryAgain`` for the retry loop."""

    def __init__(self, message: str, *, wait: float | None = None) -> None:
        super().__init__(message, retryable=True)
        self.wait = wait


def parse_message(server: str, raw: str) -> dict[str, Any]:
    """A server message as a JSON object, or a ``TTSError`` saying what came instead."""
    try:
        data = _json.loads(raw)
    except ValueError as exc:
        raise TTSError(f"{server} sent a message that is not JSON: {raw[:80]!r}") from exc
    if not isinstance(data, dict):
        raise TTSError(f"{server} sent a message that is not a JSON object: {raw[:80]!r}")
    return data


def close_failure(server: str, code: int | None, reason: str) -> TTSError:
    """The connection closed before the end of the audio: fatal for a close code after
    which the same request cannot work (a bad key, the quota, a bad message), otherwise
    a drop that a new connection may get past."""
    why = f": {reason}" if reason else ""
    text = f"{server} closed the connection before the end of the audio (code {code}{why})"
    if code in FATAL_CLOSE_CODES:
        return TTSError(text, retryable=False)
    return Transient(text)


class WebSocketTTS(StreamingTTS):
    """What a streaming TTS over a WebSocket holds alike; see the module docstring. A
    provider gives its name, server and logger as class attributes, and ``_whole``."""

    _name: ClassVar[str]
    """``elevenlabs.TTS``: in messages and log lines."""
    _server: ClassVar[str]
    """``ElevenLabs``: the server, in messages."""
    _log: ClassVar[logging.Logger]

    def __init__(
        self,
        *,
        voice_id: str,
        model: str,
        sample_rate: int,
        sample_rates: frozenset[int],
        frame_ms: int,
        timeout: Timeout | float | None,
        max_retries: int,
        retry_backoff: float,
        retry_backoff_cap: float,
        http_session: aiohttp.ClientSession | None,
        headers: Mapping[str, str],
        explanations: Mapping[int, str],
    ) -> None:
        if sample_rate not in sample_rates:
            raise ValueError(
                f"sample_rate must be one of {sorted(sample_rates)}, got {sample_rate}"
            )
        if frame_ms <= 0:
            raise ValueError(f"frame_ms must be positive, got {frame_ms}")
        super().__init__(sample_rate=sample_rate)
        self.voice_id = voice_id
        self.model = model
        self._frame_bytes = sample_rate * frame_ms // 1000 * 2
        self._timeout = Timeout.of(timeout)
        self._retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        self._dialer = Dialer(
            who=self._server,
            owner=self._name,
            headers=headers,
            timeout=self._timeout.connect,
            close_timeout=CLOSE_TIMEOUT,
            policy=self._retry,
            http_session=http_session,
            error=TTSError,
            transient=Transient,
            log=self._log,
            max_msg_size=_MAX_MESSAGE_BYTES,
            explanations=explanations,
        )
        self.retries = 0
        """How many times a stream was tried again, over all streams."""

    def __repr__(self) -> str:
        return f"{self._name}(voice_id={self.voice_id!r}, model={self.model!r})"

    def _whole(self, text: str) -> TTSStream:
        """A stream of ``text``, known whole, its input ended."""
        raise NotImplementedError

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        if not text.strip():
            return
        stream = self._whole(text)
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()

    async def aclose(self) -> None:
        """Close the HTTP session this engine created (one passed in is left open)."""
        await self._dialer.aclose()


class PumpedStream(TTSStream):
    """A TTS stream run by a pump task; see the module docstring. A provider implements
    ``_attempt`` (one try: send the text so far and what comes, read, ``_put`` what is
    heard), reading through ``_receive`` so the read limit applies, and calls
    ``_input_ended`` from its ``end_input``."""

    def __init__(self, engine: WebSocketTTS) -> None:
        self._engine = engine
        self._input_done = False
        self._wake = asyncio.Event()
        self._items: asyncio.Queue[AudioFrame | WordTiming | TTSError | None] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._iterated = False
        self._delivered = False
        self._read_deadline: asyncio.Timeout | None = None

    async def _attempt(self) -> None:
        raise NotImplementedError

    def _input_ended(self) -> None:
        """The input is complete: wake the sender, and start the read limit."""
        self._input_done = True
        self._wake.set()
        read = self._engine._timeout.read
        if self._read_deadline is not None and read is not None:
            self._read_deadline.reschedule(asyncio.get_running_loop().time() + read)

    async def __aiter__(self) -> AsyncIterator[AudioFrame | WordTiming]:
        if self._iterated:
            raise RuntimeError("a TTS stream can be iterated once")
        self._iterated = True
        self._pump = asyncio.ensure_future(self._run())
        while (item := await self._items.get()) is not None:
            if isinstance(item, TTSError):
                raise item
            yield item

    async def aclose(self) -> None:
        self._input_done = True
        pump, self._pump = self._pump, None
        if pump is not None and not pump.done():
            pump.cancel()
            # Bounded: what the pump does when cancelled waits at most close_timeout.
            await asyncio.wait({pump}, timeout=2 * CLOSE_TIMEOUT)

    async def _run(self) -> None:
        engine = self._engine

        def counted() -> None:
            engine.retries += 1

        try:
            await with_retries(
                self._attempt,
                engine._retry,
                error=TTSError,
                what=engine._name,
                log=engine._log,
                on_retry=counted,
                # Once audio was heard, a new try would repeat it.
                may_retry=lambda: not self._delivered,
            )
        except TTSError as error:
            self._items.put_nowait(error)
        except Exception as exc:  # a bug must end the stream, not hang it
            engine._log.exception("%s stream failed", engine._name)
            self._items.put_nowait(TTSError(f"{engine._name} failed: {exc!r}"))
        self._items.put_nowait(None)

    async def _receive(
        self, get: Callable[[], Awaitable[M]], on_silence: Callable[[str], None] | None = None
    ) -> M:
        """``await get()``, bounded by the read limit once the input ended (``end_input``
        during the wait starts it too). A silent server fails the stream (retryable);
        ``on_silence`` is told first."""
        read = self._engine._timeout.read
        deadline = None
        if self._input_done and read is not None:
            deadline = asyncio.get_running_loop().time() + read
        try:
            async with asyncio.timeout_at(deadline) as self._read_deadline:
                return await get()
        except TimeoutError:
            silent = f"no audio from {self._engine._server} for {read}s"
            if on_silence is not None:
                on_silence(silent)
            raise TTSError(silent, retryable=True) from None
        finally:
            self._read_deadline = None

    def _put(self, item: AudioFrame | WordTiming) -> None:
        self._delivered = True  # the caller has it: a new try would repeat it
        self._items.put_nowait(item)
