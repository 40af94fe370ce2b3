"""Smart Turn v3: an end-of-turn classifier on the user's audio, offline, on the CPU.

Smart Turn (https://github.com/pipecat-ai/smart-turn, by Daily) is a Whisper-encoder
based model that hears whether a speaker finished their turn from the last up to 8 s of
their audio: intonation, pace, and how the words end, in 23 languages. Its weights are
open under the BSD 2-Clause licence, like the training code and data ("a truly open
model (BSD 2-clause license)", the project's README; the HuggingFace model card
pipecat-ai/smart-turn-v3 says the same). The quantized CPU build, ``smart-turn-v3.2-cpu.onnx``
(8.7 MB), ships inside the ``pipecat-ai`` wheel (also BSD-2-Clause), which is installed
*without* its dependencies and never imported — the file is found through the wheel's
installed-files record::

    pip install onnxruntime==1.31.1 faster-whisper==1.2.1   # in rejoinder[local]
    pip install --no-deps pipecat-ai==1.14.0

The model's input is Whisper's 80-bin log-mel spectrogram of exactly 8 s of 16 kHz audio
(the turn's end, zero-padded in front when shorter, normalised to zero mean and unit
variance first). The features come from faster-whisper's own extractor, which we already
use for Whisper, with an 8 s chunk (its output matches the transformers extractor the
model was trained with to ~1e-7). The model returns the probability that the turn is
complete.

Cost (``bench/smart_turn.py``, 2-vCPU EPYC VM, median per decision through
``probability()``): 18.6 ms with two onnxruntime threads when numpy's BLAS uses one
thread (``OPENBLAS_NUM_THREADS=1``, which ``rejoinder serve``, ``dev`` and ``console``
set), 37 ms with one. With BLAS's own threads (numpy's default) two onnxruntime threads
are slower, 60 ms, and one takes 38.6 ms: the features' matrix product wakes BLAS
threads that spin on the same two cores. So ``cpu_threads`` defaults to 2 only where
BLAS is held to one thread.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ... import _extras
from ...models.audio import AudioFrame
from ...models.turn_detector import TurnDetector, TurnDetectorError
from .model_worker import ModelWorker
from .whisper import _utterance_float32
from .whisper_files import _hub_offline

SAMPLE_RATE = 16000
WINDOW_SECONDS = 8
MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
_DISTRIBUTION = "pipecat-ai"
_PIP_PIPECAT = "pip install --no-deps pipecat-ai==1.14.0"
_NORM_EPS = 1e-7  # the variance floor of the normalisation the model was trained with

Float32 = npt.NDArray[np.float32]


class _InferenceSession(Protocol):
    def run(self, outputs: None, feeds: dict[str, Float32]) -> list[Any]: ...


def model_path() -> Path:
    """The ONNX file inside the installed pipecat-ai wheel (found without importing it)."""
    try:
        distribution = importlib.metadata.distribution(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise TurnDetectorError(
            f"SmartTurn needs the model file from the pipecat-ai wheel: {_PIP_PIPECAT}"
        ) from None
    for file in distribution.files or ():
        if file.name == MODEL_FILE:
            path = Path(str(distribution.locate_file(file)))
            if path.is_file():
                return path
    raise TurnDetectorError(
        f"the installed pipecat-ai ({distribution.version}) has no {MODEL_FILE}; "
        f"install the tested version: {_PIP_PIPECAT}"
    )


class SmartTurn(TurnDetector):
    """``AgentSession(turn_detection=local.SmartTurn(), ...)``.

    Use it with a VAD that ends utterances quickly (``SileroVAD(min_silence_duration=
    0.2)``): the model, not the length of the silence, tells a finished turn from a
    pause, so a short silence costs nothing but saves its length on every turn.
    """

    max_audio_seconds = float(WINDOW_SECONDS)
    # A "complete" at the first pause stands when only quiet follows: see turn_verdict.
    judges_early = True

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        model_path: str | Path | None = None,
        cpu_threads: int | None = None,
    ) -> None:
        """
        Args:
            threshold: a probability at or above this is a complete turn. Lower ends
                turns sooner (and cuts more people off); higher waits more often.
            model_path: another Smart Turn v3 ONNX file (same input and output).
            cpu_threads: onnxruntime's threads for one judgement; by default 2 when
                numpy's BLAS is held to one thread (``OPENBLAS_NUM_THREADS=1``) and there
                are two cores or more, else 1 (see the measurements above).
        """
        if not 0.0 < threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        if cpu_threads is None:
            cpu_threads = _default_threads()
        if cpu_threads < 1:
            raise ValueError("cpu_threads must be at least 1")
        self.threshold = threshold
        self.model_path = Path(model_path) if model_path is not None else None
        self.cpu_threads = cpu_threads
        self._session: _InferenceSession | None = None
        self._extractor: Any = None
        self._load_lock = threading.Lock()  # any loop, any thread may load

    @property
    def loaded(self) -> bool:
        return self._session is not None

    async def warm_up(self) -> None:
        await asyncio.to_thread(self._ensure_loaded)

    async def probability(self, frames: Sequence[AudioFrame], transcript: str = "") -> float:
        # One hop to the engine's own thread (shared by every session's SmartTurn, like
        # the engine): resampling, features and the model (~30 ms).
        return await _worker_for(self._worker_key).run(self.judge, list(frames))

    async def aclose(self) -> None:
        self._session = None

    # ------------------------------------------------------------- worker threads

    def judge(self, frames: Sequence[AudioFrame]) -> float:
        """The probability for ``frames``, computed in the calling thread."""
        audio = _utterance_float32(frames)
        if audio.size == 0:
            raise TurnDetectorError("no audio to judge")
        session, extractor = self._ensure_loaded()
        features = self.features(audio, extractor)
        try:
            outputs = session.run(None, {"input_features": features[np.newaxis]})
            value = float(np.asarray(outputs[0]).reshape(-1)[0])
        except Exception as exc:
            raise TurnDetectorError(f"Smart Turn inference failed: {exc}") from exc
        if not 0.0 <= value <= 1.0:  # a sigmoid output; anything else is a wrong model
            raise TurnDetectorError(f"Smart Turn returned {value}, not a probability")
        return value

    @staticmethod
    def features(audio: Float32, extractor: Any) -> Float32:
        """80 x 800 log-mel features of the last 8 s of ``audio`` (16 kHz mono)."""
        size = SAMPLE_RATE * WINDOW_SECONDS
        window = np.zeros(size, np.float32)
        tail = audio[-size:]
        window[size - tail.size :] = tail  # the end of the turn, silence in front
        window = (window - window.mean()) / np.sqrt(window.var() + _NORM_EPS)
        # padding=0: the window is already the model's length; the extractor's centred
        # STFT gives 801 frames and drops the last, as Whisper's does.
        mel = extractor(window, padding=0)
        return np.ascontiguousarray(mel, dtype=np.float32)

    def _ensure_loaded(self) -> tuple[_InferenceSession, Any]:
        with self._load_lock:
            if self._session is None or self._extractor is None:
                path = self.model_path if self.model_path is not None else model_path()
                key = (str(path), self.cpu_threads)
                # One engine per model and thread count in the process: every session's
                # SmartTurn shares it, and its thread (_worker_for).
                with _ENGINES_LOCK:
                    if key not in _ENGINES:
                        _ENGINES[key] = (self._load_session(), _load_extractor())
                    self._session, self._extractor = _ENGINES[key]
            return self._session, self._extractor

    @property
    def _worker_key(self) -> tuple[str, int]:
        """Its engine's, without looking for the default file on the loop ("")."""
        return (str(self.model_path or ""), self.cpu_threads)

    def _load_session(self) -> _InferenceSession:
        with _extras.needed("local", "SmartTurn", error=TurnDetectorError):
            import onnxruntime  # type: ignore[import-untyped]  # ships no type information
        path = self.model_path if self.model_path is not None else model_path()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.cpu_threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        try:
            session: _InferenceSession = onnxruntime.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise TurnDetectorError(f"could not load the Smart Turn model {path}: {exc}") from exc
        return session


_ENGINES: dict[tuple[str, int], tuple[_InferenceSession, Any]] = {}
_ENGINES_LOCK = threading.Lock()
_WORKERS: dict[tuple[str, int], ModelWorker] = {}
"""One thread per engine: concurrent judgements of one engine each ran on its threads at
once (two sessions' verdicts, two intra-op threads each, on two cores)."""


def _worker_for(key: tuple[str, int]) -> ModelWorker:
    with _ENGINES_LOCK:
        worker = _WORKERS.get(key)
        if worker is None:
            worker = _WORKERS[key] = ModelWorker("smart-turn")
        return worker


def _default_threads() -> int:
    one_blas_thread = os.environ.get("OPENBLAS_NUM_THREADS") == "1"
    return 2 if one_blas_thread and (os.cpu_count() or 1) >= 2 else 1


def _load_extractor() -> Any:
    # faster-whisper's import reads the hub's settings once
    with _extras.needed("local", "SmartTurn", error=TurnDetectorError), _hub_offline():
        from faster_whisper.feature_extractor import (  # type: ignore[import-untyped]
            FeatureExtractor,
        )
    return FeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE, chunk_length=WINDOW_SECONDS)
