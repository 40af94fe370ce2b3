"""OnsetClassifier: the shipped weights, probabilities on voices it never trained on, bad input."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.providers.local.onset_classifier import WEIGHTS_PATH, OnsetClassifier

pytest.importorskip("espeakng_loader")

# en-us+m3 and en+f2 are validation voices of tools/train_onset_classifier.py: no training
# voice has their variant, so these check voices the model never heard.
# flite's kal16 is its validation voice from another synthesizer altogether (the model
# never trained on it; it did train on flite's kal and slt).
HELD_OUT_VOICES = ("en-us+m3", "en+f2", "flite:kal16")


@pytest.fixture(scope="module")
def classifier() -> OnsetClassifier:
    return OnsetClassifier()


def _speak(text: str, voice: str) -> tuple[npt.NDArray[np.int16], int]:
    if voice.startswith("flite:"):
        if shutil.which("flite") is None:
            pytest.skip("flite is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "out.wav"
            subprocess.run(["flite", "-voice", voice[6:], "-t", text, "-o", str(path)], check=True)
            with wave.open(str(path)) as w:
                return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16), (
                    w.getframerate()
                )

    from rejoinder.providers.local import EspeakTTS

    tts = EspeakTTS(voice=voice)

    async def run() -> list[npt.NDArray[np.int16]]:
        return [frame.data async for frame in tts.synthesize(text)]

    return np.concatenate(asyncio.run(run())), tts.sample_rate


def _from_onset(pcm: npt.NDArray[np.int16], rate: int, lead: float) -> npt.NDArray[np.int16]:
    """The clip from ``lead`` seconds before its first loud 5 ms (as a VAD pre-roll gives)."""
    block = rate // 200
    n = pcm.shape[0] // block
    rms = np.sqrt((pcm[: n * block].astype(np.float64).reshape(n, block) ** 2).mean(axis=1))
    onset = int(np.flatnonzero(rms > rms.max() * 0.02)[0]) * block
    start = onset - round(lead * rate)
    if start < 0:
        pcm = np.concatenate([np.zeros(-start, np.int16), pcm])
        start = 0
    return pcm[start:]


def _at(pcm: npt.NDArray[np.int16], rate: int, band: str) -> tuple[npt.NDArray[np.int16], int]:
    if band == "wideband":
        return resample(AudioFrame(pcm, rate), 16000).data, 16000
    narrow = resample(AudioFrame(pcm, rate), 8000).data
    return g711.ulaw_decode(g711.ulaw_encode(narrow)), 8000


def test_weights_load(classifier: OnsetClassifier) -> None:
    assert WEIGHTS_PATH.is_file()
    assert WEIGHTS_PATH.stat().st_size < 1_000_000
    assert 0.0 < classifier.threshold < 1.0
    assert 0.1 <= classifier.window_seconds <= 0.5


def test_output_is_a_probability(classifier: OnsetClassifier) -> None:
    rng = np.random.default_rng(1)
    for rate in (8000, 16000, 24000, 48000):
        noise = (rng.normal(0, 3000, rate // 2)).astype(np.int16)
        p = classifier.backchannel_probability(noise, rate)
        assert isinstance(p, float)
        assert 0.0 <= p <= 1.0
    silence = np.zeros(4000, np.int16)
    assert 0.0 <= classifier.backchannel_probability(silence, 16000) <= 1.0


@pytest.mark.parametrize("band", ["wideband", "phone"])
@pytest.mark.parametrize("voice", HELD_OUT_VOICES)
def test_backchannel_above_and_interruption_below(
    classifier: OnsetClassifier, voice: str, band: str
) -> None:
    for lead in (0.0, 0.1):
        pcm, rate = _speak("uh-huh", voice)
        audio, audio_rate = _at(_from_onset(pcm, rate, lead), rate, band)
        p_back = classifier.backchannel_probability(audio, audio_rate)
        assert p_back >= classifier.threshold, (voice, band, lead, p_back)
        assert classifier.is_backchannel(audio, audio_rate)

        pcm, rate = _speak("wait, stop", voice)
        audio, audio_rate = _at(_from_onset(pcm, rate, lead), rate, band)
        p_stop = classifier.backchannel_probability(audio, audio_rate)
        assert p_stop < classifier.threshold, (voice, band, lead, p_stop)
        assert not classifier.is_backchannel(audio, audio_rate)


def test_cheap(classifier: OnsetClassifier) -> None:
    audio = np.random.default_rng(2).normal(0, 2000, 16000).astype(np.int16)
    classifier.backchannel_probability(audio, 16000)
    start = time.perf_counter()
    for _ in range(20):
        classifier.backchannel_probability(audio, 16000)
    assert (time.perf_counter() - start) / 20 < 0.005


def test_bad_input(classifier: OnsetClassifier) -> None:
    with pytest.raises(ValueError, match="empty"):
        classifier.backchannel_probability(np.zeros(0, np.int16), 16000)
    with pytest.raises(TypeError, match="int16"):
        classifier.backchannel_probability(np.zeros(1600, np.float32), 16000)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int16"):
        classifier.backchannel_probability([0] * 1600, 16000)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-D"):
        classifier.backchannel_probability(np.zeros((2, 800), np.int16), 16000)
    with pytest.raises(ValueError, match="sample_rate"):
        classifier.backchannel_probability(np.zeros(1600, np.int16), 0)
    with pytest.raises(ValueError, match="threshold"):
        OnsetClassifier(threshold=1.5)


def test_missing_weights(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="cannot load"):
        OnsetClassifier(weights_path="/nonexistent/onset.npz")
