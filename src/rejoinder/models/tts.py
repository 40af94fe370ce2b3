"""Text to speech. A ``TTS`` turns one piece of text into audio frames; the session feeds
it sentence by sentence as the model's text arrives (``SentenceSplitter``, in
``sentences``), so the first sentence is heard while the rest is still being generated,
each cleaned for speech by the engine's ``text_filter`` (``speech_text``). A
``StreamingTTS`` takes the text deltas themselves. Either may report ``WordTiming``s
with its audio.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from .._dataclass import dataclass
from .sentences import SentenceSplitter as SentenceSplitter
from .speech_text import clean_for_speech

if TYPE_CHECKING:
    from .audio import AudioFrame  # numpy: imported only where audio flows


class TTSError(Exception):
    """Synthesis failed; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class WordTiming:
    """When a word is spoken, in seconds from the start of the audio it came with (the
    synthesis of one text, or of one stream). Engines that know it yield these between
    frames; the session then records exactly the words heard before an interruption."""

    word: str
    start: float
    end: float


class TTS(ABC):
    """A voice: text in, audio frames out. The session feeds it one sentence at a time
    as the model's text streams in, so the first sentence plays while the rest is being
    written. Implement ``synthesize``; an engine that takes the text as it streams is a
    ``StreamingTTS``.

    Args:
        sample_rate: Hz of the frames ``synthesize`` yields.
        num_channels: channels of those frames.
        text_filter: what the engine is given of the model's text (see the attribute).
    """

    text_filter: Callable[[str], str] | None
    """What the engine is given of the model's text (``clean_for_speech``: no markdown,
    no emoji); ``None`` hands it the text as written. The transcript and the history keep
    the original either way. Set it on the instance (a function set on the class would
    become a method)."""

    def __init__(
        self,
        *,
        sample_rate: int,
        num_channels: int = 1,
        text_filter: Callable[[str], str] | None = clean_for_speech,
    ) -> None:
        self.sample_rate = sample_rate
        self.num_channels = num_channels
        self.text_filter = text_filter

    @abstractmethod
    def synthesize(self, text: str) -> AsyncIterator[AudioFrame | WordTiming]:
        """Stream the audio for ``text`` (optionally with word timings). Raise ``TTSError``
        while iterating on failure."""

    async def aclose(self) -> None:  # noqa: B027 - most engines hold nothing to release
        """Release resources. Idempotent."""


class TTSStream(ABC):
    """One streamed synthesis: text goes in as it is generated, audio comes out."""

    @abstractmethod
    def push_text(self, text: str) -> None: ...

    @abstractmethod
    def end_input(self) -> None:
        """No more text: the stream ends once the audio for it has come out."""

    @abstractmethod
    def __aiter__(self) -> AsyncIterator[AudioFrame | WordTiming]: ...

    async def aclose(self) -> None:  # noqa: B027 - most streams hold nothing to release
        """Stop early and release resources."""


class StreamingTTS(TTS):
    """A TTS that takes text incrementally (no sentence splitting needed): the session
    pushes the model's deltas as they arrive."""

    @abstractmethod
    def stream(self) -> TTSStream: ...
