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
from typing import TYPE_CHECKING, Any

from ..models import ChatMessage
from ..models.realtime import Transcript
from .realtime_playout import Burst

if TYPE_CHECKING:
    from ..io.text import TextOutput
    from .session import AgentSession

logger = logging.getLogger("rejoinder")

LATE_FRAGMENT_GAP_MS = 800
"""A fragment starting within this of the previous burst's transcript end continues it
(the same silence that ends a burst, gpt-live.md §4.4)."""


class RealtimeRecord:
    def __init__(self, session: AgentSession[Any]) -> None:
        self._session = session
        self._pending: list[str] = []
        self._pending_end_ms: int | None = None
        self._last: Burst | None = None
        """The most recent burst that began (it may be finished and recorded)."""
        self._messages: dict[int, ChatMessage] = {}
        """Recorded message of each burst, by burst seq (a late fragment may extend it)."""
        self._captions: asyncio.Queue[str | None] = asyncio.Queue()
        self._captioned: set[int] = set()
        output = session.output.transcription
        if output is not None:
            session._spawn(self._write_captions(output))

    # ------------------------------------------------------------- transcripts

    def burst_began(self, burst: Burst) -> None:
        history = self._session.history.items
        context = self._session.current_agent.chat_ctx.items
        burst.anchor = (history[-1] if history else None, context[-1] if context else None)
        burst.text, self._pending = self._pending, []
        burst.span_end_ms, self._pending_end_ms = self._pending_end_ms, None
        self._last = burst

    def agent_text(self, fragment: Transcript, receiving: Burst | None) -> None:
        if receiving is not None:
            self._add(receiving, fragment)
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
            return
        message = ChatMessage(role="assistant", content=text, interrupted=interrupted)
        self._messages[burst.seq] = message
        if len(self._messages) > 16:
            del self._messages[min(self._messages)]
        # Where the speech began: the user may have talked over it (full duplex).
        history_anchor, context_anchor = burst.anchor
        context = self._session.current_agent.chat_ctx.items
        context.insert(self._position(context, context_anchor), message)
        history = self._session.history.items
        self._session._record(message, at=self._position(history, history_anchor))

    def _position(self, items: list[Any], anchor: object | None) -> int:
        """Just after ``anchor``, and after the messages of bursts that began before this
        one (they were recorded first: bursts finish in the order they began)."""
        position = 0
        if anchor is not None:
            position = next(
                (i + 1 for i in range(len(items) - 1, -1, -1) if items[i] is anchor),
                len(items),
            )
        recorded = {id(m) for m in self._messages.values()}
        while position < len(items) and id(items[position]) in recorded:
            position += 1
        return position
