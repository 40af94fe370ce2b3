"""What the streaming TTS providers over a WebSocket (ElevenLabs, Cartesia) decide alike
about a stream, in one place:

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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ..models.tts import TTSError, TTSStream, WordTiming
from . import _json
from ._retry import RetryPolicy
from ._ws import FATAL_CLOSE_CODES, TryAgain, with_retries

if TYPE_CHECKING:
    from ..models.audio import AudioFrame

__all__ = ["PumpedStream", "Transient", "close_failure", "parse_message"]

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


class _Engine(Protocol):
    retries: int
    """How many times a stream was tried again, over all its streams."""


class PumpedStream(TTSStream):
    """A TTS stream run by a pump task; see the module docstring. A provider implements
    ``_attempt`` (one try: send the text so far and what comes, read, ``_put`` what is
    heard), reading through ``_receive`` so the read limit applies, and calls
    ``_input_ended`` from its ``end_input``."""

    _name: ClassVar[str]
    """``elevenlabs.TTS``: in messages and log lines."""
    _server: ClassVar[str]
    """``ElevenLabs``: the server, in messages."""
    _log: ClassVar[logging.Logger]

    def __init__(
        self,
        engine: _Engine,
        *,
        policy: RetryPolicy,
        read_timeout: float | None,
        close_timeout: float,
    ) -> None:
        self._engine = engine
        self._policy = policy
        self._read_timeout = read_timeout
        self._close_timeout = close_timeout
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
        if self._read_deadline is not None and self._read_timeout is not None:
            loop = asyncio.get_running_loop()
            self._read_deadline.reschedule(loop.time() + self._read_timeout)

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
            await asyncio.wait({pump}, timeout=2 * self._close_timeout)

    async def _run(self) -> None:
        def counted() -> None:
            self._engine.retries += 1

        try:
            await with_retries(
                self._attempt,
                self._policy,
                error=TTSError,
                what=self._name,
                log=self._log,
                on_retry=counted,
                # Once audio was heard, a new try would repeat it.
                may_retry=lambda: not self._delivered,
            )
        except TTSError as error:
            self._items.put_nowait(error)
        except Exception as exc:  # a bug must end the stream, not hang it
            self._log.exception("%s stream failed", self._name)
            self._items.put_nowait(TTSError(f"{self._name} failed: {exc!r}"))
        self._items.put_nowait(None)

    async def _receive(
        self, get: Callable[[], Awaitable[M]], on_silence: Callable[[str], None] | None = None
    ) -> M:
        """``await get()``, bounded by the read limit once the input ended (``end_input``
        during the wait starts it too). A silent server fails the stream (retryable);
        ``on_silence`` is told first."""
        read = self._read_timeout
        deadline = None
        if self._input_done and read is not None:
            deadline = asyncio.get_running_loop().time() + read
        try:
            async with asyncio.timeout_at(deadline) as self._read_deadline:
                return await get()
        except TimeoutError:
            silent = f"no audio from {self._server} for {read}s"
            if on_silence is not None:
                on_silence(silent)
            raise TTSError(silent, retryable=True) from None
        finally:
            self._read_deadline = None

    def _put(self, item: AudioFrame | WordTiming) -> None:
        self._delivered = True  # the caller has it: a new try would repeat it
        self._items.put_nowait(item)
