"""``AudioFilter``: what a filter on the caller's audio is (noise suppression, echo
cancellation, your own).

A filter takes one frame of the caller's audio and returns one frame: the same rate, the
same number of samples. It may keep state from frame to frame (an echo canceller's model
of the room, a noise suppressor's noise estimate) and may delay the audio by a constant
few milliseconds. ``filter_audio`` (``attach.py``) runs the session's filters, in order,
on every frame of the microphone before the VAD and the recognizer hear it.

A filter that ``uses_reference`` is also handed, for each frame, the far end: the agent's
audio the listener's speaker was playing at the same moments, as many samples at the same
rate (zeros while nothing plays). That is what an echo canceller subtracts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from ..models.audio import PCM16, AudioFrame

__all__ = ["AudioFilter"]


class AudioFilter(ABC):
    """One stage of the caller's audio, before the VAD and the recognizer hear it.

    Subclass it and implement ``process`` (and ``reset`` if the filter keeps state).
    One instance serves one session: its state is one caller's room.
    """

    sample_rates: ClassVar[tuple[int, ...]] = ()
    """The rates ``process`` takes (empty: any). A frame at another rate reaches the
    filter resampled to the first of them, and its output is resampled back, so the next
    stage and the VAD get the microphone's rate either way."""

    uses_reference: ClassVar[bool] = False
    """Whether ``process`` wants the far-end reference (what the agent played)."""

    runs_in_thread: ClassVar[bool] = False
    """Whether a frame costs enough to keep off the event loop (a neural model: about a
    millisecond per 20 ms frame). A chain with one such filter runs every frame in a
    worker thread; the loop waits for it without blocking."""

    @abstractmethod
    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        """Filter one mono ``frame``: return a frame of the same rate and number of
        samples. ``reference`` (for a filter that ``uses_reference``): the far end at the
        same moments, as many int16 samples at the same rate; ``None`` when the agent is
        not playing (silence). An exception here does not reach the session: the chain
        logs it once and passes the audio on unfiltered from then on."""

    def reset(self) -> None:  # noqa: B027 - a stateless filter has nothing to forget
        """Forget what was heard so far (another caller, device or sample rate)."""
