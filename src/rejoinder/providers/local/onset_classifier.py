"""Backchannel-or-interruption at speech onset: a tiny numpy classifier on ~0.3 s of audio.

When the user starts talking over the agent, the agent has to stop at once for a real
interruption ("wait", "no, Friday", any sentence) but keep talking through a backchannel
("uh-huh", "yeah", "right", "I see"), a cough, a laugh or a breath. A recognizer on the
first few hundred milliseconds is no help (too little audio for it to hear the words),
but the *non*-interruptions form a small closed set with a typical shape: one or two
short syllables followed by silence, or an unvoiced noise burst. So this model answers
the closed-set question: the probability that the onset is a backchannel or a noise.

Input: int16 mono PCM from the speech onset (where the VAD says speech started, minus
the pre-roll), at any sample rate. Everything is resampled to 8 kHz first, so wideband
and phone (G.711) audio go through the same features: the model only ever hears the
0-4 kHz band. It was trained for the speech to begin anywhere in the first 0-150 ms of
the window, at any level (±12 dB), clean or over white, pink or babble noise at
10-20 dB SNR, through μ-law, at ±12 % speed (pitch and formants moving with it) and
through random microphone colourings.

Features: a 16-band log-mel spectrogram (25 ms frames every 10 ms, 100-3800 Hz), relative
to the window's loudest frame (so the level does not matter), with the bands' mean over the
frames that carry sound subtracted (cepstral mean normalisation: a voice's or a channel's
fixed colouring drops out, only the coarse shape of that mean is kept), re-read from the
sound's own start (found against the window's noise floor, so the pre-roll's length does not
matter) and pooled into 30 ms steps (so a little misalignment or a faster voice moves the
numbers little); plus the 10 ms loudness envelope, the bands' spread, the spectral change
per step and a few envelope statistics (how much of the window is sound, where it starts
and stops). Three one-hidden-layer MLPs, averaged (stored as one MLP with their hidden
layers side by side), give the probability. Its weights (``onset_classifier.npz``, next to
this file) come from ``tools/train_onset_classifier.py``, which synthesizes the data with
the local TTS voices (Piper joe at three speeds, 45 eSpeak NG accent/variant/rate
combinations, flite slt and kal at several pitches and speeds) and noise generators.

Cost (2-vCPU VM shared with other jobs, mean of 300 calls on 0.5 s of input): about
0.3 ms at 8, 16 or 48 kHz (the resampling, 30 FFTs of 256 points, two small matrix
products).

Accuracy, 0.3 s window, the shipped threshold (0.29), measured by the training script on
voices it never trained on, with sentence texts it never trained on, wideband and phone
band alike:

* Validation voices (13 eSpeak voices whose variant or accent no training voice has, and
  flite kal16; they chose the stopping epoch and the threshold): sentence onsets judged
  backchannel ("late stops") 18 % (eSpeak 18 %, kal16 21 %); backchannels, laughs and
  noises judged interruption ("false stops") 5 %: spoken backchannels 7 %, TTS laughs 8 %,
  synthesized coughs/breaths/knocks under 1 %; by voice, spoken ones 7 % on eSpeak, 12 % on
  kal16, up to 28 % on the worst eSpeak variant.
* The voices the conversation benchmark holds out (eSpeak en-us+m7 and en-gb-scotland,
  flite awb and rms; scored once, they chose nothing): late stops 19 %, spoken
  backchannels and laughs judged interruption 23 % (eSpeak 14 % / 5 %, flite 25 % / 40 %:
  flite's awb and rms still sound unlike anything trained on). The previous model (one
  voice family less, no normalisation) scored 18 % / 31 % there, flite 24 % / 55 %.

A second model on the same features of a 0.5 s window (``SECOND_LOOK_WEIGHTS_PATH``,
``tools/train_onset_classifier.py --second-look``) takes a second look at the onsets this
one took for feedback; its threshold (0.12) was chosen on the validation voices to add at
most 1 % of false stops. There it caught 237 of the 396 sentence onsets the 0.3 s model
took for feedback (60 %) and added 30 false stops of 3,216 feedback windows (0.9 %); on
the benchmark's voices (scored once, chose nothing) 56 of 103 (54 %), adding 36 of 576
(6.2 %): eSpeak 19 of 30 and 2 of 288, flite 37 of 73 and 34 of 288 (awb and rms again).

This is *not* good enough to act on alone, least of all on voices unlike the training
ones: a late stop costs the agent the fallback delay, a false stop costs its turn.
Sentences that begin with a backchannel word ("yeah but...", "okay so...") are judged
backchannel about 90 % of the time: their first 300 ms *are* a backchannel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ...models.audio import AudioFrame
from ...models.audio_utils import resample

FEATURE_RATE = 8000
"""Every input is resampled to this rate: the phone band is what the model knows."""
FRAME = 200  # 25 ms at 8 kHz
HOP = 80  # 10 ms
N_FFT = 256
N_MELS = 16
SEGMENT = 3
"""Frames pooled into one time step of the spectral features (30 ms)."""
N_SHAPE = 6
"""Cosine coefficients kept of the bands' mean spectrum (its coarse shape)."""
F_MIN, F_MAX = 100.0, 3800.0
FLOOR = -12.0
"""Log-power floor relative to the loudest frame (natural log, about -52 dB): quieter
bins are clipped so digital silence and a faint noise floor look the same."""
ACTIVE_SHARE = 0.5
"""A frame carries sound when its log energy is above this share of the way from the
window's quietest frame to its loudest."""

WEIGHTS_PATH = Path(__file__).with_name("onset_classifier.npz")
SECOND_LOOK_WEIGHTS_PATH = Path(__file__).with_name("onset_classifier_second_look.npz")
"""The same features on a 0.5 s window, for a second look at an onset the first took for
feedback (``OnsetInterruptionDetector``'s ``second_look``)."""

Float32 = npt.NDArray[np.float32]
Float64 = npt.NDArray[np.float64]


def _mel_filters() -> Float64:
    """Triangular filters on the mel scale, (N_MELS, N_FFT // 2 + 1), each of unit area."""

    def mel(f: Float64 | float) -> Float64:
        return np.asarray(2595.0 * np.log10(1.0 + np.asarray(f) / 700.0), np.float64)

    def hz(m: Float64) -> Float64:
        return np.asarray(700.0 * (10.0 ** (m / 2595.0) - 1.0), np.float64)

    edges = hz(np.linspace(mel(F_MIN), mel(F_MAX), N_MELS + 2))
    bins = np.fft.rfftfreq(N_FFT, 1.0 / FEATURE_RATE)
    filters = np.zeros((N_MELS, bins.shape[0]))
    for i in range(N_MELS):
        low, mid, high = edges[i], edges[i + 1], edges[i + 2]
        rising = (bins - low) / (mid - low)
        falling = (high - bins) / (high - mid)
        filters[i] = np.maximum(0.0, np.minimum(rising, falling))
        filters[i] /= max(filters[i].sum(), 1e-9)
    return filters


_FILTERS = _mel_filters()
_HANN = np.hanning(FRAME + 2)[1:-1]  # no zero end points: every sample counts
# DCT-II rows 1..N_SHAPE over the bands (row 0, the overall level, is left out).
_DCT = np.cos(
    np.pi / N_MELS * (np.arange(N_MELS) + 0.5)[None, :] * np.arange(1, N_SHAPE + 1)[:, None]
)


def frame_count(window_seconds: float) -> int:
    """Frames of HOP in a window (the last frame may run past it: that part is zero)."""
    return max(1, round(window_seconds * FEATURE_RATE) // HOP)


def to_feature_rate(pcm: npt.NDArray[np.int16], sample_rate: int) -> Float64:
    """``pcm`` at 8 kHz as floats in [-1, 1)."""
    if sample_rate != FEATURE_RATE:
        pcm = resample(AudioFrame(pcm, sample_rate), FEATURE_RATE).data
    return pcm.astype(np.float64) / 32768.0


def features(audio: Float64, window_seconds: float) -> Float32:
    """The model's input for 8 kHz ``audio`` (floats) starting at the window start.

    Only the first ``window_seconds`` are used; shorter audio is padded with silence.
    """
    frames = frame_count(window_seconds)
    needed = (frames - 1) * HOP + FRAME
    usable = min(audio.shape[0], round(window_seconds * FEATURE_RATE))
    padded = np.zeros(needed)
    padded[:usable] = audio[:usable]
    # DC and rumble below the band say nothing about the words; a first difference
    # (a gentle pre-emphasis) keeps them out without a filter design.
    padded[1:] = padded[1:] - 0.95 * padded[:-1]
    index = np.arange(FRAME)[None, :] + HOP * np.arange(frames)[:, None]
    spectrum = np.fft.rfft(padded[index] * _HANN, N_FFT)
    power = spectrum.real**2 + spectrum.imag**2
    mel = np.log(power @ _FILTERS.T + 1e-10)  # (frames, N_MELS)
    energy = np.log(power.sum(axis=1) + 1e-10)
    reference = float(energy.max())
    grid = np.maximum(mel - reference, FLOOR)
    envelope = np.maximum(energy - reference, FLOOR)
    # Sound is what rises well above the window's quietest frames (its noise floor): a
    # threshold half-way between them in log terms holds for digital silence and for
    # 10 dB SNR alike.
    quiet = float(envelope.min())
    active = envelope > quiet + ACTIVE_SHARE * (0.0 - quiet)
    positions = np.flatnonzero(active)
    onset = int(positions[0]) if positions.size else 0
    heard = frames - onset
    weights = active.astype(np.float64)
    count = max(float(weights.sum()), 1.0)
    band_mean = (grid * weights[:, None]).sum(axis=0) / count
    band_spread = np.sqrt(((grid - band_mean) ** 2 * weights[:, None]).sum(axis=0) / count + 1e-6)
    # A voice (and a channel) is mostly a fixed spectral colouring: subtracting the bands'
    # mean over the sound (cepstral mean normalisation) leaves how the spectrum *moves*,
    # which is what tells "mm-hmm" from "wait, no". Only the mean's coarse shape is kept
    # (its first few cosine coefficients: the tilt, voiced vs noisy), not its detail.
    normed = (grid - band_mean) * weights[:, None]
    shape = _DCT @ (band_mean - band_mean.mean())
    # Re-read from the sound's own start (the speech may begin anywhere in the first
    # ~150 ms) and pooled into SEGMENT-frame steps, so that a few milliseconds of
    # misalignment, or a voice that says the same thing a little faster, moves the
    # numbers little; the 10 ms envelope keeps the fine timing of the loudness alone.
    steps = frames // SEGMENT
    aligned = np.zeros((steps * SEGMENT, N_MELS))
    aligned_active = np.zeros(steps * SEGMENT)
    take = min(heard, steps * SEGMENT)
    aligned[:take] = normed[onset : onset + take]
    aligned_active[:take] = weights[onset : onset + take]
    pooled = aligned.reshape(steps, SEGMENT, N_MELS).mean(axis=1)
    flux_frames = np.zeros(steps * SEGMENT)
    flux = np.abs(np.diff(grid, axis=0)).mean(axis=1) if frames > 1 else np.zeros(1)
    flux_take = min(max(heard - 1, 0), steps * SEGMENT)
    flux_frames[:flux_take] = flux[onset : onset + flux_take]
    pooled_flux = flux_frames.reshape(steps, SEGMENT).mean(axis=1)
    pooled_active = aligned_active.reshape(steps, SEGMENT).mean(axis=1)
    aligned_envelope = np.full_like(envelope, FLOOR)
    aligned_envelope[:heard] = envelope[onset:]
    mask = (np.arange(frames) < heard).astype(np.float64)
    last = float(positions[-1]) / frames if positions.size else 0.0
    # How long the sound lasts after its start and where it stops inside the window: a
    # backchannel is one short event, a sentence keeps going.
    scalars = np.array(
        [
            count / frames,
            count / heard,
            onset / frames,
            last,
            1.0 - last,
            quiet / FLOOR,
            float(envelope[-frames // 4 :].mean()) / -FLOOR,
            float(np.abs(np.diff(envelope)).mean()) if frames > 1 else 0.0,
            float(np.argmax(envelope) - onset) / frames,
        ]
    )
    return np.concatenate(
        [
            pooled.reshape(-1) / -FLOOR,
            pooled_flux,
            pooled_active,
            aligned_envelope / -FLOOR,
            mask,
            shape / -FLOOR,
            band_spread,
            scalars,
        ]
    ).astype(np.float32)


@dataclass(frozen=True)
class _Weights:
    window_seconds: float
    threshold: float
    mean: Float32
    scale: Float32
    w1: Float32
    b1: Float32
    w2: Float32
    b2: float


def _load(path: Path) -> _Weights:
    try:
        with np.load(path) as data:
            config = data["config"]
            expected = np.array(
                [FEATURE_RATE, FRAME, HOP, N_FFT, N_MELS, SEGMENT, N_SHAPE], np.float64
            )
            if not np.array_equal(config, expected):
                raise ValueError(
                    f"{path} was trained with features {config.tolist()}, this module "
                    f"computes {expected.tolist()}: retrain with tools/train_onset_classifier.py"
                )
            weights = _Weights(
                window_seconds=float(data["window_seconds"]),
                threshold=float(data["threshold"]),
                mean=data["mean"].astype(np.float32),
                scale=data["scale"].astype(np.float32),
                w1=data["w1"].astype(np.float32),
                b1=data["b1"].astype(np.float32),
                w2=data["w2"].astype(np.float32),
                b2=float(data["b2"]),
            )
    except (OSError, KeyError) as exc:
        raise ValueError(f"cannot load the onset classifier weights {path}: {exc}") from exc
    size = features(np.zeros(1), weights.window_seconds).shape[0]
    if weights.w1.shape[0] != size or weights.mean.shape[0] != size:
        raise ValueError(f"{path} expects {weights.w1.shape[0]} features, not {size}")
    return weights


class OnsetClassifier:
    """Is the sound that just started over the agent a backchannel/noise or an interruption?

    ``backchannel_probability(pcm, sample_rate)`` takes int16 mono audio from the window
    start (the VAD's speech start minus up to ~0.15 s of pre-roll) and uses its first
    ``window_seconds``; pass at least that much (shorter audio is read as followed by
    silence, which looks like a short backchannel). ``threshold``: probabilities at or
    above it mean "backchannel or noise, keep talking" (``is_backchannel``); it defaults
    to the one chosen by the training script for a low false-stop rate. Synchronous
    and cheap (well under a millisecond); safe to share between sessions (no state).
    """

    def __init__(
        self, *, weights_path: str | Path | None = None, threshold: float | None = None
    ) -> None:
        self._weights = _load(Path(weights_path) if weights_path is not None else WEIGHTS_PATH)
        self.window_seconds = self._weights.window_seconds
        self.threshold = self._weights.threshold if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within 0-1, got {self.threshold}")

    def backchannel_probability(self, pcm: npt.NDArray[np.int16], sample_rate: int) -> float:
        """The probability (0-1) that ``pcm`` is a backchannel or a noise, not an interruption."""
        if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16:
            kind = pcm.dtype if isinstance(pcm, np.ndarray) else type(pcm).__name__
            raise TypeError(f"pcm must be a numpy int16 array, got {kind}")
        if pcm.ndim != 1:
            raise ValueError(f"pcm must be 1-D mono audio, got shape {pcm.shape}")
        if pcm.shape[0] == 0:
            raise ValueError("pcm is empty: pass the audio from the speech onset")
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        # Resample only what the window needs (plus a little for the resampler's edge).
        keep = min(pcm.shape[0], int(np.ceil((self.window_seconds + 0.02) * sample_rate)))
        audio = to_feature_rate(np.ascontiguousarray(pcm[:keep]), sample_rate)
        return self.probability_of_features(features(audio, self.window_seconds))

    def probability_of_features(self, x: Float32) -> float:
        """The model on an already computed feature vector (the training script checks
        its own numbers through this)."""
        w = self._weights
        hidden = np.maximum((x - w.mean) / w.scale @ w.w1 + w.b1, 0.0)
        logit = float(hidden @ w.w2) + w.b2
        return float(1.0 / (1.0 + np.exp(-np.clip(logit, -40.0, 40.0))))

    def is_backchannel(self, pcm: npt.NDArray[np.int16], sample_rate: int) -> bool:
        """``backchannel_probability(...) >= threshold``: keep talking."""
        return self.backchannel_probability(pcm, sample_rate) >= self.threshold
