"""ScriptedInterruptionDetector: an interruption detector whose onset verdicts a test
writes down (the words are judged as the real rule does, unless ``words`` says otherwise;
``interim_from`` turns on the judging of the words so far; ``second_look`` scripts the
verdicts of a second look, ``second_look_seconds`` after the onset).

    detector = ScriptedInterruptionDetector([rj.Interruption.UNDECIDED], delay=0.01)
    session = AgentSession(vad=..., stt=..., interruption_detection=detector)
    ...
    assert detector.onsets[0].audio_seconds == pytest.approx(0.25)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..models.interruption import Interruption, InterruptionDetector

if TYPE_CHECKING:
    from ..models.audio import AudioFrame
    from ..models.stt import Transcript

__all__ = ["OnsetCall", "ScriptedInterruptionDetector"]


@dataclass(frozen=True, slots=True)
class OnsetCall:
    """One verdict a ``ScriptedInterruptionDetector`` was asked for: how much audio it
    was given, and when."""

    audio_seconds: float
    at: float
    """The loop time the verdict was asked for."""


class ScriptedInterruptionDetector(InterruptionDetector):
    """Each onset takes the next verdict of ``script`` (the last repeats) after ``delay``
    seconds of the loop's clock, or raises it when it is an exception."""

    def __init__(
        self,
        script: Iterable[Interruption | BaseException] = (Interruption.UNDECIDED,),
        *,
        delay: float = 0.0,
        onset_seconds: float = 0.2,
        max_undecided_seconds: float = 1.0,
        words: Callable[[str], Interruption] | None = None,
        interim_from: float | None = None,
        interim_every: float = 0.1,
        second_look: Iterable[Interruption | BaseException] | None = None,
        second_look_seconds: float = 0.4,
    ) -> None:
        self.script = list(script)
        if not self.script:
            raise ValueError("the script needs at least one verdict")
        self.second_script = None if second_look is None else list(second_look)
        if self.second_script is not None:
            if not self.second_script:
                raise ValueError("the second look's script needs at least one verdict")
            self.second_look_seconds = second_look_seconds
        self.delay = delay
        self.onset_seconds = onset_seconds
        self.max_undecided_seconds = max_undecided_seconds
        self._words = words
        self.interim_from = interim_from
        self.interim_every = interim_every
        self.onsets: list[OnsetCall] = []
        self.second_looks: list[OnsetCall] = []
        self.transcripts: list[str] = []
        """The whole utterances' words it judged."""
        self.interims: list[str] = []
        """The words so far it judged (``interim_from``), in order."""

    async def at_onset(self, frames: Sequence[AudioFrame]) -> Interruption:
        return await self._play(frames, self.script, self.onsets)

    async def at_second_look(self, frames: Sequence[AudioFrame]) -> Interruption:
        if self.second_script is None:
            return Interruption.UNDECIDED
        return await self._play(frames, self.second_script, self.second_looks)

    async def _play(
        self,
        frames: Sequence[AudioFrame],
        script: list[Interruption | BaseException],
        calls: list[OnsetCall],
    ) -> Interruption:
        calls.append(OnsetCall(sum(f.duration for f in frames), asyncio.get_running_loop().time()))
        verdict = script[min(len(calls), len(script)) - 1]
        if self.delay:
            await asyncio.sleep(self.delay)
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict

    def while_speaking(self, transcript: Transcript) -> Interruption:
        self.interims.append(transcript.text)
        return super().while_speaking(transcript)

    def after_transcript(self, transcript: Transcript) -> Interruption:
        self.transcripts.append(transcript.text)
        return super().after_transcript(transcript)

    def after_words(self, transcript: str) -> Interruption:
        if self._words is not None:
            return self._words(transcript)
        return super().after_words(transcript)
