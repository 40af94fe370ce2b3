"""Text to speech. A ``TTS`` turns one piece of text into audio frames; the session feeds
it sentence by sentence as the model's text arrives (``SentenceSplitter``), so the first
sentence is heard while the rest is still being generated. A ``StreamingTTS`` takes the
text deltas themselves. Either may report ``WordTiming``s with its audio.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    def __init__(self, *, sample_rate: int, num_channels: int = 1) -> None:
        self.sample_rate = sample_rate
        self.num_channels = num_channels

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


# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) and white
# space; abbreviations such as "e.g. " split early, which only costs a little prosody.
_SENTENCE_END = re.compile(r"""[.!?…]+["')\]]*\s+""")


class SentenceSplitter:
    """Cuts streamed text into sentences: ``push`` returns the ones completed so far,
    ``flush`` the remainder. Very short fragments are kept for the next sentence."""

    def __init__(self, min_chars: int = 12) -> None:
        self._pending = ""
        self._min_chars = min_chars

    def push(self, text: str) -> list[str]:
        self._pending += text
        sentences: list[str] = []
        start = 0
        for match in _SENTENCE_END.finditer(self._pending):
            candidate = self._pending[start : match.end()].strip()
            if len(candidate) >= self._min_chars:
                sentences.append(candidate)
                start = match.end()
        self._pending = self._pending[start:]
        return sentences

    def flush(self) -> str:
        rest, self._pending = self._pending.strip(), ""
        return rest
