"""Checks that an agent's chat context reads in speaking order, as its model is given it.

Chat APIs put a tool's output right after the call that asked for it. A context reads in
speaking order only if nothing said sits between a call and its output (the wire would
move the output above it), and if what was said comes in the order the history has it.
"""

from __future__ import annotations

from collections.abc import Sequence

import rejoinder as rj


def read(items: Sequence[rj.ChatItem]) -> list[tuple[str, str]]:
    """A context as (kind, text) pairs: messages by role, calls by name, outputs by text."""
    out: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, rj.ChatMessage):
            out.append((item.role, item.content))
        elif isinstance(item, rj.FunctionCall):
            out.append(("call", item.name))
        elif isinstance(item, rj.FunctionCallOutput):
            out.append(("output", item.output))
    return out


def assert_speaking_order(items: Sequence[rj.ChatItem], history: rj.ChatContext) -> None:
    """``items`` (an agent's context) against the session's ``history``."""
    open_calls: dict[str, int] = {}
    for index, item in enumerate(items):
        if isinstance(item, rj.FunctionCall):
            open_calls[item.call_id] = index
        elif isinstance(item, rj.FunctionCallOutput) and item.call_id in open_calls:
            start = open_calls.pop(item.call_id)
            between = [i for i in items[start:index] if isinstance(i, rj.ChatMessage)]
            assert between == [], (
                f"said between {item.name}'s call and its output: {read(between)} in {read(items)}"
            )
    where = {id(item): index for index, item in enumerate(history.items)}
    said = [i for i in items if isinstance(i, rj.ChatMessage) and id(i) in where]
    positions = [where[id(message)] for message in said]
    assert positions == sorted(positions), f"not in the history's order: {read(said)}"
