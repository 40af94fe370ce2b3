"""A simulated speaker: plays the agent's audio in real time and keeps playback truth.

No sockets and no clock of its own: the connection tells it the time. Audio that reaches
an idle speaker waits ``jitter`` seconds (a jitter buffer, as a browser's player holds),
then plays at the server's rate. It counts what was played, never what was received, so
its ``played`` reports follow a listener: a server that set ``speaking`` when it sent
audio, not when it was heard, would be caught by them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PlayedReport", "Speaker"]

REPORT_EVERY = 0.05
"""Seconds between two ``played`` reports while audio plays (the protocol asks for at
most 0.1)."""


@dataclass(frozen=True, slots=True)
class PlayedReport:
    """One ``played`` report the client sent."""

    at: float
    """When it was sent (the event loop's clock, ``loop.time()``)."""
    samples: int
    """Agent samples played so far, in total."""
    cleared: bool
    """The report that answered a ``clear``."""


class Speaker:
    """Plays agent audio (PCM16LE mono at ``rate``) after a jitter buffer, in real time.

    ``received``, ``played``, ``queued`` and ``dropped`` count samples; ``reports`` lists
    the ``played`` reports sent. With ``keep_audio``, ``heard()`` returns exactly the
    audio that was played (what a listener heard), cleared audio left out.
    """

    def __init__(self, *, jitter: float = 0.1, keep_audio: bool = False) -> None:
        if not (math.isfinite(jitter) and jitter >= 0):
            raise ValueError(f"jitter is a number of seconds >= 0, not {jitter!r}")
        self.jitter = jitter
        self.rate = 0
        """The agent audio's rate (``ready.sample_rate``); 0 until ``ready``."""
        self.received = 0
        """Agent samples received, ever."""
        self.played = 0
        """Agent samples played, ever (what the ``played`` reports count)."""
        self.queued = 0
        """Samples received and not played yet."""
        self.dropped = 0
        """Samples dropped on ``clear`` (received, never played)."""
        self.reports: list[PlayedReport] = []
        self._keep = keep_audio
        self._pending = bytearray()
        self._heard = bytearray()
        self._odd = b""
        self._starts_at: float | None = None
        self._last_tick = 0.0
        self._fraction = 0.0
        self._reported = 0
        self._reported_at = -math.inf

    @property
    def playing(self) -> bool:
        """Audio is queued (playing, or waiting in the jitter buffer)."""
        return self.queued > 0

    def start(self, rate: int, now: float) -> None:
        """The server's ``ready`` gave the rate of its audio."""
        if rate <= 0:
            raise ValueError(f"a sample rate is > 0, not {rate}")
        self.rate = rate
        self._last_tick = now

    def receive(self, pcm: bytes, now: float) -> int:
        """Queue a binary frame of agent audio; returns its whole samples."""
        if not self.rate:
            return 0
        self.advance(now)
        data = self._odd + pcm
        cut = len(data) - len(data) % 2
        data, self._odd = data[:cut], data[cut:]  # a sample split over two frames
        samples = len(data) // 2
        if not samples:
            return 0
        if self.queued == 0:  # an idle speaker buffers before it plays
            self._starts_at = now + self.jitter
            self._fraction = 0.0
        self.queued += samples
        self.received += samples
        if self._keep:
            self._pending += data
        return samples

    def advance(self, now: float) -> None:
        """Play what the time since the last call allows."""
        starts = self._starts_at
        if self.queued and starts is not None and now > starts:
            exact = (now - max(self._last_tick, starts)) * self.rate + self._fraction
            step = min(self.queued, int(exact))
            self._fraction = exact - int(exact) if step < self.queued else 0.0
            self._play(step)
        self._last_tick = now

    def clear(self, now: float) -> None:
        """The server's ``clear``: stop, and drop everything queued."""
        self.advance(now)
        self.dropped += self.queued
        self.queued = 0
        self._starts_at = None
        self._pending.clear()

    def report_due(self, now: float) -> bool:
        """A regular report is due: every ``REPORT_EVERY`` while audio plays, and once
        more when the queue has run dry."""
        if now - self._reported_at < REPORT_EVERY:
            return False
        return self.played != self._reported or self.queued > 0

    def report(self, now: float, *, cleared: bool = False) -> PlayedReport:
        """Record the report about to be sent."""
        report = PlayedReport(now, self.played, cleared)
        self.reports.append(report)
        self._reported = self.played
        self._reported_at = now
        return report

    def heard(self) -> bytes:
        """The agent audio played so far (only with ``keep_audio``; else empty)."""
        return bytes(self._heard)

    def _play(self, samples: int) -> None:
        self.played += samples
        self.queued -= samples
        if self._keep:
            size = samples * 2
            self._heard += self._pending[:size]
            del self._pending[:size]
