"""Speculation: one agent's slot for a speculative reply (see ``preemptive``): at most one
runs at a time, and each is opened on the floor as an uncommitted ``preemptive``
obligation and closed on every path that drops it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Hashable, Mapping
from typing import Any

from ...floor import ObligationKind
from ...models import ChatContext, ChatItem, ChatMessage
from ...models.llm import LLM
from ..events import SpeculationEvent
from ..turn_state import TurnState
from .preemptive import OfferedTool, Preemptive

logger = logging.getLogger("rejoinder")


class Speculation:
    """One agent's slot for a speculative reply: at most one runs at a time."""

    def __init__(
        self,
        state: TurnState,
        owner: str,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
    ) -> None:
        self._state = state
        self._owner = owner
        self._spawn = spawn
        self._current: Preemptive | None = None

    def start(
        self,
        llm: LLM,
        key: Hashable,
        context: list[ChatItem],
        message: ChatMessage,
        tools: Mapping[str, OfferedTool],
    ) -> None:
        """Start generating a reply to the user's ``message`` (kept as is when one with
        the same key is already running)."""
        if self._current is not None and self._current.key == key:
            return
        self.discard("a newer attempt")
        prepared = Preemptive(key, self._state.new(ObligationKind.PREEMPTIVE, self._owner))
        prepared.on_outcome = self._report
        self._state.open_new(prepared.obligation, on_expire=prepared.cancel)
        self._report("started", "")
        stream = llm.chat(
            ChatContext([*context, message]),
            [t.definition for t in tools.values()],
            "auto" if tools else "none",
        )
        prepared.task = self._spawn(prepared.collect(stream))
        self._current = prepared

    def discard(self, reason: str) -> None:
        prepared, self._current = self._current, None
        if prepared is not None:
            logger.debug("preemptive reply discarded: %s", reason)
            prepared.cancel()
            self._state.close(prepared.obligation, "discarded")
            self._report("dropped", reason)

    def _report(self, event: str, reason: str) -> None:
        self._state.report(
            "speculation",
            SpeculationEvent(event, reason, self._state.now()),  # type: ignore[arg-type]
        )

    def claim(self) -> Preemptive | None:
        """The speculative reply, for the user turn that just ended (checked before use)."""
        prepared, self._current = self._current, None
        return prepared
