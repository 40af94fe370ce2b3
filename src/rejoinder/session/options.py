"""What a session was configured with (``SessionOptions``, frozen at construction) and
the slots its transport fills (``session.input.audio``, ``session.output.audio`` and
``session.output.transcription``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

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


class SessionInput:
    def __init__(self) -> None:
        self.audio: Any = None


class SessionOutput:
    def __init__(self) -> None:
        self.audio: Any = None
        self.transcription: TextOutput | None = None
