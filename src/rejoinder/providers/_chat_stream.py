"""A chat model's streamed reply over HTTP, for every provider that streams one as
server-sent events (OpenAI-compatible Chat Completions, Anthropic Messages): POST the
request, decode the event stream, hand each event's data to the provider's assembler,
and try again after a transient failure that came before anything was yielded.

Once a chunk was yielded nothing is retried: the caller may already have spoken it. A
timeout is not retried either (the caller chose the limit). What a provider brings is
its ``EventAssembler`` (its events → ``ChatChunk``s, sans I/O) and the ``StreamInfo``
its first chunk carries.
"""

from __future__ import annotations

import contextlib
import json
from abc import abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from .. import models
from ..models import ChatChunk, ChatContext, LLMError, StreamInfo, ToolDefinition
from ..models.metrics import label_of
from ._http import Failure, HTTPClient, error_message_from_body, read_some
from ._retry import log_retry
from ._sse import SSEDecoder

__all__ = ["EventAssembler", "StreamedChat", "stream_chat"]


class EventAssembler(Protocol):
    """A provider's stream, sans I/O: each event's data in, ``ChatChunk``s out. Raises
    ``LLMError`` for a malformed event or an error the server reported."""

    @property
    def done(self) -> bool:
        """The stream said it is complete: nothing after it is read."""
        ...

    def feed(self, data: str) -> ChatChunk | None: ...

    def end(self) -> ChatChunk | None:
        """The connection ended: what is still held, or ``LLMError`` if the stream was
        cut short."""
        ...


_STREAM_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}
"""Added to a client's headers: the body is JSON, the reply an event stream."""


class StreamedChat(HTTPClient, models.LLM):
    """A chat model whose reply streams as server-sent events: each provider brings its
    request (``build_request``), the path it is posted to and its ``EventAssembler``."""

    _provider: ClassVar[str]
    _path: ClassVar[str]
    """After the base URL: ``/chat/completions``, ``/messages``."""
    _assembler: ClassVar[Callable[[], EventAssembler]]
    _model: str

    @property
    def model(self) -> str:
        return self._model

    @property
    def provider(self) -> str:
        return self._provider

    def __repr__(self) -> str:
        return f"{self._provider}.LLM(model={self._model!r}, base_url={self._base_url!r})"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        # The request body is built now, so later changes to chat_ctx do not leak into it;
        # the HTTP work happens while the returned stream is iterated.
        body = self.build_request(chat_ctx, tools, tool_choice)
        return stream_chat(
            self,
            f"{self._base_url}{self._path}",
            body,
            self._headers(**_STREAM_HEADERS),
            type(self)._assembler,
            self._info,
        )

    @abstractmethod
    def build_request(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON body ``chat`` would POST (useful for logging and tests)."""

    def _info(self, retries: int) -> StreamInfo:
        return StreamInfo(
            model=self._model, provider=self._provider, label=label_of(self), retries=retries
        )


@dataclass(slots=True)
class _Try:
    """What one try of a request learned, for deciding whether to retry it."""

    delivered: bool = False
    """A chunk was yielded to the caller: never retry."""
    timed_out: bool = False
    server_wait: float | None = None
    """The ``Retry-After`` of an error response."""

    def failed(self, failure: Failure) -> LLMError:
        """``failure`` as the error the caller sees, noting what the retry decision needs."""
        self.timed_out = failure.timed_out
        self.server_wait = failure.wait
        return LLMError(str(failure), retryable=failure.retryable, status=failure.status)


async def stream_chat(
    client: HTTPClient,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    new_assembler: Callable[[], EventAssembler],
    info: Callable[[int], StreamInfo],
) -> AsyncIterator[ChatChunk]:
    """POST ``body`` to ``url`` and stream the reply; the first chunk carries
    ``info(retries)``."""
    try:
        payload = json.dumps(body).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise LLMError(f"the request body is not JSON-serializable: {exc}") from exc
    retries = 0
    while True:
        attempt = _Try()
        try:
            # aclosing: a consumer that stops early must close the try's response now.
            tried = _try(client, url, payload, headers, new_assembler(), attempt)
            async with contextlib.aclosing(tried):
                async for chunk in tried:
                    if not attempt.delivered:
                        attempt.delivered = True
                        yield replace(chunk, info=info(retries))
                        continue
                    yield chunk
            return
        except LLMError as error:
            if attempt.delivered or attempt.timed_out or not error.retryable:
                raise
            wait = client._retry.next_wait(retries, attempt.server_wait)
            if isinstance(wait, str):
                if not wait:
                    raise
                raise LLMError(
                    f"{error} ({wait})", retryable=error.retryable, status=error.status
                ) from error
            retries += 1
            client.retries += 1
            log_retry(client._name, str(error), retries, client._retry, wait)
            if await client._backoff(wait):
                raise LLMError(
                    f"{error} (not retried: {client._name} was closed)", status=error.status
                ) from error


async def _try(
    client: HTTPClient,
    url: str,
    payload: bytes,
    headers: Mapping[str, str],
    assembler: EventAssembler,
    attempt: _Try,
) -> AsyncGenerator[ChatChunk, None]:
    """One try of a request: POST it and stream the reply, noting in ``attempt`` what the
    retry decision needs."""
    try:
        response = await client._post(url, payload, headers)
    except Failure as failure:
        # Chained to what the failure came from (None for an error status), as the
        # failure itself adds nothing to the traceback.
        raise attempt.failed(failure) from failure.__cause__

    finished = False
    try:
        if response.content_type in ("application/json", "text/html"):
            message = error_message_from_body(await read_some(response))
            raise LLMError(
                f"{url} answered {response.content_type} instead of an event stream: {message}",
                status=response.status,
            )

        decoder = SSEDecoder()
        while not assembler.done:
            try:
                data = await response.content.readany()
            except Exception as exc:
                raise attempt.failed(client._read_failure(exc, url, "stream")) from exc
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
