"""ReportedPlayback: an ``AudioOutput`` whose truth comes from the far end.

The server cannot hear the client's speaker. It sends agent audio out as fast as the
transport takes it and counts the samples it sent; the client reports, at least every
100 ms while it plays, how many agent samples it has played in total (``played``). A
segment (one reply's audio) *started* once the reported count passes its first sample,
and *finished* once it reaches its last: ``speaking`` follows the listener, not the
socket.

Barge-in: ``clear_buffer`` tells the client to drop what it has queued (the transport's
``send_clear``) and reports the segment finished at once, interrupted, at the position of
the last report (what the history keeps as heard; the listener may have heard a little
more, never less). Until the client's ``cleared`` report says where it stopped, the
mapping between samples sent and samples played is unknown; reports in between are
stale and ignored, and audio sent meanwhile is placed after that position.

The server never waits on a client forever (a client is code someone else wrote):

* a client that does not answer ``clear`` with ``cleared: true``: once ``CLEARED_WAIT``
  has passed since the clear, its next plain report says where it stopped (its count
  stops growing when it drops its queue). If the next reply's audio went out meanwhile,
  the client may already be playing it: as much of it as could have played since it was
  sent is taken off the report (but never below the last report before the clear), so
  the reply is heard from the right place, give or take the round trip to the client.
* a client that stops reporting while audio is outstanding: ``STALL_GRACE`` after that
  audio would have ended at the real-time pace, everything sent counts as played and
  what is sent next is paced on the server's clock (started as it is sent, finished when
  it would have played out). ``on_stall`` tells the transport once per stall; the first
  report that comes back ends the estimate. A client that stopped reporting because it
  was gone heard none of what the estimate added: when the transport sees the drop,
  ``detach`` cuts at the last report. (A reply whose end the estimate reached before the
  drop was seen counts as heard: the transports see a drop within a few seconds, see
  ``WebSocketOptions.heartbeat`` and ``WebRTCOptions.media_idle_timeout``.)

A client that drops and comes back (a resumed session, ``rejoinder.io.resume``): ``detach``
ends every segment the client held, interrupted where its last report left it (what it
had not reported hearing was not heard), and drops the rest of the audio of the speech
that was playing. What is captured afterwards is held, never sent and never started (no
``speaking`` while nobody listens), up to ``MAX_HELD`` seconds (then the producer waits).
``attach`` hands the held audio to the next client, whose reports count from its own
zero.

Background audio (an ambient loop, a thinking sound) is never the agent's voice: mixed
under the voice's own frames, or sent between replies as positions of no segment
(``playback_background``).

Framework-free: both the WebSocket and the WebRTC transports use it, each with its own
``send_audio`` (a socket frame, a paced media track) and ``send_clear``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..models.audio import AudioFrame, AudioOutput, PlaybackFinished
from .playback_background import BackgroundGaps, BackgroundMixer

__all__ = ["ReportedPlayback"]

logger = logging.getLogger("rejoinder")

CLEARED_WAIT = 0.5
"""Seconds after a ``clear`` during which plain ``played`` reports count as sent before
the client processed it (a round trip and a report interval, with room to spare)."""

STALL_GRACE = 1.5
"""Seconds past the end of the outstanding audio (at the real-time pace from the last
report) that a client may stay silent before its playback is estimated. Over a second:
a browser throttles a background tab's timers to once a second."""

MAX_HELD = 60.0
"""Seconds of agent audio held for a client that is away (a detached session) before the
speech producing it is made to wait for the client's return."""


@dataclass(slots=True)
class _Segment:
    start: int
    """First sample, counted from the current clear epoch's base."""
    end: int
    """One past the last sample captured so far."""
    on_started: Callable[[], None] | None
    on_finished: Callable[[PlaybackFinished], None] | None
    flushed: bool = False
    started: bool = False


class ReportedPlayback(BackgroundGaps, AudioOutput):
    """Plays through ``send_audio`` and reports from the client's ``played`` counts.

    ``stall_grace``: see ``STALL_GRACE`` (``None``: a subclass that bounds silent
    clients its own way).

    ``send_audio(frame)`` hands one frame (mono, at ``sample_rate``) to the transport;
    awaiting it is the transport's backpressure. ``send_clear()`` must drop whatever
    audio the transport still holds and tell the client to clear; it must not raise.
    """

    def __init__(
        self,
        sample_rate: int,
        send_audio: Callable[[AudioFrame], Awaitable[None]],
        send_clear: Callable[[], None],
    ) -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        super().__init__(sample_rate=sample_rate, can_pause=False)
        self.stall_grace: float | None = STALL_GRACE
        self._send_audio = send_audio
        self._send_clear = send_clear
        self._segments: list[_Segment] = []
        self._sent = 0
        """Samples handed to ``send_audio`` since the last clear."""
        self._base: int | None = 0
        """The client's played count at which this epoch's sample 0 plays (None: a clear
        was sent and its ``cleared`` report has not arrived)."""
        self._pending_clears = 0
        self._played = 0
        """The last report, as the client's cumulative count."""
        self._closed = False
        self.total_sent = 0
        """Every sample handed to the transport, ever (for metrics and tests)."""
        self.on_progress: Callable[[float, float | None], None] | None = None
        """Called with each report that moves the segment being heard: seconds of it
        heard, and its whole length once it is complete (``None`` before)."""
        self.on_stall: Callable[[str], None] | None = None
        """Called (with a sentence saying why) when the client's reports stop and playback
        is estimated from here on, until a report comes back."""
        self._last_progress: tuple[int, int, bool] | None = None
        self._cleared_at: float | None = None
        """When the last clear was sent (for telling stale reports from a client that
        does not confirm clears)."""
        self._anchor: tuple[float, int] = (0.0, 0)
        """(time, position) of the last report that moved playback, or of the first
        outstanding sample's sending: the real-time pace is counted from there."""
        self._last_capture = 0.0
        self._stall_timer: asyncio.TimerHandle | None = None
        self._estimate: int | None = None
        """While the client is silent: samples of this epoch taken as played."""
        self._paced_until = 0.0
        """While estimating: when everything sent will have played out."""
        self._epoch_first_sent: float | None = None
        """When the first audio after an unconfirmed clear was sent."""
        self._detached = False
        """No client (it dropped and may come back): audio is held, nothing is heard."""
        self._held: deque[AudioFrame] = deque()
        """Captured audio not handed to a client yet (while detached, and until the next
        client has been given all of it)."""
        self._held_samples = 0
        self._room = asyncio.Event()
        self._room.set()
        self._handing: asyncio.Task[None] | None = None
        """Gives the held audio to the client that took over."""
        self._dropping: Callable[[PlaybackFinished], None] | None = None
        """The listener of the speech cut by a detach: the rest of its audio is dropped
        (until its segment ends or another speech takes the output)."""
        self.on_cut_over: Callable[[bool], None] | None = None
        """Called once the speech a detach cut has no more audio to give: True when its
        audio ended (all of its text was produced), False when it was stopped."""
        self.background: BackgroundMixer | None = None
        """Mixes background audio under the voice (set by ``BackgroundAudio``)."""

    # ---------------------------------------------------------------- reading

    @property
    def played_samples(self) -> int:
        """The client's last reported cumulative count."""
        return self._played

    @property
    def playing(self) -> bool:
        """A segment is audible now (started and not finished)."""
        return any(seg.started for seg in self._segments)

    @property
    def closed(self) -> bool:
        """The client is gone: nothing more can be heard."""
        return self._closed

    @property
    def pending(self) -> bool:
        """Some captured audio is not reported played yet."""
        return bool(self._segments)

    @property
    def detached(self) -> bool:
        """No client is connected: audio is held for the next one."""
        return self._detached

    @property
    def held_seconds(self) -> float:
        """Audio waiting for a client."""
        assert self.sample_rate is not None
        return self._held_samples / self.sample_rate

    # --------------------------------------------------------- AudioOutput

    async def capture_frame(self, frame: AudioFrame) -> None:
        if frame.sample_rate != self.sample_rate:
            raise ValueError(f"expected {self.sample_rate} Hz audio, got {frame.sample_rate} Hz")
        if frame.num_channels != 1:
            raise ValueError("the client protocol carries mono audio")
        if self._closed:
            return  # the client is gone: nothing can be heard
        if self._dropping is not None:
            if self._on_finished == self._dropping:
                return  # the rest of a speech cut when its client dropped
            self._cut_over(ended=False)  # another speech: that one stopped without a word
        if not self._segments:
            self.recall_background()  # the reply plays now, not after the ambient sent ahead
        if self.background is not None:
            frame = self.background.under_voice(frame)
        now = _now()
        if not self._segments:
            # Audio after a pause: the client's pace is counted from now.
            self._anchor = (now, self._sent)
        if self._base is None and self._epoch_first_sent is None:
            self._epoch_first_sent = now
        if not self._segments or self._segments[-1].flushed:
            # The listener is the one set for this segment (a speech takes the output's
            # reports with its first frame); earlier segments keep theirs.
            self._segments.append(
                _Segment(self._sent, self._sent, self._on_started, self._on_finished)
            )
        segment = self._segments[-1]
        samples = frame.samples_per_channel
        if samples == 0:
            return
        # Counted before the await: a report for it can only come after it was sent, and
        # a clear during the send must place it in the epoch it was sent in.
        self._sent += samples
        self.total_sent += samples
        segment.end = self._sent
        self._last_capture = now
        if self._detached:
            await self._hold(frame)
            return
        if self._estimate is not None:
            self._pace_estimate(now, samples)
        else:
            self._watch_stall()
        if self._held or self._handing is not None:
            await self._hold(frame)  # behind the audio held for this client
            return
        await self._after_background()
        await self._send_audio(frame)

    def flush(self) -> None:
        if self._dropping is not None:
            self._cut_over(ended=True)  # the cut speech's end: nothing of the rest plays
            return
        if self._segments and not self._segments[-1].flushed:
            segment = self._segments[-1]
            segment.flushed = True
            if segment.end == segment.start:  # no audio: never audible, nothing to report
                self._segments.pop()
            self._advance()

    def clear_buffer(self) -> None:
        if self._dropping is not None:
            self._cut_over(ended=False)
        self._drop_held()
        if not self._segments and not self._background_unheard():
            return  # everything sent was reported played: the client holds nothing
        if self._detached:
            # Nothing of it was sent or heard: no client to tell, no report to wait for.
            self._segments = []
            self._sent = 0
            return
        segments, self._segments = self._segments, []
        position = self._position()
        self._pending_clears += 1
        self._base = None
        self._sent = 0
        self._background_end = 0
        self._cleared_at = _now()
        self._epoch_first_sent = None
        if self._estimate is not None:
            self._estimate = 0  # the new epoch: nothing of it played yet
        self._cancel_stall()
        try:
            self._send_clear()
            if self.background is not None:
                self.background.cleared()
        finally:
            for segment in segments:
                if segment.started:
                    heard = 0 if position is None else min(segment.end, position) - segment.start
                    self._finish(segment, max(0, heard), interrupted=True)

    # -------------------------------------------------------- client reports

    def on_played(self, samples: int, *, cleared: bool = False) -> None:
        """A ``played`` report from the client (cumulative samples played)."""
        if cleared:
            if self._pending_clears == 0:
                return  # a cleared report for no clear: nothing to re-base
            self._pending_clears -= 1
            self._played = max(self._played, samples)
            if self._pending_clears == 0:
                self._base = samples
            self._heard_from_client()
            return
        if self._base is None:
            cleared_at = self._cleared_at
            if cleared_at is not None and _now() - cleared_at < CLEARED_WAIT:
                return  # stale: sent before the client processed our clear
            # A client that does not confirm clears: it stopped here, less what of the
            # next reply it could have played since that was sent (a late ``cleared``
            # report, if one still comes, re-bases exactly).
            assert self.sample_rate is not None
            first_sent = self._epoch_first_sent
            since = 0.0 if first_sent is None else max(0.0, _now() - first_sent)
            could_play = min(self._sent, round(since * self.sample_rate))
            self._base = max(self._played, samples - could_play)
            self._played = max(self._played, samples)
            self._heard_from_client()
            return
        if samples <= self._played:
            return  # counts only grow; a repeat or a reordered report says nothing new
        self._played = samples
        self._heard_from_client()

    def close(self) -> None:
        """The client is gone: every open segment ends now, interrupted, where the last
        report left it. Later frames are dropped."""
        self._closed = True
        if self._dropping is not None:
            self._cut_over(ended=False)
        self._drop_held()
        if self._handing is not None:
            self._handing.cancel()
            self._handing = None
        self._cancel_stall()
        position = self._position()
        segments, self._segments = self._segments, []
        for segment in segments:
            if segment.started:
                heard = 0 if position is None else min(segment.end, position) - segment.start
                self._finish(segment, max(0, heard), interrupted=True)

    # ----------------------------------------------- a client away, then back

    @property
    def cutting(self) -> bool:
        """The speech a detach cut is still producing audio (dropped): ``on_cut_over``
        is still to come."""
        return self._dropping is not None

    def detach(self) -> int | None:
        """The client dropped (it may come back): every segment it held ends now,
        interrupted where its last report left it (a segment it never reported starting
        was not heard at all), and the rest of the audio of the speech still being
        captured is dropped (``cutting``). What is captured from now on is held for the
        next client. Returns the samples of the cut speech that were heard, or None when
        nothing was playing or waiting to play."""
        if self._closed or self._detached:
            return None
        self._detached = True
        self._cancel_stall()
        if self._handing is not None:
            self._handing.cancel()
            self._handing = None
        self._drop_held()
        # Where the client's last report left it, never the estimate: a client that
        # stopped reporting because it was gone heard nothing the estimate added.
        position = self._reported_position()
        segments, self._segments = self._segments, []
        if segments and not segments[-1].flushed:
            self._dropping = segments[-1].on_finished
        # The next client's count starts at its own zero, and so does this epoch.
        self._sent = 0
        self._background_end = 0
        if self.background is not None:
            self.background.cleared()  # the client took what it held away with it
        self._base = 0
        self._played = 0
        self._pending_clears = 0
        self._cleared_at = None
        self._estimate = None
        self._epoch_first_sent = None
        self._last_progress = None
        total = 0
        for segment in segments:
            heard = 0
            if segment.started and position is not None:
                heard = max(0, min(segment.end, position) - segment.start)
            total += heard
            self._finish(segment, heard, interrupted=True)
        return total if segments else None

    def _cut_over(self, *, ended: bool) -> None:
        self._dropping = None
        if self.on_cut_over is not None:
            try:
                self.on_cut_over(ended)
            except Exception:
                logger.exception("the cut-over callback failed")

    def attach(
        self,
        send_audio: Callable[[AudioFrame], Awaitable[None]],
        send_clear: Callable[[], None],
    ) -> None:
        """A client took over (a resumed session): the audio held meanwhile goes to it,
        and its ``played`` reports count from its own zero."""
        if self._closed:
            return
        self._send_audio = send_audio
        self._send_clear = send_clear
        self._detached = False
        now = _now()
        self._anchor = (now, 0)
        self._last_capture = now
        if self._held:
            self._handing = asyncio.get_running_loop().create_task(
                self._hand_over_held(), name="rejoinder-held-audio"
            )
        self._watch_stall()

    async def _hold(self, frame: AudioFrame) -> None:
        self._held.append(frame)
        self._held_samples += frame.samples_per_channel
        if self._held_samples >= self._held_limit():
            self._room.clear()
            await self._room.wait()  # the client's return, a clear or the close

    async def _hand_over_held(self) -> None:
        """Send the held audio, in order, to the client that took over (frames captured
        meanwhile queue behind it)."""
        try:
            while self._held and not self._detached and not self._closed:
                frame = self._held.popleft()
                self._held_samples -= frame.samples_per_channel
                if not self._room.is_set() and self._held_samples < self._held_limit():
                    self._room.set()
                await self._send_audio(frame)
        finally:
            if asyncio.current_task() is self._handing:
                self._handing = None

    def _held_limit(self) -> float:
        assert self.sample_rate is not None
        return MAX_HELD * self.sample_rate

    def _drop_held(self) -> None:
        self._held.clear()
        self._held_samples = 0
        self._room.set()

    # -------------------------------------------------------------- internal

    def _position(self) -> int | None:
        """Samples of this epoch played, per the last report or the estimate (None:
        unknown)."""
        if self._estimate is not None:
            return min(self._sent, self._estimate)
        return self._reported_position()

    def _reported_position(self) -> int | None:
        """Samples of this epoch played, per the client's last report (None: unknown)."""
        if self._base is None:
            return None
        return min(self._sent, max(0, self._played - self._base))

    # -------------------------------------------------- a client gone quiet

    def _heard_from_client(self) -> None:
        """A report was taken: the client's own count leads again."""
        if self._estimate is not None:
            self._estimate = None
            self._cancel_stall()  # the pacing timer
            logger.info("the client reports playback again: its reports lead")
        position = self._position()
        if position is not None:
            self._anchor = (_now(), position)
        self._advance()
        self._watch_stall()

    def _stall_due(self) -> float:
        """When a client silent since the last report counts as stalled: ``stall_grace``
        after the audio outstanding then would have played out."""
        assert self.sample_rate is not None and self.stall_grace is not None
        anchored_at, anchored = self._anchor
        ends = anchored_at + max(0, self._sent - anchored) / self.sample_rate
        return max(ends, self._last_capture) + self.stall_grace

    def _watch_stall(self) -> None:
        """Arm the check for a client that stopped reporting, while audio is outstanding.
        Mostly the due time moves later (more audio sent), and then the armed timer is
        kept: it checks again when it fires, instead of being re-armed on every frame."""
        if self.stall_grace is None or self._estimate is not None:
            return
        if not self._segments or self._closed or self._detached:
            return
        due = self._stall_due()
        if self._stall_timer is not None:
            if self._stall_timer.when() <= due:
                return
            self._stall_timer.cancel()
        self._stall_timer = asyncio.get_running_loop().call_at(due, self._stalled)

    def _stalled(self) -> None:
        self._stall_timer = None
        if not self._segments or self._closed or self._detached or self._estimate is not None:
            return
        if _now() < self._stall_due():
            self._watch_stall()  # heard from since it was armed: not yet
            return
        why = (
            "no `cleared: true` report and no `played` report after a clear"
            if self._base is None
            else "no `played` report while agent audio was playing"
        )
        logger.warning(
            "the client's playback reports stopped (%s): playback is estimated until they resume",
            why,
        )
        self._estimate = self._sent  # everything sent has had time to play
        self._paced_until = _now()
        if self.on_stall is not None:
            try:
                self.on_stall(why)
            except Exception:
                logger.exception("the playback stall callback failed")
        self._advance()

    def _pace_estimate(self, now: float, samples: int) -> None:
        """Estimating: a frame just sent starts playing now (or after what is queued)
        and has played out at the real-time pace."""
        assert self.sample_rate is not None and self._estimate is not None
        start = max(now, self._paced_until)
        self._paced_until = start + samples / self.sample_rate
        # It is heard from its first sample on: the segment it belongs to has started.
        self._estimate = max(self._estimate, self._sent - samples + 1)
        self._advance()
        self._cancel_stall()
        self._stall_timer = asyncio.get_running_loop().call_at(self._paced_until, self._paced_out)

    def _paced_out(self) -> None:
        self._stall_timer = None
        if self._estimate is not None:
            self._estimate = self._sent
            self._advance()

    def _cancel_stall(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _advance(self) -> None:
        position = self._position()
        if position is None:
            return
        while self._segments:
            segment = self._segments[0]
            if not segment.started and position > segment.start:
                segment.started = True
                if segment.on_started is not None:
                    segment.on_started()
            if not (segment.started and segment.flushed and position >= segment.end):
                if segment.started:
                    self._progress(segment, position)
                return
            self._segments.pop(0)
            self._finish(segment, segment.end - segment.start, interrupted=False)

    def _progress(self, segment: _Segment, position: int) -> None:
        if self.on_progress is None:
            return
        key = (id(segment), position, segment.flushed)
        if key == self._last_progress:
            return  # nothing moved
        self._last_progress = key
        assert self.sample_rate is not None
        heard = (min(position, segment.end) - segment.start) / self.sample_rate
        length = (segment.end - segment.start) / self.sample_rate if segment.flushed else None
        try:
            self.on_progress(heard, length)
        except Exception:  # a display hook must not break playback truth
            logger.exception("the playback progress callback failed")

    def _finish(self, segment: _Segment, samples: int, *, interrupted: bool) -> None:
        assert self.sample_rate is not None
        if segment.on_finished is not None:
            segment.on_finished(PlaybackFinished(samples / self.sample_rate, interrupted))


def _now() -> float:
    return asyncio.get_running_loop().time()
