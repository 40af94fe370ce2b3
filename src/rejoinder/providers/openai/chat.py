"""An LLM for any OpenAI-compatible Chat Completions endpoint, streamed over SSE.

Works with OpenAI itself and with local servers that speak the same protocol (Ollama,
vLLM, llama.cpp, LM Studio, ...). ``aiohttp`` is imported on first use only, so importing
this module is cheap.

A request that fails before anything of the reply was yielded (the server could not be
reached or cut the connection, HTTP 429 or 5xx) is tried again, as ``max_retries`` and
the backoff parameters allow; see ``_retry``. Once a chunk was yielded nothing is retried:
the caller may already have spoken it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ... import models
from ...models import ChatChunk, ChatContext, LLMError, StreamInfo, ToolDefinition
from ...models.metrics import label_of
from .._retry import RetryPolicy, log_retry, retry_after, transient_status
from .._timeout import Timeout
from . import _convert
from ._auth import DEFAULT_BASE_URL, api_key_from, base_url_from
from ._stream import SSEDecoder, StreamAssembler

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_BASE_URL", "LLM", "SSEDecoder", "StreamAssembler", "Timeout"]

_USER_AGENT = "rejoinder/0.1"
_MAX_ERROR_BODY_BYTES = 64 * 1024


@dataclass(slots=True)
class _Try:
    """What one try of a request learned, for deciding whether to retry it."""

    delivered: bool = False
    """A chunk was yielded to the caller: never retry."""
    timed_out: bool = False
    server_wait: float | None = None
    """The ``Retry-After`` of an error response."""


class LLM(models.LLM):
    """Chat Completions over HTTP with ``stream: true``.

    ``from rejoinder.providers import openai; openai.LLM(model="gpt-4o-mini")``.
    For a local server: ``openai.LLM(model="llama3.2", base_url="http://localhost:11434/v1")``.
    """

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float | None = None,
        timeout: Timeout | float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        http_session: aiohttp.ClientSession | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        retry_backoff_cap: float = 8.0,
    ) -> None:
        """
        Args:
            model: the model name the server knows.
            api_key: sent as ``Authorization: Bearer``; defaults to ``$OPENAI_API_KEY``.
                When neither is set no ``Authorization`` header is sent (local servers).
            base_url: the API root, up to but excluding ``/chat/completions``; defaults to
                ``$OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
            temperature: sampling temperature; ``None`` leaves it to the server.
            timeout: a ``Timeout``, or a number of seconds used for both connect and read;
                ``None`` means ``Timeout()`` (connect 10 s, read 60 s, no total limit).
            extra_headers: added to every request (they win over the defaults).
            extra_body: added to every request body (vendor options such as ``seed``).
            http_session: an ``aiohttp.ClientSession`` to use; it is not closed by
                ``aclose()``. By default the LLM creates its own on first use.
            max_retries: how many times a request is tried again after a transient
                failure (cannot connect, connection cut, HTTP 429 or 5xx) that came before
                any chunk was yielded; 0 disables retrying. Counted in ``retries``.
            retry_backoff: seconds before the first retry, doubling with each retry,
                with jitter (each wait is between half and all of that). A
                ``Retry-After`` (or ``retry-after-ms``) header is honoured instead, up to
                30 s; a server asking for longer gets no retry.
            retry_backoff_cap: the longest backoff wait, in seconds.

        Raises:
            ValueError: a negative or non-integer ``max_retries``, a negative or
                non-finite backoff, or a cap below ``retry_backoff``.
        """
        self._retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        self.retries = 0
        """How many times this LLM retried a request so far (each retry is also logged as
        a warning on the ``rejoinder.providers.openai`` logger)."""
        self._model = model
        self._api_key = api_key_from(api_key)
        self._base_url = base_url_from(base_url).rstrip("/")
        self._temperature = temperature
        self._timeout = Timeout.of(timeout)
        self._extra_headers = dict(extra_headers or {})
        self._extra_body = dict(extra_body or {})
        self._session = http_session
        self._owns_session = http_session is None

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return "openai"

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        return f"openai.LLM(model={self._model!r}, base_url={self._base_url!r})"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        # The request body is built now, so later changes to chat_ctx do not leak into it;
        # the HTTP work happens while the returned stream is iterated.
        body = self.build_request(chat_ctx, tools, tool_choice)
        return self._stream(body)

    def build_request(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON body ``chat`` would POST (useful for logging and tests)."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": _convert.to_messages(chat_ctx),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = _convert.to_tools(tools)
            body["tool_choice"] = _convert.to_tool_choice(tool_choice)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        body.update(self._extra_body)
        return body

    async def aclose(self) -> None:
        """Close the HTTP session this LLM created (a session passed in is left open)."""
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            if not session.closed:
                await session.close()

    def _info(self, retries: int) -> StreamInfo:
        return StreamInfo(
            model=self._model, provider="openai", label=label_of(self), retries=retries
        )

    # -- HTTP ---------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or (self._owns_session and self._session.closed):
            import aiohttp

            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "User-Agent": _USER_AGENT,
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self._extra_headers)
        return headers

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[ChatChunk]:
        import aiohttp

        url = f"{self._base_url}/chat/completions"
        timeout = aiohttp.ClientTimeout(
            total=self._timeout.total,
            connect=self._timeout.connect,
            sock_connect=self._timeout.connect,
            sock_read=self._timeout.read,
        )
        try:
            payload = json.dumps(body).encode()
        except (TypeError, ValueError, RecursionError) as exc:
            raise LLMError(f"the request body is not JSON-serializable: {exc}") from exc
        retries = 0
        while True:
            attempt = _Try()
            try:
                # aclosing: a consumer that stops early must close the try's response now.
                async with contextlib.aclosing(self._try(url, payload, timeout, attempt)) as tried:
                    async for chunk in tried:
                        if not attempt.delivered:
                            attempt.delivered = True
                            yield replace(chunk, info=self._info(retries))
                            continue
                        yield chunk
                return
            except LLMError as error:
                if attempt.delivered or attempt.timed_out or not error.retryable:
                    raise
                wait = self._retry.next_wait(retries, attempt.server_wait)
                if isinstance(wait, str):
                    if not wait:
                        raise
                    raise LLMError(
                        f"{error} ({wait})", retryable=error.retryable, status=error.status
                    ) from error
                retries += 1
                self.retries += 1
                log_retry("openai.LLM", str(error), retries, self._retry, wait)
                await asyncio.sleep(wait)

    async def _try(
        self, url: str, payload: bytes, limits: aiohttp.ClientTimeout, attempt: _Try
    ) -> AsyncGenerator[ChatChunk, None]:
        """One try of a request: POST it and stream the reply, noting in ``attempt`` what
        the retry decision needs."""
        try:
            response = await self._get_session().post(
                url, data=payload, headers=self._headers(), timeout=limits
            )
        except Exception as exc:
            attempt.timed_out = isinstance(exc, TimeoutError)
            raise self._request_error(exc, url) from exc

        finished = False
        try:
            if response.status >= 300:
                attempt.server_wait = retry_after(response.headers)
                raise await self._status_error(response, url)
            if response.content_type in ("application/json", "text/html"):
                message = _convert.error_message_from_body(await self._read_some(response))
                raise LLMError(
                    f"{url} answered {response.content_type} instead of an event stream: {message}",
                    status=response.status,
                )

            decoder = SSEDecoder()
            assembler = StreamAssembler()
            while not assembler.done:
                try:
                    data = await response.content.readany()
                except Exception as exc:
                    attempt.timed_out = isinstance(exc, TimeoutError)
                    raise self._read_error(exc, url) from exc
                try:
                    events = decoder.feed(data) if data else decoder.flush()
                except ValueError as exc:
                    raise LLMError(f"malformed event stream from {url}: {exc}") from exc
                for event in events:
                    chunk = assembler.feed(event)
                    if chunk is not None:
                        yield chunk
                    if assembler.done:
                        break
                if not data:
                    chunk = assembler.end()
                    if chunk is not None:
                        yield chunk
                    break
            finished = True
        finally:
            if finished:
                response.release()
            else:
                # Cancelled, failed, or abandoned by the consumer: drop the connection so no
                # half-read stream goes back into the pool.
                response.close()

    async def _read_some(self, response: aiohttp.ClientResponse) -> bytes:
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

    async def _status_error(self, response: aiohttp.ClientResponse, url: str) -> LLMError:
        status = response.status
        message = _convert.error_message_from_body(await self._read_some(response))
        reason = f" {response.reason}" if response.reason else ""
        return LLMError(
            f"{url} returned HTTP {status}{reason}: {message}",
            retryable=transient_status(status),
            status=status,
        )

    def _request_error(self, exc: Exception, url: str) -> LLMError:
        """An exception from sending the request or waiting for the response headers."""
        import aiohttp

        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return LLMError(
                f"timed out connecting to {url} (after {self._timeout.connect}s)", retryable=True
            )
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return LLMError(
                f"timed out waiting for {url} to respond (no answer for {self._timeout.read}s)",
                retryable=True,
            )
        if isinstance(exc, TimeoutError):
            return LLMError(
                f"timed out waiting for {url} (total limit {self._timeout.total}s)", retryable=True
            )
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return LLMError(f"TLS error connecting to {url}: {exc}")
        if isinstance(exc, aiohttp.ClientConnectorError):
            if isinstance(exc.os_error, ConnectionRefusedError):
                reason = "connection refused"
            else:
                reason = exc.os_error.strerror or str(exc.os_error) or str(exc)
            return LLMError(f"cannot connect to {url}: {reason}", retryable=True)
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            return LLMError(f"{url} closed the connection before responding", retryable=True)
        if isinstance(exc, aiohttp.InvalidURL | ValueError):
            return LLMError(f"invalid request URL {url!r}: {exc}")
        if isinstance(exc, aiohttp.ClientError | OSError):
            return LLMError(f"request to {url} failed: {_describe(exc)}", retryable=True)
        return LLMError(f"request to {url} failed: {_describe(exc)}")

    def _read_error(self, exc: Exception, url: str) -> LLMError:
        """An exception from reading the body of a streaming response."""
        import aiohttp

        if isinstance(exc, aiohttp.ServerTimeoutError):
            return LLMError(
                f"timed out reading the stream from {url} (no data for {self._timeout.read}s)",
                retryable=True,
            )
        if isinstance(exc, TimeoutError):
            return LLMError(
                f"timed out reading the stream from {url} (total limit {self._timeout.total}s)",
                retryable=True,
            )
        if isinstance(exc, aiohttp.ClientError | OSError):
            return LLMError(
                f"connection lost mid-stream from {url}: {_describe(exc)}", retryable=True
            )
        return LLMError(f"reading the stream from {url} failed: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
