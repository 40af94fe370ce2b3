"""``EchoReference``: the agent's audio counted out in microphone samples from the
moment the output takes it, taken back when a late report shows the output buffered
ahead; paused, cut and finished as the output is."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.audio_filters import EchoReference
from rejoinder.models.audio import AudioFrame


def ramp(samples: int, rate: int, start: int = 1) -> AudioFrame:
    return AudioFrame((np.arange(samples) + start).astype(np.int16), rate)


def test_the_playhead_starts_when_the_output_takes_the_audio() -> None:
    ref = EchoReference()
    assert ref.take(320, 16000) is None  # nothing to play
    ref.captured(ramp(320, 16000))
    got = ref.take(320, 16000)
    assert got is not None and np.array_equal(got, np.arange(320) + 1)


def test_each_frame_takes_as_many_samples_as_it_has_and_silence_after_the_end() -> None:
    ref = EchoReference()
    for i in range(3):
        ref.captured(ramp(100, 16000, start=1 + 100 * i))
    ref.flushed()
    first, second = ref.take(160, 16000), ref.take(160, 16000)
    assert first is not None and second is not None
    assert np.array_equal(first, np.arange(160) + 1)
    assert np.array_equal(second[:140], np.arange(160, 300) + 1)
    assert not second[140:].any()  # the segment ran dry


def test_a_timely_report_leaves_the_playhead_where_it_is() -> None:
    ref = EchoReference(lead=0.1, max_ahead=0.3)
    ref.captured(ramp(16000, 16000))
    ref.take(1600, 16000)  # 0.1 s in when the report comes
    ref.started()
    got = ref.take(160, 16000)
    assert got is not None and got[0] == 1601
    assert ref.realigned == 0


def test_a_report_long_after_the_audio_was_taken_takes_the_playhead_back_to_the_lead() -> None:
    # An output that buffered half a second before playing: the echo is that much later.
    ref = EchoReference(lead=0.1, max_ahead=0.3)
    ref.captured(ramp(16000, 16000))
    ref.take(8000, 16000)
    ref.started()
    got = ref.take(160, 16000)
    assert got is not None and got[0] == 1601
    assert ref.realigned == 1


def test_a_pause_stops_the_count_and_a_resume_goes_on_from_there() -> None:
    ref = EchoReference()
    ref.captured(ramp(640, 16000))
    ref.take(160, 16000)
    ref.paused()
    assert ref.take(160, 16000) is None
    ref.resumed()
    got = ref.take(160, 16000)
    assert got is not None and got[0] == 161


def test_a_clear_drops_what_was_not_heard() -> None:
    ref = EchoReference()
    ref.captured(ramp(640, 16000))
    ref.flushed()
    ref.captured(ramp(640, 16000, start=5000))
    ref.take(160, 16000)
    ref.cleared()
    assert ref.take(160, 16000) is None
    ref.captured(ramp(320, 16000, start=9000))  # the next reply
    got = ref.take(160, 16000)
    assert got is not None and got[0] == 9000


def test_segments_play_back_to_back_and_a_finished_one_is_dropped_where_it_stood() -> None:
    ref = EchoReference()
    ref.captured(ramp(200, 16000))
    ref.flushed()
    ref.captured(ramp(320, 16000, start=7000))
    ref.flushed()
    got = ref.take(300, 16000)
    assert got is not None
    assert np.array_equal(got[:200], np.arange(200) + 1)
    assert np.array_equal(got[200:], np.arange(100) + 7000)  # straight on
    ref.started()
    ref.finished()  # the first one, reported
    ref.started()  # the second: timely, the playhead stays
    got = ref.take(100, 16000)
    assert got is not None and got[0] == 7100


def test_a_segment_cut_while_the_playhead_was_in_it_gives_way_to_the_next() -> None:
    ref = EchoReference()
    ref.captured(ramp(3200, 16000))
    ref.flushed()
    ref.captured(ramp(320, 16000, start=7000))
    ref.started()
    ref.take(100, 16000)
    ref.finished()
    got = ref.take(100, 16000)
    assert got is not None and got[0] == 7000


def test_the_agents_rate_is_converted_to_the_microphones() -> None:
    ref = EchoReference()
    t = np.arange(24000) / 24000
    ref.captured(AudioFrame((np.sin(2 * np.pi * 300 * t) * 8000).astype(np.int16), 24000))
    got = np.concatenate([ref.take(320, 16000) for _ in range(40)])  # type: ignore[misc]
    expected = np.sin(2 * np.pi * 300 * np.arange(got.shape[0]) / 16000) * 8000
    # 300 Hz survives the quick resampler within a couple of samples' delay.
    best = min(
        np.mean((got[100:] - expected[100 - lag : got.shape[0] - lag]) ** 2) for lag in range(4)
    )
    assert best < np.mean(expected**2) * 10 ** (-25 / 10)


def test_memory_is_bounded() -> None:
    ref = EchoReference(max_seconds=1.0)
    for _ in range(100):
        ref.captured(ramp(1600, 16000))  # 0.1 s each
    assert ref.dropped_seconds == pytest.approx(9.0)
