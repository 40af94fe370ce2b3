"""The filter chain on its own: rates bridged, exact-length frames, a failing filter
left out (logged once), filters that cannot be shared."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.audio_filters import AudioFilter, FilterChain
from rejoinder.audio_filters.blocks import BlockStream
from rejoinder.models.audio import PCM16, AudioFrame


class Gain(AudioFilter):
    """Multiplies by ``gain``; records the rates and references it was given."""

    def __init__(self, gain: float = 1.0, *, rates: tuple[int, ...] = ()) -> None:
        self.gain = gain
        self.sample_rates = rates  # type: ignore[misc]  # per instance, for the test
        self.rates: list[int] = []
        self.sizes: list[int] = []
        self.references: list[PCM16 | None] = []
        self.resets = 0

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        self.rates.append(frame.sample_rate)
        self.sizes.append(frame.samples_per_channel)
        self.references.append(reference)
        scaled = np.clip(frame.data * self.gain, -32768, 32767).astype(np.int16)
        return AudioFrame(scaled, frame.sample_rate)

    def reset(self) -> None:
        self.resets += 1


class Wants(Gain):
    uses_reference = True


class Broken(AudioFilter):
    def __init__(self, after: int = 0) -> None:
        self.after = after
        self.calls = 0

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("the engine fell over")
        return frame


class Shortens(AudioFilter):
    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        return AudioFrame(frame.data[:-1], frame.sample_rate)


def tone(seconds: float, rate: int, hz: float = 440.0) -> PCM16:
    t = np.arange(round(seconds * rate)) / rate
    return (np.sin(2 * np.pi * hz * t) * 8000).astype(np.int16)


def frames(pcm: PCM16, rate: int, size: int) -> list[AudioFrame]:
    return [AudioFrame(pcm[i : i + size], rate) for i in range(0, pcm.shape[0], size)]


def test_filters_run_in_order_and_keep_each_frame_whole() -> None:
    first, second = Gain(0.5), Gain(4.0)
    chain = FilterChain([first, second])
    frame = AudioFrame(np.full(320, 1000, np.int16), 16000)
    out = chain.process(frame)
    assert out.sample_rate == 16000 and out.samples_per_channel == 320
    assert np.all(out.data == 2000)
    assert chain.audio_seconds == pytest.approx(0.02)
    assert chain.cpu_seconds >= 0.0


def test_a_filter_of_another_rate_gets_its_rate_and_the_session_keeps_the_microphones() -> None:
    filt = Gain(1.0, rates=(48000,))
    chain = FilterChain([filt])
    pcm = tone(1.0, 16000)
    out = np.concatenate([chain.process(f).data for f in frames(pcm, 16000, 320)])
    assert set(filt.rates) == {48000}
    assert out.shape == pcm.shape
    # The round trip (quick cubic resampling both ways) keeps the tone, a few samples late.
    lags = range(0, 40)
    errors = [
        np.mean((out[lag + 1000 :].astype(float) - pcm[1000 : -lag or None]) ** 2) for lag in lags
    ]
    best = int(np.argmin(errors))
    assert best <= 8
    assert errors[best] < np.mean(pcm.astype(float) ** 2) * 10 ** (-30 / 10)  # 30 dB down


def test_a_phone_rate_frame_is_bridged_to_the_filters_rate_and_back() -> None:
    filt = Wants(1.0, rates=(16000,))
    chain = FilterChain([filt])
    out = chain.process(AudioFrame(tone(0.02, 8000), 8000), np.full(160, 500, np.int16))
    assert filt.rates == [16000]
    assert out.sample_rate == 8000 and out.samples_per_channel == 160
    ref = filt.references[0]
    # The reference, at the filter's rate, as long as the audio the filter got (about 320).
    assert ref is not None and ref.shape[0] == filt.sizes[0] and 300 < filt.sizes[0] <= 320


def test_a_filter_that_does_not_want_the_reference_never_gets_it() -> None:
    plain, wants = Gain(), Wants()
    chain = FilterChain([plain, wants])
    far = np.full(320, 7, np.int16)
    chain.process(AudioFrame(np.zeros(320, np.int16), 16000), far)
    assert plain.references == [None]
    assert wants.references[0] is far
    assert chain.uses_reference and not chain.runs_in_thread


def test_a_failing_filter_is_logged_once_and_the_audio_passes_on_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, after = Broken(after=2), Gain(2.0)
    chain = FilterChain([broken, after])
    frame = AudioFrame(np.full(320, 100, np.int16), 16000)
    with caplog.at_level(logging.ERROR, logger="rejoinder"):
        outs = [chain.process(frame) for _ in range(10)]
    assert all(np.all(o.data == 200) for o in outs)  # the next filter still runs
    assert broken.calls == 3  # left out after its failure
    assert [type(e).__name__ for _, e in chain.failures] == ["RuntimeError"]
    records = [r for r in caplog.records if "Broken failed" in r.getMessage()]
    assert len(records) == 1


def test_a_filter_that_changes_the_frames_length_counts_as_failed() -> None:
    chain = FilterChain([Shortens()])
    frame = AudioFrame(np.full(320, 5, np.int16), 16000)
    out = chain.process(frame)
    assert out is frame
    assert isinstance(chain.failures[0][1], ValueError)


def test_stereo_passes_unfiltered() -> None:
    filt = Gain(0.0)
    chain = FilterChain([filt])
    frame = AudioFrame(np.full(640, 9, np.int16), 16000, 2)
    assert chain.process(frame) is frame
    assert filt.rates == []


def test_a_new_rate_resets_the_filter() -> None:
    filt = Gain()
    chain = FilterChain([filt])
    chain.process(AudioFrame(np.zeros(320, np.int16), 16000))
    chain.process(AudioFrame(np.zeros(160, np.int16), 8000))
    assert filt.resets == 1


def test_filters_are_checked_and_never_shared() -> None:
    with pytest.raises(TypeError, match=r"rj\.AudioFilter"):
        FilterChain(["rnnoise"])  # type: ignore[list-item]
    filt = Gain()
    with pytest.raises(ValueError, match="twice"):
        FilterChain([filt, filt])
    FilterChain([filt])
    with pytest.raises(ValueError, match="another session"):
        FilterChain([filt])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=700), min_size=1, max_size=30))
def test_blocks_give_back_every_sample_in_order_with_less_than_a_block_of_zeros(
    sizes: list[int],
) -> None:
    seen: list[int] = []

    def identity(block: PCM16, reference: PCM16 | None) -> PCM16:
        seen.append(block.shape[0])
        return block

    stream = BlockStream(160, identity)
    pcm = (np.arange(sum(sizes)) % 30000 + 1).astype(np.int16)
    outs, at = [], 0
    for size in sizes:
        out = stream.push(pcm[at : at + size])
        assert out.shape[0] == size
        outs.append(out)
        at += size
    joined = np.concatenate(outs)
    delay = stream.delay
    assert delay < 160  # zeros are put in only while a push leaves a block unfilled
    assert int(np.count_nonzero(joined == 0)) == delay
    assert np.array_equal(joined[joined != 0], pcm[: pcm.shape[0] - delay])
    assert set(seen) <= {160}


def test_twenty_ms_frames_of_ten_ms_blocks_add_no_delay() -> None:
    stream = BlockStream(160, lambda block, ref: block)
    for _ in range(5):
        stream.push(np.ones(320, np.int16))
    assert stream.delay == 0


def test_a_filter_whose_reset_raises_is_left_out() -> None:
    class BadReset(Gain):
        def reset(self) -> None:
            raise OSError("the device is gone")

    bad, good = BadReset(0.0), Gain(2.0)
    chain = FilterChain([bad, good])
    chain.reset()
    assert [type(e).__name__ for _, e in chain.failures] == ["OSError"]
    assert good.resets == 1
    out = chain.process(AudioFrame(np.full(320, 10, np.int16), 16000))
    assert np.all(out.data == 20)  # the muting filter is out, the next one still runs
