"""RunResult: what one ``session.run(user_input=...)`` turn produced, for users' tests.

    result = await session.run(user_input="weather in Paris?")
    result.expect.next_event().is_function_call(name="lookup", arguments={"city": "Paris"})
    result.expect.next_event().is_function_call_output(output="sunny")
    result.expect.next_event().is_message(role="assistant")
    result.expect.no_more_events()

A failed expectation raises ``AssertionError`` with a numbered dump of the turn's events.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, NoReturn

from .._dataclass import dataclass
from ..models import AgentHandoff, ChatItem, ChatMessage, FunctionCall, FunctionCallOutput


@dataclass
class RunResult:
    """What one ``session.run(user_input=...)`` turn produced: its items in order, by
    kind, the final text, and ``expect`` for ordered assertions::

        result = await session.run(user_input="weather in Paris?")
        result.expect.next_event().is_function_call(name="lookup", arguments={"city": "Paris"})
        result.expect.next_event().is_function_call_output(output="sunny")
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
    """

    user_input: str
    items: list[ChatItem] = field(default_factory=list)
    """Messages, tool calls, tool outputs and handoffs of the turn, in order (the user's
    own message excluded)."""
    _expect: RunExpectation | None = field(default=None, repr=False, compare=False)

    def _on_item(self, event: object) -> None:
        item: ChatItem = event.item  # type: ignore[attr-defined]
        self.items.append(item)

    @property
    def messages(self) -> list[ChatMessage]:
        """The turn's messages."""
        return [i for i in self.items if isinstance(i, ChatMessage)]

    @property
    def function_calls(self) -> list[FunctionCall]:
        """The turn's tool calls."""
        return [i for i in self.items if isinstance(i, FunctionCall)]

    @property
    def function_call_outputs(self) -> list[FunctionCallOutput]:
        """The turn's tool outputs."""
        return [i for i in self.items if isinstance(i, FunctionCallOutput)]

    @property
    def handoffs(self) -> list[AgentHandoff]:
        """The turn's handoffs."""
        return [i for i in self.items if isinstance(i, AgentHandoff)]

    @property
    def expect(self) -> RunExpectation:
        """Ordered assertions over ``items`` (one cursor per result)."""
        if self._expect is None:
            self._expect = RunExpectation(self.items)
        return self._expect

    @property
    def final_output(self) -> str:
        """The text of the last assistant message ("" when the agent said nothing)."""
        replies = [m for m in self.messages if m.role == "assistant"]
        return replies[-1].content if replies else ""


def describe(item: ChatItem) -> str:
    if isinstance(item, ChatMessage):
        flag = " (interrupted)" if item.interrupted else ""
        return f"message {item.role}: {item.content!r}{flag}"
    if isinstance(item, FunctionCall):
        return f"function_call {item.name}({item.arguments})"
    if isinstance(item, FunctionCallOutput):
        error = " error" if item.is_error else ""
        return f"function_call_output{error} {item.name}: {item.output!r}"
    return f"agent_handoff {item.old_agent_id} -> {item.new_agent_id}"


class RunExpectation:
    """``result.expect``: a cursor over the turn's items. A failed expectation raises
    ``AssertionError`` listing the items, the one it failed on marked."""

    def __init__(self, items: list[ChatItem]) -> None:
        self._items = items
        self._cursor = 0

    def next_event(self) -> EventAssert:
        """The next item, to check with ``is_message``, ``is_function_call``, ..."""
        if self._cursor >= len(self._items):
            self._fail(f"expected another event after #{self._cursor}, the turn had no more")
        item = self._items[self._cursor]
        self._cursor += 1
        return EventAssert(item, self._cursor - 1, self)

    def skip_next(self, count: int = 1) -> RunExpectation:
        """Move past ``count`` items without checking them."""
        self._cursor = min(len(self._items), self._cursor + count)
        return self

    def no_more_events(self) -> None:
        """Fail if items are left after the cursor."""
        if self._cursor < len(self._items):
            self._fail(f"expected no more events, but #{self._cursor} and later remain")

    def _fail(self, message: str) -> NoReturn:
        lines = [
            f"  {'>' if i == self._cursor - 1 else ' '} #{i} {describe(item)}"
            for i, item in enumerate(self._items)
        ]
        raise AssertionError(message + "\nthe turn's events:\n" + "\n".join(lines or ["  (none)"]))


class EventAssert:
    """One item of the turn, from ``next_event``: each ``is_...`` checks its kind and the
    fields given, and returns the item."""

    def __init__(self, item: ChatItem, index: int, owner: RunExpectation) -> None:
        self.item, self._index, self._owner = item, index, owner

    def _mismatch(self, expected: str) -> NoReturn:
        self._owner._fail(f"event #{self._index}: expected {expected}, got {describe(self.item)}")

    def is_message(self, *, role: str | None = None, content: str | None = None) -> ChatMessage:
        """A message, from ``role`` if given, whose text contains ``content`` if given."""
        item = self.item
        if (
            not isinstance(item, ChatMessage)
            or (role is not None and item.role != role)
            or (content is not None and content not in item.content)
        ):
            wanted = f"a message{f' from {role}' if role else ''}"
            self._mismatch(wanted + (f" containing {content!r}" if content else ""))
        return item

    def is_function_call(
        self, *, name: str | None = None, arguments: dict[str, Any] | None = None
    ) -> FunctionCall:
        """A tool call, to ``name`` if given, whose arguments parse to ``arguments`` if
        given."""
        item = self.item
        ok = isinstance(item, FunctionCall) and (name is None or item.name == name)
        if ok and arguments is not None:
            assert isinstance(item, FunctionCall)
            import json  # here, not at import: only assertions on arguments parse JSON

            try:
                ok = json.loads(item.arguments or "{}") == arguments
            except json.JSONDecodeError:
                ok = False
        if not ok or not isinstance(item, FunctionCall):
            self._mismatch(
                f"a function call{f' to {name}' if name else ''}"
                + (f" with {arguments}" if arguments is not None else "")
            )
        return item

    def is_function_call_output(
        self, *, output: str | None = None, is_error: bool | None = None
    ) -> FunctionCallOutput:
        """A tool's output, equal to ``output`` if given, an error or not if
        ``is_error`` is given."""
        item = self.item
        if (
            not isinstance(item, FunctionCallOutput)
            or (output is not None and item.output != output)
            or (is_error is not None and item.is_error != is_error)
        ):
            self._mismatch(
                "a function call output"
                + (f" {output!r}" if output is not None else "")
                + ("" if is_error is None else f" (is_error={is_error})")
            )
        return item

    def is_agent_handoff(self, *, new_agent_id: str | None = None) -> AgentHandoff:
        """A handoff, to the agent with id ``new_agent_id`` if given."""
        item = self.item
        if not isinstance(item, AgentHandoff) or (
            new_agent_id is not None and item.new_agent_id != new_agent_id
        ):
            self._mismatch(f"a handoff{f' to {new_agent_id}' if new_agent_id else ''}")
        return item
