"""OnsetInterruptionDetector: the offline ``rj.InterruptionDetector`` of the shipped voice
setup.

At the onset it asks ``OnsetClassifier`` (a small numpy model, well under a millisecond)
whether the first few hundred milliseconds sound like a backchannel, a cough, laughter or
noise: if not, the agent stops at once; if so, the agent talks on and the recognizer's
words of the utterance decide. The classifier was trained for the sound to start within
the first 0-150 ms of its window, but the VAD's estimate of the onset came 0-0.18 s late
(Silero, median 0.03 s): one window placed on the estimate cut the first syllable off as
often as not, and a few milliseconds moved the verdict. So three windows, starting 0.2,
0.15 and 0.1 s before the estimate, are judged and their probabilities averaged, 0.2 s
after the estimate. On the conversation benchmark's tuning voices (its barge-in clips
through Silero, 16 kHz and phone band) this stopped late on 2 of 40 interruptions and
falsely on 0 of 56 backchannels, coughs and laughs, against 7 and 2 with one window from
0.05 s before the estimate, which also decided 50 ms later. An onset taken for feedback
gets a second look 0.4 s after the estimate: the same three window starts, 0.5 s long each,
judged by a second model of the same kind (``onset_classifier_second_look.npz``). Half a
second tells more: an "uh-huh" is over by then, "stop, stop" goes on. On the trainer's
validation voices it caught 60 % of the sentence onsets the first look took for feedback
and stopped 0.9 % of the feedback the first look let through (its threshold was chosen
for that: at most 1 % more false stops). Then, from 0.3 s after the
onset while the user goes on, the recognizer's words so far (a pass over the utterance
so far, again as soon as one is done): words it is sure of that are no backchannel stop
the agent ("Hold on.", "Sorry.", "No." of onsets taken for feedback, 0.45-0.65 s after
the onset instead of at the utterance's end or after 1 s). Finally the recognizer's
words of the whole utterance decide (``rj.is_backchannel``: "uh-huh", "yeah", "I see"
are dropped; "yeah, but wait" interrupts). The classifier only ever says "might be feedback",
never "ignore": a word that is no backchannel still interrupts when it is heard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...models.interruption import Interruption, InterruptionDetector
from .onset_classifier import SECOND_LOOK_WEIGHTS_PATH, OnsetClassifier

if TYPE_CHECKING:
    from ...models.audio import AudioFrame

__all__ = ["OnsetInterruptionDetector"]

_INTERIM_FROM = 0.3
"""Seconds after the onset from which the words so far are recognized (see below)."""
_LEADS = (0.2, 0.15, 0.1)
"""Where the judged windows start, in seconds before the VAD's estimate of the onset."""


class OnsetInterruptionDetector(InterruptionDetector):
    """``threshold``: the classifier's backchannel probability at or above which the
    agent talks on until the words are in (default: the classifier's own).
    ``second_look``: the classifier of the longer window judged at the second look
    (``True``: the shipped 0.5 s one, with its own threshold; ``False``: none).
    ``max_undecided_seconds``: speech over the agent this long is a turn."""

    def __init__(
        self,
        *,
        classifier: OnsetClassifier | None = None,
        threshold: float | None = None,
        second_look: OnsetClassifier | bool = True,
        max_undecided_seconds: float = 1.0,
    ) -> None:
        if max_undecided_seconds <= 0:
            raise ValueError("max_undecided_seconds must be positive")
        self.classifier = classifier if classifier is not None else OnsetClassifier()
        self.threshold = self.classifier.threshold if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within 0-1, got {self.threshold}")
        if second_look is True:
            second_look = OnsetClassifier(weights_path=SECOND_LOOK_WEIGHTS_PATH)
        self.second_look = second_look or None
        # Judged as soon as the last window (the one starting nearest the onset) is full.
        self.lead_seconds = max(_LEADS)
        self.onset_seconds = max(0.05, self.classifier.window_seconds - min(_LEADS))
        if self.second_look is not None:
            if self.second_look.window_seconds <= self.classifier.window_seconds:
                raise ValueError(
                    "the second look's window must be longer than the onset's "
                    f"({self.second_look.window_seconds} s against "
                    f"{self.classifier.window_seconds} s)"
                )
            self.second_look_seconds = self.second_look.window_seconds - min(_LEADS)
        self.max_undecided_seconds = max_undecided_seconds
        # An onset taken for feedback: its first words decide ("Hold on." at 0.3 s).
        self.interim_from = _INTERIM_FROM
        self.last_probability: float | None = None
        """The backchannel probability of the last look (onset or second)."""

    async def at_onset(self, frames: Sequence[AudioFrame]) -> Interruption:
        return self._judge(frames, self.classifier, self.threshold)

    async def at_second_look(self, frames: Sequence[AudioFrame]) -> Interruption:
        if self.second_look is None:
            return Interruption.UNDECIDED
        return self._judge(frames, self.second_look, self.second_look.threshold)

    def _judge(
        self, frames: Sequence[AudioFrame], classifier: OnsetClassifier, threshold: float
    ) -> Interruption:
        audio = [frame for frame in frames if frame.data.size]
        if not audio:
            return Interruption.UNDECIDED
        rate = audio[0].sample_rate
        pcm = np.concatenate([frame.data[:: frame.num_channels] for frame in audio])
        # The audio given ends where the look is due (the last window, the one starting
        # nearest the onset, just full); count back from there (the start may be missing
        # when the speech began right after a previous turn).
        window = round(classifier.window_seconds * rate)
        ends = [pcm.shape[0] - round((lead - min(_LEADS)) * rate) for lead in _LEADS]
        # Under a millisecond of numpy each: cheaper on the loop than a hop to a thread.
        probability = float(
            np.mean(
                [
                    classifier.backchannel_probability(pcm[max(0, end - window) : end], rate)
                    for end in ends
                ]
            )
        )
        self.last_probability = probability
        if probability >= threshold:
            return Interruption.UNDECIDED
        return Interruption.INTERRUPT
