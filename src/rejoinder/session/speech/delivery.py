"""Delivery: carries one speech's text to the user and tells the floor when it is audible.

``TextDelivery`` (no audio output): text is audible from its first delta until the
segment ends. ``AudioDelivery`` (in ``audio_delivery``, which loads numpy): text becomes
sentences, sentences become audio through the TTS (concurrently with the model still
streaming), and the speech is audible from the output's *playback started* to its
*playback finished*: what the user hears, not what was produced. After an interruption,
``heard()`` is the text up to the playback position, paced by each sentence's own
speaking rate.

Outputs are the application's code (a console piped into ``head``, a socket that went
away). A failing text output is reported once as an ``error`` event (source ``output``)
and left out for the rest of the speech; it never takes the session down, and its
``flush`` is never called again after it failed.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable

from ...models.text import TextOutput

logger = logging.getLogger("rejoinder")

OnOutputError = Callable[[Exception], None]


class OutputError(RuntimeError):
    """An output the session delivers to (audio or text) failed."""


class Delivery(ABC):
    def __init__(
        self,
        audible: Callable[[], None],
        text_output: TextOutput | None,
        on_error: OnOutputError,
    ):
        self._audible = audible
        """Tells the speech's owner the user can hear (or see) it: ``SpeechRun.audible``."""
        self._text_output = text_output
        self._on_error = on_error
        self._failed = False
        self._parts: list[str] = []

    async def push_text(self, text: str) -> None:
        await self._show(text)
        self._parts.append(text)

    def text_paused(self) -> None:  # noqa: B027 - text is delivered as it comes
        """The model's stream sent something other than text (a tool call): what waits
        for more text may go now. Only audio holds text back (a sentence's end)."""

    async def _show(self, text: str) -> bool:
        """Give ``text`` to the text output; False when it failed (it is dropped)."""
        output = self._text_output
        if output is None:
            return not self._failed
        try:
            await output.capture_text(text)
        except Exception as exc:
            self._output_failed(exc)
            return False
        return True

    def _output_failed(self, exc: Exception) -> None:
        self._text_output = None  # not called again for this speech, flush included
        self._failed = True
        logger.warning("the text output failed: %r", exc)
        self._on_error(exc)

    @abstractmethod
    async def finish(self) -> None:
        """All text was pushed; return once it has been delivered (played out)."""

    @abstractmethod
    def stop(self) -> None:
        """Interrupted: go silent now. Never raises."""

    @abstractmethod
    def heard(self) -> str:
        """The text the user got."""

    @property
    def cut_short(self) -> bool:
        """The output ended the playback before its end (the listener left mid-reply):
        what was heard is a part, and is recorded as interrupted."""
        return False

    def _end_text_segment(self) -> None:
        if self._parts and self._text_output is not None:
            try:
                self._text_output.flush()
            except Exception as exc:
                self._output_failed(exc)


class TextDelivery(Delivery):
    async def push_text(self, text: str) -> None:
        if not await self._show(text):
            return  # the user did not get it: not heard, not audible
        self._parts.append(text)
        # Audible once the sink returned: its contract is that the user can now see it.
        self._audible()

    async def finish(self) -> None:
        self._end_text_segment()

    def stop(self) -> None:
        self._end_text_segment()

    def heard(self) -> str:
        return "".join(self._parts)
