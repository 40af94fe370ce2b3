"""OnsetInterruptionDetector: the offline ``rj.InterruptionDetector`` of the shipped voice
setup.

At the onset it asks ``OnsetClassifier`` (a small numpy model, well under a millisecond)
whether the first few hundred milliseconds sound like a backchannel, a cough, laughter or
noise: if not, the agent stops at once; if so, the agent talks on and the recognizer's
words of the utterance decide (``rj.is_backchannel``: "uh-huh", "yeah", "I see" are
dropped; "yeah, but wait" interrupts). The classifier only ever says "might be feedback",
never "ignore": a word that is no backchannel still interrupts when it is heard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...models.interruption import Interruption, InterruptionDetector
from .onset_classifier import OnsetClassifier

if TYPE_CHECKING:
    from ...models.audio import AudioFrame

__all__ = ["OnsetInterruptionDetector"]

_LEAD = 0.05  # the session gives the audio from this long before the VAD's onset


class OnsetInterruptionDetector(InterruptionDetector):
    """``threshold``: the classifier's backchannel probability at or above which the
    agent talks on until the words are in (default: the classifier's own).
    ``max_undecided_seconds``: speech over the agent this long is a turn."""

    def __init__(
        self,
        *,
        classifier: OnsetClassifier | None = None,
        threshold: float | None = None,
        max_undecided_seconds: float = 1.0,
    ) -> None:
        if max_undecided_seconds <= 0:
            raise ValueError("max_undecided_seconds must be positive")
        self.classifier = classifier if classifier is not None else OnsetClassifier()
        self.threshold = self.classifier.threshold if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within 0-1, got {self.threshold}")
        # The classifier's window starts a little before the onset; it is judged as soon
        # as the window is full.
        self.onset_seconds = max(0.05, self.classifier.window_seconds - _LEAD)
        self.max_undecided_seconds = max_undecided_seconds
        self.last_probability: float | None = None

    async def at_onset(self, frames: Sequence[AudioFrame]) -> Interruption:
        audio = [frame for frame in frames if frame.data.size]
        if not audio:
            return Interruption.UNDECIDED
        rate = audio[0].sample_rate
        pcm = np.concatenate([frame.data[:: frame.num_channels] for frame in audio])
        # Under a millisecond of numpy: cheaper on the loop than a hop to a thread.
        probability = self.classifier.backchannel_probability(pcm, rate)
        self.last_probability = probability
        if probability >= self.threshold:
            return Interruption.UNDECIDED
        return Interruption.INTERRUPT
