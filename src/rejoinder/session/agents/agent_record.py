"""AgentRecord: one agent's side of the record — its chat context (what its model sees)
and the session's history — written in the order things happened.

A reply is recorded once it was heard (that is when its text is known), but it goes
*where it began*: a user message typed or spoken while the reply played, or sent right
after an interrupt, comes after it. Otherwise the next model call would see
``[user: hi, user: stop, assistant: <the reply to hi>]`` and answer as if "stop" had been
answered already.
Tool outputs are appended when they arrive: the model adapters put each right after its
call, as model APIs require.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...models import ChatContext, ChatItem, ChatMessage
from ..speech.handle import Mark

if TYPE_CHECKING:
    from ..context import SessionContext
    from ..speech.handle import SpeechHandle
    from .agent import Agent


class AgentRecord:
    def __init__(self, agent: Agent, ctx: SessionContext) -> None:
        self._agent = agent
        self._ctx = ctx
        self._system_message: ChatMessage | None = None

    def model_context(self, instructions: str | None) -> ChatContext:
        """What the model is given: the agent's instructions, its context, and the
        reply's own extra instructions."""
        agent = self._agent
        if self._system_message is None or self._system_message.content != agent.instructions:
            self._system_message = ChatMessage(role="system", content=agent.instructions)
        items: list[ChatItem] = [self._system_message, *agent.chat_ctx.items]
        if instructions:
            items.append(ChatMessage(role="system", content=instructions))
        return ChatContext(items)

    def mark(self) -> Mark:
        context, history = self._agent.chat_ctx.items, self._ctx.history.items
        return Mark(context[-1] if context else None, history[-1] if history else None)

    def commit(
        self, item: ChatItem, speech: SpeechHandle | None = None, *, at: Mark | None = None
    ) -> None:
        """Record ``item`` in the agent's context and the history: appended, or just
        after ``at`` (plus whatever was recorded there since, except later turns)."""
        context = self._agent.chat_ctx.items
        if at is None:
            context.append(item)
            self._ctx.record(item)
        else:
            context.insert(_after(context, at.context_last), item)
            history = self._ctx.history.items
            self._ctx.record(item, at=_after(history, at.history_last))
        if speech is not None:
            speech.chat_items.append(item)

    def add_user_message(self, text: str) -> ChatMessage:
        message = ChatMessage(role="user", content=text, images=self._ctx.take_images())
        self.commit(message)
        return message


def _after(items: list[ChatItem], anchor: ChatItem | None) -> int:
    """The index just after ``anchor`` and whatever followed it up to the first user
    turn (only user messages must come after the reply). Searches from the end: the
    anchor is recent."""
    if anchor is None:
        position = 0
    else:
        for index in range(len(items) - 1, -1, -1):
            if items[index] is anchor:
                position = index + 1
                break
        else:
            return len(items)  # the context was replaced or edited: append
    while position < len(items) and not _is_user_turn(items[position]):
        position += 1
    return position


def _is_user_turn(item: ChatItem) -> bool:
    return isinstance(item, ChatMessage) and item.role == "user"
