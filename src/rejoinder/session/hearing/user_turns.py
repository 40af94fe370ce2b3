"""UserTurns: the microphone side. VAD → user speaking, barge-in and false interruptions;
STT → transcripts; endpointing → one committed user turn at a time.

Per frame it does the least it can: one synchronous VAD push, a list append while the
user speaks (or a ring-buffer append before), and the recognizer's own ``push`` when it
streams. Everything else happens on VAD events and timers.

End of turn. The turn ends a delay after the user stopped speaking that depends on what
the words and the audio say (``turn_end``: at once when both say the turn is complete,
``min_endpointing_delay`` when the words are whole, well over a second when they break
off), counted from the end of speech, not from the moment the VAD was sure of it: the
VAD's own silence is part of the delay, not added to it. With a turn detector
(``turn_detection=SmartTurn()``) its verdict is made while the utterance is transcribed
(``turn_verdict``). The turn cannot end before the VAD ended the utterance and its
transcript is in, so a recognizer that does not stream gets the utterance early: when
the user pauses inside speech for ``_EARLY_PAUSE``, the utterance so far is recognized in
the background (and judged by a turn detector that ``judges_early``). If the user does
not speak again before the VAD ends the utterance and everything after that snapshot is
quiet, that transcript is the utterance's (and a "complete" from the detector stands),
and the work has overlapped the VAD's silence; otherwise (the user went on, or the quiet
end of a word came after it) it is dropped and the whole utterance is recognized.

Interruptions. When the user starts speaking over an interruptible reply that is
audible, and the session has an ``InterruptionDetector``, the reply goes on playing
while ``Overlap`` decides (an onset verdict, the utterance's words, or its length): a real
interruption interrupts it, a backchannel or a noise is dropped as never said. Without a
detector the duration rule applies: the reply is *paused* and *yielded* (still owed: the
agent reports ``thinking``, never ``listening``); if the speech lasts
``min_interruption_duration`` (and has ``min_interruption_words``, when set), the reply is
interrupted; if it was only a noise, the reply resumes after ``false_interruption_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING

from ...floor import SESSION_OWNER, ObligationKind
from ...models.stt import STT, StreamingSTT, Transcript
from ...models.turn_detector import TurnDetector
from ..events import UserInputTranscribedEvent
from ..metrics_emit import meter_for
from .mute import silence_like
from .overlap import Overlap
from .turn_end import judge_words, turn_end_delay
from .turn_verdict import EarlyVerdict, TurnVerdicts

if TYPE_CHECKING:
    from ...floor import Obligation
    from ...models.audio import AudioFrame
    from ...models.vad import VAD, VADEvent
    from ..agents.activity import AgentActivity
    from ..context import SessionContext
    from ..speech.run import SpeechRun

logger = logging.getLogger("rejoinder")

_HOLD_STEP = 0.02  # how often a due turn end rechecks a VAD that is still deciding
_MAX_HOLD = 0.3  # the longest a due turn end waits for that verdict
_PREROLL_SECONDS = 0.5  # audio kept from before speech was confirmed (word onsets)
_EARLY_PAUSE = 0.1  # a pause inside speech this long starts an early recognition
_QUIET_TAIL = 0.1  # what the early pass did not hear must be this far below the speech
_OVER_BACKGROUND = 2.0  # ... or no more than this over the room's noise (6 dB)
_ROOM_FRAMES = 5  # pre-roll frames needed to tell the room's noise


class _Early:
    """The work on the utterance so far, started at a pause: a recognition (``None``
    when the recognizer streams) and a turn detector's verdict (``None`` without one
    asked early). Valid while the VAD has heard no more speech than ``speech_seconds``,
    and only if the audio after its first ``frames`` frames is quiet (``_heard_all``)."""

    __slots__ = ("frames", "result", "speech_seconds", "verdict")

    def __init__(
        self,
        speech_seconds: float,
        frames: int,
        result: asyncio.Future[Transcript | Exception] | None,
        verdict: EarlyVerdict | None,
    ) -> None:
        self.speech_seconds = speech_seconds
        self.frames = frames
        self.result = result
        self.verdict = verdict

    def drop(self) -> None:
        """Stale: the judgement's work is not needed (a recognition runs on: cheap)."""
        if self.verdict is not None:
            self.verdict.cancel()


def _heard_all(frames: list[AudioFrame], heard: int, room: int = 0) -> bool:
    """Whether an early pass over ``frames[:heard]`` heard the whole utterance: every
    frame after it is at least 20 dB below the loud part of what it heard, or, in a
    noisy room, within 6 dB of the room's noise (the quietest tenth of the first ``room``
    frames: the pre-roll, from before the VAD was sure of the speech).

    The VAD's speech count can stall on the quiet end of a word ("... to Tokyo?" fades
    out), so a pause by the VAD's count is not proof of silence: an early pass that
    missed 0.15 s of speech came out "How on does it take the flight". The final
    transcript must come from audio that covers everything the user said. At 10 dB SNR
    the noise alone is never 20 dB below the speech, and every utterance was recognized
    twice (the conversation benchmark's noise rows: 0.2-0.3 s later answers).
    """
    import numpy as np  # numpy only where audio flows; this runs once per utterance

    if heard >= len(frames):
        return True
    if heard == 0:
        return False

    def rms(frame: AudioFrame) -> float:
        data = frame.data.astype(np.float32)
        return float(np.sqrt(np.mean(data * data))) if data.size else 0.0

    levels = sorted(rms(frame) for frame in frames[:heard])
    loud = levels[int(0.9 * (len(levels) - 1))]
    quiet = _QUIET_TAIL * loud
    if room >= _ROOM_FRAMES:
        before = sorted(rms(frame) for frame in frames[:room])
        quiet = max(quiet, _OVER_BACKGROUND * before[int(0.1 * (len(before) - 1))])
    return max(rms(frame) for frame in frames[heard:]) <= quiet


class UserTurns:
    def __init__(
        self,
        ctx: SessionContext,
        vad: VAD,
        stt: STT,
        *,
        current: Callable[[], AgentActivity | None],
        on_turn: Callable[[str], None],
    ) -> None:
        self._ctx = ctx
        self._options = ctx.options
        self._current = current
        """The current agent's activity (the agent stack decides which one)."""
        self._on_turn = on_turn
        self._vad = vad.stream()
        self._stt = stt
        self._streaming = isinstance(stt, StreamingSTT)
        self._preroll: deque[AudioFrame] = deque()
        self._room_frames = 0  # of the utterance's frames, those of its pre-roll
        self._preroll_seconds = 0.0
        self._utterance: list[AudioFrame] = []
        self._transcript: list[str] = []
        self._last_part = Transcript("")  # the transcript's last part, as recognized
        self._interim = ""
        self._recognizing = 0
        self._early: _Early | None = None
        self._voiced_seen = 0.0  # the VAD's speech_seconds at the last frame
        self._paused_for = 0.0  # seconds of the current pause inside speech
        self._ended_at: float | None = None
        self._transcribed_at: float | None = None  # the turn's last final transcript
        self._commit_timer: asyncio.TimerHandle | None = None
        self._barge_in_timer: asyncio.TimerHandle | None = None
        self._resume_timer: asyncio.TimerHandle | None = None
        self._paused: SpeechRun | None = None
        self._awaiting_words: SpeechRun | None = None
        self._overlap: Overlap | None = None  # speech over the agent, being judged
        self.manual = ctx.options.turn_detection == "manual"
        detection = ctx.options.turn_detection
        self._verdicts = (
            TurnVerdicts(ctx, detection, self._schedule_commit)
            if isinstance(detection, TurnDetector)
            else None
        )
        # Is there early work to do at a pause (a recognition, a verdict)?
        self._watch_pauses = not self._streaming or (
            self._verdicts is not None and self._verdicts.detector.judges_early
        )

    # ------------------------------------------------------------ the frame path

    async def run(self, microphone: AsyncIterable[AudioFrame]) -> None:
        if self._verdicts is not None:
            self._ctx.spawn(self._verdicts.warm_up())
        try:
            async for frame in microphone:
                self.push(frame)
        finally:
            self._cancel_timers()

    def push(self, frame: AudioFrame) -> None:
        if self._ctx.input_muted:
            frame = silence_like(frame)
        events = self._vad.push(frame)
        if self._vad.speaking or events:
            self._utterance.append(frame)
            if self._streaming:
                stt: StreamingSTT = self._stt  # type: ignore[assignment]
                if self._preroll and any(e.type == "start_of_speech" for e in events):
                    # The word's onset came before the VAD was sure: a streaming
                    # recognizer hears it too, in order, as the utterance's audio has it.
                    for early in self._preroll:
                        stt.push(early, self._on_interim)
                stt.push(frame, self._on_interim)
        else:
            self._preroll.append(frame)
            self._preroll_seconds += frame.duration
            while self._preroll_seconds > _PREROLL_SECONDS:
                self._preroll_seconds -= self._preroll.popleft().duration
        for event in events:
            if event.type == "start_of_speech":
                self._speech_started(event)
            else:
                self._speech_ended(event)
        if self._watch_pauses and self._vad.speaking:
            self._watch_pause(frame.duration)

    def _watch_pause(self, seconds: float) -> None:
        """A pause inside speech: the VAD's speech seconds stop growing."""
        voiced = self._vad.speech_seconds
        if voiced != self._voiced_seen:  # speech (again): what started early is stale
            self._voiced_seen, self._paused_for = voiced, 0.0
            self._drop_early()
            return
        self._paused_for += seconds
        if self._early is None and self._paused_for >= _EARLY_PAUSE - 1e-9:
            self._start_early()

    def _drop_early(self) -> None:
        if self._early is not None:
            self._early.drop()
            self._early = None

    # -------------------------------------------------------------- VAD events

    def _speech_started(self, event: VADEvent) -> None:
        self._utterance[:0] = self._preroll
        self._room_frames = len(self._preroll)
        self._preroll.clear()
        self._preroll_seconds = 0.0
        state = self._ctx.state
        state.set_user_speaking(True)
        activity = self._current()
        if activity is not None:
            activity.discard_preemptive("the user went on speaking")
        self._cancel(self._commit_timer)  # the user goes on: not the end of the turn
        self._cancel(self._resume_timer)
        if self._verdicts is not None:
            self._verdicts.user_went_on()
        self._awaiting_words = None
        self._drop_early()
        self._voiced_seen, self._paused_for = -1.0, 0.0
        if self._overlap is not None:
            self._overlap.cancel()
            self._overlap = None
        speech = self._interruptible_speech()
        if speech is None:
            return
        detector = self._options.interruption_detection
        if detector is not None:
            if speech.audible:
                self._overlap = Overlap(
                    self._ctx,
                    detector,
                    speech,
                    onset_at=asyncio.get_running_loop().time() - event.speech_duration,
                    audio=lambda: self._utterance,
                    speech_seconds=lambda: self._vad.speech_seconds,
                    interrupt=self._interrupt,
                    recognize=None if self._streaming else self._stt.transcribe_so_far,
                )
            return  # the detector decides; nothing pauses meanwhile
        audio = self._ctx.output.audio
        options = self._options
        if (
            options.resume_false_interruption
            and audio is not None
            and audio.can_pause
            and speech.audible
            and self._paused is None
        ):
            audio.pause()
            speech.yield_for_barge_in()
            self._paused = speech
        wait = max(0.0, options.min_interruption_duration - event.speech_duration)
        self._cancel(self._barge_in_timer)
        self._barge_in_timer = asyncio.get_running_loop().call_later(
            wait, self._barge_in_due, speech
        )

    def _speech_ended(self, event: VADEvent) -> None:
        self._ctx.state.set_user_speaking(False)
        # Too short to interrupt (or, with min_interruption_words, no words yet): maybe
        # only a noise. A paused reply resumes unless words arrive before the timeout.
        self._cancel(self._barge_in_timer)
        self._barge_in_timer = None
        if self._paused is not None:
            self._resume_timer = asyncio.get_running_loop().call_later(
                self._options.false_interruption_timeout, self._resume_paused
            )
        frames, self._utterance = self._utterance, []
        # The user stopped when the silence began, not when the VAD was sure of it.
        self._ended_at = asyncio.get_running_loop().time() - event.silence_duration
        early, self._early = self._early, None
        overlap, self._overlap = self._overlap, None
        if overlap is not None:
            overlap.speech_ended()
            if overlap.decided:
                overlap = None  # interrupted already: the words are a turn
        if early is not None and (
            event.speech_duration > early.speech_seconds + 1e-6  # speech after it
            # or sound the VAD did not count
            or not _heard_all(frames, early.frames, self._room_frames)
        ):
            early.drop()
            early = None
        if self._verdicts is not None and frames and not self.manual and overlap is None:
            verdict = early.verdict if early is not None else None
            self._verdicts.utterance_ended(frames, " ".join(self._transcript), verdict)
        elif early is not None:
            early.drop()
        self._recognize(frames, early, overlap)  # an early transcript, if it has one

    # ------------------------------------------------------------ interruptions

    def _interruptible_speech(self) -> SpeechRun | None:
        activity = self._current()
        if activity is None:
            return None
        speech = activity.current_run
        if speech is not None and not speech.done() and speech.handle.allow_interruptions:
            return speech
        return None

    def _barge_in_due(self, speech: SpeechRun) -> None:
        self._barge_in_timer = None
        needed = self._options.min_interruption_duration - self._vad.speech_seconds
        if needed > 1e-6 and self._vad.speaking:
            # The user paused within the utterance: only speech counts toward the rule.
            self._barge_in_timer = asyncio.get_running_loop().call_later(
                needed, self._barge_in_due, speech
            )
            return
        if self._options.min_interruption_words > 0:
            self._awaiting_words = speech  # long enough; now it takes words too
            return
        self._interrupt(speech)

    def _interrupt(self, speech: SpeechRun) -> None:
        self._cancel(self._resume_timer)
        self._paused = self._awaiting_words = None
        # The current agent's reply only: after a task took over (its caller is paused) or
        # a handoff, the user speaks to the agent now current; stopping a paused caller's
        # reply would cancel the tool that waits for the task.
        if speech is self._interruptible_speech():
            speech.interrupt()

    def _resume_paused(self) -> None:
        self._resume_timer = None
        speech, self._paused = self._paused, None
        if speech is None or speech.done():
            return
        logger.info("false interruption: resuming %s", speech.handle.id)
        audio = self._ctx.output.audio
        if audio is not None:
            audio.resume()
        speech.resume()

    def _words_heard(self, text: str) -> None:
        """Words settle a pending interruption: the user was not just a noise."""
        words = len(text.split())
        if words == 0 or words < self._options.min_interruption_words:
            return
        target = self._awaiting_words or self._paused
        if target is not None:
            self._cancel(self._barge_in_timer)
            self._barge_in_timer = None
            self._interrupt(target)

    # ------------------------------------------------------- transcripts, turns

    def _on_interim(self, text: str) -> None:
        self._interim = text
        self._ctx.events.emit(
            "user_input_transcribed", UserInputTranscribedEvent(text, is_final=False)
        )
        if self._overlap is not None:
            self._overlap.interim(text)
        self._words_heard(text)

    def _speculate(self, text: str) -> None:
        activity = self._current()
        if activity is not None:
            activity.start_preemptive(text)

    def _start_early(self) -> None:
        """The user paused: recognize (and judge) the utterance so far meanwhile."""
        if not self._utterance or self._ctx.closing or not self._ctx.running:
            return
        frames = list(self._utterance)
        result: asyncio.Future[Transcript | Exception] | None = None
        if not self._streaming:
            result = asyncio.get_running_loop().create_future()
            self._ctx.spawn(self._recognize_into(frames, result))
        verdict = None
        if self._verdicts is not None and not self.manual and self._overlap is None:
            verdict = self._verdicts.judge_early(frames, " ".join(self._transcript))
        self._early = _Early(self._vad.speech_seconds, len(frames), result, verdict)

    async def _recognize_into(
        self, frames: list[AudioFrame], result: asyncio.Future[Transcript | Exception]
    ) -> None:
        try:
            try:
                outcome: Transcript | Exception = await self._stt.transcribe(frames)
            except Exception as exc:  # delivered to whoever uses it; a stale one is dropped
                outcome = exc
            result.set_result(outcome)
        finally:
            if not result.done():  # cancelled (the session closes)
                result.cancel()

    def _recognize(
        self, frames: list[AudioFrame], early: _Early | None = None, overlap: Overlap | None = None
    ) -> None:
        if not frames or self._ctx.closing:
            if overlap is not None:
                overlap.cancel()
            return
        self._recognizing += 1
        # In the session's scope: an utterance outlives a handoff.
        ended = asyncio.get_running_loop().time()
        # Owed to the user until its words are in: they are not away meanwhile, however
        # slow the recognizer (the watchdog bounds it: see _recognize_utterance).
        state = self._ctx.state
        seconds = sum(frame.duration for frame in frames)
        owed = state.new(
            ObligationKind.RECOGNITION, SESSION_OWNER, label=f"the user's {seconds:.1f} s utterance"
        )
        work = asyncio.ensure_future(self._words_of(frames, early))

        def too_slow() -> None:
            work.cancel()

        state.open_new(owed, on_expire=too_slow)
        self._ctx.spawn(self._recognize_utterance(work, owed, seconds, ended, overlap))

    async def _words_of(self, frames: list[AudioFrame], early: _Early | None) -> Transcript:
        if early is None or early.result is None:
            return await self._stt.transcribe(frames)
        # recognized from the pause on: what followed was silence
        outcome = await early.result
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _recognize_utterance(
        self,
        work: asyncio.Future[Transcript],
        owed: Obligation,
        audio_seconds: float,
        audio_ended_at: float,
        overlap: Overlap | None = None,
    ) -> None:
        try:
            await self._utterance_heard(work, owed, audio_seconds, audio_ended_at, overlap)
        finally:
            self._ctx.state.close(owed, "transcribed")

    async def _utterance_heard(
        self,
        work: asyncio.Future[Transcript],
        owed: Obligation,
        audio_seconds: float,
        audio_ended_at: float,
        overlap: Overlap | None,
    ) -> None:
        try:
            try:
                transcript = await work
            except asyncio.CancelledError:
                if not (work.cancelled() and owed.outcome == "expired"):
                    raise  # the session is closing
                # The watchdog stopped it and reported the error: the words are lost.
                logger.warning("speech recognition took over %.0f s: dropped", owed.watchdog)
                transcript = Transcript("")
            text = transcript.text.strip()
            meter_for(self._ctx).stt_done(
                self._stt,
                audio_duration=audio_seconds,
                audio_ended_at=audio_ended_at,
                streamed=self._streaming,
            )
        except Exception as exc:
            logger.warning("speech recognition failed: %s", exc)
            self._ctx.emit_error(exc, source="stt", recoverable=True)
            transcript = Transcript("")
            text = ""
        finally:
            self._recognizing -= 1
            if overlap is not None:
                overlap.cancel()
            if not work.done():
                work.cancel()
        self._interim = ""
        if overlap is not None and overlap.words(transcript):
            # Feedback ("uh-huh"), a cough, laughter: as if it was never said.
            if not self.manual:
                self._schedule_commit()
            return
        if text:
            self._ctx.events.emit(
                "user_input_transcribed", UserInputTranscribedEvent(text, is_final=True)
            )
            self._transcript.append(text)
            self._last_part = transcript
            self._transcribed_at = asyncio.get_running_loop().time()
            self._words_heard(text)
            if self._options.preemptive_generation and not self._vad.speaking:
                self._speculate(" ".join(self._transcript))
        if not self.manual:
            self._schedule_commit()

    def _schedule_commit(self) -> None:
        """End of turn, once the transcript (and the turn detector's verdict, if any)
        is in: ``turn_end_delay`` after the user stopped, from what the words and the
        audio say (see ``turn_end``)."""
        if self._vad.speaking or self._recognizing or not self._transcript:
            return
        options, verdicts = self._options, self._verdicts
        complete = verdicts.complete() if verdicts is not None else None
        if complete is None and verdicts is not None and verdicts.judging:
            return  # the verdict reschedules this when it is in
        delay = turn_end_delay(
            judge_words(" ".join(self._transcript), self._last_part.last_word_confidence),
            audio_complete=complete,
            probability=verdicts.probability if verdicts is not None else None,
            min_delay=options.min_endpointing_delay,
            max_delay=options.max_endpointing_delay,
            continuation=len(self._transcript) > 1,
            recognizer_probability=self._last_part.end_of_turn_probability,
        )
        loop = asyncio.get_running_loop()
        at = (self._ended_at if self._ended_at is not None else loop.time()) + delay
        self._cancel(self._commit_timer)
        self._commit_timer = loop.call_at(max(at, loop.time()), self._turn_end_due, 0.0)

    def _turn_end_due(self, held: float) -> None:
        """The endpointing delay ran out. If the VAD is hearing what may be the user
        going on after a pause (speech not yet confirmed), wait for its verdict — a
        confirmed start cancels this — for at most ``_MAX_HOLD``, then end the turn."""
        self._commit_timer = None
        if self._vad.hearing and held < _MAX_HOLD:
            self._commit_timer = asyncio.get_running_loop().call_later(
                _HOLD_STEP, self._turn_end_due, held + _HOLD_STEP
            )
            return
        self.commit()

    def commit(self) -> None:
        """Close the user's turn now with what was transcribed (manual turn control)."""
        self._cancel(self._commit_timer)
        self._commit_timer = None
        text = " ".join(self._transcript).strip() or self._interim.strip()
        self._transcript, self._interim = [], ""
        verdicts = self._verdicts
        probability = verdicts.probability if verdicts is not None else None
        if verdicts is not None:
            verdicts.clear()
        if text:
            if self._ended_at is not None:
                transcribed = self._transcribed_at
                meter_for(self._ctx).user_turn_committed(
                    self._ended_at,
                    self._ended_at if transcribed is None else transcribed,
                    end_of_turn_probability=probability,
                )
            self._transcribed_at = None
            self._on_turn(text)

    def clear(self) -> None:
        """Forget the turn in progress (audio, transcripts)."""
        self._cancel(self._commit_timer)
        self._utterance, self._transcript, self._interim = [], [], ""
        self._drop_early()
        if self._verdicts is not None:
            self._verdicts.clear()
        if self._streaming:
            self._stt.reset()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------- timers

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()

    def _cancel_timers(self) -> None:
        for timer in (self._commit_timer, self._barge_in_timer, self._resume_timer):
            self._cancel(timer)
        if self._overlap is not None:
            self._overlap.cancel()
