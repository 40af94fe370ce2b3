"""Silero VAD (MIT) on onnxruntime, offline, without torch.

The model comes inside the ``silero-vad`` wheel, installed without its torch dependency::

    pip install onnxruntime==1.31.1
    pip install --no-deps silero-vad==6.2.3

``import silero_vad`` needs torch, so the package is never imported: its ``data/``
folder is located with ``importlib.util.find_spec`` and the ONNX file loaded directly.

The model judges 512-sample windows (32 ms) of 16 kHz audio, each with the previous 64
samples prepended as context, carrying an LSTM state from window to window. Streams take
frames at any rate and channel count: they are mixed down to mono, resampled to 16 kHz
(soxr, which adds about 20-30 ms of delay for other rates) and cut into windows.

The file used is ``silero_vad_16k_sequence.onnx``: for the same feeding its probabilities
are bit-identical to the default ``silero_vad.onnx`` (checked on speech), it runs one
window about 20 % faster (it has no 8 kHz branch), and it also accepts several windows
per call. With ``batch_windows=1`` (the default) every window is judged as soon as it is
complete. With ``batch_windows=n`` the stream waits for ``n`` windows and judges them in
one call: cheaper per window, but an event can come up to ``n - 1`` windows
(``(n - 1) * 32`` ms) later than it would one window at a time. The events themselves are
the same.

Cost (``bench/vad_cpu.py``, 20 streams, on a 2-vCPU EPYC box shared with other work):
one window at a time takes 124-156 µs of CPU per 20 ms of audio (about 200-250 µs per
window, nearly all of it inside onnxruntime), so it does NOT meet a 100 µs per 20 ms
budget there. ``batch_windows=4`` takes 66-90 µs (up to 96 ms later events) and
``batch_windows=10`` 58-78 µs (up to 288 ms later).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import threading
from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from ... import _extras
from ...models.audio import PCM16, AudioFrame
from ...models.audio_utils import FrameRebuffer, Resampler
from ...models.vad import VAD, VADEvent, VADStream

SAMPLE_RATE = 16000
WINDOW = 512
"""Samples the model judges per call and row (32 ms at 16 kHz)."""
CONTEXT = 64
"""Samples of the previous window prepended to each window."""
WINDOW_SECONDS = WINDOW / SAMPLE_RATE
MODEL_FILE = "silero_vad_16k_sequence.onnx"

# The background gate (``noise_gate_db``): the background level is a low percentile of the
# windows' levels over the last few seconds (the pauses between words sink to it, so a
# talker does not raise it), checked once enough audio was heard.
_GATE_HISTORY = 12.0
_GATE_MIN_HISTORY = 1.0
_GATE_PERCENTILE = 10.0
_GATE_EVERY = 16  # windows between two estimates of the background (0.5 s)
_QUIET_BACKGROUND_DBFS = -60.0
"""A background quieter than this is a quiet room or a phone line: the gate stays open."""
_GATE_HYSTERESIS = 4.0  # dB: speech goes on down to the threshold less this
_GATE_MIN_SPEECH = 8
"""Windows (0.256 s) of loud speech that start an utterance while the gate is closed: the
crowd's own peaks rise over it too, but briefly."""
_GATE_QUIETEST = 20.0
_GATE_SPEECHY = 0.5
"""The gate closes only when the quietest fifth of the windows is, on average, this likely
speech to the model: the background itself sounds like talk (babble)."""

_ONNXRUNTIME = "onnxruntime==1.31.1"
_PIP_SILERO = "pip install --no-deps silero-vad==6.2.3"


Float32 = npt.NDArray[np.float32]


class InferenceSession(Protocol):
    """What a stream needs of ``onnxruntime.InferenceSession`` (a test can fake it)."""

    def run(
        self, output_names: list[str] | None, input_feed: dict[str, Float32], /
    ) -> Sequence[Float32]: ...


def model_path() -> str:
    """The ONNX file inside the installed silero-vad wheel (without importing it)."""
    spec = importlib.util.find_spec("silero_vad")
    locations = spec.submodule_search_locations if spec is not None else None
    if not locations:
        raise RuntimeError(f"SileroVAD needs the silero-vad wheel (without torch): {_PIP_SILERO}")
    path = os.path.join(next(iter(locations)), "data", MODEL_FILE)
    if not os.path.isfile(path):
        raise RuntimeError(
            f"the installed silero-vad has no {MODEL_FILE}; install the tested version: "
            f"{_PIP_SILERO}"
        )
    return path


@functools.cache
def _load_session() -> InferenceSession:
    """One engine per process: every ``SileroVAD`` and stream shares it (the model is
    stateless, each stream passes its own state, and onnxruntime runs concurrent calls
    safely), so a new session does not load the model again."""
    with _extras.needed("local", "SileroVAD", error=RuntimeError, packages=_ONNXRUNTIME):
        import onnxruntime  # type: ignore[import-untyped]  # ships no type information
    path = model_path()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only
    session: InferenceSession = onnxruntime.InferenceSession(
        path, sess_options=options, providers=["CPUExecutionProvider"]
    )
    return session


def _windows(seconds: float) -> int:
    """At least ``seconds``, in whole windows (and at least one)."""
    return max(1, math.ceil(seconds / WINDOW_SECONDS - 1e-9))


class SileroVAD(VAD):
    """Silero voice activity detection.

    A window whose speech probability reaches ``activation_threshold`` is speech, and
    speech continues until a window falls below ``deactivation_threshold`` (hysteresis).
    Speech starts after ``min_speech_duration`` seconds of consecutive speech windows and
    ends after ``min_silence_duration`` seconds of non-speech windows; both are rounded up
    to whole 32 ms windows. A pause shorter than ``min_silence_duration`` inside speech
    counts as speech. ``batch_windows`` trades latency for CPU (see the module docstring).

    ``noise_gate_db``: in a noisy room a window is speech only if it is also this many
    dB louder than the background (a low percentile of the last 12 s). Silero hears
    babble (other people talking) as speech, so in a café the user's turn never ended;
    the person talking *to* the agent is nearer and louder than the crowd, and their
    speech ends when the level falls back to it. The gate is open while the background
    is under -60 dBFS (a quiet room, a phone line), in the first second of a stream and
    with ``None``.

    The default silence (0.3 s, 10 windows) stays under the session's default
    ``min_endpointing_delay`` (0.4 s, counted from the end of speech), so the VAD is sure
    the user stopped before the turn may end, and does not add to that delay. Silero's
    probability falls 50-80 ms after the last word, so the VAD reports the end about
    0.38 s after it.

    One onnxruntime session (one thread) is created on the first ``stream()`` and shared
    by every stream of this object; each stream has its own model state.
    """

    def __init__(
        self,
        *,
        activation_threshold: float = 0.5,
        deactivation_threshold: float = 0.35,
        min_speech_duration: float = 0.1,
        min_silence_duration: float = 0.3,
        batch_windows: int = 1,
        noise_gate_db: float | None = 8.0,
    ) -> None:
        if not 0.0 < deactivation_threshold <= activation_threshold <= 1.0:
            raise ValueError(
                "need 0 < deactivation_threshold <= activation_threshold <= 1, got "
                f"{deactivation_threshold} and {activation_threshold}"
            )
        if min_speech_duration < 0 or min_silence_duration < 0:
            raise ValueError("durations must not be negative")
        if batch_windows < 1:
            raise ValueError(f"batch_windows must be at least 1, got {batch_windows}")
        if noise_gate_db is not None and not 0.0 <= noise_gate_db <= 40.0:
            raise ValueError(f"noise_gate_db must be within 0-40 dB or None, got {noise_gate_db}")
        self.activation_threshold = activation_threshold
        self.deactivation_threshold = deactivation_threshold
        self.min_speech_duration = min_speech_duration
        self.min_silence_duration = min_silence_duration
        self.batch_windows = batch_windows
        self.noise_gate_db = noise_gate_db
        self._session: InferenceSession | None = None  # created on first stream()
        self._lock = threading.Lock()

    def _get_session(self) -> InferenceSession:
        with self._lock:
            if self._session is None:
                self._session = _load_session()
            return self._session

    def stream(self) -> SileroStream:
        return SileroStream(self, self._get_session())


class SileroStream(VADStream):
    """One audio input's detector state. ``push`` runs the model inline (synchronously)."""

    def __init__(self, vad: SileroVAD, session: InferenceSession) -> None:
        self._session = session
        self._activation = vad.activation_threshold
        self._deactivation = vad.deactivation_threshold
        self._min_speech = _windows(vad.min_speech_duration)
        self._min_silence = _windows(vad.min_silence_duration)
        self._batch = vad.batch_windows
        self._gate = None if vad.noise_gate_db is None else _BackgroundGate(vad.noise_gate_db)
        # Model input, reused: row j = [last CONTEXT samples of the window before | window j].
        self._rows = np.zeros((self._batch, CONTEXT + WINDOW), np.float32)
        self._feeds: dict[str, Float32] = {
            "input": self._rows,
            "h": np.zeros((1, 1, 128), np.float32),
            "c": np.zeros((1, 1, 128), np.float32),
        }
        self._bound = _BoundRun.of(session, self._rows)
        self._filled = 0  # rows of the current batch holding a window
        self._rebuffer = FrameRebuffer(WINDOW)
        self._resampler: Resampler | None = None
        self._hot = False  # hysteresis: the last window was speech
        self._speaking = False
        self._voiced = 0  # windows of speech (candidate run, or the current utterance)
        self._quiet = 0  # windows of non-speech (before a start, or trailing in speech)
        self.last_probability = 0.0
        """The speech probability of the last window judged."""

    @property
    def speaking(self) -> bool:
        return self._speaking

    @property
    def speech_seconds(self) -> float:
        return self._voiced * WINDOW_SECONDS if self._speaking else 0.0

    @property
    def hearing(self) -> bool:
        return not self._speaking and self._voiced > 0

    def push(self, frame: AudioFrame) -> list[VADEvent]:
        events: list[VADEvent] = []
        data = self._to_16k_mono(frame)
        if data is None:
            return events
        rows = self._rows
        for window in self._rebuffer.push(data):
            j = self._filled
            row = rows[j]
            row[:CONTEXT] = rows[j - 1 if j else self._batch - 1, WINDOW:]
            tail = row[CONTEXT:]
            tail[:] = window  # int16 -> float32 in place
            tail *= 1.0 / 32768.0
            self._filled = j + 1
            if self._filled == self._batch:
                self._filled = 0
                self._judge(events)
        return events

    def _to_16k_mono(self, frame: AudioFrame) -> PCM16 | None:
        if frame.num_channels != 1:
            mixed = frame.data.reshape(-1, frame.num_channels).mean(axis=1)
            frame = AudioFrame(mixed.astype(np.int16), frame.sample_rate)
        if frame.sample_rate == SAMPLE_RATE:
            return frame.data
        resampler = self._resampler
        if resampler is None or resampler.in_rate != frame.sample_rate:
            resampler = self._resampler = Resampler(frame.sample_rate, SAMPLE_RATE)
        out = resampler.push(frame)
        return None if out is None else out.data

    def _judge(self, events: list[VADEvent]) -> None:
        if self._bound is not None:
            probs = self._bound.run()
        else:
            feeds = self._feeds
            probs, feeds["h"], feeds["c"] = self._session.run(None, feeds)
        gate = self._gate
        if gate is None:
            if self._batch == 1:
                self._step(float(probs[0]), events)
            else:
                for p in probs.tolist():
                    self._step(p, events)
            return
        values = probs.tolist()
        for p, margin in zip(values, gate.margins(self._rows[:, CONTEXT:], values), strict=True):
            # Hysteresis, as for the probability: speech goes on a little nearer the
            # background than it must start, so a quieter syllable does not end it.
            loud = margin >= (-_GATE_HYSTERESIS if self._hot else 0.0)
            self._step(p, events, loud)

    def _to_start(self) -> int:
        """Windows of speech that start an utterance."""
        if self._gate is not None and self._gate.engaged:
            return max(self._min_speech, _GATE_MIN_SPEECH)
        return self._min_speech

    def _step(self, p: float, events: list[VADEvent], loud: bool = True) -> None:
        self.last_probability = p
        hot = loud and p >= (self._deactivation if self._hot else self._activation)
        self._hot = hot
        if not self._speaking:
            if not hot:
                self._quiet += self._voiced + 1  # a blip too short to start is not speech
                self._voiced = 0
                return
            self._voiced += 1
            if self._voiced >= self._to_start():
                self._speaking = True
                events.append(
                    VADEvent(
                        "start_of_speech",
                        self._voiced * WINDOW_SECONDS,
                        self._quiet * WINDOW_SECONDS,
                        p,
                    )
                )
                self._quiet = 0
            return
        if hot:
            self._voiced += self._quiet + 1  # a short pause inside speech is speech
            self._quiet = 0
            return
        self._quiet += 1
        if self._quiet >= self._min_silence:
            self._speaking = False
            events.append(
                VADEvent(
                    "end_of_speech",
                    self._voiced * WINDOW_SECONDS,
                    self._quiet * WINDOW_SECONDS,
                    p,
                )
            )
            self._voiced = 0


class _BoundRun:
    """The model run on buffers bound once (onnxruntime's I/O binding): the stream's rows
    in, the probabilities and the next state out, the state ping-ponging between two
    pairs of arrays. Same results as ``session.run``, bit for bit, without the per-call
    conversion of inputs and outputs, which cost about a quarter of a window's CPU when
    sessions take turns on the model (its caches cold)."""

    def __init__(self, session: _OrtSession, rows: Float32) -> None:
        shape = [1, 1, 128]
        self._h = [np.zeros(shape, np.float32) for _ in range(2)]
        self._c = [np.zeros(shape, np.float32) for _ in range(2)]
        self._probs = np.zeros(rows.shape[0], np.float32)
        self._session = session
        self._bindings = []
        for k in range(2):  # binding k reads state k, writes state 1 - k
            binding = session.io_binding()
            binding.bind_cpu_input("input", rows)
            binding.bind_cpu_input("h", self._h[k])
            binding.bind_cpu_input("c", self._c[k])
            self._output(binding, "speech_probs", self._probs)
            self._output(binding, "hn", self._h[1 - k])
            self._output(binding, "cn", self._c[1 - k])
            self._bindings.append(binding)
        self._next = 0

    @staticmethod
    def of(session: InferenceSession, rows: Float32) -> _BoundRun | None:
        """A bound run for a real onnxruntime session (None for anything else: a fake)."""
        if not callable(getattr(session, "io_binding", None)):
            return None
        return _BoundRun(cast(_OrtSession, session), rows)

    @staticmethod
    def _output(binding: Any, name: str, into: Float32) -> None:
        binding.bind_output(name, "cpu", 0, np.float32, list(into.shape), into.ctypes.data)

    def run(self) -> Float32:
        """One call; returns the probabilities (a view, valid until the next call)."""
        self._session.run_with_iobinding(self._bindings[self._next])
        self._next ^= 1
        return self._probs


class _OrtSession(InferenceSession, Protocol):
    def io_binding(self) -> Any: ...

    def run_with_iobinding(self, iobinding: Any, /) -> None: ...


class _BackgroundGate:
    """Whether each window stands out of the background by ``margin_db`` (see
    ``SileroVAD``'s ``noise_gate_db``), once the background sounds like speech."""

    def __init__(self, margin_db: float) -> None:
        self._margin = margin_db
        size = _windows(_GATE_HISTORY)
        self._levels = np.zeros(size, np.float64)  # dBFS of each window, a ring
        self._speechy = np.zeros(size, np.float64)  # the model's probability for each
        self._at = 0  # next slot of the ring
        self._heard = 0  # windows heard, up to the ring's size
        self._min_heard = _windows(_GATE_MIN_HISTORY)
        self._threshold = -math.inf  # dBFS a window must reach; open until estimated

    def margins(self, windows: Float32, probabilities: Sequence[float]) -> list[float]:
        """dB by which each row of ``windows`` (float samples in -1..1) is louder than it
        must be to start speech (negative: quieter)."""
        margins = []
        size = self._levels.shape[0]
        for row, probability in zip(windows, probabilities, strict=True):
            level = 10.0 * math.log10(float(np.dot(row, row)) / row.shape[0] + 1e-12)
            self._levels[self._at] = level
            self._speechy[self._at] = probability
            self._at = (self._at + 1) % size
            self._heard = min(self._heard + 1, size)
            if self._heard >= self._min_heard and self._at % _GATE_EVERY == 0:
                self._estimate()
            margins.append(level - self._threshold)
        return margins

    @property
    def engaged(self) -> bool:
        return self._threshold > -math.inf

    def _estimate(self) -> None:
        # The ring fills from slot 0: its first ``_heard`` slots are the windows heard.
        n = self._heard
        levels = self._levels[:n]
        low, quiet_edge = int(n * _GATE_PERCENTILE / 100), int(n * _GATE_QUIETEST / 100)
        order = np.argpartition(levels, (low, quiet_edge))
        background = float(levels[order[low]])
        if background < _QUIET_BACKGROUND_DBFS:
            self._threshold = -math.inf
            return
        # Only a background that sounds like speech to the model needs the gate: Silero
        # already ignores steady noise (white, pink, a fan), where a level gate would only
        # chop the user's quieter syllables. What the background sounds like is read on
        # the quietest windows of the last seconds, which are the room's unless the user
        # talked nearly all that time (between syllables the model still hears them).
        quietest = order[: quiet_edge + 1]
        crowd = float(np.mean(self._speechy[quietest])) >= _GATE_SPEECHY
        self._threshold = background + self._margin if crowd else -math.inf
