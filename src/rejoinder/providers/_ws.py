"""What the WebSocket speech providers (Deepgram, AssemblyAI, ElevenLabs, Cartesia) decide
alike about their connections, in one place:

* opening one: the ``aiohttp`` session (one given is borrowed and never closed here; else
  one is made on first use and closed by ``aclose``), the ``User-Agent``, one try bounded
  by the connect timeout and including the provider's set-up exchange when it has one
  (AssemblyAI's ``Begin``), and a socket left half set up closed again;
* what a failed try means: a refused upgrade with a transient status (408, 409, 429, 5xx)
  or a server that cannot be reached may work when tried again (``TryAgain``, with the
  wait a ``Retry-After`` asks for); 401/403 and other refusals, TLS and URL problems will
  not (the provider's error, not retryable); a timeout is not tried again here (the caller
  chose the limit) but is retryable for the caller, as ``Timeout`` promises;
* trying again: ``with_retries``, the backoff of ``RetryPolicy``, a warning per retry, and
  the last failure with why no other try was made;
* how a connection ended: the close code and reason of the message that ended it, what to
  tell the user about it, and the close codes after which the same request cannot work.

What each provider says differently is a parameter: its name, its key header, how its
server explains a refusal (Deepgram's ``dg-error`` header; what a 404 means for a voice).
The realtime providers, which open their sessions their own way (``RealtimeError`` with
``fatal`` and ``code``), use ``close_quietly`` and ``close_of`` from here too. ``aiohttp``
is imported on first use only, so importing this stays cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from ._retry import RetryPolicy, retry_after, transient_status

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "FATAL_CLOSE_CODES",
    "KEY_REFUSALS",
    "USER_AGENT",
    "Dialer",
    "ProviderError",
    "TryAgain",
    "api_key_from",
    "close_of",
    "close_quietly",
    "describe",
    "ended_by",
    "with_retries",
    "ws_base_url",
]

logger = logging.getLogger("rejoinder.providers")

USER_AGENT = "rejoinder/0.1"
FATAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
"""Close codes after which the same request cannot work: protocol error, unsupported or
invalid data, policy violation (a bad key, the quota), message too big, missing
extension. A provider adds its own (AssemblyAI's 3006, 3007)."""
KEY_REFUSALS = {401: "the API key was refused", 403: "forbidden"}
"""``explanations`` for a server that says no more than its status about a key."""
_KEY_HINT = " (check the API key)"
_HANDSHAKE_WITHOUT_REASON = "Invalid response status"  # aiohttp's words for any non-101

T = TypeVar("T")


class ProviderError(Protocol):
    """``STTError`` or ``TTSError``: what a provider raises, with ``retryable``."""

    def __call__(self, message: str, *, retryable: bool = ...) -> Exception: ...


class TryAgain(Exception):
    """One try failed in a way the next may not: the server could not be reached, it
    answered 429 or 5xx, or the connection was cut before anything was delivered. ``wait``
    is what the server asked for (``Retry-After``), if anything."""

    def __init__(self, message: str, *, wait: float | None = None) -> None:
        super().__init__(message)
        self.wait = wait


def api_key_from(api_key: str | None, variable: str) -> str | None:
    """The key given, else the environment ``variable``; None when neither is set (or
    empty)."""
    key = api_key if api_key is not None else os.environ.get(variable)
    return key or None


def ws_base_url(base_url: str | None, variable: str, default: str) -> str:
    """The URL given, else the environment ``variable``, else ``default``, without a
    trailing slash. An ``http(s)://`` root (a self-hosted server) is taken as
    ``ws(s)://``."""
    url = (base_url or os.environ.get(variable) or default).rstrip("/")
    if url.startswith("http://") or url.startswith("https://"):
        url = "ws" + url[4:]
    return url


def describe(exc: BaseException | None) -> str:
    """An exception for a message: its type, and its text when it has one."""
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def close_quietly(ws: aiohttp.ClientWebSocketResponse | None, seconds: float) -> None:
    """Close without ever hanging or raising: a peer that does not answer the close frame
    within ``seconds`` is cut off, and a socket that failed already stays failed (the
    first error is the one told)."""
    if ws is None or ws.closed:
        return
    try:
        async with asyncio.timeout(seconds):
            await ws.close()
    except Exception:
        logger.debug("closing a WebSocket failed", exc_info=True)


def close_of(
    ws: aiohttp.ClientWebSocketResponse, message: aiohttp.WSMessage
) -> tuple[int | None, str]:
    """The close code and reason of a message that ended a connection: a close frame's
    own, else the socket's code (None, or 1006 for a connection cut without a close)."""
    import aiohttp

    if message.type == aiohttp.WSMsgType.CLOSE:
        code = message.data if isinstance(message.data, int) else ws.close_code
        return code, message.extra if isinstance(message.extra, str) else ""
    return ws.close_code, ""


def ended_by(
    ws: aiohttp.ClientWebSocketResponse, message: aiohttp.WSMessage, server: str
) -> tuple[str, int | None] | None:
    """Why a message that is not data ended the connection to ``server``, and the close
    code it gave; None for one that ends nothing (a binary frame, a ping)."""
    import aiohttp

    if message.type == aiohttp.WSMsgType.CLOSE:
        code, reason = close_of(ws, message)
        return f"{server} closed the connection ({code}{' ' + reason if reason else ''})", code
    if message.type == aiohttp.WSMsgType.ERROR:
        return f"the connection to {server} failed: {describe(ws.exception())}", None
    if message.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
        return f"the connection to {server} was lost", None
    return None


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    error: ProviderError,
    what: str,
    log: logging.Logger,
    on_retry: Callable[[], None] | None = None,
    may_retry: Callable[[], bool] | None = None,
) -> T:
    """``await attempt()``, tried again after a ``TryAgain`` as ``policy`` allows, while
    ``may_retry()`` (the provider is not closing; no audio was delivered yet). A
    ``TryAgain`` that is not tried again is raised as ``error(..., retryable=True)``: its
    message, and why there was no other try (``gave up after 2 retries``). ``on_retry``
    counts each retry, before its wait."""
    retries = 0
    while True:
        try:
            return await attempt()
        except TryAgain as failure:
            allowed = may_retry is None or may_retry()
            wait = policy.next_wait(retries, failure.wait) if allowed else ""
            if isinstance(wait, str):
                message = f"{failure} ({wait})" if wait else str(failure)
                raise error(message, retryable=True) from failure
            retries += 1
            if on_retry is not None:
                on_retry()
            log.warning(
                "%s: %s; retry %d of %d in %.2f s", what, failure, retries, policy.max_retries, wait
            )
            await asyncio.sleep(wait)


class Dialer:
    """Opens one provider's WebSockets. ``open`` makes one try, bounded by ``timeout``
    (None: no limit), ``connect`` tries again as ``policy`` allows; both raise ``error``
    (not retryable, except for a timeout) or, from ``open``, ``transient``.

    ``who`` names the provider in messages ("Deepgram"), ``owner`` the client
    ("deepgram.STT"). ``reason_header`` is the response header the server explains a
    refused upgrade in (a WebSocket client never reads the body of one); ``explanations``
    what some statuses mean at this provider (they replace the key hint)."""

    def __init__(
        self,
        *,
        who: str,
        owner: str,
        headers: Mapping[str, str],
        timeout: float | None,
        close_timeout: float,
        policy: RetryPolicy,
        http_session: aiohttp.ClientSession | None,
        error: ProviderError,
        transient: Callable[..., TryAgain] = TryAgain,
        log: logging.Logger = logger,
        max_msg_size: int = 4 * 1024 * 1024,
        reason_header: str | None = None,
        explanations: Mapping[int, str] | None = None,
    ) -> None:
        self.who, self.owner = who, owner
        self._headers = {"User-Agent": USER_AGENT, **headers}
        self.timeout, self.close_timeout, self.policy = timeout, close_timeout, policy
        self.session = http_session
        """The HTTP session the sockets run on: the one given, or the one made (None
        until the first try, and again once ``aclose`` closed it)."""
        self._owns_session = http_session is None
        self._error, self._transient, self._log = error, transient, log
        self._max_msg_size = max_msg_size
        self._reason_header = reason_header
        self._explanations = dict(explanations or {})
        self.retries = 0
        """How many times ``connect`` tried again, so far."""

    async def connect(
        self,
        url: str,
        *,
        setup: Callable[[aiohttp.ClientWebSocketResponse], Awaitable[None]] | None = None,
        may_retry: Callable[[], bool] | None = None,
    ) -> aiohttp.ClientWebSocketResponse:
        """``open``, tried again after a transient failure while ``may_retry()``."""

        def counted() -> None:
            self.retries += 1

        return await with_retries(
            lambda: self.open(url, setup=setup),
            self.policy,
            error=self._error,
            what=self.owner,
            log=self._log,
            on_retry=counted,
            may_retry=may_retry,
        )

    async def open(
        self,
        url: str,
        *,
        setup: Callable[[aiohttp.ClientWebSocketResponse], Awaitable[None]] | None = None,
    ) -> aiohttp.ClientWebSocketResponse:
        """One try: the upgrade, then ``setup(ws)`` (which may raise ``error`` or
        ``TryAgain`` itself), within ``timeout``. A socket that fails its set-up, or
        whose try is cancelled, is closed."""
        import aiohttp

        session = self._session()
        ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            async with asyncio.timeout(self.timeout):
                ws = await session.ws_connect(
                    url,
                    headers=self._headers,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self.close_timeout),
                    max_msg_size=self._max_msg_size,
                )
                if setup is not None:
                    await setup(ws)
                return ws
        except BaseException as exc:
            await close_quietly(ws, self.close_timeout)
            failure = self._failure(exc, url.split("?", 1)[0], opened=ws is not None)
            if failure is None:
                raise
            raise failure from exc

    async def aclose(self) -> None:
        """Close the HTTP session this dialer made (one given is left open)."""
        if self._owns_session and self.session is not None:
            session, self.session = self.session, None
            if not session.closed:
                await session.close()

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self.session is None or self.session.closed:
            if not self._owns_session:
                raise self._error(f"the http_session given to {self.owner} is closed")
            self.session = aiohttp.ClientSession()
        return self.session

    def _failure(self, exc: BaseException, where: str, *, opened: bool) -> Exception | None:
        """What a failed try raises (None: the exception itself, as it came)."""
        import aiohttp

        if isinstance(exc, aiohttp.WSServerHandshakeError):
            message = f"{self.who} refused the connection to {where}: HTTP {exc.status}: "
            message += self._refusal(exc)
            if transient_status(exc.status):
                return self._transient(message, wait=retry_after(exc.headers))
            return self._error(message, retryable=False)
        if isinstance(exc, TimeoutError):
            doing = "waiting for the session to begin at" if opened else "connecting to"
            after = f" (after {self.timeout:g} s)" if self.timeout is not None else ""
            return self._error(f"timed out {doing} {where}{after}", retryable=True)
        if isinstance(exc, aiohttp.InvalidURL | aiohttp.ClientSSLError | ValueError):
            return self._error(f"cannot connect to {where}: {exc}", retryable=False)
        if isinstance(exc, aiohttp.ClientError | OSError):
            return self._transient(f"cannot connect to {where}: {describe(exc)}")
        return None

    def _refusal(self, exc: aiohttp.WSServerHandshakeError) -> str:
        """Why the server refused the upgrade, in its words where it gives any."""
        explained = self._explanations.get(exc.status)
        if explained is not None:
            return explained
        why = ""
        if self._reason_header is not None:
            for key, value in (exc.headers or {}).items():
                if key.lower() == self._reason_header and value:
                    why = value
        if not why and exc.message == _HANDSHAKE_WITHOUT_REASON:
            with contextlib.suppress(ValueError):
                why = http.HTTPStatus(exc.status).phrase
        why = why or exc.message or "no reason given"
        return why + _KEY_HINT if exc.status in (401, 403) else why
