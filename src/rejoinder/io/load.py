"""LoadGauge: how busy the process is, what one more session would add, and so whether
a new session can be admitted without slowing the live ones down.

The offline voice stack runs its models in this process (Whisper, Piper, Silero, Smart
Turn, on threads), so the process's own CPU time is the load that makes callers wait:
five calls on a process sized for four waited 26-32 s to be understood, all of them,
because nothing refused the fifth. ``--max-sessions`` is a guess; this is measured.

Every ``SAMPLE_SECONDS`` the gauge reads the process's CPU seconds (all threads) and
keeps, as exponentially weighted averages over about ``WINDOW_SECONDS``:

* ``utilization``: the share of the machine's cores the process used;
* ``per_session``: the utilization each live session adds, over the idle process's
  (measured only while sessions are live; a session's cost is bursty, so the average is
  long). Before anything is measured, ``prior`` stands in for it.

A new session is admitted while the predicted load stays within ``target`` (and within the
hard ``max_sessions``, if one is set): the measured ``utilization``, plus the cost of every
session too young to show in that average (started less than ``WINDOW_SECONDS`` ago,
counted at ``per_session``, or ``prior`` before anything was measured), plus the new one.
Older sessions are in the measurement: three idle sessions do not stop a fourth. A burst of
callers arriving together is stopped by the young ones' predicted cost. ``capacity`` is how
many sessions fit the target at the measured cost. Framework-free and clock-injected: the
app samples it from a task, tests feed it numbers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SAMPLE_SECONDS", "WINDOW_SECONDS", "LoadGauge", "process_cpu_seconds"]

SAMPLE_SECONDS = 1.0
WINDOW_SECONDS = 30.0
"""How far back the averages reach (a conversation's turns come every few seconds)."""


def process_cpu_seconds() -> float:
    """User and system CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


@dataclass
class LoadGauge:
    target: float = 0.75
    """The predicted share of all cores above which a new session is refused: headroom
    for the bursts of the live ones (a turn takes a core for a fraction of a second)."""
    prior: float = 0.2
    """Utilization one session is assumed to add before it was measured (share of all
    cores; 0.2 on 2 cores is 0.4 of a core: the offline stack's first turns)."""
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    cpu: Callable[[], float] = process_cpu_seconds
    clock: Callable[[], float] = time.monotonic
    utilization: float = 0.0
    idle: float | None = None
    """The process's utilization with no live session (its own floor: the server, timers)."""
    per_session: float | None = None
    _last: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"target must be within (0, 1], got {self.target}")
        if not 0.0 < self.prior <= 1.0:
            raise ValueError(f"prior must be within (0, 1], got {self.prior}")
        if self.cores < 1:
            raise ValueError("cores must be at least 1")

    # ----------------------------------------------------------- measuring

    def sample(self, live: int) -> None:
        """Read the CPU clock; ``live``: sessions running during the interval."""
        now, used = self.clock(), self.cpu()
        last, self._last = self._last, (now, used)
        if last is None or now <= last[0]:
            return
        seconds = now - last[0]
        share = max(0.0, (used - last[1]) / seconds / self.cores)
        weight = min(1.0, seconds / WINDOW_SECONDS)
        self.utilization += (share - self.utilization) * weight
        if live <= 0:
            self.idle = _averaged(self.idle, share, weight)
            return
        each = max(0.0, share - (self.idle or 0.0)) / live
        # From the prior: one busy second (a greeting being synthesized) is not the cost.
        start = self.prior if self.per_session is None else self.per_session
        self.per_session = _averaged(start, each, weight)

    # ------------------------------------------------------------- reading

    @property
    def session_cost(self) -> float:
        """What one more session is expected to add (measured, else the prior)."""
        return self.per_session if self.per_session is not None else self.prior

    @property
    def capacity(self) -> int:
        """Sessions that fit within ``target`` at the current cost per session."""
        room = self.target - (self.idle or 0.0)
        return max(1, int(room / max(self.session_cost, 1e-3) + 1e-9))

    def refusal(self, live: int, young: int | None = None) -> str | None:
        """Why a new session would be refused now (``None``: admit). ``live``: sessions
        running or about to; ``young``: how many of them started too recently to show in
        the measurement (default: all). One session is always admitted on an otherwise
        idle process."""
        if live <= 0:
            return None
        unmeasured = live if young is None else min(live, young)
        predicted = self.utilization + (unmeasured + 1) * self.session_cost
        if predicted <= self.target:
            return None
        return (
            f"the server is busy ({live} live session(s), about "
            f"{min(predicted, 9.99):.0%} of its CPU with one more; capacity {self.capacity}); "
            "try again later"
        )


def _averaged(average: float | None, value: float, weight: float) -> float:
    return value if average is None else average + (value - average) * weight
