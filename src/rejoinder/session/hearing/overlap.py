"""Overlap: the user's speech over the agent's audible reply, while an
``InterruptionDetector`` decides what it is.

The reply keeps playing and no state changes while the decision is pending: a
backchannel must not stop the agent, even for a moment (a pause would be an audible
stop, and a ``speaking → thinking → speaking`` the client can see). The decision comes
from three places, whichever is first:

* the detector's ``at_onset`` verdict on the first ``onset_seconds`` of the user's audio
  (a real interruption stops here, a few hundred milliseconds after the onset), and its
  ``at_second_look`` on a little more (``second_look_seconds``), if it has one;
* the words so far, while the user still speaks (``while_speaking``, from the detector's
  ``interim_from`` on): the recognizer's interim transcripts when it streams, otherwise a
  pass over the utterance so far, again and again (one at a time) until it is decided;
  an onset the detector took for feedback ("hold on", "sorry" sound like "uh-huh" at
  first) stops the agent when its first words are heard, not when the utterance ends;
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
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ...models.interruption import Interruption, InterruptionDetector
from ...models.stt import Transcript

if TYPE_CHECKING:
    from ...models.audio import AudioFrame
    from ..context import SessionContext
    from ..speech.run import SpeechRun

logger = logging.getLogger("rejoinder")

_AudioJudge = Callable[[Sequence["AudioFrame"]], Awaitable[Interruption]]
"""The detector's ``at_onset`` or ``at_second_look``."""


class Overlap:
    def __init__(
        self,
        ctx: SessionContext,
        detector: InterruptionDetector,
        speech: SpeechRun,
        *,
        onset_at: float,
        audio: Callable[[], Sequence[AudioFrame]],
        speech_seconds: Callable[[], float],
        interrupt: Callable[[SpeechRun], None],
        recognize: Callable[[Sequence[AudioFrame]], Awaitable[Transcript]] | None = None,
    ) -> None:
        """``recognize``: transcribes the utterance so far, for a recognizer that does
        not stream (``None``: its interim transcripts come through ``interim``)."""
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
        self._second_look_timer: asyncio.TimerHandle | None = None
        if detector.second_look_seconds is not None:
            self._second_look_timer = loop.call_at(
                max(loop.time(), onset_at + detector.second_look_seconds), self._second_look
            )
        self._long_timer: asyncio.TimerHandle | None = loop.call_at(
            max(loop.time(), onset_at + detector.max_undecided_seconds), self._long_due
        )
        self._recognize = recognize
        self._interim_timer: asyncio.TimerHandle | None = None
        self._interim_pass: asyncio.Task[None] | None = None
        self._latest_interim = ""  # a streaming recognizer's, before interim_from
        if detector.interim_from is not None:
            self._interim_timer = loop.call_at(
                max(loop.time(), onset_at + detector.interim_from), self._interim_due
            )
        ctx.state.note("overlap", event="started", speech_id=speech.handle.id)

    @property
    def decided(self) -> bool:
        return self.verdict is not Interruption.UNDECIDED

    @property
    def relevant(self) -> bool:
        """Still about a reply that plays: once it ended, the user's words are a turn."""
        return not self.speech.done() and self.speech.handle.allow_interruptions

    # ------------------------------------------------------------------ decisions

    def _decide(self, verdict: Interruption, why: str) -> None:
        if self.decided or verdict is Interruption.UNDECIDED:
            return
        self.verdict = verdict
        self._cancel_timers()
        self._cancel_pass()
        self._ctx.state.note(
            "overlap", event=verdict.value, why=why, speech_id=self.speech.handle.id
        )
        if verdict is Interruption.INTERRUPT and self.relevant:
            self._interrupt(self.speech)

    def _judge_onset(self) -> None:
        self._onset_timer = None
        self._look(self._detector.at_onset, "onset")

    def _second_look(self) -> None:
        self._second_look_timer = None
        self._look(self._detector.at_second_look, "second_look")

    def _look(self, judge: _AudioJudge, which: str) -> None:
        if self.decided or not self.relevant:
            return
        frames = _since(self._audio(), self._onset_at - self._detector.lead_seconds)
        self._ctx.spawn(self._audio_verdict(judge, frames, which))

    async def _audio_verdict(
        self, judge: _AudioJudge, frames: list[AudioFrame], which: str
    ) -> None:
        try:
            verdict = await judge(frames)
        except Exception as exc:  # the words still decide
            logger.warning("the interruption detector failed: %s", exc)
            self._ctx.emit_error(exc, source="interruption_detection", recoverable=True)
            return
        if verdict is Interruption.INTERRUPT:
            self._decide(verdict, which)

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

    # -------------------------------------------------- words while speaking

    @property
    def _listening_for_words(self) -> bool:
        return not self.decided and self._speaking and self.relevant

    def _interim_due(self) -> None:
        self._interim_timer = None
        if not self._listening_for_words:
            return
        if self._recognize is None:  # streaming: judge what it heard so far
            if self._latest_interim:
                self._judge_words_so_far(Transcript(self._latest_interim))
            return
        self._interim_pass = self._ctx.spawn(self._recognize_so_far())

    async def _recognize_so_far(self) -> None:
        assert self._recognize is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            transcript = await self._recognize(list(self._audio()))
        except Exception as exc:  # the whole utterance's words still decide
            logger.warning("recognizing the words over the agent failed: %s", exc)
            return
        finally:
            self._interim_pass = None
        if not self._listening_for_words:
            return
        self._judge_words_so_far(transcript)
        if not self.decided:  # the next pass: one at a time, at most every interim_every
            at = max(loop.time(), started + self._detector.interim_every)
            self._interim_timer = loop.call_at(at, self._interim_due)

    def interim(self, text: str) -> None:
        """A streaming recognizer's words so far of the utterance."""
        if not self._listening_for_words or not text.strip():
            return
        self._latest_interim = text
        if self._interim_timer is None and self._detector.interim_from is not None:
            self._judge_words_so_far(Transcript(text))  # interim_from has passed

    def _judge_words_so_far(self, transcript: Transcript) -> None:
        if self._detector.while_speaking(transcript) is Interruption.INTERRUPT:
            self._ctx.state.note("overlap", event="heard", text=transcript.text)
            self._decide(Interruption.INTERRUPT, "interim")

    def speech_ended(self) -> None:
        self._speaking = False
        self._cancel_pass()  # the whole utterance's words decide now
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
        self._cancel_pass()

    def _cancel_pass(self) -> None:
        """Nobody needs the words so far any more: a pass still queued is skipped."""
        if self._interim_pass is not None:
            self._interim_pass.cancel()
            self._interim_pass = None

    def _cancel_timers(self) -> None:
        timers = (self._onset_timer, self._second_look_timer, self._long_timer, self._interim_timer)
        for timer in timers:
            if timer is not None:
                timer.cancel()
        self._onset_timer = self._second_look_timer = None
        self._long_timer = self._interim_timer = None


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
