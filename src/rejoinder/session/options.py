"""What a session was configured with (``SessionOptions``, frozen at construction) and
the slots its transport fills (``session.input.audio``, ``session.output.audio``,
``session.output.transcription`` and, on a phone line, ``session.output.keypad``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._dataclass import dataclass

if TYPE_CHECKING:
    from ..models.interruption import InterruptionDetector
    from ..models.text import TextOutput
    from ..models.turn_detector import TurnDetector


@dataclass(frozen=True, slots=True)
class SessionOptions:
    allow_interruptions: bool
    min_interruption_duration: float
    min_endpointing_delay: float
    max_endpointing_delay: float
    preemptive_generation: bool
    max_tool_steps: int
    close_timeout: float
    turn_detection: Literal["vad", "manual"] | TurnDetector
    interruption_detection: InterruptionDetector | None
    min_interruption_words: int
    resume_false_interruption: bool
    false_interruption_timeout: float
    answer_timeout: float


class KeypadOutput(Protocol):
    """Where ``session.send_dtmf`` presses keys: a phone line (a media stream's in-band
    tones or the provider's keypad command, RFC 4733 events on SIP)."""

    async def send_dtmf(self, digits: str) -> None:
        """Press ``digits`` (``0-9 * # A-D``, ``w`` a half-second pause, ``W`` a second)
        and return once they were sent down the line."""
        ...


class SessionInput:
    def __init__(self) -> None:
        self.audio: Any = None


class SessionOutput:
    def __init__(self) -> None:
        self.audio: Any = None
        self.transcription: TextOutput | None = None
        self.keypad: KeypadOutput | None = None
