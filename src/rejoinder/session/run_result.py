"""RunResult: what one ``session.run(user_input=...)`` turn produced, for users' tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models import AgentHandoff, ChatItem, ChatMessage, FunctionCall, FunctionCallOutput


@dataclass
class RunResult:
    user_input: str
    items: list[ChatItem] = field(default_factory=list)
    """Messages, tool calls, tool outputs and handoffs of the turn, in order (the user's
    own message excluded)."""

    def _on_item(self, event: object) -> None:
        item: ChatItem = event.item  # type: ignore[attr-defined]
        self.items.append(item)

    @property
    def messages(self) -> list[ChatMessage]:
        return [i for i in self.items if isinstance(i, ChatMessage)]

    @property
    def function_calls(self) -> list[FunctionCall]:
        return [i for i in self.items if isinstance(i, FunctionCall)]

    @property
    def function_call_outputs(self) -> list[FunctionCallOutput]:
        return [i for i in self.items if isinstance(i, FunctionCallOutput)]

    @property
    def handoffs(self) -> list[AgentHandoff]:
        return [i for i in self.items if isinstance(i, AgentHandoff)]

    @property
    def final_output(self) -> str:
        """The text of the last assistant message ("" when the agent said nothing)."""
        replies = [m for m in self.messages if m.role == "assistant"]
        return replies[-1].content if replies else ""
