"""What a realtime session says, written down: agent transcripts matched to the bursts of
audio they describe, captions on the text output, and assistant messages in the history
where the speech began.

Providers send transcript fragments apart from the audio: ahead of it, with it, or after
it has already played (gpt-live.md §4.5). A fragment that arrives while a burst is being
received belongs to it; one that arrives between bursts belongs to the next burst, unless
its timeline position shows it continues the previous one (a late fragment).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...models import ChatMessage
from ...models.realtime import Transcript
from .playout import Burst

if TYPE_CHECKING:
    from ...models.text import TextOutput
    from ..agents.agent import Agent
    from ..context import SessionContext

logger = logging.getLogger("rejoinder")

UNTEXTED_GRACE_S = 1.0
"""How long after a burst with no transcript a fragment may still arrive for it."""

LATE_FRAGMENT_GAP_MS = 800
"""A fragment starting within this of the previous burst's transcript end continues it
(the same silence that ends a burst, gpt-live.md §4.4)."""


class RealtimeRecord:
    def __init__(self, ctx: SessionContext, current_agent: Callable[[], Agent]) -> None:
        self._ctx = ctx
        self._current_agent = current_agent
        self._pending: list[str] = []
        self._pending_end_ms: int | None = None
        self._last: Burst | None = None
        """The most recent burst that began (it may be finished and recorded)."""
        self._messages: dict[int, ChatMessage] = {}
        """Recorded message of each burst, by burst seq (a late fragment may extend it)."""
        self._begun = 0
        self._order: dict[int, int] = {}
        """When each recorded message's speech began (by id): speech goes in the history
        in the order it began, not the order it ended."""
        self._untexted: tuple[Burst, float] | None = None
        """The last burst, finished with no transcript yet, and when it finished."""
        self._user_turn: tuple[tuple[object | None, object | None], int] | None = None
        self._captions: asyncio.Queue[str | None] = asyncio.Queue()
        self._captioned: set[int] = set()
        output = ctx.output.transcription
        if output is not None:
            ctx.spawn(self._write_captions(output))

    # ------------------------------------------------------------- transcripts

    def _anchor(self) -> tuple[object | None, object | None]:
        history = self._ctx.history.items
        context = self._current_agent().chat_ctx.items
        return (history[-1] if history else None, context[-1] if context else None)

    def burst_began(self, burst: Burst) -> None:
        burst.anchor = self._anchor()
        self._begun += 1
        burst.order = self._begun
        burst.text, self._pending = self._pending, []
        burst.span_end_ms, self._pending_end_ms = self._pending_end_ms, None
        self._last = burst

    def agent_text(self, fragment: Transcript, receiving: Burst | None) -> None:
        if receiving is not None and not self._after(receiving, fragment):
            self._add(receiving, fragment)
            return
        if receiving is None and self._describes_untexted(fragment):
            return
        last = self._last
        if (
            last is not None
            and fragment.start_ms is not None
            and last.span_end_ms is not None
            and fragment.start_ms <= last.span_end_ms + LATE_FRAGMENT_GAP_MS
        ):
            self._add(last, fragment)  # late: its audio already played
            message = self._messages.get(last.seq)
            if message is not None:
                message.content = (message.content + fragment.text).strip()
            return
        self._pending.append(fragment.text)
        if fragment.end_ms is not None:
            self._pending_end_ms = max(fragment.end_ms, self._pending_end_ms or 0)

    @staticmethod
    def _after(burst: Burst, fragment: Transcript) -> bool:
        """The fragment's position shows it starts well after ``burst``'s text: it is
        ahead of its own audio (the next burst), not part of this one."""
        return (
            fragment.start_ms is not None
            and burst.span_end_ms is not None
            and fragment.start_ms > burst.span_end_ms + LATE_FRAGMENT_GAP_MS
        )

    def _describes_untexted(self, fragment: Transcript) -> bool:
        """Text arriving just after a burst that had none is that burst's (a provider
        sends some transcripts only once the audio went out)."""
        last = self._last
        if last is None or last.text:
            return False
        if self._untexted is None:  # still playing, nothing described it yet
            self._add(last, fragment)
            return True
        burst, finished_at = self._untexted
        loop_time = asyncio.get_running_loop().time()
        if burst is not last or loop_time - finished_at > UNTEXTED_GRACE_S:
            return False
        self._untexted = None
        self._add(burst, fragment)
        self._insert(burst, fragment.text.strip(), interrupted=False)
        return True

    def _add(self, burst: Burst, fragment: Transcript) -> None:
        burst.text.append(fragment.text)
        if fragment.end_ms is not None:
            burst.span_end_ms = max(fragment.end_ms, burst.span_end_ms or 0)
        if burst.seq in self._captioned:
            self._captions.put_nowait(fragment.text)

    # ----------------------------------------------------------------- captions

    def burst_audible(self, burst: Burst) -> None:
        """Captions follow the audio: a burst's text shows once it is heard."""
        self._captioned.add(burst.seq)
        text = "".join(burst.text)
        if text:
            self._captions.put_nowait(text)

    async def _write_captions(self, output: TextOutput) -> None:
        while True:
            text = await self._captions.get()
            try:
                if text is None:
                    output.flush()
                else:
                    await output.capture_text(text)
            except Exception:
                logger.exception("the transcription output failed")

    # ------------------------------------------------------------------ history

    def burst_finished(self, burst: Burst, text: str, interrupted: bool) -> None:
        if burst.seq in self._captioned:
            self._captioned.discard(burst.seq)
            self._captions.put_nowait(None)
        if not text:
            if burst is self._last and not burst.text:
                self._untexted = (burst, asyncio.get_running_loop().time())
            return
        self._insert(burst, text, interrupted=interrupted)

    def _insert(self, burst: Burst, text: str, *, interrupted: bool) -> None:
        message = ChatMessage(role="assistant", content=text, interrupted=interrupted)
        self._messages[burst.seq] = message
        if len(self._messages) > 16:
            del self._messages[min(self._messages)]
        # Where the speech began: the user may have talked over it (full duplex).
        self._place(message, burst.anchor, burst.order)

    # --------------------------------------------------------------- user turns

    def user_turn_began(self) -> None:
        if self._user_turn is None:
            self._begun += 1
            self._user_turn = (self._anchor(), self._begun)

    def user_turn_ended(self, text: str) -> None:
        turn, self._user_turn = self._user_turn, None
        if not text.strip():
            return
        message = ChatMessage(role="user", content=text)
        if turn is None:
            self._place(message, self._anchor(), self._begun + 1)
        else:
            self._place(message, turn[0], turn[1])

    def _place(
        self, message: ChatMessage, anchor: tuple[object | None, object | None], order: int
    ) -> None:
        self._order[id(message)] = order
        history_anchor, context_anchor = anchor
        context = self._current_agent().chat_ctx.items
        context.insert(self._position(context, context_anchor, order), message)
        history = self._ctx.history.items
        self._ctx.record(message, at=self._position(history, history_anchor, order))
        if len(self._order) > 64:
            self._order = dict(list(self._order.items())[-32:])

    def _position(self, items: list[Any], anchor: object | None, order: int) -> int:
        """Just after ``anchor``, and after what was said since that began earlier."""
        position = 0
        if anchor is not None:
            position = next(
                (i + 1 for i in range(len(items) - 1, -1, -1) if items[i] is anchor),
                len(items),
            )
        while position < len(items) and self._order.get(id(items[position]), order) < order:
            position += 1
        return position
