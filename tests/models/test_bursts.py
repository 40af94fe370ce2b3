"""BurstDetector: an energy gate over a continuous output stream, on sample positions."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.models.audio import AudioFrame
from rejoinder.models.bursts import BurstDetector
from rejoinder.models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioPaused,
    AgentAudioStarted,
)

RATE = 24000


def speech(seconds: float, level: int = 0x1000) -> np.ndarray:
    return np.full(round(seconds * RATE), level, np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * RATE), np.int16)


def stream(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate(parts)


def feed(detector: BurstDetector, samples: np.ndarray, sizes: list[int] | None = None) -> list:
    """Push ``samples`` as one frame, or cut into frames of the given sizes (cycled)."""
    if sizes is None:
        return detector.push(AudioFrame(samples, RATE))
    events = []
    start = 0
    index = 0
    while start < samples.shape[0]:
        size = sizes[index % len(sizes)]
        events += detector.push(AudioFrame(samples[start : start + size].copy(), RATE))
        start += size
        index += 1
    return events


def summary(events: list) -> list[tuple[str, int]]:
    """Markers with positions, and audio as sample counts with adjacent frames merged."""
    result: list[tuple[str, int]] = []
    for event in events:
        if isinstance(event, AgentAudio):
            if result and result[-1][0] == "audio":
                result[-1] = ("audio", result[-1][1] + event.frame.samples_per_channel)
            else:
                result.append(("audio", event.frame.samples_per_channel))
        elif isinstance(event, AgentAudioStarted):
            result.append(("started", event.position_ms or 0))
        elif isinstance(event, AgentAudioEnded):
            result.append(("ended", event.position_ms or 0))
    return result


def audio_of(events: list) -> np.ndarray:
    frames = [e.frame.data for e in events if isinstance(e, AgentAudio)]
    return np.concatenate(frames) if frames else np.zeros(0, np.int16)


def test_one_utterance_then_silence() -> None:
    events = feed(BurstDetector(), stream(speech(0.1), silence(1.0)))
    assert summary(events) == [("started", 0), ("audio", 2400), ("ended", 100)]
    assert np.all(audio_of(events) == 0x1000)


def test_silence_before_a_burst_is_dropped_and_positions_count_it() -> None:
    events = feed(BurstDetector(), stream(silence(0.5), speech(0.2), silence(1.0)))
    assert summary(events) == [("started", 500), ("audio", 4800), ("ended", 700)]


def test_speech_is_released_as_soon_as_it_is_classified() -> None:
    detector = BurstDetector()
    assert summary(feed(detector, speech(0.1))) == [("started", 0), ("audio", 2400)]
    held = feed(detector, silence(0.5))  # held back: speech may resume
    assert held == [AgentAudioPaused(100)]  # but what was sent is all there is for now


def test_a_pause_shorter_than_end_silence_stays_inside_the_burst() -> None:
    events = feed(BurstDetector(), stream(speech(0.1), silence(0.5), speech(0.1), silence(1.0)))
    assert summary(events) == [("started", 0), ("audio", 16800), ("ended", 700)]
    audio = audio_of(events)
    assert np.all(audio[2400:14400] == 0)  # the pause is kept, in place
    assert np.all(audio[-2400:] == 0x1000)  # and no trailing silence


def test_a_long_pause_splits_two_bursts() -> None:
    events = feed(BurstDetector(), stream(speech(0.1), silence(0.9), speech(0.1), silence(1.0)))
    assert summary(events) == [
        ("started", 0),
        ("audio", 2400),
        ("ended", 100),
        ("started", 1000),
        ("audio", 2400),
        ("ended", 1100),
    ]


def test_the_burst_ends_exactly_after_end_silence_of_samples() -> None:
    detector = BurstDetector(end_silence=0.8)
    feed(detector, speech(0.1))
    assert summary(feed(detector, silence(0.79))) == []
    assert summary(feed(detector, silence(0.01))) == [("ended", 100)]


def test_paused_is_reported_once_per_pause_after_pause_after_of_silence() -> None:
    detector = BurstDetector(pause_after=0.2, end_silence=0.8)
    feed(detector, speech(0.1))
    assert feed(detector, silence(0.19)) == []
    assert feed(detector, silence(0.01)) == [AgentAudioPaused(100)]
    assert feed(detector, silence(0.3)) == []  # once per pause
    events = feed(detector, stream(speech(0.1), silence(0.25)))  # resumes, pauses again
    assert [type(e) for e in events] == [AgentAudio, AgentAudioPaused]
    assert events[1] == AgentAudioPaused(700)


def test_pause_after_must_fit_inside_end_silence() -> None:
    with pytest.raises(ValueError, match="pause_after"):
        BurstDetector(pause_after=0.9, end_silence=0.8)


@pytest.mark.parametrize("sizes", [[3, 1, 97], [7, 333, 1001], [239, 241], [5000, 17]])
def test_odd_frame_sizes_give_the_same_bursts(sizes: list[int]) -> None:
    samples = stream(
        silence(0.3), speech(0.25), silence(0.4), speech(0.05), silence(1.2), speech(0.1)
    )
    reference = BurstDetector()
    expected = feed(reference, samples) + reference.end()
    detector = BurstDetector()
    pieces = feed(detector, samples, sizes) + detector.end()
    assert (
        summary(pieces)
        == summary(expected)
        == [
            ("started", 300),
            ("audio", 16800),
            ("ended", 1000),
            ("started", 2200),
            ("audio", 2400),
            ("ended", 2300),
        ]
    )
    assert np.array_equal(audio_of(pieces), audio_of(expected))


def test_quiet_noise_under_the_threshold_is_silence() -> None:
    quiet = speech(1.0, level=10)  # RMS ≈ 0.0003 of full scale
    assert feed(BurstDetector(), quiet) == []
    audible = speech(0.1, level=40)  # RMS ≈ 0.0012
    assert summary(feed(BurstDetector(), audible))[:1] == [("started", 0)]


def test_end_closes_an_open_burst_at_the_end_of_its_speech() -> None:
    detector = BurstDetector()
    events = feed(detector, stream(speech(0.1), silence(0.3)))
    assert summary(events) == [("started", 0), ("audio", 2400)]
    assert summary(detector.end()) == [("ended", 100)]
    assert detector.end() == []


def test_end_classifies_the_last_partial_window() -> None:
    detector = BurstDetector()
    assert feed(detector, speech(0.005)) == []  # half a 10 ms window
    assert summary(detector.end()) == [("started", 0), ("audio", 120), ("ended", 5)]


def test_rejects_frames_of_another_rate_or_layout() -> None:
    with pytest.raises(ValueError, match="24000"):
        BurstDetector().push(AudioFrame(np.zeros(160, np.int16), 16000))
    with pytest.raises(ValueError, match="mono"):
        BurstDetector().push(AudioFrame(np.zeros(480, np.int16), RATE, num_channels=2))
