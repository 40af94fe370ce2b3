"""Bounds on what one SIP source can make us do: a token bucket per source address, and
log lines that a flood cannot multiply.

``RateLimiter(rate, burst)`` lets each source send ``rate`` datagrams a second sustained,
``burst`` at once; ``allow(host, now)`` takes one token. A trunk's busiest moment (a burst
of INVITEs, each with its retransmissions and ACKs) stays far below the default.
``LogThrottle`` writes one line per kind of trouble per ``interval`` and counts the rest.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

__all__ = ["LogThrottle", "RateLimiter"]

MAX_SOURCES = 10_000


@dataclass
class RateLimiter:
    """A token bucket per source host (see the module docstring)."""

    rate: float = 200.0
    burst: float = 400.0
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    """host -> (tokens, when counted)."""

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst < 1:
            raise ValueError("the SIP rate limit needs rate > 0 and burst >= 1")

    def allow(self, host: str, now: float) -> bool:
        tokens, then = self._buckets.get(host, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1:
            self._buckets[host] = (tokens, now)
            return False
        if host not in self._buckets and len(self._buckets) >= MAX_SOURCES:
            return False  # spoofed sources by the thousand: refuse rather than grow
        self._buckets[host] = (tokens - 1, now)
        return True

    def prune(self, now: float) -> None:
        """Forget sources whose bucket is full again (they cost nothing to re-create)."""
        full_after = self.burst / self.rate
        for host, (_, then) in list(self._buckets.items()):
            if now - then > full_after:
                del self._buckets[host]


class LogThrottle:
    """One warning per key per ``interval`` seconds (by the logger's clock: records)."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warn(self, key: str, message: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        suffix = f" ({skipped} more like it not logged)" if skipped else ""
        self.logger.warning(message + suffix, *args)
