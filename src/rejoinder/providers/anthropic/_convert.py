"""Conversions between rejoinder's provider-neutral types and the Anthropic Messages wire
format (https://docs.anthropic.com/en/api/messages). Pure: tested by feeding values.

The API is stricter than Chat Completions about the shape of a conversation, and a
request that breaks a rule is answered with HTTP 400, which in a voice agent means a turn
with no reply. So the conversion guarantees the rules instead of passing the context
through:

- The system prompt is the top-level ``system``: the context's leading system and
  developer messages. One that comes later (instructions given mid-conversation) stays
  where it was, as a user-role text block, so the model reads it in order.
- Roles alternate: consecutive messages of one role become one message of several blocks.
- Every ``tool_use`` block is answered by a ``tool_result`` block in the very next
  message, all results of one assistant message together and before any text there
  (https://docs.anthropic.com/en/docs/build-with-claude/tool-use). A call whose output
  is not in the context (interrupted, still running) is left out with its output, and so
  is an output whose call is missing or was answered already: the tool context a
  session keeps across turns and agent switches can never produce the 400 that other
  frameworks' users meet when it is lost between calls.
- A user message's images (``ChatMessage.images``) go before its text, as ``image``
  blocks with a base64 or URL source
  (https://docs.anthropic.com/en/docs/build-with-claude/vision).
- The conversation starts and ends with a user message: an agent that greets first gets
  a ``(the conversation starts)`` user turn before its greeting, and a request whose
  context ends with the agent's own words gets ``(go on)`` after them (otherwise the API
  would read them as a prefill to continue). Empty texts are left out (the API rejects
  empty text blocks).
- With ``cache=True`` (prompt caching, https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching)
  the last tool, the last system block and the last block of the last message carry
  ``cache_control``: the tools, the system prompt and the conversation so far are cached
  prefixes, each turn reading what the previous one wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...models import (
    ChatContext,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    ImageContent,
    NamedToolChoice,
    ToolChoice,
    ToolDefinition,
)
from .._turn_edges import CONVERSATION_STARTS, GO_ON

JSONObject = dict[str, Any]

_EPHEMERAL: JSONObject = {"type": "ephemeral"}


def to_system_and_messages(
    chat_ctx: ChatContext, *, cache: bool = False
) -> tuple[list[JSONObject], list[JSONObject]]:
    """The ``system`` blocks and the ``messages`` of a request for ``chat_ctx``."""
    items = chat_ctx.items
    outputs: dict[str, FunctionCallOutput] = {}
    for item in items:
        if isinstance(item, FunctionCallOutput):
            outputs.setdefault(item.call_id, item)

    system: list[JSONObject] = []
    turns = _Turns()
    answered: set[str] = set()
    leading = True
    for item in items:
        if isinstance(item, ChatMessage):
            if item.role in ("system", "developer"):
                if leading:
                    if item.content:
                        system.append({"type": "text", "text": item.content})
                    continue
                turns.add("user", _text(item.content))
                continue
            leading = False
            role = "user" if item.role == "user" else "assistant"
            if role == "user":
                # Images before the words: the order Anthropic's vision guide recommends.
                for image in item.images:
                    turns.add("user", _image_block(image))
            turns.add(role, _text(item.content))
        elif isinstance(item, FunctionCall):
            leading = False
            if item.call_id not in outputs or item.call_id in answered:
                continue  # no answer yet (or answered already): the pair is left out
            answered.add(item.call_id)
            turns.call(_tool_use(item), _tool_result(outputs[item.call_id]))
        # outputs go with their calls; agent handoffs are not for the model

    messages = turns.messages()
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [_text_block(CONVERSATION_STARTS)]})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": [_text_block(GO_ON)]})
    if cache:
        if system:
            system[-1]["cache_control"] = _EPHEMERAL
        messages[-1]["content"][-1]["cache_control"] = _EPHEMERAL
    return system, messages


class _Turns:
    """Messages with alternating roles, tool results first in the message after their
    calls (parallel calls: one assistant message of calls, one user message of results)."""

    def __init__(self) -> None:
        self._messages: list[JSONObject] = []
        self._results: list[JSONObject] = []
        """Results owed to the last assistant message's tool_use blocks."""

    def add(self, role: str, block: JSONObject | None) -> None:
        """A text: the results owed go first (the user spoke while the tools ran, or the
        agent speaks again after them)."""
        if block is None:
            return
        self._flush_results()
        self._append(role, block)

    def call(self, tool_use: JSONObject, result: JSONObject) -> None:
        """A call with its result: calls in a row share one assistant message."""
        self._append("assistant", tool_use)
        self._results.append(result)

    def messages(self) -> list[JSONObject]:
        self._flush_results()
        return self._messages

    def _flush_results(self) -> None:
        if self._results:
            results, self._results = self._results, []
            self._messages.append({"role": "user", "content": results})

    def _append(self, role: str, block: JSONObject) -> None:
        last = self._messages[-1] if self._messages else None
        if last is not None and last["role"] == role:
            last["content"].append(block)
        else:
            self._messages.append({"role": role, "content": [block]})


def _image_block(image: ImageContent) -> JSONObject:
    if image.data is None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.mime_type, "data": image.base64()},
    }


def _text(content: str) -> JSONObject | None:
    return _text_block(content) if content.strip() else None


def _text_block(text: str) -> JSONObject:
    return {"type": "text", "text": text}


def _tool_use(call: FunctionCall) -> JSONObject:
    return {"type": "tool_use", "id": call.call_id, "name": call.name, "input": _input(call)}


def _input(call: FunctionCall) -> JSONObject:
    """The arguments as the object the API wants; what the model wrote that is not one
    (it was answered with an error already) goes as ``{"arguments": <text>}``."""
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except (ValueError, RecursionError):
        return {"arguments": call.arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _tool_result(output: FunctionCallOutput) -> JSONObject:
    block: JSONObject = {
        "type": "tool_result",
        "tool_use_id": output.call_id,
        "content": output.output or "(no output)",
    }
    if output.is_error:
        block["is_error"] = True
    return block


def to_tools(tools: Sequence[ToolDefinition], *, cache: bool = False) -> list[JSONObject]:
    result: list[JSONObject] = [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]
    if cache and result:
        result[-1]["cache_control"] = _EPHEMERAL
    return result


def to_tool_choice(tool_choice: ToolChoice) -> JSONObject:
    if isinstance(tool_choice, NamedToolChoice):
        return {"type": "tool", "name": tool_choice.name}
    if tool_choice == "auto":
        return {"type": "auto"}
    if tool_choice == "required":
        return {"type": "any"}
    if tool_choice == "none":
        return {"type": "none"}
    raise ValueError(f"unknown tool_choice: {tool_choice!r}")
