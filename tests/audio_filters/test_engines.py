"""The engines on real speech (eSpeak NG): AEC3 removes a synthetic echo, RNNoise and
WebRTC's suppressor remove white noise and keep the speech. Thresholds are what was
measured here, with margin (the measured value is in each comment)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import numpy as np
import pytest

from rejoinder.audio_filters import (
    EchoReference,
    FilterChain,
    RNNoiseSuppressor,
    WebRTCEchoCanceller,
    WebRTCNoiseSuppressor,
)
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample

RATE = 16000
HAS_WEBRTC = importlib.util.find_spec("pywebrtc_audio") is not None
HAS_RNNOISE = importlib.util.find_spec("pyrnnoise") is not None
needs_webrtc = pytest.mark.skipif(not HAS_WEBRTC, reason="pywebrtc-audio is not installed")
needs_rnnoise = pytest.mark.skipif(not HAS_RNNOISE, reason="pyrnnoise is not installed")

_speech: dict[str, np.ndarray] = {}


def speech(text: str, voice: str = "en-us") -> np.ndarray:
    """``text`` said by eSpeak NG at 16 kHz, scaled to -23 dBFS (RMS of the loud part)."""
    key = f"{voice}:{text}"
    if key not in _speech:
        pytest.importorskip("espeakng_loader")
        from rejoinder.providers.local import EspeakTTS

        async def say() -> AudioFrame:
            tts = EspeakTTS(voice=voice)
            frames = [f async for f in tts.synthesize(text) if isinstance(f, AudioFrame)]
            await tts.aclose()
            return AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate)

        pcm = resample(asyncio.run(say()), RATE).data.astype(np.float64)
        loud = pcm[np.abs(pcm) > 0.05 * np.abs(pcm).max()]
        _speech[key] = pcm * (32768 * 10 ** (-23 / 20)) / np.sqrt(np.mean(loud**2))
    return _speech[key]


def level(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.asarray(x, np.float64) ** 2) + 1e-9))


def run(chain: FilterChain, mic: np.ndarray, far: EchoReference | None = None) -> np.ndarray:
    pcm = np.clip(np.rint(mic), -32768, 32767).astype(np.int16)
    out = []
    for i in range(0, pcm.size - 319, 320):
        ref = None if far is None else far.take(320, RATE)
        out.append(chain.process(AudioFrame(pcm[i : i + 320], RATE), ref).data)
    return np.concatenate(out).astype(np.float64)


def echo_path(far: np.ndarray, delay: float, gain_db: float, seed: int) -> np.ndarray:
    """The speaker heard at the microphone: delayed, attenuated, with a 0.1 s tail."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(0.1 * RATE)) / RATE
    rir = rng.standard_normal(t.size) * np.exp(-t / 0.03) * 0.1
    rir[0] = 1.0
    rir *= 10 ** (gain_db / 20) / np.sqrt(np.sum(rir**2))
    wet = np.convolve(far, rir)[: far.size]
    return np.concatenate([np.zeros(int(delay * RATE)), wet])


@needs_webrtc
@pytest.mark.parametrize(("rate", "delay"), [(16000, 0.03), (16000, 0.12), (8000, 0.06)])
def test_aec3_removes_the_agents_echo(rate: int, delay: float) -> None:
    far = speech(
        "Our opening hours are from nine in the morning until six in the evening, "
        "every day except Sunday, when we open at ten."
    )
    mic = echo_path(far, delay, -12.0, seed=1)
    mic += np.random.default_rng(2).standard_normal(mic.size) * 10  # a -70 dBFS floor
    agent = np.clip(np.rint(far), -32768, 32767).astype(np.int16)
    if rate != RATE:  # a phone line: the microphone and the agent at 8 kHz
        mic = resample(AudioFrame(np.clip(mic, -32768, 32767).astype(np.int16), RATE), rate)
        mic = mic.data.astype(np.float64)
        agent = resample(AudioFrame(agent, RATE), rate).data
    reference = EchoReference()
    step = rate // 50
    output_rate = 24000 if rate == RATE else rate  # a phone line's output is 8 kHz too
    for i in range(0, agent.size, step):  # the agent's 20 ms frames, as the output took them
        reference.captured(resample(AudioFrame(agent[i : i + step], rate), output_rate))
    reference.flushed()
    reference.started()
    chain = FilterChain([WebRTCEchoCanceller()])
    pcm = np.clip(np.rint(mic), -32768, 32767).astype(np.int16)
    out = np.concatenate(
        [
            chain.process(AudioFrame(pcm[i : i + step], rate), reference.take(step, rate)).data
            for i in range(0, pcm.size - step + 1, step)
        ]
    ).astype(np.float64)
    after = slice(rate * 2, out.size)  # once it converged (about a second)
    removed = level(mic[after]) - level(out[after])
    assert removed > 15.0  # measured 22.1 dB (30 ms), 21.7 dB (120 ms), 22.3 dB (8 kHz)


@needs_webrtc
def test_aec3_keeps_the_users_voice_when_the_agent_is_silent() -> None:
    user = speech("wait, stop, that is not what I asked for", voice="en+f3")
    out = run(FilterChain([WebRTCEchoCanceller()]), user, EchoReference())
    assert abs(level(out) - level(user[: out.size])) < 1.5  # measured 0.03 dB


def noisy(snr_db: float, seed: int) -> tuple[np.ndarray, np.ndarray, slice, slice]:
    """Speech with 0.75 s of silence before it, in white noise at ``snr_db``."""
    words = speech("set a timer for five seconds, then turn off the lights in the kitchen")
    clean = np.concatenate([np.zeros(int(0.75 * RATE)), words, np.zeros(RATE // 4)])
    noise = np.random.default_rng(seed).standard_normal(clean.size)
    loud = words[np.abs(words) > 0.05 * np.abs(words).max()]
    noise *= np.sqrt(np.mean(loud**2)) * 10 ** (-snr_db / 20)
    quiet = slice(int(0.25 * RATE), int(0.7 * RATE))  # noise alone (after a warm-up)
    talk = slice(int(0.75 * RATE), int(0.75 * RATE) + words.size)
    return clean + noise, clean, quiet, talk


@needs_rnnoise
def test_rnnoise_removes_noise_and_keeps_speech() -> None:
    mic, clean, quiet, talk = noisy(10.0, seed=3)
    out = run(FilterChain([RNNoiseSuppressor()]), mic)
    assert level(mic[quiet]) - level(out[quiet]) > 20.0  # measured 36 dB
    assert abs(level(out[talk]) - level(clean[talk])) < 2.0  # measured -0.5 dB


@needs_webrtc
def test_webrtc_ns_removes_noise_and_keeps_speech() -> None:
    mic, clean, quiet, talk = noisy(10.0, seed=4)
    out = run(FilterChain([WebRTCNoiseSuppressor(level=2)]), mic)
    assert level(mic[quiet]) - level(out[quiet]) > 8.0  # measured 15.8 dB
    assert abs(level(out[talk]) - level(clean[talk])) < 3.0  # measured -1.7 dB


@needs_rnnoise
def test_rnnoise_at_the_phones_rate() -> None:
    mic, _, quiet, _ = noisy(10.0, seed=5)
    phone = resample(AudioFrame(np.clip(mic, -32768, 32767).astype(np.int16), RATE), 8000)
    chain = FilterChain([RNNoiseSuppressor()])
    out = np.concatenate(
        [
            chain.process(AudioFrame(phone.data[i : i + 160], 8000)).data
            for i in range(0, phone.data.size - 159, 160)
        ]
    ).astype(np.float64)
    half = slice(quiet.start // 2, quiet.stop // 2)
    assert out.size == phone.data.size - phone.data.size % 160
    assert level(phone.data[half]) - level(out[half]) > 20.0  # measured 47 dB


def test_a_missing_engine_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from rejoinder import _extras
    from rejoinder.audio_filters import rnnoise

    monkeypatch.setattr(rnnoise.importlib.util, "find_spec", lambda name: None)
    rnnoise._library.cache_clear()
    with pytest.raises(_extras.MissingExtra, match=r"pip install --no-deps pyrnnoise==0\.4\.5"):
        RNNoiseSuppressor()
    rnnoise._library.cache_clear()
    monkeypatch.setitem(sys.modules, "pywebrtc_audio", None)
    with pytest.raises(_extras.MissingExtra, match=r"rejoinder\[filters\]"):
        WebRTCEchoCanceller()
