"""The user's voice in the randomized session tests, and the rule for tentative
interruptions.

``Voice`` is a microphone the test speaks into: a noise (a cough the VAD hears, too short
to interrupt, with no words: a reply it paused resumes), a wordless noise long enough to
interrupt, or words that make a user turn. ``PauseWatch`` watches the speaker: every time
the session pauses a reply because the user may be interrupting it, and how that pause
ends. It checks, from what a client is told and what the speaker does, not from the floor:

* no ``listening`` while a paused reply is still owed: at a ``listening`` edge during a
  pause, the paused reply must already be interrupted (or done);
* a ``listening`` edge is final for the reply that was playing: a paused reply that
  resumes saw no ``listening`` since it was paused.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import MemoryAudioInput, MemoryAudioOutput, ScriptedVAD, speech_frame

RATE = 16000
# Utterances are pushed in a few long frames, not in 20 ms ones: on looptime every frame
# is a jump of the clock, and a jump costs dozens of idle loop cycles; over thousands of
# sequences 20 ms frames doubled these tests' run time. The VAD's rules hold at any frame
# size: the first frame confirms the speech (it is longer than ScriptedVAD's 0.06 s), the
# rest of the utterance follows in one, and one frame of quiet ends it.
ONSET = 0.1
NOISE = 0.2  # a cough: shorter than min_interruption_duration (0.5 s), no words
LONG = 0.8  # long enough to interrupt
VAD_SILENCE = 0.3  # ScriptedVAD's default: quiet that ends an utterance
SPEAKING_WITHIN = 3.0  # how long a barge-in waits for the agent to speak (virtual seconds)
RECOGNIZED_WITHIN = 1.0  # the utterance's recognition, after its end (immediate here)
LINE = "One more thing, if I may."
"""Said for the user to talk over: a pause keeps it playing however short it is."""


def utterances(turns: Sequence[str]) -> st.SearchStrategy[str]:
    """What the user says: a noise (half of the time: over speech, a tentative
    interruption), a long wordless noise, or the words of one of ``turns``."""
    return st.one_of(
        st.just("noise"), st.just("noise"), st.just("wordless"), st.sampled_from(turns)
    )


def _quiet(seconds: float) -> AudioFrame:
    return AudioFrame(np.zeros(round(seconds * RATE), np.int16), RATE)


FRAMES = {
    NOISE: [speech_frame(ONSET, RATE), speech_frame(NOISE - ONSET, RATE)],
    LONG: [speech_frame(ONSET, RATE), speech_frame(LONG - ONSET, RATE)],
}
QUIET = _quiet(VAD_SILENCE)


class QueuedSTT(rj.STT):
    """Says, for each utterance, the text the test meant by it (a noise: nothing)."""

    def __init__(self) -> None:
        self.text = ""
        self.heard: list[str] = []
        self._waiting: asyncio.Future[None] | None = None

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        text, self.text = self.text, ""
        self.heard.append(text)
        if self._waiting is not None and not self._waiting.done():
            self._waiting.set_result(None)
        return text

    async def recognized(self, within: float) -> None:
        """Wait (bounded) for the next utterance to be recognized."""
        self._waiting = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._waiting, within)
        except TimeoutError:
            pass  # not recognized (the session was busy closing): the next text waits
        finally:
            self._waiting = None


class PauseWatch:
    """Judges every pause of the speaker (see the module's docstring). ``note`` logs, in
    the caller's log, what it saw; ``violations`` holds each broken promise."""

    def __init__(self, note: Callable[[str], object] = lambda _: None) -> None:
        self._note = note
        self._session: rj.AgentSession[Any] | None = None
        self._paused: rj.SpeechHandle | None = None
        self._listened_at: float | None = None
        self.closing = False
        """The session is being closed: a close ends a pause with whatever it closes."""
        self.violations: list[str] = []
        self.counts: Counter[str] = Counter()

    def attach(self, session: rj.AgentSession[Any]) -> None:
        self._session = session
        session.on("agent_state_changed", self._agent_changed)

    def check(self, describe: Callable[[], str] = lambda: "") -> None:
        assert not self.violations, self.violations[0] + "\n" + describe()

    def _violate(self, text: str) -> None:
        self.violations.append(text)
        self._note(f"!!! {text}")

    # --------------------------------------------------------- speaker events

    def paused(self) -> None:
        speech = None if self._session is None else self._session.current_speech
        self._paused, self._listened_at = speech, None
        self.counts["paused"] += 1
        self._note(f"speaker paused ({speech.id if speech is not None else 'no speech'})")

    def resumed(self) -> None:
        speech, listened = self._paused, self._listened_at
        self._paused = self._listened_at = None
        self.counts["resumed"] += 1
        self._note("speaker resumed")
        if listened is not None:
            self._violate(
                f"the paused reply {getattr(speech, 'id', '?')} resumed after listening at "
                f"{listened:.3f}: that listening was not final"
            )

    def cleared(self) -> None:
        """The paused audio was dropped (an interruption): the pause is over."""
        self._paused = self._listened_at = None
        self.counts["interrupted while paused"] += 1
        self._note("speaker cleared while paused")

    def _agent_changed(self, ev: rj.AgentStateChangedEvent) -> None:
        speech = self._paused
        if ev.new_state != "listening" or speech is None:
            return
        if self._listened_at is None:
            self._listened_at = ev.created_at
        if not (speech.interrupted or speech.done() or self.closing):
            self._violate(f"listening while the paused reply {speech.id} is still owed")


class WatchedSpeaker(MemoryAudioOutput):
    """A speaker that tells a ``PauseWatch`` when it really pauses, resumes or drops a
    paused segment (a call that changes nothing is no event)."""

    def __init__(self, watch: PauseWatch, *, max_lead: float | None = None) -> None:
        super().__init__(24000, max_lead=max_lead)
        self._watch = watch

    def pause(self) -> None:
        was = self.paused
        super().pause()
        if self.paused and not was:
            self._watch.paused()

    def resume(self) -> None:
        was = self.paused
        super().resume()
        if was and not self.paused:
            self._watch.resumed()

    def clear_buffer(self) -> None:
        was = self.paused
        super().clear_buffer()
        if was and not self.paused:
            self._watch.cleared()


class Voice:
    """The user's microphone in a randomized test; ``session_options`` wire it in."""

    def __init__(self) -> None:
        self.mic = MemoryAudioInput(RATE)
        self.stt = QueuedSTT()
        self.counts: Counter[str] = Counter()
        """What the user's speech began over (for the test's statistics)."""

    def session_options(self) -> dict[str, Any]:
        return {"stt": self.stt, "vad": ScriptedVAD()}

    def attach(self, session: rj.AgentSession[Any]) -> None:
        session.input.audio = self.mic

    async def say(self, session: rj.AgentSession[Any], what: str, barge_in: bool) -> None:
        """``noise``, ``wordless`` (long, no words) or a turn's text; with ``barge_in``,
        first wait (bounded) for the agent to be speaking."""
        if barge_in and session.agent_state != "speaking":
            await _speaking(session, SPEAKING_WITHIN)
        seconds = NOISE if what == "noise" else LONG
        kind = "noise" if what == "noise" else "speech"
        output = "audio" if session.output.audio is not None else "text"
        self.counts[f"{kind} over {session.agent_state} ({output})"] += 1
        self.stt.text = "" if what in ("noise", "wordless") else what
        for frame in FRAMES[seconds]:
            await self.mic.push(frame)
        recognized = asyncio.ensure_future(self.stt.recognized(RECOGNIZED_WITHIN))
        await self.mic.push(QUIET)
        # The utterance's text is taken before the next step can queue another one.
        await recognized


async def _speaking(session: rj.AgentSession[Any], within: float) -> None:
    started = asyncio.get_running_loop().create_future()

    def changed(ev: rj.AgentStateChangedEvent) -> None:
        if ev.new_state == "speaking" and not started.done():
            started.set_result(None)

    session.on("agent_state_changed", changed)
    try:
        await asyncio.wait_for(started, within)
    except TimeoutError:
        pass  # nothing to talk over: the user just speaks
    finally:
        session.off("agent_state_changed", changed)
