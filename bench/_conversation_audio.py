"""The conversation benchmark's sounds: the panel spoken by its voices, coughs, noise and
the phone line.

Speech is synthesized at run time by what is installed (Piper, eSpeak NG through
``rejoinder.providers.local``, Debian's ``flite``) and cached as ``.npy`` under
``bench/.cache/conversation/`` (git-ignored), keyed by engine, voice and text. Everything
is 16 kHz int16 mono. Each clip's speech is scaled to the same active level
(``SPEECH_DBFS``, the RMS of its 10 ms blocks within 40 dB of the peak), as a
microphone's gain control would, so that one noise level gives the same SNR for every
voice.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import _conversation_breath as breath
from panel import Half, Item, Voice
from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample

RATE = 16000
PHONE_RATE = 8000
BLOCK = RATE // 100  # 10 ms, for speech onset and end
SPEECH_DBFS = -23.0
CACHE = Path(__file__).resolve().parent / ".cache" / "conversation"


# ------------------------------------------------------------------ synthesis


def voice_available(voice: Voice) -> bool:
    if voice.engine == "flite":
        return shutil.which("flite") is not None
    return True  # Piper and eSpeak NG come with the local extra


async def speak(voice: Voice, text: str) -> np.ndarray:
    """``text`` in ``voice`` at 16 kHz, from the cache when it was synthesized before."""
    key = hashlib.sha1(f"{voice.engine}\0{voice.name}\0{text}".encode()).hexdigest()[:20]
    path = CACHE / f"{key}.npy"
    if path.exists():  # set-up, before anything is timed: blocking is fine
        return np.load(path)
    CACHE.mkdir(parents=True, exist_ok=True)
    if voice.engine == "flite":
        frame = _flite(voice.name, text)
    else:
        frame = await _rejoinder_tts(voice, text)
    pcm = resample(frame, RATE).data.astype(np.int16)
    np.save(path, pcm)
    return pcm


_tts_cache: dict[Voice, object] = {}


async def _rejoinder_tts(voice: Voice, text: str) -> AudioFrame:
    from rejoinder.providers.local import EspeakTTS, PiperTTS

    tts = _tts_cache.get(voice)
    if tts is None:
        tts = (
            PiperTTS(first_clause=False) if voice.engine == "piper" else EspeakTTS(voice=voice.name)
        )
        _tts_cache[voice] = tts
    frames = [f async for f in tts.synthesize(text)]  # type: ignore[attr-defined]
    return AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate)


def _flite(name: str, text: str) -> AudioFrame:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.wav"
        subprocess.run(["flite", "-voice", name, "-t", text, "-o", str(out)], check=True)
        with wave.open(str(out)) as w:
            rate = w.getframerate()
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16)
    return AudioFrame(pcm, rate)


async def close_voices() -> None:
    for tts in _tts_cache.values():
        await tts.aclose()  # type: ignore[attr-defined]
    _tts_cache.clear()


# ---------------------------------------------------------------- measurements


def _block_rms(pcm: np.ndarray) -> np.ndarray:
    n = max(1, pcm.size // BLOCK)
    padded = np.zeros(n * BLOCK)
    padded[: min(pcm.size, n * BLOCK)] = pcm[: n * BLOCK]
    return np.sqrt(np.mean(padded.reshape(n, BLOCK) ** 2, axis=1))


def _loud(pcm: np.ndarray) -> np.ndarray:
    rms = _block_rms(pcm.astype(np.float64))
    return np.nonzero(rms > rms.max() * 10 ** (-40 / 20))[0]


def onset_end(pcm: np.ndarray) -> tuple[float, float]:
    """First and last sound in a clip (seconds): the first 10 ms block within 40 dB of
    the peak, and the end of the last one (TTS engines pad with near-silence)."""
    loud = _loud(pcm)
    return float(loud[0] * BLOCK / RATE), float((loud[-1] + 1) * BLOCK / RATE)


def normalized(pcm: np.ndarray) -> np.ndarray:
    x = pcm.astype(np.float64)
    rms = _block_rms(x)
    active = rms[rms > rms.max() * 10 ** (-40 / 20)]
    level = float(np.sqrt(np.mean(active**2)))
    gain = 32768 * 10 ** (SPEECH_DBFS / 20) / max(level, 1.0)
    return np.clip(x * gain, -32768, 32767).astype(np.int16)


# -------------------------------------------------------------------- the clips


@dataclass
class Clip:
    """One thing the user says (or does) into the microphone, with its known times."""

    item: Item
    voice: Voice
    pcm: np.ndarray  # 16 kHz int16
    onset: float  # seconds from the clip's first sample
    end: float  # end of speech (of the last part)
    first_end: float | None = None  # ``pause`` items: end of the first part
    second_onset: float | None = None  # ``pause`` items: where the second part starts
    lead: np.ndarray | None = None  # barge-in kinds: the request said first
    lead_end: float = 0.0

    @property
    def seconds(self) -> float:
        return self.pcm.size / RATE


def cough(duration: float, low: float, high: float, seed: int) -> np.ndarray:
    """A cough: band-passed noise with a 10 ms attack and an exponential decay; an odd
    seed makes it a double cough (a second, weaker burst 0.12 s after the first)."""
    rng = np.random.default_rng(seed)
    n = round(duration * RATE)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    spectrum[(freqs < low) | (freqs > high)] = 0
    burst = np.fft.irfft(spectrum, n)
    t = np.arange(n) / RATE
    envelope = np.minimum(t / 0.01, 1.0) * np.exp(-t / (duration / 3))
    burst = burst * envelope / np.max(np.abs(burst * envelope))
    if seed % 2:
        gap = np.zeros(round(0.12 * RATE))
        burst = np.concatenate([burst, gap, 0.6 * burst])
    tail = np.zeros(round(0.3 * RATE))
    return np.concatenate([tail, burst, tail])


async def build_clip(item: Item, voice: Voice) -> Clip:
    if item.kind == "cough":
        raw = (cough(*item.cough) * 32767 * 0.5).astype(np.int16)
        pcm = normalized(raw)
        onset, end = onset_end(pcm)
        clip = Clip(item, voice, pcm, onset, end)
    elif item.kind == "pause":
        # Said in one breath, the pause opened between the two parts' words: what comes
        # before it keeps the pitch of a sentence that goes on (_conversation_breath).
        first, second = item.parts
        whole = normalized(await speak(voice, f"{first} {second}"))
        alone = normalized(await speak(voice, first))
        speech = alone[slice(*(round(t * RATE) for t in onset_end(alone)))]
        at = breath.boundary(whole, speech)
        cut = round(at * RATE)
        onset, first_end = onset_end(whole[:cut])
        tail_onset, tail_end = onset_end(whole[cut:])
        pcm = breath.open_pause(whole, at, item.pause)
        start2 = at + item.pause + tail_onset
        clip = Clip(
            item,
            voice,
            pcm,
            onset,
            at + item.pause + tail_end,
            first_end=first_end,
            second_onset=start2,
        )
    else:
        pcm = normalized(await speak(voice, " ".join(item.parts)))
        onset, end = onset_end(pcm)
        clip = Clip(item, voice, pcm, onset, end)
    if item.lead:
        clip.lead = normalized(await speak(voice, item.lead))
        clip.lead_end = onset_end(clip.lead)[1]
    return clip


def assign(half: Half, voices: list[Voice], limit: int | None) -> list[tuple[Item, Voice]]:
    """Who says what. Within each kind the j-th item goes to voice ``(j + k) % n`` (``k``
    the kind's index), so every voice says a mix of kinds; each voice's items are then
    taken round-robin over the kinds, voice ``v`` starting at kind ``v``, so that a small
    ``limit`` still covers every kind across the voices."""
    per_voice: dict[Voice, dict[str, list[Item]]] = {v: {} for v in voices}
    kinds: list[str] = []
    for item in half.items:
        if item.kind not in kinds:
            kinds.append(item.kind)
    for k, kind in enumerate(kinds):
        of_kind = [i for i in half.items if i.kind == kind]
        for j, item in enumerate(of_kind):
            voice = voices[(j + k) % len(voices)]
            per_voice[voice].setdefault(kind, []).append(item)
    out: list[tuple[Item, Voice]] = []
    for v, voice in enumerate(voices):
        order = kinds[v % len(kinds) :] + kinds[: v % len(kinds)]
        queues = [list(per_voice[voice].get(kind, [])) for kind in order]
        mine: list[Item] = []
        while any(queues):
            for queue in queues:
                if queue:
                    mine.append(queue.pop(0))
        out += [(item, voice) for item in mine[:limit]]
    return out


# ------------------------------------------------------------------------ noise


def babble(sources: list[np.ndarray], seconds: float, seed: int) -> np.ndarray:
    """Four talkers at once, each a random sequence of ``sources`` (other panel
    sentences), looped over ``seconds``."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE)
    mix = np.zeros(n)
    for _ in range(4):
        track: list[np.ndarray] = []
        length = 0
        while length < n + RATE:
            s = sources[rng.integers(len(sources))].astype(np.float64)
            track.append(s)
            length += s.size
        joined = np.concatenate(track)
        start = rng.integers(RATE)
        mix += joined[start : start + n]
    return mix


def white(seconds: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(round(seconds * RATE))


def pink(seconds: float, seed: int) -> np.ndarray:
    """1/f noise: white noise shaped by 1/sqrt(f) in the frequency domain."""
    n = round(seconds * RATE)
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    spectrum[1:] /= np.sqrt(freqs[1:])
    spectrum[0] = 0
    return np.fft.irfft(spectrum, n)


def at_snr(noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``noise`` scaled to ``snr_db`` below the clips' common speech level (float,
    in int16 units, added to the microphone's samples)."""
    target = 32768 * 10 ** ((SPEECH_DBFS - snr_db) / 20)
    return noise * target / float(np.sqrt(np.mean(noise**2)))


# ------------------------------------------------------------------- phone line


def narrow(pcm16k: np.ndarray) -> np.ndarray:
    """A clip as the phone band carries it: resampled to 8 kHz (soxr's low-pass)."""
    return resample(AudioFrame(pcm16k.astype(np.int16), RATE), PHONE_RATE).data.astype(np.int16)


def ulaw_line(frame: np.ndarray) -> np.ndarray:
    """One frame through G.711 μ-law and back, as the phone network delivers it
    (sample by sample, so framing does not matter)."""
    return g711.ulaw_decode(g711.ulaw_encode(frame.astype(np.int16)))
