"""ScriptedTurnDetector: a turn detector whose verdicts a test writes down.

Each judgement takes the next probability from the script (the last one repeats), after
``delay`` seconds of the loop's clock (virtual time under looptime), or raises when the
entry is an exception. ``judges_early=True`` has the session ask it at the user's first
pause as well (``TurnDetector.judges_early``). What it was asked is kept in ``calls``::

    detector = ScriptedTurnDetector([0.1, 0.9], delay=0.03)
    session = AgentSession(vad=..., stt=..., turn_detection=detector)
    ...
    assert detector.calls[0].audio_seconds == pytest.approx(1.2)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models.turn_detector import TurnDetector, TurnDetectorError

if TYPE_CHECKING:
    from ..models.audio import AudioFrame

__all__ = ["ScriptedTurnDetector", "TurnCall"]


@dataclass(frozen=True, slots=True)
class TurnCall:
    """One judgement a ``ScriptedTurnDetector`` was asked for: how much audio it was
    given, the transcript before it, and when."""

    audio_seconds: float
    transcript: str
    at: float
    """The loop time the judgement was asked for."""


class ScriptedTurnDetector(TurnDetector):
    """A turn detector whose verdicts a test writes down::

        detector = ScriptedTurnDetector([0.1, 0.9], delay=0.03)
        session = AgentSession(vad=..., stt=..., turn_detection=detector)
        ...
        assert detector.calls[0].audio_seconds == pytest.approx(1.2)

    Args:
        script: the probability of each judgement in turn (the last repeats), or an
            exception to raise.
        delay: seconds (loop time) each judgement takes.
        threshold: a probability at or above this is a complete turn.
        max_audio_seconds: how much of the utterance it is given, at most.
        judges_early: be asked at the user's first pause as well.
    """

    def __init__(
        self,
        script: Iterable[float | BaseException] = (0.9,),
        *,
        delay: float = 0.0,
        threshold: float = 0.5,
        max_audio_seconds: float = 8.0,
        judges_early: bool = False,
    ) -> None:
        self.script = list(script)
        if not self.script:
            raise ValueError("the script needs at least one verdict")
        self.delay = delay
        self.threshold = threshold
        self.max_audio_seconds = max_audio_seconds
        self.judges_early = judges_early
        self.calls: list[TurnCall] = []
        self.warmed_up = False

    async def warm_up(self) -> None:
        self.warmed_up = True

    async def probability(self, frames: Sequence[AudioFrame], transcript: str) -> float:
        loop = asyncio.get_running_loop()
        seconds = sum(frame.duration for frame in frames)
        self.calls.append(TurnCall(seconds, transcript, loop.time()))
        entry = self.script[min(len(self.calls), len(self.script)) - 1]
        if self.delay:
            await asyncio.sleep(self.delay)
        if isinstance(entry, BaseException):
            raise entry
        if not 0.0 <= entry <= 1.0:
            raise TurnDetectorError(f"scripted probability {entry} is not in [0, 1]")
        return entry
