"""When to try a failed request again, and how long to wait first: one policy for the
chat client's HTTP requests and for the WebSocket clients' first connect.

Only failures that say nothing about the request itself are retried: the server could
not be reached or cut the connection, it is rate limiting (HTTP 429), or it failed
(5xx). A timeout is not retried: the caller chose the limit, and retrying would multiply
it. The wait grows exponentially up to a cap, with jitter, so clients that failed
together do not all come back at the same instant. A wait the server asks for
(``Retry-After``) is honoured as given, up to ``MAX_RETRY_AFTER``: a longer one is not
waited for at all, as a voice reply that late is useless and a fallback model (or the
user) is better served by the error now.

``aiohttp`` is imported only once something failed, so importing this stays cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..models.realtime import RealtimeError

__all__ = [
    "MAX_RETRY_AFTER",
    "RetryPolicy",
    "log_retry",
    "retry_after",
    "transient_connect_failure",
    "transient_status",
    "with_retries",
]

logger = logging.getLogger("rejoinder.providers.openai")

MAX_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` honoured, in seconds; a longer one ends the retries."""
_RETRYABLE_STATUSES = frozenset({408, 409, 429})  # and every 5xx
_MAX_EXPONENT = 64  # 2**64 times any sane base is past any cap; avoids float overflow

T = TypeVar("T")


def transient_status(status: int) -> bool:
    """An HTTP status that may go away by itself: timeout, conflict, 429, or any 5xx."""
    return status in _RETRYABLE_STATUSES or 500 <= status <= 599


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for, in seconds: OpenAI's ``retry-after-ms``, else
    ``Retry-After`` in seconds. None when absent, negative or not a number (an HTTP date
    is not honoured: the exponential backoff applies instead)."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            value = float(lowered[name]) * scale
        except (KeyError, ValueError):
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to retry, and the backoff between tries.

    The field names are the constructor parameters of the clients that take them, so a
    bad value is reported under the name the caller used.
    """

    max_retries: int = 3
    """Retries after the first try; 0 turns retrying off."""
    retry_backoff: float = 0.5
    """The wait before the first retry, in seconds; it doubles with each retry."""
    retry_backoff_cap: float = 8.0
    """The longest wait between two tries, in seconds."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ValueError(f"max_retries must be an integer, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("retry_backoff", "retry_backoff_cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number of seconds, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if self.retry_backoff_cap < self.retry_backoff:
            raise ValueError(
                f"retry_backoff_cap ({self.retry_backoff_cap}) must be at least "
                f"retry_backoff ({self.retry_backoff})"
            )

    def next_wait(self, retries_done: int, server_wait: float | None = None) -> float | str:
        """Seconds to wait before the next try, or, as a ``str``, why there is none ("" when
        retrying is off, so the error is reported exactly as it came)."""
        if retries_done >= self.max_retries:
            return f"gave up after {retries_done} retries" if retries_done else ""
        if server_wait is not None:
            if server_wait > MAX_RETRY_AFTER:
                return (
                    f"not retried: the server asks to wait {server_wait:g} s, "
                    f"more than {MAX_RETRY_AFTER:g} s"
                )
            return server_wait
        return self.backoff(retries_done + 1)

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1-based): between half and all of
        ``retry_backoff * 2**(retry - 1)``, capped at ``retry_backoff_cap``. Half is kept
        fixed so a retry never comes back at once; the other half is random."""
        exponent = min(max(retry - 1, 0), _MAX_EXPONENT)
        ceiling = min(self.retry_backoff_cap, self.retry_backoff * 2.0**exponent)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def log_retry(what: str, reason: str, retry: int, policy: RetryPolicy, wait: float) -> None:
    logger.warning(
        "%s: %s; retry %d of %d in %.2f s", what, reason, retry, policy.max_retries, wait
    )


# -- WebSocket connects ---------------------------------------------------------------------


def transient_connect_failure(error: BaseException) -> tuple[bool, float | None]:
    """Whether a failed WebSocket connect may work if tried again, and the wait the
    server asked for.

    Decided on the exception the client's ``RealtimeError`` was raised from: a refused or
    failed TCP connection, a connection cut before the upgrade, or an HTTP 429/5xx answer
    to the upgrade are transient. A timeout, a TLS or URL problem, 401/403/404, and a
    session the server refused after the upgrade (no such cause) are not.
    """
    import aiohttp

    cause = error.__cause__
    if isinstance(cause, aiohttp.WSServerHandshakeError):
        if transient_status(cause.status):
            return True, retry_after(cause.headers)
        return False, None
    if isinstance(cause, TimeoutError | aiohttp.ClientSSLError | aiohttp.InvalidURL):
        return False, None
    return isinstance(cause, aiohttp.ClientError | OSError), None


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    what: str,
    on_retry: Callable[[], None] = lambda: None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``await attempt()``, tried again after a transient ``RealtimeError`` (see
    ``transient_connect_failure``) as ``policy`` allows. ``on_retry`` runs before each
    retry's wait; ``sleep`` does the waiting (a caller may make it end early, by raising).
    The last error is raised, saying how many retries it took."""
    retries = 0
    while True:
        try:
            return await attempt()
        except RealtimeError as error:
            transient, server_wait = transient_connect_failure(error)
            if not transient:
                raise
            wait = policy.next_wait(retries, server_wait)
            if isinstance(wait, str):
                if not wait:
                    raise
                raise RealtimeError(f"{error} ({wait})", fatal=error.fatal, code=error.code) from (
                    error
                )
            retries += 1
            log_retry(what, str(error), retries, policy, wait)
            on_retry()
            await sleep(wait)


def sleep_unless_closed(
    closing: asyncio.Event, closed: Callable[[], bool], what: str
) -> Callable[[float], Awaitable[None]]:
    """A ``sleep`` for ``with_retries`` that ends early when ``closing`` is set and then
    raises if ``closed()``: a session closed during a retry's wait opens no connection
    after it."""

    async def wait(seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closing.wait(), seconds)
        if closed():
            raise RealtimeError(f"{what}: the session was closed while connecting")

    return wait
