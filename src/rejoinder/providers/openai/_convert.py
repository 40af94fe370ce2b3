"""Conversions between rejoinder's provider-neutral types and the Chat Completions wire format.

Everything here is pure (no I/O), so it is tested by feeding values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...models import (
    AgentHandoff,
    ChatContext,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    ImageContent,
    NamedToolChoice,
    ToolChoice,
    ToolDefinition,
)

JSONObject = dict[str, Any]


def to_messages(chat_ctx: ChatContext) -> list[JSONObject]:
    """Convert a chat context to Chat Completions ``messages``.

    - ``ChatMessage`` → ``{"role", "content"}`` (roles pass through unchanged); a message
      with images has a list of parts for content: its text, then an ``image_url`` part
      per image (a ``data:`` URL for bytes).
    - A run of consecutive ``FunctionCall`` items → one assistant message with ``tool_calls``.
      An assistant text message right before the run is merged into it (``content`` plus
      ``tool_calls``), which is how the model produced it in the first place.
    - ``FunctionCallOutput`` → a ``role: tool`` message with ``tool_call_id``. Each output is
      placed right after the assistant message that carries its call, because the API
      rejects a request where anything else comes between them.
    - ``AgentHandoff`` items are skipped.

    The API also rejects a call without an answer and an answer without a call. A call whose
    output is not in the context yet (interrupted, or still running) is therefore left out,
    and so is an output whose call is missing or was already answered.
    """
    items = chat_ctx.items
    outputs: dict[str, FunctionCallOutput] = {}
    for item in items:
        if isinstance(item, FunctionCallOutput):
            outputs.setdefault(item.call_id, item)

    messages: list[JSONObject] = []
    answered: set[str] = set()
    i = 0
    while i < len(items):
        item = items[i]
        if isinstance(item, ChatMessage):
            nxt = items[i + 1] if i + 1 < len(items) else None
            if item.role == "assistant" and isinstance(nxt, FunctionCall):
                i = _emit_calls(items, i + 1, item.content, outputs, answered, messages)
                continue
            messages.append({"role": item.role, "content": _content(item)})
        elif isinstance(item, FunctionCall):
            i = _emit_calls(items, i, None, outputs, answered, messages)
            continue
        elif isinstance(item, FunctionCallOutput | AgentHandoff):
            # Outputs are emitted together with their calls; handoffs are not for the model.
            pass
        i += 1
    return messages


def _content(message: ChatMessage) -> str | list[JSONObject]:
    """A message's ``content``: its text, or (with images) the text and ``image_url``
    parts, the form the API documents for vision input."""
    if not message.images:
        return message.content
    parts: list[JSONObject] = []
    if message.content:
        parts.append({"type": "text", "text": message.content})
    parts.extend(_image_part(image) for image in message.images)
    return parts


def _image_part(image: ImageContent) -> JSONObject:
    url: JSONObject = {"url": image.data_url()}
    if image.detail != "auto":
        url["detail"] = image.detail
    return {"type": "image_url", "image_url": url}


def _emit_calls(
    items: Sequence[object],
    start: int,
    content: str | None,
    outputs: dict[str, FunctionCallOutput],
    answered: set[str],
    messages: list[JSONObject],
) -> int:
    """Emit the run of FunctionCalls starting at ``start``; return the index after it."""
    calls: list[FunctionCall] = []
    i = start
    while i < len(items):
        item = items[i]
        if not isinstance(item, FunctionCall):
            break
        if item.call_id in outputs and item.call_id not in answered:
            answered.add(item.call_id)
            calls.append(item)
        i += 1
    if calls:
        messages.append(
            {
                "role": "assistant",
                "content": content,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in calls
                ],
            }
        )
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                "content": outputs[call.call_id].output,
            }
            for call in calls
        )
    elif content is not None:
        messages.append({"role": "assistant", "content": content})
    return i


def to_tools(tools: Sequence[ToolDefinition]) -> list[JSONObject]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def to_tool_choice(tool_choice: ToolChoice) -> str | JSONObject:
    if isinstance(tool_choice, NamedToolChoice):
        return {"type": "function", "function": {"name": tool_choice.name}}
    if tool_choice in ("auto", "required", "none"):
        return tool_choice
    raise ValueError(f"unknown tool_choice: {tool_choice!r}")
