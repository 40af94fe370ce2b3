"""Where a finished task's conversation goes in its caller's chat context.

The caller's context must read in speaking order *as its model is given it*. Chat APIs
require a tool's output to come right after the call that asked for it (the Chat
Completions adapter moves each output up to its call), so a task's question and the
user's answer placed between the caller's call and its output would be read as coming
*after* the output: the model's context would end with the user's answer, and a model
takes that as a new request and calls the tool again.

So the task's conversation goes just before the caller's calls that were still running
when the task began (the one awaiting the task among them): what was said stays in the
order it was said, and each call stays next to its output, at the end, where the
caller's follow-up reply reads it. A task awaited from a hook, or from a tool already
released to the background, has no such call: its conversation is appended.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...models import ChatItem, ChatMessage, FunctionCall, FunctionCallOutput


def answered_calls(items: Sequence[ChatItem]) -> frozenset[str]:
    """The call ids ``items`` already holds outputs for: taken when a task begins, so
    any other call of the caller's was still running then."""
    return frozenset(item.call_id for item in items if isinstance(item, FunctionCallOutput))


def merge_conversation(
    caller: list[ChatItem], task: Sequence[ChatItem], answered: frozenset[str]
) -> None:
    """Put what was said in ``task`` into ``caller`` (in place), before the caller's calls
    that were running when the task began (``answered``: see ``answered_calls``)."""
    said = conversation(task)
    position = _before_running_calls(caller, answered)
    caller[position:position] = said


def conversation(items: Sequence[ChatItem]) -> list[ChatItem]:
    """What a task's context adds to its caller's: what was said (not instructions, and
    not the task's own tool calls: the caller's model is not offered those tools; the
    history keeps them)."""
    return [
        item
        for item in items
        if isinstance(item, ChatMessage) and item.role in ("user", "assistant")
    ]


def _before_running_calls(items: Sequence[ChatItem], answered: frozenset[str]) -> int:
    """The index of the first call, in the run of calls and outputs that ends the
    context, that had no output when the task began; the end if there is none.

    Only the trailing run is searched: the awaiting call was recorded with the reply
    that made it, and while the caller is paused nothing but tool records (outputs, a
    background tool's final result) can follow it. An output that landed since (the
    awaiting tool was cancelled, or the task's end reached it first) is in that run
    too, so the call moves with its output."""
    start = len(items)
    while start > 0 and isinstance(items[start - 1], FunctionCall | FunctionCallOutput):
        start -= 1
    for index in range(start, len(items)):
        item = items[index]
        if isinstance(item, FunctionCall) and item.call_id not in answered:
            return index
    return len(items)
