"""Offline recognizers on several voices, wideband and through a phone line: word error,
decode time and CPU per utterance.

    python bench/recognition.py [--candidates tiny.en,base] [--voices piper,en-us]
                                [--bands wide,phone] [--limit 30] [--out result.json]

The utterances are the ~30 short requests below (commands, questions, statements),
spoken by Piper (``local.PiperTTS()``, the joe voice) and by eSpeak NG voices and
variants (``local.EspeakTTS(voice=...)``). Synthesis is cached under the system
temporary directory. Each clip is trimmed to its speech (10 ms blocks louder than -40 dB
below its peak) and handed over as the session would: 0.3 s of pre-roll before the
speech and 0.12 s of silence after it (the user's first pause), in 20 ms frames.

Bands:

* ``wide``: 16 kHz PCM, as from a microphone.
* ``phone``: resampled to 8 kHz and G.711 μ-law encoded and decoded
  (``rejoinder.models.g711``), then handed to the recognizer *at 8 kHz*, as a phone call
  gives it; the recognizer does its own resampling.
* ``narrow`` and ``wide-ulaw`` (``--bands``), to tell the two apart: 8 kHz linear PCM
  (the phone's band without μ-law), and μ-law at 16 kHz (μ-law without the band).

Word error is the word-level edit distance over the reference's word count, after a
small normalizer: lowercase, punctuation dropped (apostrophes inside words kept, hyphens
are spaces), and the numbers 0-20 written as words, so "5" and "five" are the same word.

Per recognizer and band: the word error rate per voice and over all; decode wall time
(median and p90 over every utterance, and over the 2-3 s ones); CPU seconds per utterance
(``time.process_time``: every thread of this process, so run nothing else in it). The
model is loaded and warmed up on one utterance before timing. Candidates (``--candidates``,
comma-separated; see ``CANDIDATES``) are Whisper models from wheels with decoding options,
and PocketSphinx for reference. Run it on a quiet machine: the times are this machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from _fakes import percentile as sorted_percentile
from _words import word_errors
from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.models.stt import STT

SENTENCES = (
    "Set a timer for five seconds.",
    "I need to change my booking.",
    "What's the weather in London?",
    "Can you call me back in ten minutes?",
    "Cancel my appointment for tomorrow.",
    "I'd like to speak to someone about my bill.",
    "Turn the volume down a little.",
    "Where is the nearest train station?",
    "My order hasn't arrived yet.",
    "Please send me the receipt by email.",
    "How much does the premium plan cost?",
    "I want to book a room for three nights.",
    "Is the store open on Sunday?",
    "That's not what I asked for.",
    "Could you repeat that, please?",
    "Move the meeting to Thursday afternoon.",
    "I lost my card this morning.",
    "What time is my flight?",
    "Add two bottles of water to the list.",
    "Yes, that sounds good to me.",
    "No, I said the other one.",
    "Remind me to water the plants.",
    "Do you have any tables for four tonight?",
    "I'm calling about a delivery problem.",
    "Switch off the lights in the bedroom.",
    "How do I reset my password?",
    "The package was left at the wrong address.",
    "Wake me up at six in the morning.",
    "Can I pay with a credit card?",
    "Thanks, that's all I needed.",
)

PIPER = "piper"
VOICES = (PIPER, "en-us", "en-us+m3", "en+f3", "en-gb-x-rp+m7")
"""Piper's joe voice and eSpeak NG voices with variants (``voice+variant``; ``en`` is
British English)."""

WIDE_RATE, PHONE_RATE = 16000, 8000
BANDS = ("wide", "phone", "narrow", "wide-ulaw")
PRE_ROLL, TAIL = 0.3, 0.12


# ------------------------------------------------------------------------ scoring


def percentile(values: Sequence[float], q: float) -> float:
    return sorted_percentile(sorted(values), q)


# ------------------------------------------------------------------------- speech


@dataclass(frozen=True)
class Utterance:
    text: str
    voice: str
    pcm: np.ndarray  # int16 at the synthesizer's rate, trimmed to the speech
    rate: int

    @property
    def seconds(self) -> float:
        return self.pcm.size / self.rate


def _trim(pcm: np.ndarray, rate: int) -> np.ndarray:
    block = rate // 100
    n = pcm.size // block
    rms = np.sqrt(np.mean(pcm[: n * block].astype(np.float64).reshape(n, block) ** 2, axis=1))
    loud = np.nonzero(rms > rms.max() * 10 ** (-40 / 20))[0]
    return pcm[loud[0] * block : (loud[-1] + 1) * block]


async def synthesize(voices: Sequence[str], sentences: Sequence[str]) -> list[Utterance]:
    """Every sentence in every voice (cached on disk)."""
    from rejoinder.models.tts import TTS
    from rejoinder.providers.local import EspeakTTS, PiperTTS

    folder = os.path.join(tempfile.gettempdir(), "rejoinder-bench-recognition")
    os.makedirs(folder, exist_ok=True)
    out: list[Utterance] = []
    for voice in voices:
        tts: TTS | None = None
        for text in sentences:
            key = hashlib.sha1(f"{voice}\n{text}".encode()).hexdigest()[:16]
            path = os.path.join(folder, key + ".npz")
            if not os.path.exists(path):  # noqa: ASYNC240 - a benchmark's set-up
                if tts is None:
                    tts = PiperTTS(first_clause=False) if voice == PIPER else EspeakTTS(voice=voice)
                frames = [f async for f in tts.synthesize(text)]
                pcm = np.concatenate([f.data for f in frames])
                np.savez(path, pcm=pcm, rate=frames[0].sample_rate)
            saved = np.load(path)
            rate = int(saved["rate"])
            out.append(Utterance(text, voice, _trim(saved["pcm"], rate), rate))
        if tts is not None:
            await tts.aclose()
    return out


async def panel_utterances(half_name: str) -> list[Utterance]:
    """The panel's commands and questions (``bench/panel``), each in every voice of that
    half that is installed (Piper, eSpeak NG, Debian's flite)."""
    from _conversation_audio import RATE, speak, voice_available
    from panel import HALVES

    half = HALVES.get(half_name)
    if half is None:
        raise SystemExit(f"no panel half {half_name!r} (halves: {sorted(HALVES)})")
    out: list[Utterance] = []
    for voice in half.voices:
        if not voice_available(voice):
            print(f"skipping voice {voice.id}: not installed", file=sys.stderr)
            continue
        for item in half.items:
            if item.kind in ("command", "question"):
                pcm = await speak(voice, item.reference)
                out.append(Utterance(item.reference, voice.id, _trim(pcm, RATE), RATE))
    return out


def band_frames(utterance: Utterance, band: str) -> list[AudioFrame]:
    """The utterance with pre-roll and tail, in 20 ms frames of the band's rate."""
    rate = WIDE_RATE if band.startswith("wide") else PHONE_RATE
    speech = resample(AudioFrame(utterance.pcm, utterance.rate), rate).data
    if band in ("phone", "wide-ulaw"):
        speech = g711.ulaw_decode(g711.ulaw_encode(speech))
    pcm = np.concatenate(
        [np.zeros(round(PRE_ROLL * rate), np.int16), speech, np.zeros(round(TAIL * rate), np.int16)]
    )
    step = rate // 50
    return [AudioFrame(pcm[i : i + step], rate) for i in range(0, pcm.size, step)]


# --------------------------------------------------------------------- candidates


def _whisper(**options: Any) -> Callable[[], STT]:
    def make() -> STT:
        from rejoinder.providers.local import WhisperSTT

        return WhisperSTT(**options)

    return make


def _pocketsphinx() -> STT:
    from rejoinder.providers.local import PocketSphinxSTT

    return PocketSphinxSTT()


CANDIDATES: dict[str, Callable[[], STT]] = {
    "tiny.en": _whisper(),  # WhisperSTT() as shipped: tiny.en, beam 5
    "tiny.en-greedy": _whisper(model="tiny.en", beam_size=1),
    "tiny.en-beam3": _whisper(model="tiny.en", beam_size=3),
    "tiny.en-beam5": _whisper(model="tiny.en", beam_size=5),
    "tiny.en-greedy-30s": _whisper(model="tiny.en", beam_size=1, min_window=30.0),
    "base": _whisper(model="base", language="en", beam_size=1),
    "base-beam5": _whisper(model="base", language="en", beam_size=5),
    "base-30s": _whisper(model="base", language="en", beam_size=1, min_window=30.0),
    "base-6s": _whisper(model="base", language="en", beam_size=1, min_window=6.0),
    "pocketsphinx": _pocketsphinx,
}


# -------------------------------------------------------------------------- bench


@dataclass
class _Tally:
    errors: dict[str, list[int]] = field(default_factory=dict)  # voice -> [errors, words]
    wall: list[float] = field(default_factory=list)
    short_wall: list[float] = field(default_factory=list)  # 2-3 s utterances
    cpu: list[float] = field(default_factory=list)
    misheard: list[tuple[str, str, str]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        total_e = sum(e for e, _ in self.errors.values())
        total_n = sum(n for _, n in self.errors.values())
        short = self.short_wall
        return {
            "wer": round(total_e / total_n, 4),
            "wer_per_voice": {v: round(e / n, 4) for v, (e, n) in self.errors.items()},
            "decode_ms": {
                "median": round(statistics.median(self.wall) * 1000, 1),
                "p90": round(percentile(self.wall, 90) * 1000, 1),
            },
            "decode_ms_2_to_3_s": {
                "n": len(short),
                "median": round(statistics.median(short) * 1000, 1) if short else None,
                "p90": round(percentile(short, 90) * 1000, 1) if short else None,
            },
            "cpu_s_per_utterance": round(statistics.mean(self.cpu), 3),
            "misheard": self.misheard,
        }


async def measure(
    names: Sequence[str], utterances: Sequence[Utterance], bands: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Every candidate on every utterance. The candidates take turns on each utterance,
    so that a change in the machine's load shows in all of them alike."""
    stts = {name: CANDIDATES[name]() for name in names}
    for stt in stts.values():
        load = getattr(stt, "load", None)
        if load is not None:
            await load()
        await stt.recognize(band_frames(utterances[0], bands[0]))  # warm up
    tallies = {(name, band): _Tally() for name in names for band in bands}
    for band in bands:
        for utterance in utterances:
            frames = band_frames(utterance, band)
            for name, stt in stts.items():
                tally = tallies[name, band]
                c0, t0 = time.process_time(), time.perf_counter()
                heard = await stt.recognize(frames)
                seconds = time.perf_counter() - t0
                tally.cpu.append(time.process_time() - c0)
                tally.wall.append(seconds)
                if 2.0 <= utterance.seconds <= 3.0:
                    tally.short_wall.append(seconds)
                e, n = word_errors(utterance.text, heard)
                counts = tally.errors.setdefault(utterance.voice, [0, 0])
                counts[0] += e
                counts[1] += n
                if e:
                    tally.misheard.append((utterance.voice, utterance.text, heard))
        print(f"{band}: done", file=sys.stderr, flush=True)
    for stt in stts.values():
        await stt.aclose()
    return {name: {band: tallies[name, band].summary() for band in bands} for name in names}


def table(results: dict[str, dict[str, Any]], voices: Sequence[str]) -> str:
    head = ["candidate", "band", "WER", *voices, "med ms", "p90 ms", "2-3s med", "CPU s"]
    rows = [head]
    for name, bands in results.items():
        for band, r in bands.items():
            rows.append(
                [
                    name,
                    band,
                    f"{r['wer'] * 100:.1f}%",
                    *(f"{r['wer_per_voice'].get(v, float('nan')) * 100:.1f}%" for v in voices),
                    f"{r['decode_ms']['median']:.0f}",
                    f"{r['decode_ms']['p90']:.0f}",
                    f"{r['decode_ms_2_to_3_s']['median'] or 0:.0f}",
                    f"{r['cpu_s_per_utterance']:.3f}",
                ]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    voices = [v for v in args.voices.split(",") if v]
    bands = [b for b in args.bands.split(",") if b]
    if unknown := set(bands) - set(BANDS):
        raise SystemExit(f"unknown bands: {sorted(unknown)}")
    names = [c for c in args.candidates.split(",") if c]
    if unknown := set(names) - set(CANDIDATES):
        raise SystemExit(f"unknown candidates: {sorted(unknown)} (known: {sorted(CANDIDATES)})")
    if args.panel:
        utterances = await panel_utterances(args.panel)
        voices = list(dict.fromkeys(u.voice for u in utterances))
    else:
        utterances = await synthesize(voices, SENTENCES[: args.limit])
    lengths = [u.seconds for u in utterances]
    results = await measure(names, utterances, bands)
    print(table(results, voices), file=sys.stderr)
    return {
        "bench": "recognition",
        "utterances": len(utterances),
        "speech_seconds": {"median": round(statistics.median(lengths), 2), "max": max(lengths)},
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--candidates", default="tiny.en-greedy,tiny.en,base")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--bands", default="wide,phone")
    parser.add_argument("--limit", type=int, default=len(SENTENCES), help="sentences per voice")
    parser.add_argument(
        "--panel",
        help="the commands and questions of this half of bench/panel (tuning, held_out) "
        "in its voices, instead of SENTENCES and --voices",
    )
    parser.add_argument("--out", help="also write the JSON result to this file")
    args = parser.parse_args()
    result = asyncio.run(bench(args))
    text = json.dumps(result, separators=(",", ":"))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            file.write(text)
    print(text)


if __name__ == "__main__":
    main()
