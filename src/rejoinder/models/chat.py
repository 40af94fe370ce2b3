"""Chat context: the provider-neutral conversation record."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import field
from typing import Literal, TypeAlias

from .._dataclass import dataclass
from .image import ImageContent

Role: TypeAlias = Literal["system", "developer", "user", "assistant"]


# Ids only need to be unique within a conversation, not unguessable. os.urandom costs
# about what a seeded PRNG does per id (0.6 µs), without importing `random` at start-up
# (1.5 ms) or `secrets` (hashlib & co).
def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(6).hex()}"


@dataclass(slots=True)
class ChatMessage:
    """One message. ``images``: what the user showed with it (``session.add_image``),
    sent to the model after the text, in each provider's format."""

    role: Role
    content: str
    id: str = field(default_factory=lambda: new_id("msg"))
    interrupted: bool = False
    created_at: float = field(default_factory=time.time)
    type: Literal["message"] = "message"
    images: tuple[ImageContent, ...] = ()

    @property
    def text_content(self) -> str:
        """The message's text (the same as ``content``)."""
        return self.content


@dataclass(slots=True)
class FunctionCall:
    """A tool call the model made. ``arguments`` is the raw JSON text the model produced."""

    call_id: str
    name: str
    arguments: str
    id: str = field(default_factory=lambda: new_id("fc"))
    created_at: float = field(default_factory=time.time)
    type: Literal["function_call"] = "function_call"


@dataclass(slots=True)
class FunctionCallOutput:
    """What a tool returned for the call with the same ``call_id``, as the model is sent
    it; ``is_error`` when the tool raised (the model sees the error's message)."""

    call_id: str
    name: str
    output: str
    is_error: bool = False
    id: str = field(default_factory=lambda: new_id("fco"))
    created_at: float = field(default_factory=time.time)
    type: Literal["function_call_output"] = "function_call_output"


@dataclass(slots=True)
class AgentHandoff:
    """The conversation passed from one agent to another (a tool returned an agent,
    ``session.update_agent``, or a task started or ended); ``old_agent_id`` is ``None``
    for the first agent."""

    old_agent_id: str | None
    new_agent_id: str
    id: str = field(default_factory=lambda: new_id("handoff"))
    created_at: float = field(default_factory=time.time)
    type: Literal["agent_handoff"] = "agent_handoff"


ChatItem: TypeAlias = ChatMessage | FunctionCall | FunctionCallOutput | AgentHandoff
"""One entry of a conversation: a message, a tool call, a tool's output or a handoff
(each has a ``type`` naming which)."""


class ChatContext:
    """An ordered list of chat items with helpers. Cheap to copy (items are shared)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[ChatItem] = ()) -> None:
        self.items: list[ChatItem] = list(items)

    @classmethod
    def empty(cls) -> ChatContext:
        """A context with no items."""
        return cls()

    def add_message(
        self,
        *,
        role: Role,
        content: str,
        interrupted: bool = False,
        images: Iterable[ImageContent] = (),
    ) -> ChatMessage:
        """Append a message with this role and text, and return it."""
        message = ChatMessage(
            role=role, content=content, interrupted=interrupted, images=tuple(images)
        )
        self.items.append(message)
        return message

    def append(self, item: ChatItem) -> None:
        """Append any item: a message, a tool call or output, a handoff."""
        self.items.append(item)

    def copy(self) -> ChatContext:
        """A new context with the same items: appending to one does not change the
        other (the items themselves are shared)."""
        return ChatContext(self.items)

    def messages(self) -> list[ChatMessage]:
        """The messages only, in order (tool calls, outputs and handoffs left out)."""
        return [item for item in self.items if isinstance(item, ChatMessage)]

    def get_by_id(self, item_id: str) -> ChatItem | None:
        """The item with this ``id``, or ``None``."""
        return next((item for item in self.items if item.id == item_id), None)

    def __iter__(self) -> Iterator[ChatItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"ChatContext({len(self.items)} items)"
