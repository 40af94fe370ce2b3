"""Delivery: carries one speech's text to the user and tells the floor when it is audible.

``TextDelivery`` (no audio output): text is audible from its first delta until the
segment ends. ``AudioDelivery`` (in ``audio_delivery``, which loads numpy): text becomes
sentences, sentences become audio through
the TTS (concurrently with the model still streaming), and the speech is audible from the
output's *playback started* to its *playback finished*: what the user hears, not what was
produced. After an interruption, ``heard()`` is the text up to the playback position,
paced by each sentence's own speaking rate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..floor import Obligation
from ..io.text import TextOutput
from .turn_state import TurnState


class Delivery(ABC):
    def __init__(self, state: TurnState, reply: Obligation, text_output: TextOutput | None):
        self._state = state
        self._reply = reply
        self._text_output = text_output
        self._parts: list[str] = []

    async def push_text(self, text: str) -> None:
        if self._text_output is not None:
            await self._text_output.capture_text(text)
        self._parts.append(text)  # only once the output took it

    @abstractmethod
    async def finish(self) -> None:
        """All text was pushed; return once it has been delivered (played out)."""

    @abstractmethod
    def stop(self) -> None:
        """Interrupted: go silent now."""

    @abstractmethod
    def heard(self) -> str:
        """The text the user got."""

    def _end_text_segment(self) -> None:
        if self._parts and self._text_output is not None:
            self._text_output.flush()


class TextDelivery(Delivery):
    async def push_text(self, text: str) -> None:
        await super().push_text(text)
        # Audible once the sink returned: its contract is that the user can now see it.
        self._state.set_audible(self._reply, True)

    async def finish(self) -> None:
        self._end_text_segment()

    def stop(self) -> None:
        self._end_text_segment()

    def heard(self) -> str:
        return "".join(self._parts)
