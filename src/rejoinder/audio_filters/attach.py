"""``filter_audio(session, filters)``: the session hears its microphone through filters.

    session = rj.AgentSession(...)
    rj.filter_audio(session, [WebRTCEchoCanceller(), RNNoiseSuppressor()])
    await conn.serve(session, agent)        # or session.start(agent)

Every transport (the WebSocket, WebRTC, phone media streams, SIP, your own ``AudioInput``)
fills ``session.input.audio`` and ``session.output.audio`` before the session starts, and
the session emits ``session_started`` just before its engine takes the microphone. That
is where the slots are wrapped, as the call recorder and the answering-machine detector
wrap them, with no hook in the session: the microphone becomes a ``FilteredAudioInput``
(each frame through the chain, before the VAD, the recognizer and a realtime model hear
it), and, when a filter wants the far end, the speaker an ``EchoTap`` that forwards every
call and report unchanged and lays what the listener hears on the microphone's clock
(``EchoReference``).

Frames are filtered on the event loop, one at a time, unless a filter ``runs_in_thread``
(RNNoise: about a millisecond per 20 ms frame, measured in bench/audio_filters.py); then
each frame is filtered in a worker thread of a small pool shared by the process while the
loop goes on (the engines release the GIL). The far end is taken on the loop first, so the
worker touches nothing the loop changes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..models.audio import AudioFrame, AudioInput, AudioOutput, PlaybackFinished
from .chain import FilterChain
from .reference import REFERENCE_LEAD, EchoReference

if TYPE_CHECKING:
    from .base import AudioFilter

__all__ = ["EchoTap", "FilteredAudioInput", "filter_audio"]


class _Slots(Protocol):
    audio: Any


class FilterableSession(Protocol):
    """What ``filter_audio`` uses of a session (``rj.AgentSession`` has it)."""

    @property
    def started(self) -> bool: ...

    @property
    def input(self) -> Any: ...

    @property
    def output(self) -> Any: ...

    def on(self, name: Any, callback: Any = None) -> Any: ...

    def off(self, name: Any, callback: Any) -> None: ...


_filtered: weakref.WeakKeyDictionary[Any, FilterChain] = weakref.WeakKeyDictionary()
"""Each session whose audio is filtered, and its chain (weakly: never kept alive)."""


def filter_audio(
    session: FilterableSession,
    filters: Sequence[AudioFilter],
    *,
    reference_lead: float = REFERENCE_LEAD,
    in_thread: bool | None = None,
) -> FilterChain:
    """Filter ``session``'s microphone through ``filters``, in order, from its start on
    (call it before ``session.start()`` or ``conn.serve()``; once per session). Returns
    the chain: its ``cpu_seconds``, ``audio_seconds`` and ``failures``.

    ``reference_lead``: where the far end's playhead goes back to (seconds into a
    segment) when the output reports the segment audible long after it took it (it
    buffered ahead; ``EchoReference``). ``in_thread``: run the chain in a worker thread
    (default: when one of the filters ``runs_in_thread``; ``False`` keeps it on the loop, as a
    virtual-time test or benchmark needs)."""
    if session.started:
        raise RuntimeError("filter_audio() must come before the session starts")
    if session in _filtered:
        raise RuntimeError("this session's audio is filtered already: pass every filter at once")
    chain = FilterChain(filters)  # checks them: TypeError, ValueError here, not at start
    reference = EchoReference(lead=reference_lead) if chain.uses_reference else None
    threaded = chain.runs_in_thread if in_thread is None else bool(in_thread)

    def wrap(_event: object) -> None:
        session.off("session_started", wrap)
        microphone = session.input.audio
        if isinstance(microphone, AudioInput):
            session.input.audio = FilteredAudioInput(
                microphone, chain, reference=reference, in_thread=threaded
            )
        speaker = session.output.audio
        if reference is not None and isinstance(speaker, AudioOutput):
            session.output.audio = EchoTap(speaker, reference)

    session.on("session_started", wrap)
    _filtered[session] = chain
    return chain


class _Wrapper:
    inner: Any

    def __getattr__(self, name: str) -> Any:  # what the wrapper lacks, the inner has
        inner = vars(self).get("inner")
        if inner is None:  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(inner, name)


_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _filter_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process's filter threads: as many as cores (the work is CPU in native code),
    shared by every session."""
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=os.cpu_count() or 2, thread_name_prefix="rejoinder-audio-filter"
        )
    return _pool


class FilteredAudioInput(_Wrapper, AudioInput):
    """``inner``'s frames through ``chain``, in order; the transport's own members
    (``sample_rate``, ``push``...) are the inner's."""

    def __init__(
        self,
        inner: AudioInput,
        chain: FilterChain,
        *,
        reference: EchoReference | None = None,
        in_thread: bool = False,
    ) -> None:
        self.inner = inner
        self.chain = chain
        self.reference = reference
        self.in_thread = in_thread

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        chain, reference = self.chain, self.reference
        loop = asyncio.get_running_loop()
        async for frame in self.inner:
            far = None
            if reference is not None and frame.num_channels == 1:
                far = reference.take(frame.samples_per_channel, frame.sample_rate)
            if self.in_thread:
                yield await loop.run_in_executor(_filter_pool(), chain.process, frame, far)
            else:
                yield chain.process(frame, far)


class EchoTap(_Wrapper, AudioOutput):
    """``inner``, forwarded call for call and report for report; what it takes and what
    it reports also go to ``reference``. Each listener the session sets reaches the
    inner output wrapped, so a late report still goes to the speech it belongs to."""

    def __init__(self, inner: AudioOutput, reference: EchoReference) -> None:
        super().__init__(sample_rate=inner.sample_rate, can_pause=inner.can_pause)
        self.inner = inner
        self.reference = reference

    def set_listener(
        self,
        started: Callable[[], None] | None,
        finished: Callable[[PlaybackFinished], None] | None,
    ) -> None:
        super().set_listener(started, finished)
        reference = self.reference

        def on_started() -> None:
            reference.started()
            if started is not None:
                started()

        def on_finished(report: PlaybackFinished) -> None:
            reference.finished()
            if finished is not None:
                finished(report)

        self.inner.set_listener(on_started, on_finished)

    @property
    def sample_rate(self) -> int | None:
        # The transport may change its rate before the first reply (the TTS's rate).
        rate: int | None = self.inner.sample_rate
        return rate

    @sample_rate.setter
    def sample_rate(self, value: int | None) -> None:
        if "inner" in vars(self):
            self.inner.sample_rate = value

    async def capture_frame(self, frame: AudioFrame) -> None:
        # Before the inner takes it: an output may report the segment started from
        # inside capture_frame, and the reference must have its audio by then.
        kept = self.reference.captured(frame)
        try:
            await self.inner.capture_frame(frame)
        except BaseException:
            if kept:
                self.reference.uncaptured()
            raise

    def flush(self) -> None:
        self.reference.flushed()
        self.inner.flush()

    def clear_buffer(self) -> None:
        self.inner.clear_buffer()
        self.reference.cleared()

    def pause(self) -> None:
        self.inner.pause()
        self.reference.paused()

    def resume(self) -> None:
        self.inner.resume()
        self.reference.resumed()
