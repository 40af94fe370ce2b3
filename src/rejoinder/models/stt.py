"""Speech to text. A recognizer gets one utterance of audio and returns its transcript.

This is the non-streaming shape: the session segments the microphone with the VAD and
hands each utterance over when the user stops speaking. A streaming recognizer also
reports interim transcripts while the user speaks (``StreamingSTT``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY
from typing import TYPE_CHECKING

from .._dataclass import dataclass

if TYPE_CHECKING:
    from .audio import AudioFrame  # numpy: imported only where audio flows


class STTError(Exception):
    """Recognition failed; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Transcript:
    """One utterance's transcript, with what the recognizer knows about how sure it is.

    ``confidence``: the recognizer's probability (0-1) for its words, on average;
    ``last_word_confidence``: for the last word it wrote; ``None`` when it does not say.
    The session reads both. A recognizer that mishears the word a speaker broke off on
    ("a hotel near the" written "a hotel near now.") is usually unsure of that word, and
    the sentence only *looks* finished (the turn-end decision); one that made words of a
    sound ("here." for a laugh) is unsure of all of them (the interruption decision).

    ``end_of_turn_probability``: the recognizer's own probability (0-1) that the speaker
    finished their turn where the utterance ends, for a recognizer with a turn model of its
    own (AssemblyAI's ``end_of_turn_confidence``); ``None`` when it has none. The turn-end
    decision takes it as one more signal, never as the decider (``turn_end``).
    """

    text: str
    _: KW_ONLY
    confidence: float | None = None
    last_word_confidence: float | None = None
    end_of_turn_probability: float | None = None


class STT(ABC):
    """A recognizer: the session hands it one utterance of audio, once the VAD heard the
    user stop, and it returns the words. Implement ``recognize``; override ``transcribe``
    too if the recognizer knows how sure it is (``Transcript.confidence``). A recognizer
    that also hears the utterance while it is spoken is a ``StreamingSTT``."""

    @abstractmethod
    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        """Transcribe one utterance ("" when nothing intelligible was said)."""

    async def transcribe(self, frames: Sequence[AudioFrame]) -> Transcript:
        """The utterance's transcript and what the recognizer knows about it. The
        session calls this; a recognizer that knows more than the text overrides it."""
        return Transcript(await self.recognize(frames))

    async def transcribe_so_far(self, frames: Sequence[AudioFrame]) -> Transcript:
        """The words so far of an utterance the user is still speaking (the session asks
        this while it judges speech over the agent). Less urgent than ``transcribe``: a
        recognizer that queues its work may run it after whole utterances. By default the
        same as ``transcribe``."""
        return await self.transcribe(frames)

    async def aclose(self) -> None:  # noqa: B027 - most recognizers hold nothing to release
        """Release resources. Idempotent."""


class StreamingSTT(STT):
    """A recognizer that also hears the utterance as it is spoken.

    ``push`` is called with each frame of an utterance (inline, so keep it cheap: buffer
    and hand off); interim transcripts go to ``on_interim``. ``recognize`` is still what
    produces the final transcript when the utterance ends.
    """

    @abstractmethod
    def push(self, frame: AudioFrame, on_interim: Callable[[str], None]) -> None: ...

    @abstractmethod
    def reset(self) -> None:
        """Drop the utterance in progress."""
