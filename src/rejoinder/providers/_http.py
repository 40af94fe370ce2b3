"""The HTTP side of every OpenAI-compatible client (chat completions, transcriptions,
speech), in one place so that their options and their failures cannot drift apart.

``HTTPClient`` holds what they all take: the API key and base URL (``_auth``), a
``Timeout``, extra headers, an ``aiohttp.ClientSession`` borrowed from the caller or
created on first use (and then closed by ``aclose``), the ``RetryPolicy`` and the
``retries`` counter. It POSTs with the same headers and limits for all of them and turns
an error status or an aiohttp exception into a ``Failure``: one try failed, with the
message the caller sees, whether a retry may help, whether a limit ran out, the wait
the server asked for and the HTTP status.

Each client keeps its own request loop, as what it may retry depends on what it already
handed the caller, and turns a ``Failure`` into its own error type (``LLMError``,
``STTError``, ``TTSError``). ``aiohttp`` is imported on first use only, so importing
this module is cheap.

``aclose`` ends what is in flight, with a ``Failure`` that is not retried: a response
being read (aiohttp alone would leave its reader waiting forever: closing a connection
drops its read timeout without ending the body), a request waiting for its headers, and
a retry waiting out its backoff (which would otherwise go on, on a new session nobody
closes).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import _json
from ._retry import RetryPolicy, log_retry, retry_after, transient_status
from ._timeout import Timeout

if TYPE_CHECKING:
    import aiohttp

__all__ = ["ClientClosed", "Failure", "HTTPClient", "error_message_from_body", "read_some"]

_USER_AGENT = "rejoinder/0.1"
_MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error body is read: enough for any error message, and a server that
answers an endless body cannot hold the caller."""


class Failure(Exception):
    """One try failed: ``message`` for the caller, whether a retry may help, whether a
    time limit ran out, the wait the server asked for and the HTTP status, if any."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        timed_out: bool = False,
        wait: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.timed_out = timed_out
        self.wait = wait
        self.status = status


class ClientClosed(Exception):
    """What a read of a response still open when its client was closed raises."""


class HTTPClient:
    """What the HTTP clients share: the session, headers, timeouts, the retry policy and
    turning aiohttp's exceptions into clear messages."""

    _name = "provider"
    """Who retried, in the retry warnings."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str,
        timeout: Timeout | float | None,
        extra_headers: Mapping[str, str] | None,
        http_session: aiohttp.ClientSession | None,
        retry: RetryPolicy,
    ) -> None:
        """The options of the clients' signatures, in their order, ``api_key`` and
        ``base_url`` resolved by the provider (its environment variables, its default
        URL); each client makes ``retry`` of its ``max_retries`` and backoffs first, so
        bad values raise before anything else is done."""
        self._retry = retry
        self.retries = 0
        """How many times this client retried a request so far (each retry is also logged
        as a warning on the ``rejoinder.providers.openai`` logger)."""
        self._api_key = api_key
        self._base_url = base_url.rstrip("/")
        self._timeout = Timeout.of(timeout)
        self._extra_headers = dict(extra_headers or {})
        self._session = http_session
        self._owns_session = http_session is None
        self._reading: weakref.WeakSet[aiohttp.ClientResponse] = weakref.WeakSet()
        """Responses ``_post`` handed out that may still be read (``aclose`` ends them)."""
        self._closed: asyncio.Event | None = None
        """Set by ``aclose`` for the retries waiting out a backoff (made when one waits)."""

    @property
    def base_url(self) -> str:
        return self._base_url

    async def aclose(self) -> None:
        """End the requests in flight (their callers get a ``Failure`` that is not
        retried) and close the HTTP session this client created (a session passed in is
        left open). The client may be used again: it makes a new session."""
        closed = ClientClosed(f"{self._name} was closed")
        for response in list(self._reading):
            response.content.set_exception(closed)
            response.close()
        self._reading.clear()
        if self._closed is not None:
            self._closed.set()
            self._closed = None
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            if not session.closed:
                await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            import aiohttp

            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self, **more: str) -> dict[str, str]:
        """The headers of every request, with ``more``; ``extra_headers`` win over all."""
        headers = {"User-Agent": _USER_AGENT, **more, **self._auth_headers()}
        headers.update(self._extra_headers)
        return headers

    def _auth_headers(self) -> dict[str, str]:
        """How the key is sent: ``Authorization: Bearer`` unless a provider says otherwise
        (no header without a key: local servers)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _client_timeout(self) -> aiohttp.ClientTimeout:
        import aiohttp

        return aiohttp.ClientTimeout(
            total=self._timeout.total,
            connect=self._timeout.connect,
            sock_connect=self._timeout.connect,
            sock_read=self._timeout.read,
        )

    async def _backoff(self, seconds: float) -> bool:
        """Wait ``seconds`` before a retry; True when the client was closed meanwhile
        (the request then ends instead of going on after ``aclose``)."""
        if self._closed is None:
            self._closed = asyncio.Event()
        closed = self._closed
        try:
            async with asyncio.timeout(seconds):
                await closed.wait()
        except TimeoutError:
            return False
        return True

    async def _next_wait(self, failure: Failure, retries: int) -> float | str:
        """The wait before the next try, or why there is none ("" to re-raise as is)."""
        if failure.timed_out or not failure.retryable:
            return ""
        wait = self._retry.next_wait(retries, failure.wait)
        if not isinstance(wait, str):
            log_retry(self._name, str(failure), retries + 1, self._retry, wait)
            self.retries += 1
        return wait

    async def _post(
        self, url: str, data: Any, headers: Mapping[str, str]
    ) -> aiohttp.ClientResponse:
        """POST and check the status: an error status becomes a ``Failure``."""
        session = self._get_session()
        try:
            response = await session.post(
                url, data=data, headers=dict(headers), timeout=self._client_timeout()
            )
        except Exception as exc:
            if session.closed:  # by aclose (or the owner of a session passed in)
                raise Failure(
                    f"request to {url} stopped: its HTTP session was closed", retryable=False
                ) from exc
            raise self._request_failure(exc, url) from exc
        if response.status >= 300:
            try:
                wait = retry_after(response.headers)
                message = error_message_from_body(await read_some(response))
                reason = f" {response.reason}" if response.reason else ""
                raise Failure(
                    f"{url} returned HTTP {response.status}{reason}: {message}",
                    retryable=transient_status(response.status),
                    wait=wait,
                    status=response.status,
                )
            finally:
                response.close()
        self._reading.add(response)
        return response

    def _request_failure(self, exc: Exception, url: str) -> Failure:
        """An exception from sending the request or waiting for the response headers."""
        import aiohttp

        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return _timed_out(f"timed out connecting to {url} (after {self._timeout.connect}s)")
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return _timed_out(
                f"timed out waiting for {url} to respond (no answer for {self._timeout.read}s)"
            )
        if isinstance(exc, TimeoutError):
            return _timed_out(f"timed out waiting for {url} (total limit {self._timeout.total}s)")
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return Failure(f"TLS error connecting to {url}: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ClientConnectorError):
            if isinstance(exc.os_error, ConnectionRefusedError):
                reason = "connection refused"
            else:
                reason = exc.os_error.strerror or str(exc.os_error) or str(exc)
            return Failure(f"cannot connect to {url}: {reason}", retryable=True)
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return Failure(f"{url} closed the connection before responding", retryable=True)
        if isinstance(exc, aiohttp.InvalidURL | ValueError):
            return Failure(f"invalid request URL {url!r}: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ClientError | OSError):
            return Failure(f"request to {url} failed: {_describe(exc)}", retryable=True)
        return Failure(f"request to {url} failed: {_describe(exc)}", retryable=False)

    def _read_failure(self, exc: Exception, url: str, what: str = "response") -> Failure:
        """An exception from reading the body; ``what`` names the body in the message
        ("stream" for an event stream)."""
        import aiohttp

        if isinstance(exc, ClientClosed):
            return Failure(f"reading the {what} from {url} stopped: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return _timed_out(
                f"timed out reading the {what} from {url} (no data for {self._timeout.read}s)"
            )
        if isinstance(exc, TimeoutError):
            return _timed_out(
                f"timed out reading the {what} from {url} (total limit {self._timeout.total}s)"
            )
        if isinstance(exc, aiohttp.ClientError | OSError):
            return Failure(
                f"connection lost mid-{what} from {url}: {_describe(exc)}", retryable=True
            )
        return Failure(f"reading the {what} from {url} failed: {_describe(exc)}", retryable=False)


def _timed_out(message: str) -> Failure:
    # Retryable as a failure, but a limit the caller chose: the clients do not retry it.
    return Failure(message, retryable=True, timed_out=True)


async def read_some(response: aiohttp.ClientResponse) -> bytes:
    """Read up to 64 KiB of a body, never raising."""
    data = bytearray()
    try:
        while len(data) < _MAX_ERROR_BODY_BYTES:
            piece = await response.content.readany()
            if not piece:
                break
            data += piece
    except Exception:
        pass
    return bytes(data[:_MAX_ERROR_BODY_BYTES])


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def error_message_from_body(body: bytes) -> str:
    """The human-readable message in an error response body, whatever the server's dialect.

    OpenAI: ``{"error": {"message": ...}}``; Anthropic: ``{"type": "error", "error":
    {"type": ..., "message": ...}}``; Ollama: ``{"error": "..."}``; FastAPI-based servers
    (vLLM): ``{"detail": ...}`` or ``{"message": ...}``; otherwise the text itself.
    """
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data: object = _json.loads(text)
    except ValueError:  # not JSON, or nested too deeply to read
        return _shorten(text) if text else "(empty response body)"
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                inner = value.get("message")
                if isinstance(inner, str) and inner:
                    return _shorten(inner)
            elif isinstance(value, str) and value:
                return _shorten(value)
            elif value is not None:
                try:
                    return _shorten(_json.dumps(value))
                except ValueError:
                    break  # too deep to show as JSON: the raw text below is shortened too
    return _shorten(text)


def _shorten(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
