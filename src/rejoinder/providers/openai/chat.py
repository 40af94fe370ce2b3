"""An LLM for any OpenAI-compatible Chat Completions endpoint, streamed over SSE.

Works with OpenAI itself and with local servers that speak the same protocol (Ollama,
vLLM, llama.cpp, LM Studio, ...). ``aiohttp`` is imported on first use only, so importing
this module is cheap.

A request that fails before anything of the reply was yielded (the server could not be
reached or cut the connection, HTTP 429 or 5xx) is tried again, as ``max_retries`` and
the backoff parameters allow; see ``_retry`` and ``_chat_stream``. Once a chunk was
yielded nothing is retried: the caller may already have spoken it. The session, headers,
timeouts and the messages of failed requests are ``_http``'s, shared with the speech
clients.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import models
from ...models import ChatContext, ToolDefinition
from .._chat_stream import StreamedChat
from .._retry import RetryPolicy
from .._sse import SSEDecoder
from .._timeout import Timeout
from . import _convert
from ._auth import DEFAULT_BASE_URL
from ._http import HTTPClient
from ._stream import StreamAssembler

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_BASE_URL", "LLM", "SSEDecoder", "StreamAssembler", "Timeout"]


class LLM(HTTPClient, StreamedChat):
    """Chat Completions over HTTP with ``stream: true``.

    ``from rejoinder.providers import openai; openai.LLM(model="gpt-4o-mini")``.
    For a local server: ``openai.LLM(model="llama3.2", base_url="http://localhost:11434/v1")``.
    """

    _name = "openai.LLM"
    _provider = "openai"
    _path = "/chat/completions"
    _assembler = StreamAssembler

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
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        super().__init__(api_key, base_url, timeout, extra_headers, http_session, retry)
        self._model = model
        self._temperature = temperature
        self._extra_body = dict(extra_body or {})

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
