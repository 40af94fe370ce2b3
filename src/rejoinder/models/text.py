"""The text output interface: where an agent's reply text goes (captions, a chat window).

In text mode "audible" means text is being delivered to one. Implementations live in
``rejoinder.io.text`` (memory, console) and in the transports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class TextOutput(ABC):
    """Receives an agent reply as a stream of text deltas, one segment per reply."""

    @abstractmethod
    async def capture_text(self, text: str) -> None:
        """Deliver one delta. Returning means the user can now see it."""

    @abstractmethod
    def flush(self) -> None:
        """The current segment (one reply) is complete."""
