"""Turn detection: has the user finished their turn, or only paused mid-thought?

A VAD hears silence; it cannot tell "Book me a table for two." from "Book me a table
for..." followed by a breath. A ``TurnDetector`` judges the user's last seconds of audio
(and, if it wants, the transcript) and says how likely it is that the turn is complete.
The session asks it each time the VAD ends an utterance: a complete turn ends as soon
as its transcript is in, without waiting ``min_endpointing_delay``; an incomplete one
waits up to ``max_endpointing_delay`` for the user to go on.

``AgentSession(turn_detection=local.SmartTurn())`` uses the Smart Turn model, offline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .audio import AudioFrame  # numpy: imported only where audio flows


class TurnDetectorError(Exception):
    """The detector could not judge this turn (the session then falls back to the
    transcript: a turn that reads as finished is complete)."""


class TurnDetector(ABC):
    """A turn model (``AgentSession(turn_detection=...)``): given the end of the user's
    last utterance, how likely it is that they finished their turn. The session asks it
    each time the VAD ends an utterance; a complete turn ends without waiting
    ``min_endpointing_delay``, an incomplete one waits longer for the user to go on.
    ``local.SmartTurn`` is the shipped one; implement ``probability`` for your own."""

    threshold: float
    """A probability at or above this is a complete turn."""

    max_audio_seconds: float = 8.0
    """How much of the end of the user's last utterance ``probability`` is given, at most
    (the session judges a turn by its last utterance)."""

    judges_early: bool = False
    """Whether the session asks ``probability`` at the user's first pause as well, about
    the utterance so far, and keeps a "complete" from then if only quiet follows, instead
    of waiting for a judgement after the VAD's silence. Right for a detector that is
    cheap and, given more trailing silence, does not change its mind to "incomplete"
    (Smart Turn); a detector of the words (``transcript``) is better asked once."""

    @abstractmethod
    async def probability(self, frames: Sequence[AudioFrame], transcript: str) -> float:
        """How likely it is, from 0 to 1, that the user finished their turn with this
        audio (their last utterance, speech and the silence after it; ``transcript`` is
        what they said before it in this turn). Slow work
        belongs off the event loop. Raise ``TurnDetectorError`` when it cannot judge."""

    async def warm_up(self) -> None:  # noqa: B027 - most detectors have nothing to load
        """Load what the first judgement needs, so it is not slower than the rest."""

    async def aclose(self) -> None:  # noqa: B027 - most detectors hold nothing to release
        """Release resources. Idempotent."""
