"""EspeakTTS: eSpeak NG through ctypes (espeakng-loader's bundled libespeak-ng).

The tests run on virtual time (looptime). ``synthesize`` waits on a worker thread
(``asyncio.to_thread``); while it does, no timer is pending, so looptime has nothing to
fast-forward to and simply polls until the thread's result arrives.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("espeakng_loader")

from rejoinder.models.audio import AudioFrame
from rejoinder.models.tts import TTSError
from rejoinder.providers.local import EspeakTTS

SENTENCE = "Hello, this is a test of the offline voice agent."


async def render(tts: EspeakTTS, text: str) -> list[AudioFrame]:
    return [frame async for frame in tts.synthesize(text)]


def seconds(frames: list[AudioFrame]) -> float:
    return sum(frame.duration for frame in frames)


def pcm(frames: list[AudioFrame]) -> np.ndarray:
    return np.concatenate([frame.data for frame in frames])


async def test_frames_are_20ms_mono_int16_at_22050() -> None:
    tts = EspeakTTS()
    assert tts.sample_rate == 22050
    assert tts.num_channels == 1
    frames = await render(tts, SENTENCE)
    assert len(frames) > 50
    for frame in frames:
        assert frame.sample_rate == 22050
        assert frame.num_channels == 1
        assert frame.data.dtype == np.int16
    assert all(frame.samples_per_channel == 441 for frame in frames[:-1])
    assert 0 < frames[-1].samples_per_channel <= 441
    audio = pcm(frames)
    assert np.abs(audio).max() > 3000  # audible speech, not silence
    assert 1.5 < seconds(frames) < 5.0


async def test_duration_grows_with_the_text() -> None:
    tts = EspeakTTS()
    once = seconds(await render(tts, SENTENCE))
    thrice = seconds(await render(tts, " ".join([SENTENCE] * 3)))
    assert 2.5 < thrice / once < 3.5


async def test_rate_changes_the_duration() -> None:
    slow = seconds(await render(EspeakTTS(rate=120), SENTENCE))
    fast = seconds(await render(EspeakTTS(rate=300), SENTENCE))
    default = seconds(await render(EspeakTTS(), SENTENCE))
    assert fast < default < slow
    assert slow / fast > 1.8


async def test_concurrent_calls_do_not_interleave() -> None:
    # Two voices and rates at once: libespeak-ng has one global voice, rate and callback,
    # so interleaved calls would mix up settings or audio. eSpeak NG is not sample-exact
    # from run to run (lengths vary by ~0.3 %), so compare lengths, which differ by 2x.
    a, b = EspeakTTS(rate=140), EspeakTTS(voice="en", rate=280)
    solo_a = len(pcm(await render(a, SENTENCE)))
    solo_b = len(pcm(await render(b, SENTENCE)))
    assert solo_a > 1.6 * solo_b
    for _ in range(3):
        got = await asyncio.gather(render(a, SENTENCE), render(b, SENTENCE), render(a, SENTENCE))
        assert [len(pcm(frames)) for frames in got] == [
            pytest.approx(solo_a, rel=0.02),
            pytest.approx(solo_b, rel=0.02),
            pytest.approx(solo_a, rel=0.02),
        ]


async def test_empty_text_yields_nothing() -> None:
    assert await render(EspeakTTS(), "") == []
    assert await render(EspeakTTS(), "  \n") == []


async def test_unknown_voice_is_a_tts_error_and_the_engine_recovers() -> None:
    with pytest.raises(TTSError, match="no voice named 'xx-nope'"):
        await render(EspeakTTS(voice="xx-nope"), SENTENCE)
    assert seconds(await render(EspeakTTS(), SENTENCE)) > 1.0


def test_invalid_options() -> None:
    with pytest.raises(ValueError, match="rate"):
        EspeakTTS(rate=20)
    with pytest.raises(ValueError, match="rate"):
        EspeakTTS(rate=1000)
    with pytest.raises(ValueError, match="voice"):
        EspeakTTS(voice="")
