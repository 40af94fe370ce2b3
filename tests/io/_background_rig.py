"""What the background-audio tests share: recognisable test sounds, a listener that plays
what a ``ReportedPlayback`` sends and keeps what it heard, and a stand-in session whose
state changes a test chooses."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

import rejoinder as rj
from rejoinder.io.playback import ReportedPlayback
from rejoinder.models.audio import PCM16, AudioFrame
from rejoinder.testing import advance

RATE = 24000
TICK = 0.02
CHUNK = round(TICK * RATE)
AMBIENT_HZ, AMBIENT_AMPLITUDE = 500.0, 600
THINKING_HZ, THINKING_AMPLITUDE = 2000.0, 3000
HEARD = 150.0
"""A component above this level (of int16 full scale) is audible in a chunk."""


def sine(hz: float, amplitude: int, seconds: float, rate: int = 16000) -> AudioFrame:
    t = np.arange(round(seconds * rate)) / rate
    return AudioFrame(np.round(amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16), rate)


AMBIENT = sine(AMBIENT_HZ, AMBIENT_AMPLITUDE, 0.2)
"""A 500 Hz hum: easy to find, and never in the voice (the scripted voice is a constant)."""
THINKING = sine(THINKING_HZ, THINKING_AMPLITUDE, 0.1)
"""A 2 kHz tone standing in for the keyboard."""


def level(pcm: PCM16, hz: float, rate: int = RATE) -> float:
    """The amplitude of the ``hz`` component of ``pcm`` (whole cycles in a 20 ms chunk)."""
    if pcm.size == 0:
        return 0.0
    t = np.arange(pcm.size) / rate
    return float(2 * abs(np.mean(pcm.astype(np.float64) * np.exp(-2j * np.pi * hz * t))))


class Listener:
    """A client of a ``ReportedPlayback``: plays what it is sent in real time once
    ``jitter`` seconds of a burst have buffered, reports ``played`` at every tick of a
    fixed 20 ms grid (``tick``, or ``run`` for a task that ticks), and answers a clear at
    once with ``cleared: true`` (as the protocol asks), after dropping its queue."""

    def __init__(self, jitter: float = 0.06, rate: int = RATE) -> None:
        self.jitter, self.rate = jitter, rate
        self.queue: deque[PCM16] = deque()
        self.queued = 0
        self.played = 0
        self.burst_at: float | None = None
        self.heard: list[tuple[float, PCM16]] = []
        """(time, samples) played at each tick."""
        self.clears = 0
        self.sent: list[tuple[float, PCM16, bool]] = []
        """(time, samples, whether a voice segment was outstanding) of each frame sent."""
        self.output = ReportedPlayback(rate, self._send, self._clear)

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _send(self, frame: AudioFrame) -> None:
        if self.queued == 0 and self.burst_at is None:
            self.burst_at = self.now + self.jitter
        data = frame.data.copy()
        self.sent.append((self.now, data, self.output.pending))
        self.queue.append(data)
        self.queued += data.size

    def _clear(self) -> None:
        self.queue.clear()
        self.queued = 0
        self.burst_at = None
        self.clears += 1
        played = self.played
        asyncio.get_running_loop().call_soon(lambda: self.output.on_played(played, cleared=True))

    def tick(self) -> None:
        step = round(TICK * self.rate)
        if self.burst_at is not None and self.now >= self.burst_at - 1e-9:
            parts: list[PCM16] = []
            while step and self.queue:
                head = self.queue[0]
                take = head[:step]
                parts.append(take)
                step -= take.size
                if take.size == head.size:
                    self.queue.popleft()
                else:
                    self.queue[0] = head[take.size :]
            chunk = np.concatenate(parts) if parts else np.zeros(0, np.int16)
            self.queued -= chunk.size
            self.played += chunk.size
            self.heard.append((self.now, chunk))
            if self.queued == 0:
                self.burst_at = None
        self.output.on_played(self.played)

    async def run(self) -> None:
        while True:
            await advance(TICK)
            self.tick()

    def heard_between(self, start: float, end: float) -> list[tuple[float, PCM16]]:
        return [(t, pcm) for t, pcm in self.heard if start <= t < end]


class StandInSession:
    """The parts of a session ``BackgroundAudio`` uses: its output, its states and the
    events that change them, emitted when a test says so."""

    def __init__(self, output: object, *, started: bool = True) -> None:
        self.output = SimpleNamespace(audio=output)
        self.agent_state = "listening"
        self.user_state = "listening"
        self.started = started
        self._handlers: dict[str, list[Callable[[Any], None]]] = {}

    def on(self, name: str, callback: Callable[[Any], None]) -> None:
        self._handlers.setdefault(name, []).append(callback)

    def off(self, name: str, callback: Callable[[Any], None]) -> None:
        self._handlers.get(name, []).remove(callback)

    def emit(self, name: str, event: object) -> None:
        for callback in list(self._handlers.get(name, [])):
            callback(event)

    def start(self) -> None:
        self.started = True
        self.emit("session_started", rj.SessionStartedEvent(_now()))

    def agent(self, state: Any) -> None:
        old, self.agent_state = self.agent_state, state
        self.emit("agent_state_changed", rj.AgentStateChangedEvent(old, state, _now()))

    def user(self, state: Any) -> None:
        old, self.user_state = self.user_state, state
        self.emit("user_state_changed", rj.UserStateChangedEvent(old, state, _now()))

    def close(self) -> None:
        self.emit("close", rj.CloseEvent("closed"))


def _now() -> float:
    return asyncio.get_running_loop().time()
