"""PushAudioInput: the session's microphone, fed by a transport as the audio arrives.

One object for the whole session: a resumed session's new connection pushes into the same
microphone (``link.ClientLink``), and while no connection carries it the session hears
silence (``resume.hear_silence``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from ..models.audio import AudioFrame, AudioInput
from .mic_clock import MIC_BATCH_INTERVAL, mic_clock

__all__ = ["PushAudioInput"]


class PushAudioInput(AudioInput):
    """Microphone audio a transport pushes as it arrives (PCM16LE mono bytes, or frames).

    The client paces it (a microphone produces it in real time). A reader that waits for
    audio gets it on the next tick of the loop's shared ``MicClock`` (every
    ``batch_interval`` seconds; 0: at once), so that the sessions of one process hear
    their microphones in one loop iteration rather than each at its own moment (see
    ``mic_clock``); a reader that is busy finds every frame queued. At most
    ``max_seconds`` wait to be read; beyond that new audio is dropped and ``push_pcm``
    returns False (the session is not keeping up, or the client sends faster than real
    time)."""

    def __init__(
        self,
        sample_rate: int,
        *,
        max_seconds: float = 5.0,
        batch_interval: float = MIC_BATCH_INTERVAL,
    ) -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        if batch_interval < 0:
            raise ValueError("batch_interval must not be negative")
        self.sample_rate = sample_rate
        self.batch_interval = batch_interval
        self._limit = int(max_seconds * sample_rate)
        self._queued = 0
        self._frames: deque[AudioFrame] = deque()
        self._readers: list[asyncio.Future[None]] = []
        """Readers waiting for audio (one, but a second may come)."""
        self._wake_due = False
        """The clock will wake the readers at its next tick."""
        self._odd = b""
        self._closed = False
        self._discard = False
        self.dropped_samples = 0

    def push_pcm(self, pcm: bytes) -> bool:
        """Queue 16-bit little-endian mono PCM. An odd trailing byte waits for the next
        chunk. Returns False when the audio was dropped (closed, or over the limit)."""
        if self._closed:
            return False
        if self._odd:
            pcm, self._odd = self._odd + pcm, b""
        if len(pcm) % 2:
            pcm, self._odd = pcm[:-1], pcm[-1:]
        if not pcm:
            return True
        return self.push(AudioFrame(np.frombuffer(pcm, "<i2").astype(np.int16), self.sample_rate))

    def push(self, frame: AudioFrame) -> bool:
        if self._closed:
            return False
        if self._discard:
            return True
        samples = frame.samples_per_channel
        if self._queued + samples > self._limit:
            self.dropped_samples += samples
            return False
        self._queued += samples
        self._frames.append(frame)
        if self._readers and not self._wake_due:
            if self.batch_interval:
                self._wake_due = True
                mic_clock(self.batch_interval).call_at_tick(self._wake_readers)
            else:
                self._wake_readers()
        return True

    def _wake_readers(self) -> None:
        self._wake_due = False
        readers, self._readers = self._readers, []
        for reader in readers:
            if not reader.done():  # not cancelled meanwhile
                reader.set_result(None)

    def discard(self) -> None:
        """Nobody listens: accept audio and drop it (never an overrun)."""
        self._discard = True

    def close(self) -> None:
        """The microphone is gone: iteration ends after what was queued."""
        if not self._closed:
            self._closed = True
            self._wake_readers()  # the end need not wait for a tick

    async def __aiter__(self) -> AsyncIterator[AudioFrame]:
        frames = self._frames
        loop = asyncio.get_running_loop()
        while True:
            if not frames:
                if self._closed:
                    return
                reader: asyncio.Future[None] = loop.create_future()
                self._readers.append(reader)
                try:
                    await reader
                finally:
                    if reader in self._readers:  # cancelled before it was woken
                        self._readers.remove(reader)
                continue
            frame = frames.popleft()
            self._queued -= frame.samples_per_channel
            yield frame
