"""A loopback Anthropic Messages server that a test scripts reply by reply.

It listens on 127.0.0.1 (a free port) and speaks the streamed Messages wire format
(https://docs.anthropic.com/en/docs/build-with-claude/streaming): each event as
``event: <type>`` and ``data: <json>`` lines, from ``message_start`` through the content
blocks to ``message_delta`` and ``message_stop``; an error as Anthropic's
``{"type": "error", "error": {"type", "message"}}`` body
(https://docs.anthropic.com/en/api/errors), with the key checked in ``x-api-key``::

    async with AnthropicServer([StreamReply(message("Hello", " there"))]) as server:
        llm = anthropic.LLM(model="claude-test", base_url=server.base_url, api_key="k")
        ...
        assert server.requests[0]["messages"] == [...]

Replies are ``StreamReply`` (steps: event dicts, ``RawData``, ``Pause``,
``CutConnection``) and ``ErrorReply`` (``type`` is the error type: ``overloaded_error``
with status 529, ``rate_limit_error`` with 429 and ``retry_after``, ...), as for
``OpenAIChatServer``; ``done`` has no meaning here (the stream ends with
``message_stop``, which ``message`` adds). ``message`` builds a whole reply: text blocks
and tool calls, usage, the stop reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

from ._scripted_stream import (
    CutConnection,
    ErrorReply,
    Pause,
    RawData,
    Reply,
    ScriptedStreamServer,
    StreamReply,
)

__all__ = [
    "AnthropicServer",
    "CutConnection",
    "ErrorReply",
    "Pause",
    "RawData",
    "Reply",
    "StreamReply",
    "ToolUse",
    "encode_event",
    "error_event",
    "message",
    "message_start",
]

JSONObject: TypeAlias = dict[str, Any]
DEFAULT_MODEL = "claude-test"


class ToolUse:
    """A tool call in a scripted ``message``: its arguments streamed in ``pieces`` of JSON
    text (``input_json_delta``), joined as given (so they can be malformed on purpose)."""

    def __init__(self, call_id: str, name: str, *pieces: str) -> None:
        self.call_id, self.name, self.pieces = call_id, name, pieces


def message_start(
    *,
    input_tokens: int = 10,
    cache_read: int = 0,
    cache_creation: int = 0,
    model: str = DEFAULT_MODEL,
) -> JSONObject:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_creation,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
            },
        },
    }


def message(
    *parts: str | ToolUse,
    stop_reason: str | None = None,
    input_tokens: int = 10,
    cache_read: int = 0,
    cache_creation: int = 0,
    output_tokens: int = 5,
    ping: bool = True,
) -> list[JSONObject]:
    """A whole streamed message: consecutive strings are the deltas of one text block,
    each ``ToolUse`` a block of its own. The stop reason defaults to ``tool_use`` when
    there is a tool call, else ``end_turn``."""
    events: list[JSONObject] = [
        message_start(
            input_tokens=input_tokens, cache_read=cache_read, cache_creation=cache_creation
        )
    ]
    if ping:
        events.append({"type": "ping"})
    index = -1
    text_open = False
    for part in parts:
        if isinstance(part, str):
            if not text_open:
                if index >= 0:
                    events.append({"type": "content_block_stop", "index": index})
                index += 1
                text_open = True
                events.append(
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    }
                )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": part},
                }
            )
            continue
        if index >= 0:
            events.append({"type": "content_block_stop", "index": index})
        index += 1
        text_open = False
        events.append(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {
                    "type": "tool_use",
                    "id": part.call_id,
                    "name": part.name,
                    "input": {},
                },
            }
        )
        events.extend(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in part.pieces
        )
    if index >= 0:
        events.append({"type": "content_block_stop", "index": index})
    if stop_reason is None:
        stop_reason = "tool_use" if any(isinstance(p, ToolUse) for p in parts) else "end_turn"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def error_event(error_type: str = "overloaded_error", text: str = "Overloaded") -> JSONObject:
    """An ``error`` event, as the API sends one mid-stream."""
    return {"type": "error", "error": {"type": error_type, "message": text}}


def encode_event(event: JSONObject) -> bytes:
    """``event: <type>`` and ``data: <json>``, then a blank line."""
    return f"event: {event.get('type', 'message')}\ndata: {json.dumps(event)}\n\n".encode()


class AnthropicServer(ScriptedStreamServer):
    """Serves ``POST /v1/messages`` on 127.0.0.1 from a script (see the module)."""

    path = "/v1/messages"

    def _key_accepted(self, headers: Mapping[str, str]) -> bool:
        return headers.get("x-api-key") == self._api_key

    def _unauthorized(self) -> ErrorReply:
        return ErrorReply(401, "invalid x-api-key", type="authentication_error")

    def _error_body(self, reply: ErrorReply) -> JSONObject:
        return {"type": "error", "error": {"type": reply.type, "message": reply.message}}

    def _encode(self, event: JSONObject) -> bytes:
        return encode_event(event)
