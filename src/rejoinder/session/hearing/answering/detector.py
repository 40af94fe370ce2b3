"""``AnsweredByDetector``: who answered a call the agent placed, from the callee's audio
and words. Sans-I/O: frames and transcripts go in with the loop time they arrived at,
verdicts come out; ``listener.py`` wires it to a session.

Why an energy gate of its own rather than the session's VAD events: the rules below are
about the callee's first seconds (how long they talked, how long they then waited), which
the session's VAD reports only as ``speaking`` edges smoothed by its own silence delay,
and the realtime engine (a duplex model) has no VAD of ours at all. The beep needs the
samples anyway. One 20 ms window costs one FFT of 40 ms of audio (tens of microseconds),
and the detector stops looking once it has nothing left to find.

The rules (times in seconds; ``DetectorOptions`` holds them):

- **machine**: the callee talked for ``machine_speech`` (2.5) with no pause as long as
  ``end_silence`` (1.0). A person answering says one to three words and waits.
- **human**: an utterance shorter than that, then ``end_silence`` of quiet: the
  "hello?" and the wait for an answer.
- **beep**: a steady tone in 350-2100 Hz, ``min_beep``-``max_beep`` long (0.1-2.0), at
  least ``beep_tonality`` (0.85) of the in-band energy in one peak whose frequency holds,
  after at least ``beep_after_speech`` (0.5) of the callee's speech (the greeting):
  ``machine`` with ``beep=True``, reported when the tone ends (the moment to speak). A
  tone of 80 ms inside speech is too short; a tone longer than ``max_beep`` is a line
  tone, not a beep. Before a machine verdict a beep must last ``lone_beep`` (0.2): then
  it decides alone, and a voice's harmonic held for a syllable must not.
- **screening**: a transcript with one of ``screening.SCREENING_PHRASES`` ("record your name and
  reason for calling", "using a screening service", "Google Assistant", ...).
- **unknown**: nothing decided ``decision_timeout`` (3.0) after the callee first spoke,
  or ``answer_timeout`` (5.0) after the answer when nobody spoke.

Only the first verdict comes from the energy rules (machine, human or unknown). After
it, two facts may still refine it, each once: a beep (``machine`` with ``beep``) and
screening words (``screening``); ``FOLLOWS`` is the table of what may follow what. The
detector listens for them for ``listen_for`` (60) after the answer.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Literal

import numpy as np

from ...._dataclass import dataclass
from ...events import AnsweredBy
from .screening import screening_phrase
from .tone import frame_samples, loudness, tonality

if TYPE_CHECKING:
    import numpy.typing as npt

    from ....models.audio import AudioFrame

__all__ = ["FOLLOWS", "AnsweredByDetector", "DetectorOptions", "Verdict"]

Label = Literal["human", "machine", "unknown", "screening", "beep"]

FOLLOWS: dict[Label | None, frozenset[Label]] = {
    None: frozenset({"human", "machine", "unknown", "screening", "beep"}),
    "unknown": frozenset({"screening", "beep"}),
    "human": frozenset({"screening", "beep"}),
    "machine": frozenset({"screening", "beep"}),
    "screening": frozenset(),
    "beep": frozenset(),
}
"""What may follow the last verdict (``None``: none yet; ``beep``: ``machine`` with a
beep). A missing entry is the error: the detector checks every verdict against it."""

_HOP = 0.02  # one window every 20 ms
_GAP = 0.5  # frames this late are a gap in the audio (nothing sent), not network jitter
_FLOOR_WINDOWS = 75  # the noise floor: the quietest window of the last 1.5 s
_TONE_DRIFT, _TONE_DRIFT_SHARE = 6.0, 0.005  # how far a beep's pitch may wander a window


@dataclass(frozen=True, slots=True)
class DetectorOptions:
    """The thresholds of the answering detector (``rj.detect_answered_by(session,
    options=...)``), in seconds unless said otherwise; the module's docstring says how
    each decides. The defaults were tuned on one set of synthesized calls and checked on
    a held-out one (docs/telephony.md)."""

    machine_speech: float = 2.5
    end_silence: float = 1.0
    decision_timeout: float = 3.0
    answer_timeout: float = 5.0
    min_speech: float = 0.1
    """An utterance with less voiced audio than this is a click or a breath."""
    min_beep: float = 0.1
    lone_beep: float = 0.2
    """The shortest beep that decides ``machine`` on its own (no machine verdict yet)."""
    max_beep: float = 2.0
    beep_low: float = 350.0
    beep_high: float = 2100.0
    beep_tonality: float = 0.85
    beep_after_speech: float = 0.5
    voice_margin: float = 10.0
    """dB over the noise floor that counts as the callee's voice."""
    voice_min_db: float = -48.0
    """... and never quieter than this (dBFS): digital silence has no floor to speak of."""
    listen_for: float = 60.0

    def __post_init__(self) -> None:
        for name in ("machine_speech", "end_silence", "decision_timeout", "answer_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not 0 < self.min_beep <= self.lone_beep < self.max_beep:
            raise ValueError("need 0 < min_beep <= lone_beep < max_beep")
        if not 0 < self.beep_tonality < 1:
            raise ValueError("beep_tonality is a share: between 0 and 1")


@dataclass(frozen=True, slots=True)
class Verdict:
    """One decision: who answered, whether a beep was heard, why, and when (loop time)."""

    answered_by: AnsweredBy
    at: float
    beep: bool = False
    detail: str = ""

    @property
    def label(self) -> Label:
        return "beep" if self.beep else self.answered_by


class AnsweredByDetector:
    """Feed it with ``push(frame, now)`` and ``heard(text, now)``, call ``due(now)`` at
    ``next_deadline()``; each returns the verdicts it reached (usually none)."""

    def __init__(self, answered_at: float, options: DetectorOptions | None = None) -> None:
        self.options = options or DetectorOptions()
        self.answered_at = answered_at
        self.verdicts: list[Verdict] = []
        self.last_voice: float | None = None
        """Loop time the callee's voice was last heard (``None``: never)."""
        self._rate = 0
        self._origin = answered_at  # loop time of the first sample at this rate
        self._position = 0  # samples analysed since then
        self._pending: npt.NDArray[np.float64] = np.zeros(0)
        self._previous: npt.NDArray[np.float64] = np.zeros(0)  # the last hop, for 40 ms
        self._recent_db: deque[float] = deque(maxlen=_FLOOR_WINDOWS)
        self._first_voice: float | None = None
        self._utterance_start: float | None = None
        self._utterance_voiced = 0.0
        self._speech_heard = 0.0  # voiced, not tonal: the greeting so far
        self._tone_windows = 0
        self._tone_freq = 0.0

    # ------------------------------------------------------------------ reading

    @property
    def last(self) -> Label | None:
        return self.verdicts[-1].label if self.verdicts else None

    @property
    def finished(self) -> bool:
        """Nothing more can be decided."""
        return not FOLLOWS[self.last]

    def next_deadline(self) -> float | None:
        """When ``due`` may decide ``unknown`` (``None``: it will not)."""
        if self.verdicts:
            return None
        o = self.options
        if self._first_voice is not None:
            return min(self._first_voice + o.decision_timeout, self.answered_at + o.answer_timeout)
        return self.answered_at + o.answer_timeout

    def quiet_for(self, now: float) -> float:
        """Seconds since the callee's voice was last heard (since the answer if never)."""
        return now - (self.last_voice if self.last_voice is not None else self.answered_at)

    # ------------------------------------------------------------------- input

    def due(self, now: float) -> list[Verdict]:
        deadline = self.next_deadline()
        if deadline is None or now < deadline - 1e-9:
            return []
        if self._first_voice is None:
            why = f"nobody spoke in {self.options.answer_timeout:g} s"
        else:
            why = f"no decision {now - self._first_voice:.1f} s after they spoke"
        return self._decide("unknown", now, why)

    def heard(self, text: str, now: float) -> list[Verdict]:
        """A transcript of the callee (interim or final)."""
        if not isinstance(text, str) or "screening" not in FOLLOWS[self.last]:
            return []
        phrase = screening_phrase(text)
        if phrase is None:
            return []
        return self._decide("screening", now, f'"{phrase}"')

    def push(self, frame: AudioFrame, now: float) -> list[Verdict]:
        """A frame of the callee's audio that arrived at ``now`` (its last sample's time).

        The rules measure the audio by its samples, not by when frames arrived: a burst
        of frames held up by the network would otherwise shrink the pauses in it. The
        samples are placed on the loop clock from the first frame of each rate on; a
        line that sent nothing for over ``_GAP`` seconds was quiet that long."""
        out = self.due(now)
        if self.finished or now - self.answered_at > self.options.listen_for:
            return out
        samples = frame_samples(frame)
        if frame.sample_rate != self._rate:
            self._rate = frame.sample_rate
            self._pending = self._previous = np.zeros(0)
            self._origin, self._position = now - samples.shape[0] / self._rate, 0
        else:
            heard = self._position + self._pending.shape[0] + samples.shape[0]
            lag = now - (self._origin + heard / self._rate)
            if lag > _GAP:
                self._origin += lag  # the line sent nothing for a while: that was quiet
            elif lag < 0:
                self._origin += lag  # captured earlier than thought (the first was late)
        if self._pending.shape[0]:
            samples = np.concatenate((self._pending, samples))
        hop = max(1, round(_HOP * self._rate))
        whole = samples.shape[0] - samples.shape[0] % hop
        for start in range(0, whole, hop):
            self._position += hop
            end = min(now, self._origin + self._position / self._rate)
            out += self._window(samples[start : start + hop], end)
            if self.finished:
                break
        self._pending = samples[whole:]
        return out

    # --------------------------------------------------------------- the rules

    def _window(self, hop: npt.NDArray[np.float64], end: float) -> list[Verdict]:
        o = self.options
        db = loudness(hop)
        both = np.concatenate((self._previous, hop)) if self._previous.shape[0] else hop
        self._previous = hop
        share, freq = tonality(both, self._rate)
        # Speech has gaps between its words where the line's own noise shows: the
        # quietest recent window is that noise, however loud the line is.
        self._recent_db.append(db)
        floor = min(self._recent_db)
        voiced = db > max(floor + o.voice_margin, o.voice_min_db)
        # Not "voiced": a tone held past the floor's 1.5 s becomes the floor itself.
        loud = db > o.voice_min_db
        tonal = loud and share >= o.beep_tonality and o.beep_low <= freq <= o.beep_high
        out = self._follow_tone(tonal, freq, end)
        if voiced:
            self.last_voice = end
            if not tonal:
                self._speech_heard += _HOP
        if not self.verdicts:
            out += self._energy_rules(voiced, end)
        return out

    def _follow_tone(self, tonal: bool, freq: float, end: float) -> list[Verdict]:
        steady = abs(freq - self._tone_freq) <= _TONE_DRIFT + freq * _TONE_DRIFT_SHARE
        if tonal and self._tone_windows and steady:
            self._tone_windows += 1
            return []
        out: list[Verdict] = []
        if self._tone_windows:
            # k windows of 40 ms, one every 20 ms, are tonal for a tone of 20 (k - 1) to
            # 20 k ms (measured on tones inside speech): a tone of min_beep always passes,
            # one 20 ms shorter may, one 40 ms shorter never does.
            length = _HOP * (self._tone_windows - 1)
            o = self.options
            # A beep after a machine verdict only says when to speak; before one (or
            # after "human") it alone makes the call a machine's, and a voice's harmonic
            # held for a syllable must not send a voicemail to a person.
            shortest = o.min_beep if self.last == "machine" else o.lone_beep
            if (
                shortest - _HOP - 1e-9 <= length <= o.max_beep
                and self._speech_heard >= o.beep_after_speech - 1e-9
                and "beep" in FOLLOWS[self.last]
            ):
                why = f"beep at {self._tone_freq:.0f} Hz, {length:.2f} s"
                out = self._decide("machine", end - _HOP, why, beep=True)
        self._tone_windows = 1 if tonal else 0
        self._tone_freq = freq
        return out

    def _energy_rules(self, voiced: bool, end: float) -> list[Verdict]:
        o = self.options
        if voiced:
            if self._first_voice is None:
                self._first_voice = end - _HOP
            if self._utterance_start is None:
                self._utterance_start, self._utterance_voiced = end - _HOP, 0.0
            self._utterance_voiced += _HOP
            talked = end - self._utterance_start
            if talked >= o.machine_speech - 1e-9:
                return self._decide("machine", end, f"talked {talked:.1f} s without a pause")
            return []
        if self._utterance_start is None or self.last_voice is None:
            return []
        quiet = end - self.last_voice
        if quiet < o.end_silence - 1e-9:
            return []
        talked = self.last_voice - self._utterance_start
        voiced_for = self._utterance_voiced
        self._utterance_start = None
        if voiced_for < o.min_speech - 1e-9:
            return []  # a click, not a word
        return self._decide("human", end, f"said {talked:.1f} s, then quiet {quiet:.1f} s")

    def _decide(
        self, kind: AnsweredBy, at: float, why: str, *, beep: bool = False
    ) -> list[Verdict]:
        verdict = Verdict(kind, at, beep, why)
        if verdict.label not in FOLLOWS[self.last]:
            raise AssertionError(f"{verdict.label} may not follow {self.last}")  # a bug here
        self.verdicts.append(verdict)
        return [verdict]
