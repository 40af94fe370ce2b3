"""An LLM for Google's Gemini API (``generateContent``), streamed over server-sent events.

    from rejoinder.providers import google
    llm = google.LLM(model="gemini-2.5-flash")   # $GEMINI_API_KEY, else $GOOGLE_API_KEY

The request is ``POST {base_url}/models/{model}:streamGenerateContent?alt=sse`` with the
key in ``x-goog-api-key``
(https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent); each
event is a ``GenerateContentResponse``. The chat context is converted by ``_convert`` so
that the request always has the shape the API accepts (``systemInstruction``, alternating
``user``/``model`` contents, every ``functionCall`` answered by a ``functionResponse`` in
the next content, tools as ``functionDeclarations`` with parameters in the schema subset
Gemini takes), and the stream is read by ``_stream``.

Thought signatures (https://ai.google.dev/gemini-api/docs/thought-signatures): Gemini
2.5 and 3 thinking models sign their function-call parts, and Gemini 3 answers HTTP 400 to
the next request if a step's signature is not sent back on its part. ``FunctionCall`` has
no field for it and the session makes the ``FunctionCall`` from the stream's
``ToolCallRequest`` (which has none either), so the ``LLM`` instances of a process share
one ``CallMemory``: the signature (and Gemini's own call id, when it gives one) by call
id (unique: Gemini's, or ours with a random prefix), for the calls they streamed, the
last 4,096 kept (only the turn in progress is checked by the API). The next request puts
them back on the same parts, whichever instance makes it: an agent with its own
``google.LLM`` that a handoff made current finds the signatures of the calls before it.
A step no instance streamed (another provider's, after a fallback) goes with the
documented stand-in signature instead.

A request that fails before anything of the reply was yielded (the server could not be
reached or cut the connection, HTTP 429 ``RESOURCE_EXHAUSTED``, 500 ``INTERNAL``, 503
``UNAVAILABLE`` or another 5xx, an error event with such a status, or a malformed function
call, before the first chunk) is tried again, as ``max_retries`` and the backoff
parameters allow, honouring ``Retry-After``; once a chunk was yielded nothing is retried
(``_chat_stream``). 400 ``INVALID_ARGUMENT`` (a bad key included), 403
``PERMISSION_DENIED`` and 404 ``NOT_FOUND`` are reported at once with the API's
``error.message`` (https://ai.google.dev/gemini-api/docs/troubleshooting).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ... import models
from ...models import ChatChunk, ChatContext, ToolDefinition
from .._chat_stream import StreamedChat, stream_chat
from .._retry import RetryPolicy
from .._timeout import Timeout
from . import _convert
from ._stream import CallMemory, StreamAssembler

SHARED_CALL_MEMORY = CallMemory(limit=4096)
"""Signatures by call id, shared by every ``LLM`` of the process (see the module)."""

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_BASE_URL", "LLM"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
_STREAM_HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


class LLM(StreamedChat):
    """Gemini through ``streamGenerateContent``."""

    _name = "google.LLM"
    _provider = "google"
    _path = ":streamGenerateContent?alt=sse"
    """After ``{base_url}/models/{model}``."""
    _assembler = StreamAssembler

    def __init__(
        self,
        *,
        model: str = "gemini-2.5-flash",
        api_key: str | None = None,
        base_url: str | None = None,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        thinking_budget: int | None = None,
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
            model: the model name (``gemini-2.5-flash``, ``gemini-2.5-pro``, ...); a
                resource name (``models/...``, ``tunedModels/...``) is used as it is.
            api_key: sent as ``x-goog-api-key``; defaults to ``$GEMINI_API_KEY``, then
                ``$GOOGLE_API_KEY``. With none, the request goes without one (a proxy
                that adds it).
            base_url: the API root, up to but excluding ``/models``; defaults to
                ``$GOOGLE_GEMINI_BASE_URL`` (a host, as Google's SDK reads it) plus
                ``/v1beta``, then ``https://generativelanguage.googleapis.com/v1beta``.
            max_output_tokens: the longest reply, in tokens (``maxOutputTokens``; a
                thinking model's thoughts count too); ``None`` leaves it to the server.
            temperature: sampling temperature; ``None`` leaves it to the server.
            top_p: nucleus sampling (``topP``); ``None`` leaves it to the server.
            thinking_budget: ``thinkingConfig.thinkingBudget`` for 2.5 models (0 turns
                thinking off on Flash, the fastest first token for a voice reply; -1 lets
                the model decide); ``None`` leaves it to the server.
            timeout: a ``Timeout``, or seconds for both connect and read; ``None``: connect
                10 s, read 60 s.
            extra_headers: added to every request; they win over the defaults.
            extra_body: added to every request body (``safetySettings``, ``cachedContent``,
                ...); a ``generationConfig`` here is merged key by key into the one the
                options above make.
            http_session: an ``aiohttp.ClientSession`` to use (not closed by ``aclose``).
            max_retries: tries after a transient failure before the first chunk; 0: none.
            retry_backoff: seconds before the first retry, doubling, with jitter.
            retry_backoff_cap: the longest backoff wait, in seconds.

        Raises:
            ValueError: an empty model name, ``max_output_tokens`` below 1, or bad retry
                values.
        """
        retry = RetryPolicy(max_retries, retry_backoff, retry_backoff_cap)
        if not model.strip():
            raise ValueError("a Gemini model name is needed (e.g. gemini-2.5-flash)")
        if max_output_tokens is not None and max_output_tokens < 1:
            raise ValueError("max_output_tokens must be at least 1")
        key = api_key
        if key is None:
            key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        url = base_url or _base_url_from_environment()
        super().__init__(key or None, url, timeout, extra_headers, http_session, retry)
        model = model.strip()
        self._resource = model if "/" in model else f"models/{model}"
        self._model = model.removeprefix("models/")
        generation: dict[str, Any] = {}
        if max_output_tokens is not None:
            generation["maxOutputTokens"] = max_output_tokens
        if temperature is not None:
            generation["temperature"] = temperature
        if top_p is not None:
            generation["topP"] = top_p
        if thinking_budget is not None:
            generation["thinkingConfig"] = {"thinkingBudget": thinking_budget}
        extra = dict(extra_body or {})
        more = extra.pop("generationConfig", None)
        if isinstance(more, Mapping):
            generation.update(more)
        elif more is not None:
            raise ValueError("extra_body's generationConfig must be a mapping")
        self._generation = generation
        self._extra_body = extra
        self._declarations = _convert.Declarations()
        self.call_memory = SHARED_CALL_MEMORY
        """The thought signature and Gemini's call id of each call streamed in this
        process (see the module)."""

    def _auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    @property
    def url(self) -> str:
        """Where ``chat`` posts."""
        return f"{self._base_url}/{self._resource}{self._path}"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        # As StreamedChat.chat, with the model in the URL and this LLM's call memory given
        # to each stream's assembler (it records the signatures the next request sends).
        body = self.build_request(chat_ctx, tools, tool_choice)
        memory = self.call_memory
        return stream_chat(
            self,
            self.url,
            body,
            self._headers(**_STREAM_HEADERS),
            lambda: StreamAssembler(memory),
            self._info,
        )

    def build_request(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: models.ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON body ``chat`` would POST (useful for logging and tests)."""
        system, contents = _convert.to_system_and_contents(chat_ctx, self.call_memory)
        body: dict[str, Any] = {"contents": contents}
        if system is not None:
            body["systemInstruction"] = system
        if tools:
            body["tools"] = _convert.to_tools(tools, self._declarations)
            body["toolConfig"] = _convert.to_tool_config(tool_choice)
        if self._generation:
            body["generationConfig"] = dict(self._generation)
        body.update(self._extra_body)
        return body


def _base_url_from_environment() -> str:
    host = os.environ.get("GOOGLE_GEMINI_BASE_URL")
    return f"{host.rstrip('/')}/v1beta" if host else DEFAULT_BASE_URL
