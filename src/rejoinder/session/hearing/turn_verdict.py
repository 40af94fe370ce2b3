"""TurnVerdicts: what a turn detector says about the user's turn so far.

``UserTurns`` hands each utterance's audio here when the VAD ends it. That utterance's
audio (its pre-roll included, at most the detector's ``max_audio_seconds`` of its end) is
judged in the background while it is transcribed. Only the last utterance: Smart Turn
judged the utterances of a turn laid back to back as unfinished far more often than the
last one alone (on the conversation benchmark's tuning voices, the turns said in two
parts: complete at their end 15 of 32 times back to back, 24 of 32 alone), and every
such misjudgment kept the user waiting a second; the end of turn waits for
the verdict (``complete()`` is ``None`` until then) and is rescheduled when it arrives.
A verdict belongs to the utterance it judged: when the user speaks again it is stale
and dropped, and the next utterance's end starts a new one. A detector that fails
leaves the decision to the transcript (``None`` → the caller's own rule), with one
``error`` event.

Judged early. A detector with ``judges_early`` is also asked at the first pause inside
speech (``judge_early``, when the early recognition starts), about the utterance so far.
If nothing but quiet follows before the VAD ends the utterance, a "complete" from then
stands, and the turn ends without waiting for a second judgement after the VAD's
silence (Smart Turn: 60-80 ms on a 2-core machine, on every turn); an "incomplete" does
not stand: the utterance is judged again with its whole silence, which makes Smart Turn
say "complete" more often, never less on the conversation benchmark's tuning voices
(16 kHz: 0 of 112 utterances complete early and incomplete at the VAD's end; phone
band 3 of 112, each about as often right as wrong), and decided 85-90 % of their
complete turns early.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...models.turn_detector import TurnDetector

if TYPE_CHECKING:
    from ...models.audio import AudioFrame
    from ..context import SessionContext

logger = logging.getLogger("rejoinder")


class EarlyVerdict:
    """A judgement of the utterance so far, started at a pause (see the module's doc).
    Whoever holds it cancels it when it is stale, or hands it to ``utterance_ended``."""

    __slots__ = ("result", "task")

    def __init__(self, result: asyncio.Future[float | None], task: asyncio.Task[None]) -> None:
        self.result = result
        self.task = task

    def cancel(self) -> None:
        self.task.cancel()


class TurnVerdicts:
    def __init__(
        self, ctx: SessionContext, detector: TurnDetector, on_verdict: Callable[[], None]
    ) -> None:
        self._ctx = ctx
        self.detector = detector
        self._on_verdict = on_verdict
        self._pending: asyncio.Future[float | None] | None = None
        self.probability: float | None = None
        """The last verdict's probability (``None``: none yet, or the detector failed)."""
        self.judged_in: float | None = None
        """How long the last verdict took, in seconds of the loop's clock."""

    async def warm_up(self) -> None:
        """Load the model at session start, so the first turn is judged as fast as the
        rest; a detector that cannot load is reported now, not at the first turn."""
        try:
            await self.detector.warm_up()
        except Exception as exc:
            logger.warning("the turn detector could not load: %s", exc)
            self._ctx.emit_error(exc, source="turn_detection", recoverable=True)

    def judge_early(self, frames: list[AudioFrame], transcript: str) -> EarlyVerdict | None:
        """Judge the utterance so far, ``frames``, at a pause inside it (in the background;
        ``None`` for a detector that is not asked early)."""
        if not self.detector.judges_early:
            return None
        result: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        task = self._ctx.spawn(self._judge_early(self._window(frames), transcript, result))
        return EarlyVerdict(result, task)

    def utterance_ended(
        self, frames: list[AudioFrame], transcript: str, early: EarlyVerdict | None = None
    ) -> None:
        """Judge the turn by its last utterance, ``frames`` (in the background); ``early``:
        a judgement of it made at its last pause, with nothing but quiet since."""
        pending: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self._pending, self.probability = pending, None
        self._ctx.spawn(self._judge(self._window(frames), transcript, pending, early))

    def _window(self, frames: list[AudioFrame]) -> list[AudioFrame]:
        """The end of ``frames`` the detector is given (``max_audio_seconds``)."""
        audio: deque[AudioFrame] = deque(frames)
        seconds = sum(frame.duration for frame in frames)
        limit = self.detector.max_audio_seconds
        while audio and seconds - audio[0].duration >= limit:
            seconds -= audio.popleft().duration
        return list(audio)

    def user_went_on(self) -> None:
        """The user speaks again: the verdict on the pause before is stale."""
        self._pending, self.probability = None, None

    def clear(self) -> None:
        """The turn ended (or was dropped): its verdict is not the next turn's."""
        self._pending, self.probability = None, None

    def complete(self) -> bool | None:
        """Whether the turn is complete; ``None`` while the verdict is being made, or
        when there is none to go by (no utterance judged, or the detector failed)."""
        pending = self._pending
        if pending is None or not pending.done() or pending.cancelled():
            return None
        probability = pending.result()
        return None if probability is None else probability >= self.detector.threshold

    @property
    def judging(self) -> bool:
        return self._pending is not None and not self._pending.done()

    async def _judge_early(
        self, frames: list[AudioFrame], transcript: str, result: asyncio.Future[float | None]
    ) -> None:
        try:
            result.set_result(float(await self.detector.probability(frames, transcript)))
        except Exception:  # the judgement at the utterance's end reports it
            result.set_result(None)
        finally:
            if not result.done():  # cancelled: stale, or the session closes
                result.cancel()

    def _complete_early(self, early: EarlyVerdict) -> float | None:
        """A finished early judgement's probability, if it said "complete"."""
        result = early.result
        if result.cancelled() or (probability := result.result()) is None:
            return None
        return probability if probability >= self.detector.threshold else None

    async def _probability(
        self, frames: list[AudioFrame], transcript: str, early: EarlyVerdict | None
    ) -> tuple[float, bool]:
        """The verdict on the utterance, and whether it is the early one: an early
        "complete" stands; while the early judgement is still running, the utterance is
        judged again alongside it, and the first answer that decides wins."""
        if early is not None and early.result.done():
            probability = self._complete_early(early)
            if probability is not None:
                return probability, True
            early = None
        fresh = asyncio.ensure_future(self.detector.probability(frames, transcript))
        try:
            if early is not None:
                await asyncio.wait((fresh, early.result), return_when=asyncio.FIRST_COMPLETED)
                if early.result.done():
                    probability = self._complete_early(early)
                    if probability is not None:
                        return probability, True
            return float(await fresh), False
        finally:
            if fresh.done() and not fresh.cancelled():
                fresh.exception()  # retrieved: a failure the early verdict made moot
            fresh.cancel()
            if early is not None:
                early.cancel()

    async def _judge(
        self,
        frames: list[AudioFrame],
        transcript: str,
        pending: asyncio.Future[float | None],
        early: EarlyVerdict | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        probability: float | None = None
        judged_early = False
        try:
            probability, judged_early = await self._probability(frames, transcript, early)
        except Exception as exc:
            logger.warning("the turn detector failed: %s", exc)
            self._ctx.emit_error(exc, source="turn_detection", recoverable=True)
        finally:
            if not pending.done():
                pending.set_result(probability)
        if pending is not self._pending:
            return  # stale: the user went on, or the turn was cleared
        self.probability, self.judged_in = probability, loop.time() - started
        self._ctx.state.note(
            "turn_verdict",
            probability=probability,
            complete=None if probability is None else probability >= self.detector.threshold,
            seconds=round(self.judged_in, 4),
            early=judged_early,
        )
        self._on_verdict()
