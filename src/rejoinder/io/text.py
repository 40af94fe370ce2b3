"""Text output sinks. In text mode, "audible" means text is being delivered to one."""

from __future__ import annotations

import sys
from typing import TextIO

from ..models.text import TextOutput

__all__ = ["ConsoleTextOutput", "MemoryTextOutput", "TextOutput"]


class MemoryTextOutput(TextOutput):
    """Keeps what was delivered: ``segments`` holds each finished reply."""

    def __init__(self) -> None:
        self.segments: list[str] = []
        self._parts: list[str] = []

    async def capture_text(self, text: str) -> None:
        self._parts.append(text)

    def flush(self) -> None:
        if self._parts:
            self.segments.append("".join(self._parts))
            self._parts.clear()

    @property
    def pending(self) -> str:
        """Text of the segment still being delivered."""
        return "".join(self._parts)


class ConsoleTextOutput(TextOutput):
    """Prints replies as they stream, one line per reply, behind a prefix."""

    def __init__(self, stream: TextIO | None = None, prefix: str = "agent> ") -> None:
        self._stream = stream if stream is not None else sys.stdout
        self._prefix = prefix
        self._open = False

    async def capture_text(self, text: str) -> None:
        if not self._open:
            self._stream.write(self._prefix)
            self._open = True
        self._stream.write(text)
        self._stream.flush()

    def flush(self) -> None:
        if self._open:
            self._stream.write("\n")
            self._stream.flush()
            self._open = False
