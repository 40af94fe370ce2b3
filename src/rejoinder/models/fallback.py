"""Fallback adapters: ordered LLMs, STTs or TTSs behind one interface.

A request goes to the first available LLM. One that fails *before producing anything* is
marked unavailable and the next one takes the same request, so the user notices nothing
but latency. A failure *after* output was produced is not retried elsewhere: the user
already heard the beginning, and starting over would repeat it, so the error ends the
reply (the session keeps what was heard). The same rules hold for TTS (a voice that failed
mid-sentence is not restarted on another voice: the sentence ends there) and STT (an
utterance is recognized by the next recognizer when one fails). When every instance is
marked unavailable, a request still tries them all, in order, rather than fail untried.

How an unavailable instance comes back:

- ``probe=True`` (the default): a background task probes it ``probe_interval`` seconds
  (default: ``retry_after``) after the failure, then again with exponential backoff (up
  to 8 × ``probe_interval``) until a probe succeeds; until then no request is sent to it
  (unless every instance is down). A probe is a real, minimal request and costs like one:
  a one-message chat ("ping", no tools) whose first chunk is read before the stream is
  closed; the synthesis of "ok" up to its first frame; the recognition of 0.5 s of
  silence. Each probe is bounded by ``probe_timeout``. Pass your own ``probe`` (an async
  function of the instance that raises when it is unusable) for a cheaper health check.
  Probe tasks belong to the adapter: ``aclose()`` cancels and awaits them, and failures
  after ``aclose()`` fall back to the lazy retry below.
- ``probe=False``: nothing runs in the background. The first request after
  ``retry_after`` seconds tries the instance again (a "half-open" circuit breaker), so a
  request pays for finding out that it is still down.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Generic, TypeVar

from .chat import ChatContext
from .llm import LLM, ChatChunk, LLMError, StreamInfo, ToolChoice
from .metrics import label_of
from .stt import STT, STTError, Transcript
from .tools import ToolDefinition
from .tts import TTS, TTSError, WordTiming

if TYPE_CHECKING:
    from .audio import AudioFrame

M = TypeVar("M")

logger = logging.getLogger("rejoinder")

MAX_BACKOFF = 8.0
"""Probe intervals grow up to this multiple of ``probe_interval``."""


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


class _Breaker(Generic[M]):
    """Which instances are down, and how they come back.

    With a ``probe``, ``down`` starts one background task per failed instance (in the
    running loop) that probes it until it works again; the instance stays unavailable
    while that task lives. Without one (or once the task is gone: ``aclose``, another
    loop), an instance is available again ``retry_after`` seconds after its last failure.
    """

    def __init__(
        self,
        instances: Sequence[M],
        retry_after: float,
        what: str,
        *,
        probe: Callable[[M], Awaitable[None]] | None = None,
        probe_interval: float | None = None,
        probe_timeout: float = 10.0,
    ) -> None:
        if not instances:
            raise ValueError(f"a fallback needs at least one {what}")
        if not retry_after > 0:
            raise ValueError("retry_after must be positive")
        self.instances = list(instances)
        self.retry_after = retry_after
        self.what = what
        self.probe = probe
        self.probe_interval = _positive(
            "probe_interval", retry_after if probe_interval is None else probe_interval
        )
        self.probe_timeout = _positive("probe_timeout", probe_timeout)
        self._down_until: dict[int, float] = {}
        self._probes: dict[int, asyncio.Task[None]] = {}
        """The probe task of each instance being probed."""
        self._tasks: set[asyncio.Task[None]] = set()
        """Every probe task not finished yet (one replaced by ``up`` may still be ending)."""
        self._closed = False

    def available(self, instance: M) -> bool:
        until = self._down_until.get(id(instance))
        if until is None:
            return True
        if self._probing(instance):
            return False  # its probe decides when it is back
        return asyncio.get_running_loop().time() >= until

    def probing(self, instance: M) -> bool:
        """A background probe is watching ``instance`` (in this loop)."""
        return self._probing(instance)

    def _probing(self, instance: M) -> bool:
        task = self._probes.get(id(instance))
        return (
            task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop()
        )

    def candidates(self) -> list[M]:
        ready = [m for m in self.instances if self.available(m)]
        # With every one marked down, trying them all beats failing without a try.
        return ready or list(self.instances)

    def down(self, instance: M, error: Exception) -> None:
        loop = asyncio.get_running_loop()
        self._down_until[id(instance)] = loop.time() + self.retry_after
        if self.probe is None or self._closed:
            logger.warning(
                "%s %r failed (%s); unavailable for %.0f s, trying the next one",
                self.what,
                instance,
                error,
                self.retry_after,
            )
            return
        if self._probing(instance):
            logger.warning(
                "%s %r failed again (%s); still unavailable until a probe succeeds",
                self.what,
                instance,
                error,
            )
            return
        # Tasks of a loop that is gone can neither run nor be awaited: forget them.
        self._tasks = {t for t in self._tasks if not t.get_loop().is_closed()}
        task = loop.create_task(
            self._probe_until_up(instance), name=f"rejoinder: probe {self.what} {instance!r}"
        )
        self._probes[id(instance)] = task
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        logger.warning(
            "%s %r failed (%s); unavailable until a probe succeeds (first in %.0f s), "
            "trying the next one",
            self.what,
            instance,
            error,
            self.probe_interval,
        )

    def up(self, instance: M) -> None:
        """``instance`` just worked (a request succeeded on it): it is available again."""
        self._down_until.pop(id(instance), None)
        task = self._probes.pop(id(instance), None)
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()  # stays in _tasks until it has ended, for aclose to await

    async def _probe_until_up(self, instance: M) -> None:
        assert self.probe is not None
        delay = self.probe_interval
        while True:
            await asyncio.sleep(delay)
            try:
                async with asyncio.timeout(self.probe_timeout):
                    await self.probe(instance)
            except Exception as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # The probe turned our cancellation into an error: still cancelled.
                    raise asyncio.CancelledError from exc
                delay = min(delay * 2, self.probe_interval * MAX_BACKOFF)
                logger.info(
                    "%s %r: probe failed (%s); next probe in %.0f s",
                    self.what,
                    instance,
                    _describe(exc),
                    delay,
                )
                continue
            break
        self._down_until.pop(id(instance), None)
        if self._probes.get(id(instance)) is asyncio.current_task():
            del self._probes[id(instance)]
        logger.info("%s %r is back: a probe succeeded", self.what, instance)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        for key, probe in list(self._probes.items()):
            if probe is task:
                del self._probes[key]
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Not an ordinary probe failure (those are retried): the lazy retry takes over.
            logger.error("%s probe task died", self.what, exc_info=exc)

    async def aclose(self) -> None:
        """Cancel the probes and wait for them to end. Idempotent; later failures are
        retried lazily (no task is started any more)."""
        self._closed = True
        loop = asyncio.get_running_loop()
        while mine := [t for t in self._tasks if t.get_loop() is loop and not t.done()]:
            for task in mine:
                task.cancel()
            await asyncio.gather(*mine, return_exceptions=True)
        self._probes.clear()
        self._tasks = {t for t in self._tasks if not t.done() and not t.get_loop().is_closed()}


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return str(exc) or type(exc).__name__


def _probe_fn(
    option: bool | Callable[[M], Awaitable[None]], default: Callable[[M], Awaitable[None]]
) -> Callable[[M], Awaitable[None]] | None:
    if option is True:
        return default
    if option is False:
        return None
    if not callable(option):
        raise TypeError(f"probe must be a bool or an async function, got {option!r}")
    return option


async def probe_llm(llm: LLM) -> None:
    """The default LLM probe: a one-message chat whose first chunk is read, then closed."""
    chat_ctx = ChatContext()
    chat_ctx.add_message(role="user", content="ping")
    async with aclosing(llm.chat(chat_ctx, (), "none")) as stream:  # type: ignore[type-var]
        async for _ in stream:
            break


async def probe_tts(voice: TTS) -> None:
    """The default TTS probe: synthesize "ok" up to its first frame."""
    from .audio import AudioFrame

    async with aclosing(voice.synthesize("ok")) as stream:  # type: ignore[type-var]
        async for item in stream:
            if isinstance(item, AudioFrame):
                break


async def probe_stt(stt: STT) -> None:
    """The default STT probe: recognize 0.5 s of silence at 16 kHz."""
    from .audio import AudioFrame

    await stt.recognize([AudioFrame.silence(0.5, 16000)])


class FallbackLLM(LLM):
    """LLMs in order; see the module docstring for when the next one is used and how a
    failed one comes back (``probe``, ``probe_interval``, ``probe_timeout``,
    ``retry_after``)."""

    def __init__(
        self,
        llms: Sequence[LLM],
        *,
        retry_after: float = 30.0,
        probe: bool | Callable[[LLM], Awaitable[None]] = True,
        probe_interval: float | None = None,
        probe_timeout: float = 10.0,
    ) -> None:
        self._breaker = _Breaker(
            llms,
            retry_after,
            "LLM",
            probe=_probe_fn(probe, probe_llm),
            probe_interval=probe_interval,
            probe_timeout=probe_timeout,
        )
        self.llms = self._breaker.instances

    @property
    def model(self) -> str:
        return "fallback(" + ", ".join(llm.model for llm in self.llms) + ")"

    @property
    def provider(self) -> str:
        return "fallback"

    def available(self, llm: LLM) -> bool:
        return self._breaker.available(llm)

    def probing(self, llm: LLM) -> bool:
        """A background probe is watching ``llm`` (it failed and has not worked since)."""
        return self._breaker.probing(llm)

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        return self._stream(chat_ctx, tools, tool_choice)

    async def _stream(
        self, chat_ctx: ChatContext, tools: Sequence[ToolDefinition], tool_choice: ToolChoice
    ) -> AsyncIterator[ChatChunk]:
        failures: list[str] = []
        failed_first: str | None = None
        retryable = False
        for llm in self._breaker.candidates():
            produced = False
            try:
                async with aclosing(llm.chat(chat_ctx, tools, tool_choice)) as stream:  # type: ignore[type-var]
                    async for chunk in stream:
                        if not produced:
                            produced = True
                            # Metrics name the model that served, and the one that failed.
                            yield _served_by(llm, chunk, failed_first)
                            continue
                        yield chunk
            except LLMError as exc:
                if produced:
                    raise  # already heard in part: end the reply, do not repeat it
                self._breaker.down(llm, exc)
                failures.append(f"{llm.model}: {exc}")
                failed_first = failed_first or llm.model
                retryable = retryable or exc.retryable
                continue
            self._breaker.up(llm)
            return
        raise LLMError("every LLM failed: " + "; ".join(failures), retryable=retryable)

    async def aclose(self) -> None:
        """Stop the probes, then close every LLM."""
        await self._breaker.aclose()
        for llm in self.llms:
            await llm.aclose()


def _served_by(llm: LLM, chunk: ChatChunk, fallback_from: str | None) -> ChatChunk:
    """``chunk`` (a stream's first) with its ``info`` naming ``llm`` and, after a
    failure, the model that failed first."""
    info = chunk.info or StreamInfo(model=llm.model, provider=llm.provider, label=label_of(llm))
    if fallback_from is not None:
        info = replace(info, fallback_from=fallback_from)
    return replace(chunk, info=info)


class FallbackTTS(TTS):
    """Voices in order. All must produce the same sample rate and channel count (the
    session resamples to the output, but a mid-reply voice switch should not change it).
    See the module docstring for how a failed voice comes back."""

    def __init__(
        self,
        voices: Sequence[TTS],
        *,
        retry_after: float = 30.0,
        probe: bool | Callable[[TTS], Awaitable[None]] = True,
        probe_interval: float | None = None,
        probe_timeout: float = 10.0,
    ) -> None:
        self._breaker = _Breaker(
            voices,
            retry_after,
            "TTS",
            probe=_probe_fn(probe, probe_tts),
            probe_interval=probe_interval,
            probe_timeout=probe_timeout,
        )
        first = self._breaker.instances[0]
        if any(
            (v.sample_rate, v.num_channels) != (first.sample_rate, first.num_channels)
            for v in self._breaker.instances
        ):
            raise ValueError("FallbackTTS voices must share sample rate and channel count")
        super().__init__(sample_rate=first.sample_rate, num_channels=first.num_channels)

    def available(self, voice: TTS) -> bool:
        return self._breaker.available(voice)

    def probing(self, voice: TTS) -> bool:
        return self._breaker.probing(voice)

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        failures: list[str] = []
        for voice in self._breaker.candidates():
            produced = False
            try:
                async with aclosing(voice.synthesize(text)) as stream:  # type: ignore[type-var]
                    async for item in stream:
                        produced = True
                        yield item
            except TTSError as exc:
                self._breaker.down(voice, exc)
                if produced:
                    raise  # part of the sentence was already captured: do not repeat it
                failures.append(f"{voice!r}: {exc}")
                continue
            self._breaker.up(voice)
            return
        raise TTSError("every TTS failed: " + "; ".join(failures))

    async def aclose(self) -> None:
        """Stop the probes, then close every voice."""
        await self._breaker.aclose()
        for voice in self._breaker.instances:
            await voice.aclose()


class FallbackSTT(STT):
    """Recognizers in order: an utterance one cannot transcribe goes to the next. See the
    module docstring for how a failed recognizer comes back."""

    def __init__(
        self,
        recognizers: Sequence[STT],
        *,
        retry_after: float = 30.0,
        probe: bool | Callable[[STT], Awaitable[None]] = True,
        probe_interval: float | None = None,
        probe_timeout: float = 10.0,
    ) -> None:
        self._breaker = _Breaker(
            recognizers,
            retry_after,
            "STT",
            probe=_probe_fn(probe, probe_stt),
            probe_interval=probe_interval,
            probe_timeout=probe_timeout,
        )

    def available(self, stt: STT) -> bool:
        return self._breaker.available(stt)

    def probing(self, stt: STT) -> bool:
        return self._breaker.probing(stt)

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        failures: list[str] = []
        for stt in self._breaker.candidates():
            try:
                transcript = await stt.transcribe(frames)
            except STTError as exc:
                self._breaker.down(stt, exc)
                failures.append(f"{stt!r}: {exc}")
                continue
            self._breaker.up(stt)
            return transcript
        raise STTError("every STT failed: " + "; ".join(failures))

    async def transcribe_so_far(self, frames: Sequence[AudioFrame]) -> Transcript:
        """The first available recognizer's pass over the words so far. A failure here
        marks nothing down: the whole utterance's ``transcribe`` decides that."""
        return await self._breaker.candidates()[0].transcribe_so_far(frames)

    async def aclose(self) -> None:
        """Stop the probes, then close every recognizer."""
        await self._breaker.aclose()
        for stt in self._breaker.instances:
            await stt.aclose()
