"""Plays a realtime provider's agent audio, one stretch ("burst") at a time.

A provider delivers audio faster than it plays (frames may arrive all at once), so each
burst is queued and played after the one before it has finished. ``speaking`` comes from
the output's playback-started report, and a burst's ``reply`` obligation closes on its
playback-finished report, exactly as for pipeline speech.

A burst may pause (``AgentAudioPaused``: silence that may or may not end the utterance).
What was captured so far is then flushed as one output segment: once it has played the
agent is no longer audible, but the burst's reply stays open (the agent reports
``thinking``, never ``listening``) until the burst resumes in a new segment or ends.

Without an audio output, a burst counts as audible from its first to its last frame
(the provider's own timing): there is nothing else to go by.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ...floor import Obligation
from ..turn_state import TurnState

if TYPE_CHECKING:  # numpy and soxr load on first audio, not with the session
    from ...models.audio import AudioFrame, AudioOutput, PlaybackFinished
    from ...models.audio_utils import Resampler


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
    heard: float = 0.0
    """Seconds of its finished output segments that were played."""
    ended: bool = False
    cut: bool = False
    done: bool = False
    shown: bool = False
    pending_frames: int = 0
    frames: asyncio.Queue[AudioFrame | object | None] = field(default_factory=asyncio.Queue)
    segment: asyncio.Future[None] | None = None
    """The output segment being played, resolved by its playback-finished report."""


_PAUSE = object()
"""Queued after a burst's frames when it pauses: flush what was captured."""


def _finished_event(position: float, interrupted: bool) -> PlaybackFinished:
    from ...models.audio import PlaybackFinished

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
            self._heard(reply)
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
            burst.pending_frames += 1
            burst.frames.put_nowait(frame)

    def pause(self) -> None:
        burst = self._receiving
        if burst is None or burst.cut:
            return
        if self._output is not None:
            burst.frames.put_nowait(_PAUSE)
        # Without an output, a pause is ignored: frames carry no playback time, and a
        # pause and an end that arrive together would show a 0 ms "thinking".

    def end(self) -> None:
        burst, self._receiving = self._receiving, None
        if burst is None or burst.ended:
            return
        burst.ended = True
        if self._output is None:
            self._finish(burst, _finished_event(burst.captured, burst.cut))
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
            if playing.segment is not None and not playing.segment.done():
                self._output.clear_buffer()  # reports finished: interrupted
            else:  # between segments: nothing is audible to cut
                self._finish(playing, _finished_event(playing.heard, True))
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
        self._finish(burst, _finished_event(0.0, True))

    def _finish(self, burst: Burst, event: PlaybackFinished) -> None:
        if burst.done:
            return
        burst.done = True
        if self._playing is burst:
            self._playing = None  # finished: the playout may be idle for the callback
        self._finished(burst, event)

    # ------------------------------------------------------------------ playing

    async def _play_forever(self) -> None:
        assert self._output is not None
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            burst = self._queue.popleft()
            self._playing = burst
            try:
                await self._play(burst, self._output)
            finally:
                self._playing = None

    async def _play(self, burst: Burst, output: AudioOutput) -> None:
        segment = 0.0
        while (item := await burst.frames.get()) is not None:
            if item is _PAUSE:
                if not burst.cut:
                    segment += await self._flush_resampler(burst, output)
                    if segment > 0:
                        await self._end_segment(burst, output)
                        segment = 0.0
                continue
            burst.pending_frames -= 1
            if burst.cut:
                continue  # interrupted: drain what still arrives for it
            resampled = self._to_output_rate(cast("AudioFrame", item), output)
            if resampled is not None:
                segment += await self._capture(burst, output, resampled)
        if burst.cut or burst.done:
            self._resampler = None
            return
        segment += await self._flush_resampler(burst, output)
        if segment > 0:
            await self._end_segment(burst, output)
        self._finish(burst, _finished_event(burst.heard, False))

    async def _flush_resampler(self, burst: Burst, output: AudioOutput) -> float:
        """The resampler's held-back tail belongs to the audio before a pause or end."""
        if self._resampler is None:
            return 0.0
        tail, self._resampler = self._resampler.flush(), None
        return 0.0 if tail is None else await self._capture(burst, output, tail)

    async def _capture(self, burst: Burst, output: AudioOutput, frame: AudioFrame) -> float:
        if burst.segment is None or burst.segment.done():
            burst.segment = asyncio.get_running_loop().create_future()
        await output.capture_frame(frame)
        burst.captured += frame.duration
        return frame.duration

    async def _end_segment(self, burst: Burst, output: AudioOutput) -> None:
        assert burst.segment is not None
        output.flush()
        await asyncio.shield(burst.segment)

    def _to_output_rate(self, frame: AudioFrame, output: AudioOutput) -> AudioFrame | None:
        rate = output.sample_rate
        if rate is None or frame.sample_rate == rate:
            return frame
        if self._resampler is None:
            from ...models.audio_utils import Resampler

            self._resampler = Resampler(frame.sample_rate, rate, frame.num_channels)
        return self._resampler.push(frame)

    def _playback_started(self) -> None:
        burst = self._playing
        if burst is None:
            return
        self._heard(burst.reply)
        if not burst.shown:
            burst.shown = True
            self._started(burst)

    def _heard(self, reply: Obligation) -> None:
        self._state.set_audible(reply, True)
        if not reply.committed:
            # Once heard, the rest of the utterance is owed (a pause is not the end).
            self._state.set_committed(reply, True)

    def _playback_finished(self, event: PlaybackFinished) -> None:
        burst = self._playing
        if burst is None or burst.done:
            return
        burst.heard += event.position
        if burst.segment is not None and not burst.segment.done():
            burst.segment.set_result(None)
        if event.interrupted:
            self._finish(burst, _finished_event(burst.heard, True))
        elif burst.ended and burst.pending_frames == 0:
            # The last segment: the reply closes in the same step (no 0 ms "thinking").
            self._finish(burst, _finished_event(burst.heard, False))
        else:
            # Paused: nothing audible now, but the burst may go on; still owed.
            self._state.set_audible(burst.reply, False)
