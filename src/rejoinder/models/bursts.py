"""Cut a continuous output audio stream into bursts of speech with an energy gate.

Duplex providers (GPT-Live) stream agent audio continuously, silence included, with no
start or end markers. ``BurstDetector`` turns that stream into the ``AgentAudioStarted`` /
``AgentAudio`` / ``AgentAudioEnded`` facts of ``models.realtime``.

Every decision is made on sample positions, never on wall time: frames may arrive in a
burst of their own (a network hiccup delivers a second of audio at once), and the result
must not depend on when they arrived. numpy is imported with this module; providers
import it on first use so that importing them stays cheap.
"""

from __future__ import annotations

import itertools

import numpy as np

from .audio import PCM16, AudioFrame
from .realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioPaused,
    AgentAudioStarted,
    RealtimeEvent,
)

__all__ = ["BurstDetector"]

_FULL_SCALE = 32768.0


class BurstDetector:
    """Energy gate over fixed windows of a mono int16 stream.

    A window (``window`` seconds, 10 ms by default) whose RMS is above ``threshold`` (a
    fraction of full scale) is speech. A burst starts at its first speech window and ends
    once ``end_silence`` seconds of silence follow it. Silence inside a burst is held back
    and released only when speech resumes within ``end_silence``, so an ended burst carries
    no trailing silence; silence outside bursts is dropped. After ``pause_after`` seconds
    of silence inside a burst, ``AgentAudioPaused`` says the audio so far is all there is
    for now: on a stream that arrives in real time, that is how soon the end of speech is
    known, while ``end_silence`` decides whether the utterance is over.

    Positions (``position_ms``) count the samples pushed since the detector was created:
    the provider's output timeline. ``AgentAudioEnded.position_ms`` is where the last speech
    window ended, which is where the burst's audio ends.
    """

    __slots__ = (
        "_audio",
        "_carry",
        "_end_samples",
        "_held",
        "_held_samples",
        "_in_burst",
        "_pause_samples",
        "_position",
        "_speech_end",
        "_threshold_power",
        "_window",
        "sample_rate",
    )

    def __init__(
        self,
        *,
        sample_rate: int = 24000,
        threshold: float = 0.0006,
        end_silence: float = 0.8,
        pause_after: float = 0.2,
        window: float = 0.01,
    ) -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        if threshold < 0 or end_silence <= 0 or window <= 0:
            raise ValueError("threshold must be >= 0; end_silence and window must be > 0")
        if not 0 < pause_after <= end_silence:
            raise ValueError("pause_after must be > 0 and at most end_silence")
        self.sample_rate = sample_rate
        self._window = max(1, round(window * sample_rate))
        self._end_samples = max(1, round(end_silence * sample_rate))
        self._pause_samples = max(1, round(pause_after * sample_rate))
        # Comparing mean power with threshold² avoids a square root per window.
        self._threshold_power = (threshold * _FULL_SCALE) ** 2
        self._carry: PCM16 = np.zeros(0, np.int16)
        """Samples short of a whole window, classified with the next push."""
        self._position = 0
        """Samples classified so far: the position of the next window."""
        self._in_burst = False
        self._held: list[PCM16] = []
        self._held_samples = 0
        self._speech_end = 0
        self._audio: list[PCM16] = []
        """Audio of the current burst released during this push, sent as one frame."""

    @property
    def in_burst(self) -> bool:
        return self._in_burst

    @property
    def position_ms(self) -> int:
        """How much of the stream has been classified, in ms."""
        return self._ms(self._position)

    def push(self, frame: AudioFrame) -> list[RealtimeEvent]:
        """Classify ``frame`` (any length) and return the events it completes, in order."""
        if frame.sample_rate != self.sample_rate or frame.num_channels != 1:
            raise ValueError(
                f"BurstDetector expects mono {self.sample_rate} Hz frames, got "
                f"{frame.sample_rate} Hz x{frame.num_channels}"
            )
        data = frame.data
        if self._carry.size:
            data = np.concatenate((self._carry, data))
        windows = data.shape[0] // self._window
        whole = windows * self._window
        self._carry = data[whole:].copy()
        if windows == 0:
            return []
        samples = data[:whole]
        power = (samples.reshape(windows, self._window).astype(np.float64) ** 2).mean(axis=1)
        return self._classify(samples, power > self._threshold_power)

    def end(self) -> list[RealtimeEvent]:
        """The stream is over (disconnect, close): classify the last partial window and
        end an open burst. The detector can be reused; positions continue."""
        events: list[RealtimeEvent] = []
        carry, self._carry = self._carry, np.zeros(0, np.int16)
        if carry.size:
            power = float((carry.astype(np.float64) ** 2).mean())
            events += self._classify(carry, np.array([power > self._threshold_power]))
        if self._in_burst:
            events.append(AgentAudioEnded(self._ms(self._speech_end)))
            self._in_burst = False
            self._held.clear()
            self._held_samples = 0
        return events

    # -- internals ----------------------------------------------------------------------

    def _classify(self, samples: PCM16, speech: np.ndarray) -> list[RealtimeEvent]:
        """``samples`` split into ``len(speech)`` equal windows, flagged speech or not."""
        events: list[RealtimeEvent] = []
        size = samples.shape[0] // speech.shape[0]
        # Work on runs of equal windows, not window by window: a 1 s frame of silence is
        # one step, whatever the window size.
        edges = (np.flatnonzero(speech[1:] != speech[:-1]) + 1).tolist()
        bounds = [0, *edges, int(speech.shape[0])]
        for start, stop in itertools.pairwise(bounds):
            run = samples[start * size : stop * size]
            position = self._position + start * size
            if speech[start]:
                self._on_speech(run, position, events)
            else:
                self._on_silence(run, events)
        self._position += samples.shape[0]
        self._release_audio(events)
        return events

    def _on_speech(self, run: PCM16, position: int, events: list[RealtimeEvent]) -> None:
        if not self._in_burst:
            self._in_burst = True
            events.append(AgentAudioStarted(self._ms(position)))
        elif self._held:
            # Speech resumed within end_silence: the pause belongs to the burst.
            self._audio += self._held
            self._held = []
            self._held_samples = 0
        self._audio.append(run)
        self._speech_end = position + run.shape[0]

    def _on_silence(self, run: PCM16, events: list[RealtimeEvent]) -> None:
        if not self._in_burst:
            return
        if self._held_samples + run.shape[0] < self._end_samples:
            held_before = self._held_samples
            # Copied: ``run`` may be a view of the caller's buffer.
            self._held.append(run.copy())
            self._held_samples += run.shape[0]
            if held_before < self._pause_samples <= self._held_samples:
                self._release_audio(events)
                events.append(AgentAudioPaused(self._ms(self._speech_end)))
            return
        self._release_audio(events)
        events.append(AgentAudioEnded(self._ms(self._speech_end)))
        self._in_burst = False
        self._held = []
        self._held_samples = 0

    def _release_audio(self, events: list[RealtimeEvent]) -> None:
        if not self._audio:
            return
        data = np.concatenate(self._audio)
        self._audio = []
        events.append(AgentAudio(AudioFrame(data, self.sample_rate)))

    def _ms(self, samples: int) -> int:
        return samples * 1000 // self.sample_rate
