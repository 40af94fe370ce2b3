"""The carriers' shared HTTP client: one aiohttp session, bounded retries, clear errors.

Every provider's call-control API is JSON (or form) over HTTPS with the same failure
modes, so they are handled once here:

- a request that never reached the provider (connection refused, DNS, a connect timeout)
  or that it refused with 429 (rate limited: not processed) is retried, whatever it is;
- a 5xx or a connection lost after sending is retried only for a request the caller marks
  ``idempotent`` (a hang-up, a Telnyx command with a ``command_id``): the provider may have
  acted on it already, and placing a call twice is worse than failing once;
- at most ``attempts`` tries, ``backoff`` doubling between them (a 429's ``Retry-After``
  is honoured up to ``max_backoff``), each try bounded by ``timeout``;
- anything else becomes a ``CarrierError`` naming the provider, the request, the HTTP
  status and the provider's own error code and message.

aiohttp is imported when the first request is made.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import CarrierError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpPolicy", "RestClient"]

logger = logging.getLogger("rejoinder.io.telephony.carriers")


@dataclass(frozen=True, slots=True)
class HttpPolicy:
    """How hard a carrier client tries."""

    timeout: float = 10.0
    """Seconds one try may take, connect to last byte."""
    attempts: int = 3
    backoff: float = 0.25
    """Seconds before the second try; doubled each time after."""
    max_backoff: float = 4.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or not self.timeout > 0 or self.backoff < 0:
            raise ValueError("attempts >= 1, timeout > 0 and backoff >= 0, please")


ErrorReader = Callable[[Any], tuple[str | None, str]]
"""The provider's error body (parsed JSON, or the text) -> (its error code, its message)."""


class RestClient:
    """One provider account's HTTP client (see the module docstring)."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        headers: Mapping[str, str],
        read_error: ErrorReader,
        policy: HttpPolicy | None = None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.policy = policy or HttpPolicy()
        self._headers = dict(headers)
        self._read_error = read_error
        self._session: aiohttp.ClientSession | None = None
        self.requests = 0
        """Tries sent so far (retries included)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        form: Mapping[str, str | list[str]] | None = None,
        json_body: Mapping[str, Any] | None = None,
        idempotent: bool,
        what: str,
    ) -> Any:
        """Send ``method path`` and return the parsed JSON answer (``None`` for an empty
        one). ``what`` names the request in errors ("place a call to +1555...")."""
        import aiohttp

        policy = self.policy
        delay = policy.backoff
        last: CarrierError | None = None
        for attempt in range(1, policy.attempts + 1):
            if attempt > 1:
                await asyncio.sleep(delay)
                delay = min(policy.max_backoff, delay * 2)
            self.requests += 1
            try:
                status, body, retry_after = await self._send(method, path, form, json_body)
            except aiohttp.ClientConnectorError as exc:  # never reached the provider
                last = CarrierError(f"{self.provider}: cannot {what}: cannot connect ({exc})")
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = CarrierError(
                    f"{self.provider}: cannot {what}: {type(exc).__name__} {exc}".rstrip()
                )
                if idempotent:
                    continue
                raise last from exc
            if 200 <= status < 300:
                return body
            code, message = self._read_error(body)
            last = CarrierError(
                f"{self.provider}: cannot {what}: HTTP {status}"
                + (f" (code {code})" if code else "")
                + (f": {message}" if message else ""),
                status=status,
                code=code,
            )
            if status == 429:
                if retry_after is not None:
                    delay = min(policy.max_backoff, max(delay, retry_after))
                continue
            if status >= 500 and idempotent:
                continue
            raise last
        assert last is not None
        logger.warning("%s (after %d tries)", last, policy.attempts)
        raise last

    async def _send(
        self,
        method: str,
        path: str,
        form: Mapping[str, str | list[str]] | None,
        json_body: Mapping[str, Any] | None,
    ) -> tuple[int, Any, float | None]:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self._headers)
        data: Any = None
        if form is not None:
            data = aiohttp.FormData()
            for name, value in form.items():
                for one in [value] if isinstance(value, str) else value:
                    data.add_field(name, one)
        timeout = aiohttp.ClientTimeout(total=self.policy.timeout)
        async with self._session.request(
            method, self.base_url + path, data=data, json=json_body, timeout=timeout
        ) as response:
            text = await response.text()
            retry_after = _seconds(response.headers.get("Retry-After"))
            return response.status, _parsed(text), retry_after

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _parsed(text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text[:300]


def _seconds(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
