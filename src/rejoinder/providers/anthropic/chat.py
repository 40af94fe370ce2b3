"""An LLM for Anthropic's Messages API (Claude), streamed over server-sent events.

    from rejoinder.providers import anthropic
    llm = anthropic.LLM(model="claude-sonnet-4-5")   # $ANTHROPIC_API_KEY

The request is ``POST {base_url}/messages`` with ``stream: true``, the key in
``x-api-key`` and ``anthropic-version: 2023-06-01``
(https://docs.anthropic.com/en/api/messages). The chat context is converted by
``_convert`` so that the request always has the shape the API accepts (system prompt,
alternating roles, every tool call answered in the next message), and the stream is read
by ``_stream``. Prompt caching is on by default (``cache_prompt``): the tools, the system
prompt and the conversation so far are cached prefixes, and the tokens read from the
cache are reported as ``cached_tokens`` in the session's ``LLMMetrics``.

A request that fails before anything of the reply was yielded (the server could not be
reached or cut the connection, HTTP 429, 529 ``overloaded_error`` or another 5xx, or an
``overloaded_error``, ``api_error`` or ``rate_limit_error`` event before the first
chunk) is tried again, as ``max_retries`` and the backoff parameters allow, honouring
``retry-after``; once a chunk was yielded nothing is retried (``_chat_stream``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import models
from ...models import ChatContext, ToolDefinition
from .._chat_stream import StreamedChat
from .._retry import RetryPolicy
from .._timeout import Timeout
from . import _convert
from ._stream import StreamAssembler

if TYPE_CHECKING:
    import aiohttp

__all__ = ["API_VERSION", "DEFAULT_BASE_URL", "LLM"]

DEFAULT_BASE_URL = "https://api.anthropic.com/v1"
API_VERSION = "2023-06-01"


class LLM(StreamedChat):
    """Claude through the Messages API, streamed."""

    _name = "anthropic.LLM"
    _provider = "anthropic"
    _path = "/messages"
    _assembler = StreamAssembler

    def __init__(
        self,
        *,
        model: str = "claude-sonnet-4-5",
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        cache_prompt: bool = True,
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
            model: the model name (``claude-sonnet-4-5``, ``claude-haiku-4-5``, ...).
            api_key: sent as ``x-api-key``; defaults to ``$ANTHROPIC_API_KEY``. With
                neither, the request goes without one (a proxy that adds it).
            base_url: the API root, up to but excluding ``/messages``; defaults to
                ``$ANTHROPIC_BASE_URL``, then ``https://api.anthropic.com/v1``.
            max_tokens: the longest reply, in tokens (the API requires a bound).
            temperature: sampling temperature; ``None`` leaves it to the server.
            cache_prompt: mark the tools, the system prompt and the conversation as
                cacheable prefixes (prompt caching).
            timeout: a ``Timeout``, or seconds for both connect and read; ``None``: connect
                10 s, read 60 s.
            extra_headers: added to every request (``anthropic-beta`` for instance); they
                win over the defaults.
            extra_body: added to every request body (``top_k``, ``metadata``, ...).
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
            max_retries: tries after a transient failure before the first chunk; 0: none.
            retry_backoff: seconds before the first retry, doubling, with jitter.
            retry_backoff_cap: the longest backoff wait, in seconds.

        Raises:
            ValueError: ``max_tokens`` below 1, or bad retry values.
        """
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        super().__init__(key or None, url, timeout, extra_headers, http_session, retry)
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._cache = cache_prompt
        self._extra_body = dict(extra_body or {})

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def build_request(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON body ``chat`` would POST (useful for logging and tests)."""
        system, messages = _convert.to_system_and_messages(chat_ctx, cache=self._cache)
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = _convert.to_tools(tools, cache=self._cache)
            body["tool_choice"] = _convert.to_tool_choice(tool_choice)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        body.update(self._extra_body)
        return body
