"""Plays a realtime provider's agent audio, one stretch ("burst") at a time.

A provider delivers audio faster than it plays (frames may arrive all at once), so each
burst is queued and played after the one before it has finished. ``speaking`` comes from
the output's playback-started report, and a burst's ``reply`` obligation closes on its
playback-finished report, exactly as for pipeline speech.

Without an audio output, a burst counts as audible from its first to its last frame
(the provider's own timing): there is nothing else to go by.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..floor import Obligation
from .turn_state import TurnState

if TYPE_CHECKING:  # numpy and soxr load on first audio, not with the session
    from ..models.audio import AudioFrame, AudioOutput, PlaybackFinished
    from ..models.audio_utils import Resampler


@dataclass(eq=False)
class Burst:
    reply: Obligation
    seq: int = 0
    order: int = 0
    """When it began among everything said (see ``RealtimeRecord``)."""
    connection: int = 0
    """Which provider connection produced it (the session counts reconnects)."""
    anchor: tuple[object | None, object | None] = (None, None)
    """The last history / agent-context items when it began: its message goes after them."""
    text: list[str] = field(default_factory=list)
    span_end_ms: int | None = None
    """End of its transcript on the provider's timeline, when fragments carry one."""
    captured: float = 0.0
    ended: bool = False
    cut: bool = False
    frames: asyncio.Queue[AudioFrame | None] = field(default_factory=asyncio.Queue)
    played: asyncio.Future[PlaybackFinished] | None = None


def _finished_event(position: float, interrupted: bool) -> PlaybackFinished:
    from ..models.audio import PlaybackFinished

    return PlaybackFinished(position, interrupted)


class RealtimePlayout:
    def __init__(
        self,
        state: TurnState,
        output: AudioOutput | None,
        *,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        started: Callable[[Burst], None],
        finished: Callable[[Burst, PlaybackFinished], None],
    ) -> None:
        self._state = state
        self._output = output
        self._started = started
        self._finished = finished
        self._receiving: Burst | None = None
        """The burst whose frames are arriving now."""
        self._playing: Burst | None = None
        self._queue: deque[Burst] = deque()
        self._wakeup = asyncio.Event()
        self._resampler: Resampler | None = None
        self._seq = 0
        if output is not None:
            output.set_listener(self._playback_started, self._playback_finished)
            spawn(self._play_forever())

    @property
    def receiving(self) -> Burst | None:
        return self._receiving

    @property
    def audible(self) -> bool:
        """Agent audio is playing, or arriving to be played."""
        return self._playing is not None or self._receiving is not None

    @property
    def idle(self) -> bool:
        return not self.audible and not self._queue

    def begin(self, reply: Obligation) -> Burst:
        """A burst starts; ``reply`` is already open on the floor."""
        self.end()  # a provider that never ended the previous one
        self._seq += 1
        burst = Burst(reply, seq=self._seq)
        self._receiving = burst
        if self._output is None:
            self._state.set_audible(reply, True)
            self._started(burst)
        else:
            self._queue.append(burst)
            self._wakeup.set()
        return burst

    def frame(self, frame: AudioFrame) -> None:
        burst = self._receiving
        if burst is None or burst.cut:
            return
        if self._output is None:
            burst.captured += frame.duration
        else:
            burst.frames.put_nowait(frame)

    def end(self) -> None:
        burst, self._receiving = self._receiving, None
        if burst is None or burst.ended:
            return
        burst.ended = True
        if self._output is None:
            self._finished(burst, _finished_event(burst.captured, burst.cut))
        else:
            burst.frames.put_nowait(None)

    def interrupt(self) -> None:
        """Barge-in: stop what is audible now and drop what waits to be played (it was
        generated for a turn the user just cut short)."""
        for queued in list(self._queue):
            self._drop(queued)
        self._queue.clear()
        playing = self._playing
        if playing is not None and self._output is not None:
            playing.cut = True
            self._output.clear_buffer()
        elif self._receiving is not None and self._output is None:
            self._receiving.cut = True
            self.end()

    def stop(self) -> None:
        """The session closes: what was heard so far is final, the rest is dropped."""
        self.interrupt()
        if self._receiving is not None:
            self._receiving.cut = True
            self.end()

    def _drop(self, burst: Burst) -> None:
        """A queued burst that will never play: it ends unheard."""
        burst.cut = True
        if self._receiving is burst:
            self._receiving = None
        self._finished(burst, _finished_event(0.0, True))

    # ------------------------------------------------------------------ playing

    async def _play_forever(self) -> None:
        assert self._output is not None
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            burst = self._queue.popleft()
            burst.played = asyncio.get_running_loop().create_future()
            self._playing = burst
            try:
                await self._play(burst, self._output)
            finally:
                self._playing = None

    async def _play(self, burst: Burst, output: AudioOutput) -> None:
        assert burst.played is not None
        while (frame := await burst.frames.get()) is not None:
            if burst.cut:
                continue  # interrupted: drain what still arrives for it
            resampled = self._to_output_rate(frame, output)
            if resampled is not None:
                await self._capture(burst, output, resampled)
        if burst.cut:
            self._resampler = None
            return
        if self._resampler is not None:
            tail, self._resampler = self._resampler.flush(), None
            if tail is not None:
                await self._capture(burst, output, tail)
        if burst.captured <= 0:
            self._playing = None  # finished: the playout may be idle for the callback
            self._finished(burst, _finished_event(0.0, False))
            return
        output.flush()
        await asyncio.shield(burst.played)

    async def _capture(self, burst: Burst, output: AudioOutput, frame: AudioFrame) -> None:
        await output.capture_frame(frame)
        burst.captured += frame.duration

    def _to_output_rate(self, frame: AudioFrame, output: AudioOutput) -> AudioFrame | None:
        rate = output.sample_rate
        if rate is None or frame.sample_rate == rate:
            return frame
        if self._resampler is None:
            from ..models.audio_utils import Resampler

            self._resampler = Resampler(frame.sample_rate, rate, frame.num_channels)
        return self._resampler.push(frame)

    def _playback_started(self) -> None:
        if self._playing is not None:
            self._state.set_audible(self._playing.reply, True)
            self._started(self._playing)

    def _playback_finished(self, event: PlaybackFinished) -> None:
        burst = self._playing
        if burst is None or burst.played is None or burst.played.done():
            return
        burst.played.set_result(event)
        self._playing = None  # finished: the playout may be idle for the callback
        self._finished(burst, event)
