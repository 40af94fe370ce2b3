"""Audio frames, resampling, re-buffering, and the in-memory audio I/O of the test kit."""

from __future__ import annotations

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import PlaybackFinished
from rejoinder.models.audio_utils import FrameRebuffer, Resampler, resample
from rejoinder.testing import MemoryAudioInput, MemoryAudioOutput, advance, now


def tone(seconds: float, rate: int, hz: float = 440.0) -> rj.AudioFrame:
    t = np.arange(round(seconds * rate)) / rate
    return rj.AudioFrame((np.sin(2 * np.pi * hz * t) * 8000).astype(np.int16), rate)


def test_frame_validation_and_pcm_round_trip() -> None:
    frame = rj.AudioFrame(np.arange(960, dtype=np.int16), 48000, 2)
    assert (frame.samples_per_channel, frame.duration) == (480, 0.01)
    again = rj.AudioFrame.from_pcm(frame.to_pcm(), 48000, 2)
    assert np.array_equal(again.data, frame.data)
    with pytest.raises(TypeError, match="int16"):
        rj.AudioFrame(np.zeros(10, np.float32), 16000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channels"):
        rj.AudioFrame(np.zeros(3, np.int16), 16000, 2)
    with pytest.raises(ValueError, match="even"):
        rj.AudioFrame.from_pcm(b"\x00", 16000)
    assert rj.AudioFrame.silence(0.5, 16000).samples_per_channel == 8000


def test_rebuffer_yields_exact_windows_without_losing_samples() -> None:
    rebuffer = FrameRebuffer(512)
    data = np.arange(320 * 10, dtype=np.int16)  # ten 20 ms frames at 16 kHz
    windows = [
        w.copy()
        for start in range(0, data.size, 320)
        for w in rebuffer.push(data[start : start + 320])
    ]
    assert [w.size for w in windows] == [512] * 6
    assert np.array_equal(np.concatenate(windows), data[: 512 * 6])
    assert rebuffer.pending == data.size - 512 * 6


@pytest.mark.parametrize(("src", "dst"), [(24000, 16000), (16000, 48000), (22050, 24000)])
def test_streaming_resampler_matches_duration(src: int, dst: int) -> None:
    clip = tone(1.0, src)
    resampler = Resampler(src, dst)
    step = src // 50
    out = [
        resampler.push(rj.AudioFrame(clip.data[i : i + step], src))
        for i in range(0, clip.data.size, step)
    ]
    out.append(resampler.flush())
    samples = sum(f.samples_per_channel for f in out if f is not None)
    assert abs(samples - dst) <= 2
    one_shot = resample(clip, dst)
    assert abs(one_shot.samples_per_channel - dst) <= 1
    # The tone survives: its energy stays about the same.
    assert np.std(one_shot.data) == pytest.approx(np.std(clip.data), rel=0.05)


def test_resampler_is_a_no_op_at_equal_rates() -> None:
    frame = tone(0.02, 24000)
    assert Resampler(24000, 24000).push(frame) is frame
    with pytest.raises(ValueError, match="expected 16000 Hz"):
        Resampler(16000, 24000).push(frame)


class Recorder:
    def __init__(self, output: MemoryAudioOutput) -> None:
        self.events: list[tuple[float, object]] = []
        output.set_listener(lambda: self.events.append((now(), "started")), self.finished)

    def finished(self, ev: PlaybackFinished) -> None:
        self.events.append((now(), ev))


async def test_memory_output_plays_in_real_time() -> None:
    output = MemoryAudioOutput(24000)
    rec = Recorder(output)
    for _ in range(50):  # 1 s of audio, accepted at once
        await output.capture_frame(tone(0.02, 24000))
    output.flush()
    assert rec.events == [(0.0, "started")]
    await advance(0.5)
    assert output.position() == pytest.approx(0.5)
    await advance(1.0)
    assert rec.events[1] == (pytest.approx(1.0), PlaybackFinished(pytest.approx(1.0), False))
    assert output.played_seconds == pytest.approx(1.0)
    assert len(output.frames) == 50


async def test_memory_output_pause_resume_and_clear() -> None:
    output = MemoryAudioOutput(24000)
    rec = Recorder(output)
    await output.capture_frame(tone(1.0, 24000))
    output.flush()
    await advance(0.25)
    output.pause()
    await advance(2.0)
    assert output.position() == pytest.approx(0.25)
    output.resume()
    await advance(0.25)
    output.clear_buffer()
    assert rec.events[-1] == (pytest.approx(2.5), PlaybackFinished(pytest.approx(0.5), True))
    assert output.played_seconds == pytest.approx(0.5)
    assert not output.playing


async def test_memory_output_rejects_wrong_rate_and_pause_when_unable() -> None:
    output = MemoryAudioOutput(24000, can_pause=False)
    with pytest.raises(ValueError, match="24000"):
        await output.capture_frame(tone(0.02, 16000))
    with pytest.raises(NotImplementedError):
        output.pause()


async def test_memory_input_delivers_frames_in_real_time() -> None:
    mic = MemoryAudioInput(16000)
    received: list[tuple[float, int]] = []

    async def listen() -> None:
        async for frame in mic:
            received.append((now(), frame.samples_per_channel))

    import asyncio

    task = asyncio.create_task(listen())
    await mic.push_silence(0.1)
    mic.close()
    await task
    assert [n for _, n in received] == [320] * 5
    assert [t for t, _ in received] == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.1])
