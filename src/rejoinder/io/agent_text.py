"""AgentText: the agent's words for the client, paced by what the listener has heard."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..models.text import TextOutput
from .protocol import ServerMessage, TranscriptMessage

__all__ = ["CHARS_PER_SECOND", "AgentText"]


CHARS_PER_SECOND = 15.0
"""Speaking rate assumed to pace agent text before a reply's audio is complete."""


class AgentText(TextOutput):
    """Agent text for the client, paced by what the listener has heard.

    With audio, each ``played`` report that moves the reply reveals the share of its text
    that its share of audio heard amounts to (whole words; at ``CHARS_PER_SECOND`` until
    the reply's audio is complete and its length known), so the text runs with the voice,
    give or take a word. Without audio (``paced=False``) text is shown as it is delivered.
    The final transcript (exactly what was heard) comes from the history, not from here.

    While no client is connected (a session waiting to be resumed) text without audio
    waits here for the next client: the session counts it delivered once this returns,
    and nobody would have seen it. Text with audio never waits: its audio decides what
    was heard.
    """

    def __init__(self, send: Callable[[ServerMessage], None]) -> None:
        self._send = send
        self._parts: list[str] = []
        self._shown = 0
        self.paced = True
        self._attached = asyncio.Event()
        self._attached.set()

    async def capture_text(self, text: str) -> None:
        if not self.paced and not self._attached.is_set():
            await self._attached.wait()
        self._parts.append(text)
        if not self.paced:
            self._show(len(self._text()))

    def detach(self) -> None:
        """No client: unpaced text waits (``attach`` lets it go on)."""
        self._attached.clear()
        self._shown = 0  # the next client has seen none of it

    def attach(self) -> None:
        self._attached.set()

    def flush(self) -> None:
        pass  # the text stays until the reply's final transcript replaces it

    def progress(self, heard: float, length: float | None) -> None:
        text = self._text()
        if length is not None and length > 0:
            chars = len(text) * min(1.0, heard / length)
        else:
            chars = heard * CHARS_PER_SECOND
        end = min(len(text), round(chars))
        if end < len(text):  # back to a whole word
            end = text.rfind(" ", 0, end + 1) if text[end : end + 1] != " " else end
        self._show(max(end, 0))

    def final(self) -> str:
        """The reply ended: returns its whole text (as delivered, heard or not) and
        forgets it."""
        text = self._text()
        self._parts.clear()
        self._shown = 0
        return text

    @property
    def open(self) -> bool:
        """Interim text was shown that no final transcript closed yet."""
        return self._shown > 0

    def _text(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def _show(self, end: int) -> None:
        if end <= self._shown:
            return  # shown text only grows
        self._shown = end
        text = self._text()[:end].rstrip()
        if text:
            self._send(TranscriptMessage(role="agent", text=text, final=False))
