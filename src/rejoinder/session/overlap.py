"""Overlap: the user's speech over the agent's audible reply, while an
``InterruptionDetector`` decides what it is.

The reply keeps playing and no state changes while the decision is pending: a
backchannel must not stop the agent, even for a moment (a pause would be an audible
stop, and a ``speaking → thinking → speaking`` the client can see). The decision comes
from three places, whichever is first:

* the detector's ``at_onset`` verdict on the first ``onset_seconds`` of the user's audio
  (a real interruption stops here, a few hundred milliseconds after the onset);
* the recognizer's transcript, when the utterance ends (``words``): a backchannel or a
  sound (words the recognizer was unsure of throughout) is dropped as if never said;
  anything else interrupts and is the user's turn;
* the user speaking on past ``max_undecided_seconds``: that is a turn, not feedback.

``UserTurns`` owns one ``Overlap`` per utterance that started over audible speech; the
``Overlap`` only decides and calls back, it never touches the floor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..models.interruption import Interruption, InterruptionDetector

if TYPE_CHECKING:
    from ..models.audio import AudioFrame
    from ..models.stt import Transcript
    from .context import SessionContext
    from .speech import SpeechHandle

logger = logging.getLogger("rejoinder")


class Overlap:
    def __init__(
        self,
        ctx: SessionContext,
        detector: InterruptionDetector,
        speech: SpeechHandle,
        *,
        onset_at: float,
        audio: Callable[[], Sequence[AudioFrame]],
        speech_seconds: Callable[[], float],
        interrupt: Callable[[SpeechHandle], None],
    ) -> None:
        self._ctx = ctx
        self._detector = detector
        self.speech = speech
        self._onset_at = onset_at
        self._audio = audio
        """The utterance's audio so far (the session's buffer, read when judging)."""
        self._speech_seconds = speech_seconds
        self._interrupt = interrupt
        self.verdict = Interruption.UNDECIDED
        self._speaking = True
        loop = asyncio.get_running_loop()
        self._onset_timer: asyncio.TimerHandle | None = loop.call_at(
            max(loop.time(), onset_at + detector.onset_seconds), self._judge_onset
        )
        self._long_timer: asyncio.TimerHandle | None = loop.call_at(
            max(loop.time(), onset_at + detector.max_undecided_seconds), self._long_due
        )
        ctx.state.note("overlap", event="started", speech_id=speech.id)

    @property
    def decided(self) -> bool:
        return self.verdict is not Interruption.UNDECIDED

    @property
    def relevant(self) -> bool:
        """Still about a reply that plays: once it ended, the user's words are a turn."""
        return not self.speech.done() and self.speech.allow_interruptions

    # ------------------------------------------------------------------ decisions

    def _decide(self, verdict: Interruption, why: str) -> None:
        if self.decided or verdict is Interruption.UNDECIDED:
            return
        self.verdict = verdict
        self._cancel_timers()
        self._ctx.state.note("overlap", event=verdict.value, why=why, speech_id=self.speech.id)
        if verdict is Interruption.INTERRUPT and self.relevant:
            self._interrupt(self.speech)

    def _judge_onset(self) -> None:
        self._onset_timer = None
        if self.decided or not self.relevant:
            return
        frames = _since(self._audio(), self._onset_at - self._detector.lead_seconds)
        self._ctx.spawn(self._onset_verdict(frames))

    async def _onset_verdict(self, frames: list[AudioFrame]) -> None:
        try:
            verdict = await self._detector.at_onset(frames)
        except Exception as exc:  # the words still decide
            logger.warning("the interruption detector failed: %s", exc)
            self._ctx.emit_error(exc, source="interruption_detection", recoverable=True)
            return
        if verdict is Interruption.INTERRUPT:
            self._decide(verdict, "onset")

    def _long_due(self) -> None:
        """Speech this long over the agent is a turn (only speech counts: a pause
        within the utterance moves the deadline)."""
        self._long_timer = None
        if self.decided or not self._speaking:
            return
        missing = self._detector.max_undecided_seconds - self._speech_seconds()
        if missing > 1e-6:
            self._long_timer = asyncio.get_running_loop().call_later(missing, self._long_due)
            return
        self._decide(Interruption.INTERRUPT, "long")

    def speech_ended(self) -> None:
        self._speaking = False
        if self._long_timer is not None:
            self._long_timer.cancel()
            self._long_timer = None

    def words(self, transcript: Transcript) -> bool:
        """The utterance's transcript is in; whether to drop it (a backchannel or a
        sound over a reply still playing)."""
        if self.decided or not self.relevant:
            return False
        verdict = self._detector.after_transcript(transcript)
        if verdict is Interruption.IGNORE:
            self._decide(verdict, "words")
            return True
        self._decide(Interruption.INTERRUPT, "words")
        return False

    def cancel(self) -> None:
        self._cancel_timers()

    def _cancel_timers(self) -> None:
        for timer in (self._onset_timer, self._long_timer):
            if timer is not None:
                timer.cancel()
        self._onset_timer = self._long_timer = None


def _since(frames: Sequence[AudioFrame], start: float) -> list[AudioFrame]:
    """The frames from ``start`` (loop time) on, counting back from now."""
    now = asyncio.get_running_loop().time()
    kept: list[AudioFrame] = []
    covered = 0.0
    for frame in reversed(frames):
        if covered >= now - start - 1e-9:
            break
        kept.append(frame)
        covered += frame.duration
    kept.reverse()
    return kept
