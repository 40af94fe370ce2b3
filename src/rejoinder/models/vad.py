"""Voice activity detection: audio frames in, speech start/end events out.

``VADStream.push`` is synchronous and returns the events a frame caused: the VAD runs
inline on the frame path, so no task or queue hop is spent per frame.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

from .._dataclass import dataclass

if TYPE_CHECKING:
    from .audio import AudioFrame  # numpy: imported only where audio flows


@dataclass(frozen=True, slots=True)
class VADEvent:
    type: Literal["start_of_speech", "end_of_speech"]
    speech_duration: float
    """Seconds of speech so far (at the start, the speech that confirmed it)."""
    silence_duration: float
    """Seconds of silence before this event (at the end, the silence that confirmed it)."""
    probability: float = 1.0


class VADStream(ABC):
    @abstractmethod
    def push(self, frame: AudioFrame) -> list[VADEvent]:
        """Feed one frame; return what it confirmed (usually nothing)."""

    @property
    @abstractmethod
    def speaking(self) -> bool:
        """Whether the stream is inside speech right now."""

    @property
    @abstractmethod
    def speech_seconds(self) -> float:
        """Seconds of speech in the current utterance (not counting trailing silence)."""

    @property
    def hearing(self) -> bool:
        """Speech-like audio is coming in that is not confirmed as speech yet (it may be
        the user going on after a pause). Detectors that cannot tell say False."""
        return False


class VAD(ABC):
    """A voice activity detector: it hears when the user starts and stops speaking. The
    session opens one ``stream`` per audio input and feeds it every microphone frame;
    the ``VADEvent``s it returns start and end the user's utterances."""

    @abstractmethod
    def stream(self) -> VADStream:
        """A fresh detector state for one audio input."""
