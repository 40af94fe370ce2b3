"""``Timeout``: how long a provider's HTTP or WebSocket client waits, shared by every
provider's ``timeout=`` argument."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timeout:
    """How long to wait, in seconds, before a request fails with a retryable error
    (``LLMError``, ``STTError``, ``TTSError``).

    ``None`` disables a limit. Each try of a request has its own limits, and a try that
    timed out is not retried by the client itself (the ``retryable`` error tells a caller
    such as ``FallbackLLM`` that another try may work).
    """

    connect: float | None = 10.0
    """Opening the connection (TCP and TLS), including waiting for a pooled connection."""
    read: float | None = 60.0
    """Longest silence from the server: until the response headers, and between stream reads.
    Keep-alive comments count as data, so a server that sends them never trips this."""
    total: float | None = None
    """The whole request (one try of it), stream included."""

    @classmethod
    def of(cls, value: Timeout | float | None) -> Timeout:
        """A client's ``timeout=`` argument: the defaults for ``None``, one number of
        seconds for both connecting and reading."""
        if value is None:
            return cls()
        if isinstance(value, Timeout):
            return value
        return cls(connect=float(value), read=float(value))
