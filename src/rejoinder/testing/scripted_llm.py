"""ScriptedLLM: a deterministic LLM for tests, driven by a script on (virtual) time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..models import LLM, ChatChunk, ChatContext, LLMError, ToolCallRequest, ToolChoice, Usage
from ..models.tools import ToolDefinition


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model calls ``name``. ``arguments`` may be a raw string to script bad JSON."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Delay:
    """Pause the stream for ``seconds`` of loop time."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Gate:
    """Pause the stream until ``event`` is set."""

    event: asyncio.Event


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise ``LLMError(message)`` at this point of the stream."""

    message: str = "scripted failure"


Step: TypeAlias = str | ToolCall | Delay | Gate | Fail | Usage
"""A ``Usage`` (``rejoinder.models.Usage(prompt_tokens, completion_tokens,
cached_tokens)``) is sent as a chunk carrying only those token counts, as a provider
reports them at the end of a stream."""
Response: TypeAlias = Sequence[Step]


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    """One call a ``ScriptedLLM`` received (``llm.calls``): the conversation it was
    sent, the tools offered and the tool choice."""

    chat_ctx: ChatContext
    tools: list[ToolDefinition]
    tool_choice: ToolChoice


class ScriptedLLM(LLM):
    """``responses`` is a list consumed one per ``chat()`` call, or a function of the
    chat context returning the response. Running out of responses is an ``LLMError``.
    ``model`` is the name it reports (``"scripted"``; set it to tell two apart)."""

    def __init__(
        self,
        responses: Sequence[Response] | Callable[[ChatContext], Response],
        *,
        model: str = "scripted",
    ) -> None:
        self._model = model
        self._responses = responses if callable(responses) else list(responses)
        self._next = 0
        self._call_ids = 0
        self.calls: list[ScriptedCall] = []

    @property
    def model(self) -> str:
        """The name given as ``model`` (``"scripted"``)."""
        return self._model

    @property
    def provider(self) -> str:
        return "rejoinder.testing"

    def chat(
        self,
        chat_ctx: ChatContext,
        tools: Sequence[ToolDefinition] = (),
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[ChatChunk]:
        self.calls.append(ScriptedCall(chat_ctx.copy(), list(tools), tool_choice))
        if callable(self._responses):
            script: Response | None = self._responses(chat_ctx)
        elif self._next < len(self._responses):
            script = self._responses[self._next]
            self._next += 1
        else:
            script = None
        return self._stream(script)

    async def _stream(self, script: Response | None) -> AsyncIterator[ChatChunk]:
        if script is None:
            raise LLMError(f"ScriptedLLM has no response left for call {len(self.calls)}")
        for step in script:
            if isinstance(step, str):
                yield ChatChunk(delta=step)
            elif isinstance(step, ToolCall):
                self._call_ids += 1
                arguments = (
                    step.arguments
                    if isinstance(step.arguments, str)
                    else json.dumps(step.arguments)
                )
                call_id = step.call_id or f"call_{self._call_ids}"
                yield ChatChunk(tool_calls=(ToolCallRequest(call_id, step.name, arguments),))
            elif isinstance(step, Delay):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Gate):
                await step.event.wait()
            elif isinstance(step, Fail):
                raise LLMError(step.message)
            elif isinstance(step, Usage):
                yield ChatChunk(usage=step)
