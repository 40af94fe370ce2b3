"""Train the backchannel/noise-onset classifier of rejoinder.providers.local.onset_classifier.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python tools/train_onset_classifier.py \
        [--cache DIR] [--out PATH] [--benchmark] [--second-look]

(One BLAS thread: on a shared 2-core machine a threaded matrix product waits for the busy
core and trains several times slower.) About 5 minutes once the audio is cached, 7-8
minutes from nothing.

Synthesizes the data offline: the words from Piper's joe voice (three speeds), 45 eSpeak NG
accent/variant/rate combinations and flite's slt and kal at several pitches and speeds;
shaped noise for coughs, throat clears, breaths, laughs and knocks. Augments it the way
real onsets differ (the window starts 0-150 ms before the speech, ±12 dB of level,
white/pink/babble noise at 10-20 dB SNR, the G.711 μ-law phone band, ±12 % speed and
pitch and formants together, a random microphone colouring), trains a few one-hidden-layer
MLPs in numpy with fixed seeds, early-stopped on the validation voices, and writes their
average (one wider MLP) next to the module, with the threshold that keeps false stops on
the validation voices within --max-false-stop.

``--second-look`` trains the second look's model instead: the same data and features on
a 0.5 s window (``--window``), for the onsets the shipped first-look model took for
feedback. Its threshold is the highest whose *added* false stops (feedback the first look
let through and this one stops) stay within --max-added-false-stop of the validation
voices' feedback; it is written to onset_classifier_second_look.npz.

Three voice sets: training; validation (13 eSpeak voices, each with an accent or a
variant no training voice has, and flite kal16; held-out sentence texts), which chooses
the stopping epoch and the threshold; and the benchmark's voices, whose accent and variant
appear in neither and which choose nothing: they are scored only with --benchmark, as a
final check.

Positive (1) = backchannel / noise: keep talking. Negative (0) = the start of a sentence:
stop at once. Synthesized audio is cached (``--cache``, default under /tmp) so a second
run only retrains; nothing here is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import subprocess
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.providers.local import onset_classifier as oc

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I16 = npt.NDArray[np.int16]

SEED = 20240611
WINDOW = 0.3
# Chosen on the validation voices: 128 hidden units beat 32-64, 30 ms pooling beat 20 and
# 50 ms, stronger L2/dropout did not help, and averaging seeds cut late stops by ~2 points.
HIDDEN, EPOCHS, L2, DROPOUT, SEEDS = 128, 60, 3e-4, 0.1, 3
MAX_FALSE_STOP = 0.05
SECOND_LOOK_WINDOW = 0.5
MAX_ADDED_FALSE_STOP = 0.01
SOURCE_RATE = 16000  # every synthesized clip is brought to this rate before augmenting

# ------------------------------------------------------------------------------- texts

BACKCHANNELS = (
    "uh-huh", "uh huh", "mm-hmm", "mhm", "mm", "hmm", "mm hm", "uh-huh.", "mm-hmm.",
    "yeah", "yeah.", "yeah!", "yeah yeah", "yep", "yup", "yes", "yes.",
    "right", "right.", "right right", "okay", "okay.", "ok", "oh okay", "alright",
    "sure", "sure.", "I see", "I see.", "oh", "oh.", "oh!", "ah", "wow", "wow!", "oh wow",
    "oh really", "uh-huh uh-huh", "yeah, yeah.", "mm, okay",
)  # fmt: skip
LAUGHS = ("ha ha", "haha", "ha ha ha", "hehe", "heh", "heh heh", "hahaha", "ha!")

# Sentence openings of every kind: interruptions, corrections, commands, questions,
# statements. None starts with a backchannel word: "yeah but..." is ambiguous in its first
# 300 ms by construction, so those are scored separately (AMBIGUOUS) and not trained on.
_SENTENCES = (
    "Wait, that is not what I wanted.", "Stop talking for a moment.", "Hold on, let me think.",
    "Hang on, I need to check something.", "No, not that one.", "No no, the other one.",
    "Nope, that's wrong.", "Actually, can we change the time?", "Excuse me, can I ask something?",
    "Sorry, I didn't catch that.", "Sorry, what did you say?", "But I told you already.",
    "What? That makes no sense.", "Pardon me, could you repeat that?", "Please stop.",
    "Listen, I only need the address.", "Hey, can you go back a step?", "Never mind that.",
    "Cancel the order please.", "Just tell me the price.", "Skip that part.",
    "Let me stop you there.", "One more thing before you go on.", "That's not right.",
    "That isn't what I asked for.", "Can you slow down a little?", "Could you speak louder?",
    "I already have an account.", "I meant next Thursday.", "I said the blue one.",
    "My name is spelled differently.", "Go back to the first option.", "Change it to seven.",
    "Make that two tickets instead.", "Not Monday, Friday.", "Not now, later maybe.",
    "Forget about the dessert.", "Let me ask you something else.", "Quick question.",
    "How much does that cost?", "Why would it take so long?", "Where is the nearest branch?",
    "When can I pick it up?", "Who am I speaking with?", "Which one is cheaper?",
    "Is that the final price?", "Do you have it in green?", "Does it come with a warranty?",
    "Can I pay by card?", "Could we do it tomorrow morning?", "Would that be possible today?",
    "Will you send me a copy?", "Are you still there?", "Have you got my details?",
    "Tell me the opening times first.", "Give me a second.", "Send it to my email instead.",
    "Put me through to a person.", "Read that number again.", "Repeat the last part.",
    "Transfer me to billing.", "Book it for four people.", "Find another flight.",
    "Show me something cheaper.", "Remind me at nine.", "Add milk to the list too.",
    "Switch to the other account.", "Please use my work address.", "Let's go with option two.",
    "Let's skip the details.", "I have a problem with my bill.", "I want to speak to a manager.",
    "I would prefer the window seat.", "I'd rather pay now.", "I think you misunderstood me.",
    "I can't hear you very well.", "I don't need insurance.", "I'm not interested, thanks.",
    "I'm calling about my order.", "It was delivered to the wrong house.",
    "It's for my daughter, not me.", "It doesn't work at all.", "There is a mistake here.",
    "This is the wrong amount.", "These aren't my dates.", "The package never arrived.",
    "The meeting is at noon.", "The second one, please.", "My flight got cancelled.",
    "My card number changed.", "Our address is different now.", "His name is Daniel.",
    "Her appointment is on the fifth.", "We need a bigger room.", "We were charged twice.",
    "You already said that.", "You got the date wrong.", "You are breaking up.",
    "Everything is fine, just continue with the booking.", "Fifteen, not fifty.",
    "Three people, two adults and a child.", "Eight thirty in the evening.",
    "Twenty dollars at most.", "Number four, please.", "At the corner of Main Street.",
    "From London to Paris.", "For tomorrow afternoon.", "In the morning if possible.",
    "By Friday at the latest.", "After lunch would work.", "Before the weekend.",
    "Somewhere near the station.", "Maybe a little later.", "Probably the cheaper one.",
    "Definitely not the red one.", "Honestly I don't mind.", "Basically I want a refund.",
    "Seriously, stop.", "Please, just listen.", "Thanks, but I have to go.",
    "Thank you, that's enough.", "Good, now cancel the other one.", "Great, book it.",
    "Perfect, send the confirmation.", "Fine, do it.", "Hello? Can you hear me?",
    "Hi, I have a question.", "Excuse me, you skipped my question.", "Sorry to interrupt.",
    "Apologies, I misspoke.", "Um, I'd like to change that.", "Er, that's not my name.",
    "So what happens next?", "Then what should I do?", "And what about the deposit?",
    "Also, I need a receipt.", "Plus one more bag.", "Instead of Tuesday, let's say Wednesday.",
    "Unless it's too expensive.", "Except the last item.", "Only the first two.",
    "Every Monday at ten.", "Each ticket costs how much?", "All of them, please.",
    "Nothing else for now.", "Nobody told me that.", "None of those work for me.",
    "Somebody else will pick it up.", "Anyone can use it?", "Anything under forty dollars.",
    "Look, I just need a table.", "Listen carefully.", "Let me finish.", "Let me explain.",
    "Check the other date.", "Call me back later.", "Text me the details.",
    "Email the invoice to my partner.", "Move the appointment to Monday.",
    "Turn it off.", "Turn the volume down.", "Open the second file.", "Close the window.",
    "Play something else.", "Pause the music.", "Next song.", "Go faster.", "Louder please.",
    "Keep it short.", "Start over.", "Begin again from the top.", "Undo that.",
    "Delete the last message.", "Mute the call.", "Help me with the form.",
    "Explain the fees again.", "Describe the room.", "Spell the street name.",
    "Confirm my booking number.", "Verify the address first.", "Reset my password.",
    "Update my phone number.", "Leave a note for the driver.", "Bring two extra towels.",
)  # fmt: skip

# Templates add variety in the first words (the part the model hears).
_OPENERS = (
    "wait", "stop", "no", "hold on", "hang on", "actually", "excuse me", "sorry", "but",
    "what", "listen", "hey", "please", "just", "hmm no", "well", "so", "and", "look",
    "one second", "pardon", "never mind", "cancel that", "not quite", "careful",
)  # fmt: skip
_TAILS = (
    "I need the earlier train", "that's the wrong address", "can you check again",
    "I want two of them", "the price is too high", "make it for Saturday",
    "my number ends in five", "go back one step", "what time is it there",
    "I asked about the refund", "put it on my card", "send it to Boston",
    "let me talk to someone", "the room has to be quiet", "is breakfast included",
    "it should be under my name", "I won't be home then", "change the size to medium",
)  # fmt: skip

AMBIGUOUS = (
    "Yeah but I said Friday.", "Okay so what about the refund?", "Right, and how much is it?",
    "Sure, but make it six.", "Oh no, that's wrong.", "Mm, no, the other one.",
    "Yes, and add a salad.", "Alright, cancel it then.", "I see, but why?",
    "Wow, that's expensive, no.",
)  # fmt: skip


def sentences() -> list[str]:
    """A few hundred varied sentence texts (the hand list plus opener + tail combinations)."""
    rng = np.random.default_rng(SEED)
    combos = {
        f"{o.capitalize()}, {t}."
        for o, t in zip(rng.choice(_OPENERS, 260), rng.choice(_TAILS, 260), strict=True)
    }
    return list(_SENTENCES) + sorted(combos)


# ------------------------------------------------------------------------------- voices


@dataclass(frozen=True)
class Voice:
    name: str
    engine: str  # piper | espeak | flite
    voice: str = ""
    rate: int = 175  # eSpeak words per minute
    length_scale: float = 1.0  # Piper
    f0: int = 0  # flite's target mean pitch in Hz (0: the voice's own)
    stretch: float = 1.0  # flite's duration stretch (> 1 is slower)

    def key(self) -> str:
        """What the cache is keyed on (the settings that change the audio)."""
        base = (f"Voice(name={self.name!r}, engine={self.engine!r}, voice={self.voice!r}, "
                f"rate={self.rate!r}, length_scale={self.length_scale!r})")  # fmt: skip
        # Written so that a voice without flite settings keeps the key it always had.
        if self.f0 or self.stretch != 1.0:
            base += f" f0={self.f0} stretch={self.stretch}"
        return base


def _espeak(voice: str, rate: int) -> Voice:
    return Voice(f"espeak-{voice}-{rate}", "espeak", voice, rate=rate)


def _flite_voice(voice: str, f0: int = 0, stretch: float = 1.0) -> Voice:
    suffix = f"-{f0}-{stretch}" if f0 or stretch != 1.0 else ""
    return Voice(f"flite-{voice}{suffix}", "flite", voice, f0=f0, stretch=stretch)


# Voices are split three ways. A conversation benchmark judges the project on
# BENCHMARK_VOICES: nothing here trains on them, validates on them or chooses anything with
# them (they are scored once, at the end, as a report); no other voice shares their eSpeak
# accent or variant either. The validation voices (VALIDATION_VOICES: an accent and
# variants that no training voice has, and flite's kal16) choose the stopping epoch and the
# threshold. Everything else trains: the more different voices the model hears, the less
# it can lean on any one voice's timbre, which is what made the first model fail on flite.
TRAIN_VOICES = (
    Voice("piper-joe", "piper"),
    Voice("piper-joe-fast", "piper", length_scale=0.8),
    Voice("piper-joe-slow", "piper", length_scale=1.25),
    # flite: slt (a statistical-parametric voice) at several pitches and speeds, so its
    # sound is not one speaker's; kal (a diphone voice) at two.
    _flite_voice("slt"),
    _flite_voice("slt", 110, 0.9),
    _flite_voice("slt", 140, 1.15),
    _flite_voice("slt", 230, 1.0),
    _flite_voice("slt", 95, 1.3),
    _flite_voice("kal"),
    _flite_voice("kal", 130, 0.85),
    _flite_voice("kal", 85, 1.2),
    *(
        _espeak(v, r)
        for v, r in (
            ("en-us", 175), ("en-us", 140), ("en-us+m1", 200), ("en-us+m2", 165),
            ("en-us+f1", 185), ("en-us+f5", 150), ("en+m4", 175), ("en+m5", 210),
            ("en+f3", 160), ("en+f1", 190), ("en-gb-x-rp", 170), ("en-029", 180),
            ("en-us+klatt", 175), ("en+klatt3", 165), ("en-us+Andy", 180),
            ("en+Annie", 170), ("en-us+robert", 160), ("en+steph", 185),
            ("en-us-nyc", 170), ("en-us-nyc+m2", 190), ("en-us-nyc+f3", 155),
            ("en-gb-x-gbcwmd", 165), ("en-gb-x-gbcwmd+m1", 180), ("en-gb-x-gbcwmd+f5", 170),
            ("en-029+m4", 160), ("en-029+f1", 200), ("en-gb-x-rp+m8", 175),
            ("en-gb-x-rp+f3", 145), ("en+m8", 185), ("en-us+adam", 170),
            ("en+benjamin", 160), ("en-us+linda", 180), ("en+david", 195),
            ("en-us+max", 150), ("en+Mike", 175), ("en-us+travis", 165),
            ("en+quincy", 185), ("en-us+shelby", 175), ("en+klatt5", 170),
            ("en-us+ed", 160), ("en+john", 205), ("en-us+iven", 170),
            ("en-us+m4", 220), ("en+f5", 135), ("en-us+belinda", 180),
        )
    ),
)  # fmt: skip

VALIDATION_VOICES = (
    _flite_voice("kal16"),
    *(
        Voice(f"espeak-{v}", "espeak", v, rate=r)
        for v, r in (
            ("en-us+m3", 175), ("en+f2", 175), ("en+f4", 190), ("en-us+m6", 160),
            ("en-gb-x-gbclan", 175),
        )
    ),
    *(
        _espeak(v, r)
        for v, r in (
            ("en-gb-x-gbclan+m1", 165), ("en-gb-x-gbclan+f3", 185), ("en-us+klatt4", 170),
            ("en+Alicia", 175), ("en-us+aunty", 160), ("en+Lee", 190), ("en-us+grandpa", 150),
            ("en-029+m6", 180),
        )
    ),
)  # fmt: skip

BENCHMARK_VOICES = (
    _flite_voice("awb"),
    _flite_voice("rms"),
    Voice("espeak-en-us+m7", "espeak", "en-us+m7", rate=165),
    Voice("espeak-en-gb-scotland", "espeak", "en-gb-scotland", rate=175),
)


async def _tts_clip(tts: object, text: str) -> I16:
    frames = [f.data async for f in tts.synthesize(text)]  # type: ignore[attr-defined]
    return np.concatenate(frames) if frames else np.zeros(0, np.int16)


def _flite(voice: Voice, text: str) -> tuple[I16, int]:
    settings: list[str] = []
    if voice.f0:
        settings += ["--setf", f"int_f0_target_mean={voice.f0}"]
    if voice.stretch != 1.0:
        settings += ["--setf", f"duration_stretch={voice.stretch}"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.wav"
        subprocess.run(
            ["flite", "-voice", voice.voice, *settings, "-t", text, "-o", str(path)], check=True
        )
        with wave.open(str(path)) as w:
            rate = w.getframerate()
            data = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.int16)
    return data, rate


def synthesize(voice: Voice, texts: list[str], cache: Path) -> list[I16]:
    """Each text spoken by ``voice`` at SOURCE_RATE (cached by voice and texts)."""
    key = hashlib.sha1(("\n".join(texts) + voice.key()).encode()).hexdigest()[:12]
    path = cache / f"{voice.name}-{key}.npz"
    if path.exists():
        with np.load(path) as data:
            return [data[f"c{i}"] for i in range(len(texts))]
    clips: list[I16] = []
    if voice.engine == "flite":
        for text in texts:
            pcm, rate = _flite(voice, text)
            clips.append(resample(AudioFrame(pcm, rate), SOURCE_RATE).data)
    else:
        from rejoinder.providers.local import EspeakTTS, PiperTTS

        tts: EspeakTTS | PiperTTS
        if voice.engine == "piper":
            tts = PiperTTS(length_scale=voice.length_scale)
        else:
            tts = EspeakTTS(voice=voice.voice, rate=voice.rate)

        async def run() -> list[I16]:
            # Piper costs ~0.1 s of CPU per second of speech and only the first 0.35 s is
            # heard: it speaks just the first four words of each text.
            short = [" ".join(t.split()[:4]) if voice.engine == "piper" else t for t in texts]
            return [await _tts_clip(tts, t) for t in short]

        for pcm in asyncio.run(run()):
            clips.append(resample(AudioFrame(pcm, tts.sample_rate), SOURCE_RATE).data)
    cache.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, npt.NDArray[np.int16]] = {f"c{i}": c for i, c in enumerate(clips)}
    np.savez_compressed(path, allow_pickle=False, **arrays)
    return clips


# ----------------------------------------------------------------- synthesized sounds


def _bandpass(x: F64, low: float, high: float, rate: int) -> F64:
    """A brick-wall band-pass in the frequency domain (fine for noise sources)."""
    spectrum = np.fft.rfft(x)
    freqs = np.fft.rfftfreq(x.shape[0], 1.0 / rate)
    spectrum[(freqs < low) | (freqs > high)] = 0.0
    return np.fft.irfft(spectrum, x.shape[0])


def _burst_envelope(n: int, attack: int, rng: np.random.Generator) -> F64:
    t = np.arange(n, dtype=np.float64)
    rise = np.minimum(1.0, t / max(attack, 1))
    decay = np.exp(-t / (n * rng.uniform(0.2, 0.5)))
    return rise * decay


def _voicing(n: int, f0: float, rate: int, rng: np.random.Generator) -> F64:
    """A buzzy glottal-like source with a little jitter (for voiced coughs and laughs)."""
    f = f0 * (1.0 + 0.03 * np.cumsum(rng.normal(0.0, 0.02, n)) / np.sqrt(np.arange(1, n + 1)))
    phase = np.cumsum(f / rate)
    return np.asarray((phase % 1.0) * 2.0 - 1.0, np.float64)


def cough(rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """One or two coughs: fast-attack band-passed noise bursts, 0.1-0.4 s, often voiced."""
    out: list[F64] = []
    for _ in range(1 if rng.random() < 0.6 else int(rng.integers(2, 4))):
        n = int(rng.uniform(0.1, 0.4) * rate)
        low, high = rng.uniform(150, 800), rng.uniform(1500, 5000)
        source = _bandpass(rng.normal(0, 1, n), low, high, rate)
        source /= np.abs(source).max() + 1e-9
        if rng.random() < 0.5:
            buzz = _bandpass(_voicing(n, rng.uniform(90, 260), rate, rng), low, high, rate)
            source = source + rng.uniform(0.2, 0.7) * buzz / (np.abs(buzz).max() + 1e-9)
        out.append(source * _burst_envelope(n, int(rng.uniform(0.002, 0.02) * rate), rng))
        out.append(np.zeros(int(rng.uniform(0.05, 0.2) * rate)))
    return np.concatenate(out)


def throat_clear(rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """A low, rough rumble: noise in 100-1500 Hz, amplitude-modulated at 15-40 Hz."""
    n = int(rng.uniform(0.2, 0.5) * rate)
    t = np.arange(n) / rate
    source = _bandpass(rng.normal(0, 1, n), rng.uniform(80, 250), rng.uniform(800, 1800), rate)
    rough = 1.0 + 0.8 * np.sin(2 * np.pi * rng.uniform(15, 40) * t)
    envelope = np.minimum(1.0, t / rng.uniform(0.01, 0.05)) * np.exp(-t / rng.uniform(0.1, 0.3))
    return np.asarray(source * rough * envelope, np.float64)


def laugh(rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """Breathy "ha" pulses at 3.5-6 per second: noise plus a little voicing, each pulse
    a fast rise and a decay."""
    period = int(rate / rng.uniform(3.5, 6.0))
    pulses = int(rng.integers(2, 6))
    f0 = rng.uniform(120, 320)
    out = np.zeros(period * pulses + rate // 10)
    for k in range(pulses):
        n = int(period * rng.uniform(0.5, 0.8))
        noise = _bandpass(rng.normal(0, 1, n), rng.uniform(300, 700), rng.uniform(2500, 4500), rate)
        noise /= np.abs(noise).max() + 1e-9
        buzz = _bandpass(_voicing(n, f0 * rng.uniform(0.95, 1.05), rate, rng), 200, 3500, rate)
        buzz /= np.abs(buzz).max() + 1e-9
        mix = rng.uniform(0.0, 0.8)
        pulse = ((1 - mix) * noise + mix * buzz) * _burst_envelope(n, int(0.01 * rate), rng)
        out[k * period : k * period + n] += pulse * rng.uniform(0.6, 1.0)
    return out


def breath(rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """An in- or out-breath: soft noise with a slow rise, 0.25-0.6 s."""
    n = int(rng.uniform(0.25, 0.6) * rate)
    t = np.arange(n) / n
    source = _bandpass(rng.normal(0, 1, n), rng.uniform(200, 600), rng.uniform(2000, 6000), rate)
    return np.asarray(source * np.sin(np.pi * t) ** rng.uniform(0.5, 2.0), np.float64)


def knock(rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """A knock, click or bump: a decaying resonance or two, 30-150 ms."""
    n = int(rng.uniform(0.03, 0.15) * rate)
    t = np.arange(n) / rate
    out = np.zeros(n)
    for _ in range(int(rng.integers(1, 3))):
        out += np.sin(2 * np.pi * rng.uniform(150, 2500) * t) * np.exp(
            -t / rng.uniform(0.005, 0.04)
        )
    out[: int(0.002 * rate)] += rng.normal(0, 1, int(0.002 * rate))
    return out


SOUNDS = {"cough": cough, "throat": throat_clear, "laughnoise": laugh, "breath": breath,
          "knock": knock}  # fmt: skip


# ------------------------------------------------------------------------ augmentation


def pink(n: int, rng: np.random.Generator) -> F64:
    spectrum = np.fft.rfft(rng.normal(0, 1, n))
    spectrum /= np.sqrt(np.maximum(np.arange(spectrum.shape[0]), 1.0))
    return np.fft.irfft(spectrum, n)


def onset_sample(x: F64, rate: int = SOURCE_RATE) -> int:
    """Where a clean clip's sound starts: the first 5 ms block within 35 dB of its loudest."""
    block = rate // 200
    n = x.shape[0] // block
    if n == 0:
        return 0
    rms = np.sqrt((x[: n * block].reshape(n, block) ** 2).mean(axis=1) + 1e-12)
    return int(np.flatnonzero(rms > rms.max() * 10 ** (-35 / 20))[0] * block)


def _rms(x: F64) -> float:
    return float(np.sqrt(np.mean(x**2) + 1e-12))


def colour(x: F64, rng: np.random.Generator, rate: int = SOURCE_RATE) -> F64:
    """``x`` through a random microphone/channel: a spectral tilt of ±3 dB per octave and
    one broad peak or dip of ±5 dB, so that no voice's exact spectral balance is learned."""
    spectrum = np.fft.rfft(x)
    freqs = np.maximum(np.fft.rfftfreq(x.shape[0], 1.0 / rate), 50.0)
    octaves = np.log2(freqs / 1000.0)
    centre = rng.uniform(-2.0, 1.5)  # 250 Hz - 2.8 kHz
    gain_db = rng.uniform(-3, 3) * octaves + rng.uniform(-5, 5) * np.exp(
        -0.5 * ((octaves - centre) / rng.uniform(0.3, 1.0)) ** 2
    )
    return np.fft.irfft(spectrum * 10 ** (gain_db / 20), x.shape[0])


def augment(
    clip: F64,
    rng: np.random.Generator,
    babble: list[F64],
    *,
    phone: bool,
    noise: str,
    lead: float,
    speed: float = 1.0,
    channel: bool = False,
) -> tuple[I16, int]:
    """One onset window (WINDOW + margin) as the classifier would get it."""
    if speed != 1.0:
        # Reading the clip at another rate changes speed, pitch and formants together (a
        # shorter or longer vocal tract): other speakers, not just other tempos.
        clip = (
            resample(
                AudioFrame(np.clip(clip * 32767, -32768, 32767).astype(np.int16), SOURCE_RATE),
                round(SOURCE_RATE / speed),
            ).data.astype(np.float64)
            / 32768.0
        )
    start = onset_sample(clip)
    total = int((WINDOW + 0.05) * SOURCE_RATE)
    lead_n = int(lead * SOURCE_RATE)
    sound = clip[start : start + total - lead_n]
    x = np.zeros(total)
    x[lead_n : lead_n + sound.shape[0]] = sound
    if channel:
        x = colour(x, rng)
    active = x[lead_n : lead_n + int(0.3 * SOURCE_RATE)]
    level = 10 ** (rng.uniform(-26 - 12, -26 + 12) / 20)  # speech at -26 dBFS ±12 dB
    x *= level / _rms(active[np.abs(active) > 1e-4] if np.any(np.abs(active) > 1e-4) else active)
    speech_rms = _rms(x[lead_n : lead_n + active.shape[0]])
    if noise != "none":
        if noise == "white":
            bg = rng.normal(0, 1, total)
        elif noise == "pink":
            bg = pink(total, rng)
        else:  # babble: 3-6 other talkers, each from a random point of a sentence
            bg = np.zeros(total)
            for _ in range(int(rng.integers(3, 7))):
                other = babble[int(rng.integers(len(babble)))]
                if other.shape[0] > total:
                    at = int(rng.integers(other.shape[0] - total))
                    bg += other[at : at + total] / (_rms(other) + 1e-9)
        snr = rng.uniform(10, 20)
        x += bg * speech_rms / (_rms(bg) + 1e-12) * 10 ** (-snr / 20)
    else:  # a recording is never digitally silent
        x += rng.normal(0, 1, total) * 10 ** (-75 / 20)
    pcm = np.clip(np.round(x * 32768), -32768, 32767).astype(np.int16)
    if phone:
        narrow = resample(AudioFrame(pcm, SOURCE_RATE), 8000).data
        return g711.ulaw_decode(g711.ulaw_encode(narrow)), 8000
    return pcm, SOURCE_RATE


# -------------------------------------------------------------------------- data sets


@dataclass
class Sample:
    clip: F64
    label: int
    kind: str  # backchannel | laugh | cough | throat | ... | sentence | ambiguous
    voice: str


def _floats(pcm: I16) -> F64:
    return pcm.astype(np.float64) / 32768.0


def build_sources(
    voices: tuple[Voice, ...], texts: list[str], cache: Path, seed: int, n_sounds: int
) -> list[Sample]:
    samples: list[Sample] = []
    spoken = [(t, "backchannel", 1) for t in BACKCHANNELS] + [(t, "laugh", 1) for t in LAUGHS]
    spoken += [(t, "sentence", 0) for t in texts] + [(t, "ambiguous", 0) for t in AMBIGUOUS]
    t0 = time.perf_counter()
    for voice in voices:
        clips = synthesize(voice, [t for t, _, _ in spoken], cache)
        for (_, kind, label), pcm in zip(spoken, clips, strict=True):
            if pcm.shape[0] > SOURCE_RATE // 20:
                samples.append(Sample(_floats(pcm), label, kind, voice.name))
    print(f"  {len(voices)} voices ({time.perf_counter() - t0:.0f} s)", flush=True)
    rng = np.random.default_rng(seed)
    for i in range(n_sounds):
        kind = list(SOUNDS)[i % len(SOUNDS)]
        samples.append(Sample(SOUNDS[kind](rng), 1, kind, "synth"))
    return samples


@dataclass
class Rendered:
    """Augmented onset windows at the feature rate, with what each one is."""

    audio: list[F64]
    labels: npt.NDArray[np.int64]
    kinds: list[str]
    voices: list[str]
    phone: npt.NDArray[np.bool_]


def render(
    samples: list[Sample],
    rng: np.random.Generator,
    repeats: dict[int, int],
    babble: list[F64],
    *,
    train: bool,
) -> Rendered:
    """``repeats[label]`` augmented copies of each sample, as the classifier hears them."""
    audio: list[F64] = []
    labels: list[int] = []
    kinds: list[str] = []
    voices: list[str] = []
    phones: list[bool] = []
    for s in samples:
        for _ in range(repeats[s.label]):
            is_phone = bool(rng.random() < 0.5)
            noise = str(rng.choice(["none", "white", "pink", "babble"], p=[0.3, 0.2, 0.2, 0.3]))
            pcm, rate = augment(
                s.clip,
                rng,
                babble,
                phone=is_phone,
                noise=noise,
                lead=float(rng.uniform(0, 0.15)),
                speed=float(rng.uniform(0.88, 1.12)) if train else 1.0,
                channel=train and bool(rng.random() < 0.7),
            )
            audio.append(oc.to_feature_rate(pcm, rate))
            labels.append(s.label)
            kinds.append(s.kind)
            voices.append(s.voice)
            phones.append(is_phone)
    return Rendered(audio, np.array(labels, np.int64), kinds, voices, np.array(phones))


def featurize(data: Rendered) -> F32:
    return np.stack([oc.features(a, WINDOW) for a in data.audio])


# ------------------------------------------------------------------------------- model


@dataclass
class Mlp:
    mean: F32
    scale: F32
    w1: F64
    b1: F64
    w2: F64
    b2: float

    def logits(self, x: F32) -> F64:
        h = np.maximum(((x - self.mean) / self.scale) @ self.w1 + self.b1, 0.0)
        return np.asarray(h @ self.w2 + self.b2, np.float64)

    def proba(self, x: F32) -> F64:
        return np.asarray(1.0 / (1.0 + np.exp(-np.clip(self.logits(x), -40, 40))), np.float64)


def _balanced_loss(p: F64, y: npt.NDArray[np.int64]) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-0.5 * (np.log(p[y == 1]).mean() + np.log(1 - p[y == 0]).mean()))


def train_mlp(
    x: F32,
    y: npt.NDArray[np.int64],
    x_val: F32,
    y_val: npt.NDArray[np.int64],
    seed: int,
    *,
    hidden: int = HIDDEN,
    epochs: int = EPOCHS,
    l2: float = L2,
    dropout: float = DROPOUT,
) -> tuple[Mlp, int, float]:
    """Adam on the class-balanced cross-entropy, L2 on the weights, input dropout,
    minibatches of 128; the epoch kept is the one with the lowest balanced loss on the
    validation voices (early stopping on voices the model never trains on)."""
    rng = np.random.default_rng(seed)
    mean = x.mean(axis=0)
    scale = x.std(axis=0) + 1e-3
    z = ((x - mean) / scale).astype(np.float64)
    n, d = z.shape
    params = [
        rng.normal(0, np.sqrt(2.0 / d), (d, hidden)),
        np.zeros(hidden),
        rng.normal(0, np.sqrt(1.0 / hidden), hidden),
        np.zeros(1),
    ]
    moments = [np.zeros_like(p) for p in params]
    squares = [np.zeros_like(p) for p in params]
    weight = np.where(y == 1, n / (2.0 * max(y.sum(), 1)), n / (2.0 * max((1 - y).sum(), 1)))
    lr, step = 2e-3, 0
    best: tuple[float, int, list[F64]] = (np.inf, -1, [p.copy() for p in params])
    for epoch in range(epochs):
        order = rng.permutation(n)
        for at in range(0, n, 128):
            idx = order[at : at + 128]
            zb, yb, wb = z[idx], y[idx], weight[idx]
            # Input dropout: no single feature can carry a class (voices differ).
            zb = zb * (rng.random(zb.shape) > dropout) / (1.0 - dropout)
            pre = zb @ params[0] + params[1]
            h = np.maximum(pre, 0.0)
            p = 1.0 / (1.0 + np.exp(-np.clip(h @ params[2] + params[3][0], -40, 40)))
            g = (p - yb) * wb / idx.shape[0]
            gh = np.outer(g, params[2]) * (pre > 0)
            grads = [
                zb.T @ gh + l2 * params[0],
                gh.sum(axis=0),
                h.T @ g + l2 * params[2],
                np.array([g.sum()]),
            ]
            step += 1
            for k, (param, grad) in enumerate(zip(params, grads, strict=True)):
                moments[k] = 0.9 * moments[k] + 0.1 * grad
                squares[k] = 0.999 * squares[k] + 0.001 * grad**2
                mhat = moments[k] / (1 - 0.9**step)
                vhat = squares[k] / (1 - 0.999**step)
                param -= lr * mhat / (np.sqrt(vhat) + 1e-8)
        if epoch == epochs * 3 // 4:
            lr /= 4
        model = Mlp(
            mean.astype(np.float32),
            scale.astype(np.float32),
            params[0],
            params[1],
            params[2],
            float(params[3][0]),
        )
        loss = _balanced_loss(model.proba(x_val), y_val)
        if loss < best[0]:
            best = (loss, epoch, [p.copy() for p in params])
    loss, epoch, kept = best
    return (
        Mlp(
            mean.astype(np.float32),
            scale.astype(np.float32),
            kept[0],
            kept[1],
            kept[2],
            float(kept[3][0]),
        ),
        epoch,
        loss,
    )


def ensemble(models: list[Mlp]) -> Mlp:
    """One MLP whose logit is the mean of ``models``' logits (they share the input
    scaling): their hidden layers side by side, the output weights divided by their count."""
    k = len(models)
    return Mlp(
        models[0].mean,
        models[0].scale,
        np.concatenate([m.w1 for m in models], axis=1),
        np.concatenate([m.b1 for m in models]),
        np.concatenate([m.w2 for m in models]) / k,
        float(np.mean([m.b2 for m in models])),
    )


# -------------------------------------------------------------------------- reporting


def rates(p: F64, y: npt.NDArray[np.int64], threshold: float) -> tuple[float, float]:
    """(sentences judged backchannel, backchannels/noises judged interruption)."""
    late = float(np.mean(p[y == 0] >= threshold)) if np.any(y == 0) else float("nan")
    false_stop = float(np.mean(p[y == 1] < threshold)) if np.any(y == 1) else float("nan")
    return late, false_stop


def choose_threshold(p: F64, y: npt.NDArray[np.int64], max_false_stop: float) -> float:
    """The highest threshold whose false-stop rate stays within ``max_false_stop``: "keep
    talking" is p >= threshold, so a higher threshold stops more often, and the highest
    one within the bound has the fewest late stops."""
    grid = np.linspace(0.01, 0.99, 99)
    ok = [float(t) for t in grid if rates(p, y, float(t))[1] <= max_false_stop]
    return max(ok) if ok else 0.01


def report(title: str, p: F64, data: Rendered, threshold: float) -> None:
    """Late and false stops overall, per band, per engine, per voice and per class."""
    sentence = np.array([k != "ambiguous" for k in data.kinds])
    y = data.labels
    late, false_stop = rates(p[sentence], y[sentence], threshold)
    late_all, _ = rates(p, y, threshold)
    acc = float(np.mean((p[sentence] >= threshold) == (y[sentence] == 1)))
    print(
        f"\n{title}, threshold {threshold:.2f}: accuracy {100 * acc:.1f}%, late stops "
        f"{100 * late:.1f}% (with the ambiguous openings {100 * late_all:.1f}%), "
        f"false stops {100 * false_stop:.1f}%"
    )
    for name, band in (("wideband", False), ("phone", True)):
        ls, fs = rates(
            p[sentence & (data.phone == band)], y[sentence & (data.phone == band)], threshold
        )
        print(f"  {name}: late stops {100 * ls:.1f}%, false stops {100 * fs:.1f}%")
    voices = np.array(data.voices)
    for engine in ("piper", "espeak", "flite", "synth"):
        m = sentence & np.char.startswith(voices, engine)
        if m.any():
            ls, fs = rates(p[m], y[m], threshold)
            print(f"  {engine}: late stops {100 * ls:.1f}%, false stops {100 * fs:.1f}%")
    per_voice = []
    for voice in sorted(set(data.voices) - {"synth"}):
        m = sentence & (voices == voice)
        ls, fs = rates(p[m], y[m], threshold)
        per_voice.append(f"{voice} {100 * ls:.0f}/{100 * fs:.0f}")
    print("  per voice (late/false %): " + ", ".join(per_voice))
    kinds = np.array(data.kinds)
    per_class = []
    for kind in sorted(set(data.kinds)):
        m = kinds == kind
        wrong = p[m] < threshold if y[m][0] == 1 else p[m] >= threshold
        per_class.append(f"{kind} {100 * wrong.mean():.1f}% (n={m.sum()})")
    print("  wrong per class: " + "; ".join(per_class))


def split_texts() -> tuple[list[str], list[str]]:
    """(training sentences, held-out sentences): a fifth of the texts is never trained on."""
    all_texts = sentences()
    order = np.random.default_rng(SEED).permutation(len(all_texts))
    held = [all_texts[i] for i in sorted(order[: len(all_texts) // 5])]
    train = [all_texts[i] for i in sorted(order[len(all_texts) // 5 :])]
    return train, held


def kept_on_by(first: oc.OnsetClassifier | None, data: Rendered) -> npt.NDArray[np.bool_]:
    """Which windows the first look took for feedback (none without a first look)."""
    if first is None:
        return np.zeros(len(data.audio), np.bool_)
    return np.array(
        [
            first.probability_of_features(oc.features(a, first.window_seconds)) >= first.threshold
            for a in data.audio
        ]
    )


def choose_second_look_threshold(
    p: F64, y: npt.NDArray[np.int64], first_kept_on: npt.NDArray[np.bool_], max_added: float
) -> float:
    """The highest threshold at which the feedback the first look kept talking through
    and this model stops stays within ``max_added`` of all the feedback."""
    feedback = y == 1
    grid = np.linspace(0.01, 0.99, 99)
    ok = [
        float(t)
        for t in grid
        if np.sum(feedback & first_kept_on & (p < t)) <= max_added * max(feedback.sum(), 1)
    ]
    return max(ok) if ok else 0.01


def report_second_look(
    p: F64, data: Rendered, first_kept_on: npt.NDArray[np.bool_], threshold: float
) -> None:
    """What the second look adds to the first: late stops it catches, false stops it adds."""
    clear = np.array([k != "ambiguous" for k in data.kinds])
    sentence = clear & (data.labels == 0)
    feedback = data.labels == 1
    missed = sentence & first_kept_on
    caught = missed & (p < threshold)
    added = feedback & first_kept_on & (p < threshold)
    print(
        f"  second look at threshold {threshold:.2f}: catches {caught.sum()} of the "
        f"{missed.sum()} sentence onsets the first look took for feedback "
        f"({100 * caught.sum() / max(missed.sum(), 1):.0f}%), adds {added.sum()} false stops "
        f"of {feedback.sum()} feedback windows ({100 * added.sum() / max(feedback.sum(), 1):.1f}%)"
    )
    voices = np.array(data.voices)
    for engine in ("espeak", "flite"):
        m = np.char.startswith(voices, engine)
        print(
            f"    {engine}: catches {np.sum(caught & m)} of {np.sum(missed & m)}, "
            f"adds {np.sum(added & m)} of {np.sum(feedback & m)}"
        )


def main() -> None:
    global WINDOW
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "rj-onset")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--second-look",
        action="store_true",
        help="train the second look's model (a longer window, judged after the first)",
    )
    parser.add_argument("--window", type=float, default=None, help="seconds (0.3; 0.5 second look)")
    parser.add_argument(
        "--max-added-false-stop",
        type=float,
        default=MAX_ADDED_FALSE_STOP,
        help="second look's threshold choice: false stops it may add to the first look's, "
        "as a share of the validation feedback",
    )
    parser.add_argument(
        "--max-false-stop",
        type=float,
        default=MAX_FALSE_STOP,
        help="threshold choice: the highest threshold whose false-stop rate "
        "on the validation voices stays within this",
    )
    parser.add_argument(
        "--benchmark",
        action="store_true",
        help="also score the benchmark's voices (a final check only: nothing is chosen with them)",
    )
    args = parser.parse_args()
    WINDOW = args.window or (SECOND_LOOK_WINDOW if args.second_look else WINDOW)
    if args.out is None:
        args.out = oc.SECOND_LOOK_WEIGHTS_PATH if args.second_look else oc.WEIGHTS_PATH
    first = oc.OnsetClassifier() if args.second_look else None
    started = time.perf_counter()

    train_texts, held_texts = split_texts()
    print(f"{len(train_texts)} training sentences, {len(held_texts)} held-out sentences")
    print(f"synthesizing {len(TRAIN_VOICES)} training voices")
    train_src = build_sources(TRAIN_VOICES, train_texts, args.cache, SEED + 1, n_sounds=900)
    train_src = [s for s in train_src if s.kind != "ambiguous"]
    print(f"synthesizing {len(VALIDATION_VOICES)} validation voices")
    val_src = build_sources(VALIDATION_VOICES, held_texts, args.cache, SEED + 2, n_sounds=400)
    babble_train = [s.clip for s in train_src if s.kind == "sentence"]
    babble_val = [s.clip for s in val_src if s.kind == "sentence"]

    t0 = time.perf_counter()
    fit = render(train_src, np.random.default_rng(SEED + 4), {0: 2, 1: 5}, babble_train, train=True)
    val = render(val_src, np.random.default_rng(SEED + 5), {0: 2, 1: 3}, babble_val, train=False)
    x_fit, x_val = featurize(fit), featurize(val)
    # The second look is asked only where the first look kept talking.
    first_kept_on = kept_on_by(first, val)
    # The ambiguous openings ("yeah but...") are scored, never fitted or early-stopped on.
    clear = np.array([k != "ambiguous" for k in val.kinds])
    print(
        f"features: {len(fit.labels)} training rows ({fit.labels.mean():.2f} positive), "
        f"{len(val.labels)} validation rows, {x_fit.shape[1]} features, "
        f"{time.perf_counter() - t0:.0f} s"
    )

    models = []
    for k in range(SEEDS):
        model, epoch, loss = train_mlp(
            x_fit, fit.labels, x_val[clear], val.labels[clear], SEED + 6 + k
        )
        print(f"  seed {k}: best validation loss {loss:.3f} after epoch {epoch + 1}")
        models.append(model)
    chosen = ensemble(models)
    p_val = chosen.proba(x_val)
    if first is None:
        threshold = choose_threshold(p_val[clear], val.labels[clear], args.max_false_stop)
    else:
        threshold = choose_second_look_threshold(
            p_val[clear], val.labels[clear], first_kept_on[clear], args.max_added_false_stop
        )
    p_fit = chosen.proba(x_fit)
    fit_accuracy = float(np.mean((p_fit >= threshold) == (fit.labels == 1)))
    print(f"\ntraining voices: accuracy {100 * fit_accuracy:.1f}%")
    report("validation voices (they chose the epoch and the threshold)", p_val, val, threshold)
    if first is not None:
        report_second_look(p_val, val, first_kept_on, threshold)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        config=np.array(
            [oc.FEATURE_RATE, oc.FRAME, oc.HOP, oc.N_FFT, oc.N_MELS, oc.SEGMENT, oc.N_SHAPE],
            np.float64,
        ),
        window_seconds=np.float64(WINDOW),
        threshold=np.float64(threshold),
        mean=chosen.mean.astype(np.float32),
        scale=chosen.scale.astype(np.float32),
        w1=chosen.w1.astype(np.float32),
        b1=chosen.b1.astype(np.float32),
        w2=chosen.w2.astype(np.float32),
        b2=np.float64(chosen.b2),
    )
    # The shipped file must give the numbers printed above: check through the module.
    shipped = oc.OnsetClassifier(weights_path=args.out)
    p_mod = np.array([shipped.probability_of_features(v) for v in x_val[:50]])
    assert np.allclose(p_val[:50], p_mod, atol=1e-4), "the saved weights disagree with the model"
    print(
        f"\nwrote {args.out} ({args.out.stat().st_size} bytes), window {WINDOW} s, "
        f"threshold {threshold:.2f}"
    )

    if args.benchmark:
        bench_src = build_sources(BENCHMARK_VOICES, held_texts, args.cache, SEED + 7, 0)
        bench = render(
            bench_src,
            np.random.default_rng(SEED + 8),
            {0: 2, 1: 3},
            [s.clip for s in bench_src if s.kind == "sentence"],
            train=False,
        )
        p_bench = chosen.proba(featurize(bench))
        report("benchmark voices (final check, chose nothing)", p_bench, bench, threshold)
        if first is not None:
            report_second_look(p_bench, bench, kept_on_by(first, bench), threshold)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
