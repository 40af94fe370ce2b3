"""A loopback OpenAI-compatible Chat Completions server that a test scripts reply by reply.

It listens on 127.0.0.1 (a free port), speaks the real streaming wire format (SSE
``data: {...}`` lines ending in ``data: [DONE]``), records every request, and serves the
scripted replies in order::

    async with OpenAIChatServer([StreamReply(text_chunks("Hello", " there"))]) as server:
        llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="test")
        ...
        assert server.requests[0]["messages"] == [...]

A reply is a ``StreamReply`` (steps: chunk dicts, ``RawData``, ``Pause``,
``CutConnection``) or an ``ErrorReply`` (an HTTP error with a JSON error body, optionally
with ``Retry-After``). Scripting a transient failure before a good reply is a list of
replies: ``[ErrorReply(429, retry_after=2), StreamReply(...)]``, ``[ErrorReply(503),
StreamReply(...)]``, or ``[StreamReply([CutConnection()]), StreamReply(...)]`` (the
connection closed before the headers). For a refused connection, start the server on
the port the client failed to reach (``port=``) once it has failed.
``aiohttp`` is imported when the server starts, not when this module is imported.

Under ``looptime`` (virtual time) the server's ``Pause`` steps take no wall-clock time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ._scripted_stream import (
    CutConnection,
    ErrorReply,
    Pause,
    RawData,
    Reply,
    ScriptedStreamServer,
    Step,
    StreamReply,
    error_response,
)

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "CutConnection",
    "ErrorReply",
    "OpenAIChatServer",
    "Pause",
    "RawData",
    "Reply",
    "Step",
    "StreamReply",
    "chunk",
    "encode_event",
    "text_chunks",
    "tool_call_delta",
    "usage_chunk",
]

JSONObject: TypeAlias = dict[str, Any]
DEFAULT_MODEL = "test-model"


# -- chunk builders -------------------------------------------------------------------------


def chunk(
    *,
    content: str | None = None,
    role: str | None = None,
    tool_calls: Sequence[JSONObject] | None = None,
    finish_reason: str | None = None,
    usage: JSONObject | None = None,
    model: str = DEFAULT_MODEL,
    chunk_id: str = "chatcmpl-test",
) -> JSONObject:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: JSONObject = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = list(tool_calls)
    result: JSONObject = {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        result["usage"] = usage
    return result


def text_chunks(*texts: str, finish_reason: str | None = "stop") -> list[JSONObject]:
    """A role chunk, one chunk per text, and a finish chunk (as OpenAI streams a reply)."""
    chunks = [chunk(role="assistant", content="")]
    chunks.extend(chunk(content=text) for text in texts)
    if finish_reason is not None:
        chunks.append(chunk(finish_reason=finish_reason))
    return chunks


def tool_call_delta(
    index: int,
    *,
    call_id: str | None = None,
    name: str | None = None,
    arguments: str | None = None,
) -> JSONObject:
    """One fragment of a streamed tool call (id and name normally come in the first one)."""
    function: JSONObject = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    fragment: JSONObject = {"index": index, "function": function}
    if call_id is not None:
        fragment["id"] = call_id
        fragment["type"] = "function"
    return fragment


def usage_chunk(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
) -> JSONObject:
    """The final ``stream_options.include_usage`` chunk: no choices, just usage
    (``cached_tokens`` goes in ``prompt_tokens_details``, as OpenAI reports it)."""
    usage: JSONObject = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": DEFAULT_MODEL,
        "choices": [],
        "usage": usage,
    }


def encode_event(data: JSONObject | str) -> bytes:
    """``data: <json>\\n\\n`` (a ``str`` is sent as is, e.g. ``"[DONE]"``)."""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


# -- the server -----------------------------------------------------------------------------


class OpenAIChatServer(ScriptedStreamServer):
    """Serves ``POST /v1/chat/completions`` on 127.0.0.1 from a script.

    ``replies`` is either a sequence consumed one reply per request (more can be queued
    with ``add``), or a function from the request body to a reply. A request that finds
    the queue empty gets a 500 error. ``api_key``, when set, makes the server answer 401
    (as OpenAI does) to requests without ``Authorization: Bearer <api_key>``.
    """

    path = "/v1/chat/completions"
    end_of_stream = encode_event("[DONE]")

    def _key_accepted(self, headers: Mapping[str, str]) -> bool:
        return headers.get("Authorization") == f"Bearer {self._api_key}"

    def _unauthorized(self) -> ErrorReply:
        return ErrorReply(401, "Incorrect API key provided.", code="invalid_api_key")

    def _error_body(self, reply: ErrorReply) -> JSONObject:
        return _openai_error_body(reply)

    def _encode(self, event: JSONObject) -> bytes:
        return encode_event(event)


def _openai_error_body(reply: ErrorReply) -> JSONObject:
    return {
        "error": {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}
    }


def _error_response(reply: ErrorReply) -> web.Response:
    """An error reply in OpenAI's dialect (the audio server's too)."""
    return error_response(reply, _openai_error_body(reply))
