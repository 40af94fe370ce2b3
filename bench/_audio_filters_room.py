"""The room for bench/audio_filters.py: a speaker that plays the agent in real time and a
microphone that hears it back through an echo path, plus whatever else is in the room.

Everything runs on the session's loop clock (a virtual-time loop in the benchmark), at
16 kHz:

- ``RoomSpeaker`` is an ``AudioOutput`` as a server transport is one: it cannot pause
  (a WebSocket client, a phone line), it starts playing a segment ``play_delay`` seconds
  after its first frame arrives (a client's jitter buffer), and it *reports* the start
  ``report_lag`` seconds after that (a WebSocket client reports ``played`` every 100 ms,
  so the server learns of a start up to 100 ms late). ``clear_buffer`` stops it at once.
  What it played is laid on the room's timeline at the samples where it was audible.
- ``RoomMicrophone`` is an ``AudioInput`` that delivers a 20 ms frame every 20 ms: the
  speaker's sound through the echo path (``EchoPath``: a delay, an attenuation, a
  laptop speaker's missing bass and a short reverberant tail), plus the room's other
  sound (``near``: the user, babble, a noise floor), clipped to int16.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from rejoinder.models.audio import AudioFrame, AudioInput, AudioOutput

RATE = 16000
FRAME = 320  # 20 ms


@dataclass(frozen=True)
class EchoPath:
    """Speaker to microphone: ``delay_ms`` (the acoustic path and the device's buffers),
    ``gain_db`` (of the echo against what the agent's audio was sent at), ``rt60`` (the
    room's reverberation: seconds for its tail to fall 60 dB) and ``seed`` (the tail's
    random reflections)."""

    delay_ms: float
    gain_db: float
    rt60: float = 0.25
    seed: int = 0

    def response(self) -> np.ndarray:
        """The impulse response: the direct sound, then a decaying tail of reflections
        10 dB below it in energy, through a first-order high-pass at 200 Hz (a small
        speaker plays little bass)."""
        rng = np.random.default_rng(self.seed)
        n = round(min(0.3, self.rt60) * RATE)
        t = np.arange(n) / RATE
        tail = rng.standard_normal(n) * np.exp(-6.9 * t / self.rt60)
        tail[: round(0.003 * RATE)] = 0.0  # the first reflection comes after 3 ms
        tail *= np.sqrt(0.1 / np.sum(tail**2))
        rir = tail
        rir[0] = 1.0
        alpha = 1.0 / (1.0 + 2 * np.pi * 200 / RATE)
        out = np.zeros(n)
        prev_in = prev_out = 0.0
        for i, x in enumerate(rir):
            prev_out = alpha * (prev_out + x - prev_in)
            prev_in = x
            out[i] = prev_out
        out *= 10 ** (self.gain_db / 20) / np.sqrt(np.sum(out**2))
        return np.concatenate([np.zeros(round(self.delay_ms * RATE / 1000)), out])


class Room:
    """The timeline of what the speaker played, and the sound it makes at the mic."""

    def __init__(self, seconds: float, echo: EchoPath | None, *, origin: float = 0.0) -> None:
        self.origin = origin  # the loop time of sample 0
        self.played = np.zeros(round(seconds * RATE) + RATE)
        self.near = np.zeros(round(seconds * RATE) + RATE)
        self.response = None if echo is None else echo.response()
        self.echo_energy = 0.0  # of the echo that reached the microphone (sum of squares)

    def add_near(self, pcm: np.ndarray, at: float, gain: float = 1.0) -> None:
        start = round(at * RATE)
        end = min(self.near.size, start + pcm.size)
        if end > start:
            self.near[start:end] += pcm[: end - start].astype(np.float64) * gain

    def frame(self, first: int) -> np.ndarray:
        """The microphone's samples ``first`` to ``first + FRAME``, as floats."""
        out = self.near[first : first + FRAME].copy()
        if out.size < FRAME:
            out = np.concatenate([out, np.zeros(FRAME - out.size)])
        if self.response is not None:
            taps = self.response.size
            lo = first - taps + 1
            window = np.zeros(FRAME + taps - 1)
            src_lo, src_hi = max(0, lo), min(self.played.size, first + FRAME)
            if src_hi > src_lo:
                window[src_lo - lo : src_hi - lo] = self.played[src_lo:src_hi]
                echo = np.convolve(window, self.response, mode="valid")
                self.echo_energy += float(np.sum(echo**2))
                out += echo
        return out


class RoomSpeaker(AudioOutput):
    """See the module's docstring."""

    def __init__(self, room: Room, report_lag: float, play_delay: float = 0.0) -> None:
        super().__init__(sample_rate=RATE, can_pause=False)
        self.room = room
        self.report_lag = report_lag
        self.play_delay = play_delay
        self.starts: list[float] = []  # when each segment began to play
        self.cleared_at: list[float] = []
        self._cursor: int | None = None  # sample where the next frame plays
        self._first = 0
        self._timer: asyncio.TimerHandle | None = None
        self._finished: asyncio.TimerHandle | None = None

    async def capture_frame(self, frame: AudioFrame) -> None:
        now = asyncio.get_running_loop().time()
        if self._cursor is None:
            self._cursor = self._first = round((now - self.room.origin) * RATE)
            self.starts.append(now)
            self._timer = asyncio.get_running_loop().call_later(self.report_lag, self._started_late)
        data = frame.data.astype(np.float64)
        end = min(self.room.played.size, self._cursor + data.size)
        if end > self._cursor:  # past the room's timeline nothing is heard
            self.room.played[self._cursor : end] = data[: end - self._cursor]
        self._cursor += data.size

    def flush(self) -> None:
        if self._cursor is None:
            return
        loop = asyncio.get_running_loop()
        self._finished = loop.call_at(self.room.origin + self._cursor / RATE, self._finish, False)

    def clear_buffer(self) -> None:
        if self._cursor is None:
            return
        now = asyncio.get_running_loop().time()
        self.cleared_at.append(now)
        stop = max(self._first, round((now - self.room.origin) * RATE))
        if stop < self._cursor:
            self.room.played[stop : self._cursor] = 0.0  # never played
            self._cursor = stop
        self._finish(True)

    def _started_late(self) -> None:
        self._timer = None
        self._report_started()

    def _finish(self, interrupted: bool) -> None:
        if self._cursor is None:
            return
        for handle in (self._timer, self._finished):
            if handle is not None:
                handle.cancel()
        reported = self._timer is None
        self._timer = self._finished = None
        heard = (self._cursor - self._first) / RATE
        self._cursor = None
        if not reported:
            self._report_started()  # a report always comes, if late
        self._report_finished(heard, interrupted)


class RoomMicrophone(AudioInput):
    """A 20 ms frame every 20 ms of loop time, until ``close``."""

    def __init__(self, room: Room) -> None:
        self.room = room
        self.sample_rate = RATE
        self._closed = False

    def close(self) -> None:
        self._closed = True

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        loop = asyncio.get_running_loop()
        origin = self.room.origin
        first = round((loop.time() - origin) * RATE)
        while not self._closed and first + FRAME <= self.room.near.size:
            await asyncio.sleep(max(0.0, origin + (first + FRAME) / RATE - loop.time()))
            samples = np.clip(np.rint(self.room.frame(first)), -32768, 32767)
            yield AudioFrame(samples.astype(np.int16), RATE)
            first += FRAME
