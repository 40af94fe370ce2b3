"""Offline streaming speech recognition with PocketSphinx (CMU Sphinx, BSD licence).

``PocketSphinxSTT()`` uses the US English model that ships inside the ``pocketsphinx``
wheel (acoustic model, 3-gram language model, CMU dictionary): nothing is downloaded.
Install with ``pip install 'rejoinder[local]'``.

It is a ``StreamingSTT``: the session pushes each frame of an utterance, and interim
transcripts come out while the user speaks. It is fast to start but far less accurate than
Whisper (``WhisperSTT``): use it where interims matter more than the words, or as a
fallback.

Cost, measured on a 2-core x86 machine (CPU time, default decoder options):

* ``push``: about 4.5-7 ms per 20 ms frame of speech (real-time factor ≈ 0.25-0.35), and
  more on digital silence (~10 ms: exact zeros, which a real microphone never sends).
  That runs on the caller's thread: the event loop. PocketSphinx holds the GIL while it
  decodes (measured: two decoders in two threads take twice as long as one), so handing
  the frames to a worker thread would not give the loop that time back; it is decoded
  inline instead. ``decoder_options`` trade accuracy for speed: ``maxhmmpf=3000`` saved
  about 25 % here with the same transcript, ``beam=1e-30, wbeam=1e-20`` about 65 % but
  garbled it.
* ``recognize`` after pushes: ``end_utt`` runs the second search passes, about 0.1-0.2 s
  for a 3 s utterance (``fwdflat=False, bestpath=False`` cut that to a few ms).
* ``recognize`` without pushes decodes the whole utterance in a worker thread, in 0.1 s
  slices so the loop gets the GIL between them: about 0.3 s CPU per second of audio.
* Loading the decoder: about 0.7 s. It happens on the first ``push`` (on the loop!) or
  ``recognize`` (in a worker thread); ``await stt.load()`` does it ahead of time.

Audio the session kept from before the VAD confirmed speech (its pre-roll) is passed to
``recognize`` but was never pushed, so the streamed transcript starts at the frame the VAD
confirmed: a word's onset may be clipped. The decoder's cepstral mean adapts over the
first utterance, so the first transcript is usually the worst ("oh" for "hello").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ... import _extras
from ...models.audio import AudioFrame
from ...models.audio_utils import Resampler, resample
from ...models.stt import StreamingSTT, STTError

__all__ = ["PocketSphinxSTT"]

_SAMPLE_RATE = 16000  # the bundled en-US acoustic model's rate
_SLICE_SAMPLES = _SAMPLE_RATE // 10  # one-go decoding: 0.1 s per call, GIL free between

DecoderOption = str | int | float | bool

logger = logging.getLogger("rejoinder.providers.local")


class PocketSphinxSTT(StreamingSTT):
    """Streaming recognition with PocketSphinx's bundled US English model.

    ``interim_interval``: seconds of audio between looks at the partial hypothesis;
    ``on_interim`` is called only when it changed. ``decoder_options``: extra
    ``pocketsphinx.Decoder`` settings (``hmm``, ``lm``, ``dict`` for another model,
    ``maxhmmpf``, ``beam``, ...).

    One instance hears one audio stream: ``push`` feeds the utterance in progress,
    ``recognize`` ends it and returns its transcript, ``reset`` drops it.
    """

    def __init__(
        self,
        *,
        interim_interval: float = 0.2,
        decoder_options: Mapping[str, DecoderOption] | None = None,
    ) -> None:
        if interim_interval <= 0:
            raise ValueError("interim_interval must be positive")
        self.interim_interval = interim_interval
        self._options = dict(decoder_options or {})
        self._decoder: Any = None  # pocketsphinx.Decoder (the package has no types)
        # Guards the decoder: pushes come from the loop, loads and one-go decodes from
        # worker threads.
        self._lock = threading.Lock()
        self._in_utterance = False
        self._resampler: Resampler | None = None
        self._since_interim = 0.0
        self._hypothesis = ""
        self._failure: STTError | None = None  # from a push, raised by the next recognize

    @property
    def loaded(self) -> bool:
        return self._decoder is not None

    async def load(self) -> None:
        """Load the decoder now, in a worker thread (it otherwise loads on first use)."""

        def load() -> None:
            with self._lock:
                self._ensure_decoder()

        await asyncio.to_thread(load)

    # -------------------------------------------------------------- streaming

    def push(self, frame: AudioFrame, on_interim: Callable[[str], None]) -> None:
        """Decode ``frame`` (inline, see the module docstring). Never raises: a failure
        drops the rest of the utterance, and ``recognize`` raises it as an ``STTError``."""
        if self._failure is not None:
            return
        try:
            interim = self._push(frame)
        except Exception as exc:
            self._failure = exc if isinstance(exc, STTError) else _decoding_error(exc)
            logger.warning("PocketSphinx: %s (the utterance is dropped)", self._failure)
            return
        if interim is not None:
            on_interim(interim)

    def _push(self, frame: AudioFrame) -> str | None:
        with self._lock:
            decoder = self._ensure_decoder()
            if not self._in_utterance:
                self._start(decoder)
            pcm = self._stream_16k(frame)
            if pcm is not None and pcm.size:
                decoder.process_raw(pcm.tobytes(), False, False)
            self._since_interim += frame.duration
            if self._since_interim + 1e-9 < self.interim_interval:
                return None
            self._since_interim = 0.0
            text = _hypothesis(decoder)
            if not text or text == self._hypothesis:
                return None
            self._hypothesis = text
            return text

    def reset(self) -> None:
        with self._lock:
            self._failure = None
            if self._in_utterance:
                self._in_utterance = False
                self._resampler = None
                with contextlib.suppress(Exception):  # nothing to keep from a dropped one
                    self._decoder.end_utt()

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        failure = self._failure
        if failure is not None:
            self.reset()
            raise failure
        if self._in_utterance:
            return self._finish_streamed()
        audio = _utterance_16k(frames)
        if audio.size == 0:
            return ""
        return await asyncio.to_thread(self._decode_all, audio)

    async def aclose(self) -> None:
        self.reset()
        with self._lock:
            self._decoder = None

    # -------------------------------------------------------------- internals

    def _ensure_decoder(self) -> Any:
        """Call with ``_lock`` held."""
        if self._decoder is None:
            # Only the decoder: ``import pocketsphinx`` is fine, but its microphone
            # helper's sounddevice (PortAudio) is imported only when used, and isn't.
            with _extras.needed("local", "PocketSphinxSTT", error=STTError):
                from pocketsphinx import Decoder  # type: ignore[import-untyped]  # no types
            options: dict[str, DecoderOption] = {"loglevel": "FATAL", **self._options}
            options["samprate"] = _SAMPLE_RATE
            try:
                self._decoder = Decoder(**options)
            except Exception as exc:
                raise STTError(f"could not load the PocketSphinx decoder: {exc}") from exc
        return self._decoder

    def _start(self, decoder: Any) -> None:
        try:
            decoder.start_utt()
        except Exception as exc:
            raise STTError(f"PocketSphinx could not start an utterance: {exc}") from exc
        self._in_utterance = True
        self._resampler = None
        self._since_interim = 0.0
        self._hypothesis = ""

    def _stream_16k(self, frame: AudioFrame) -> npt.NDArray[np.int16] | None:
        mono = _mono(frame)
        if self._resampler is None or self._resampler.in_rate != mono.sample_rate:
            tail = self._resampler.flush() if self._resampler is not None else None
            self._resampler = Resampler(mono.sample_rate, _SAMPLE_RATE)
            out = self._resampler.push(mono)
            if tail is not None:
                return np.concatenate([tail.data, out.data]) if out is not None else tail.data
            return out.data if out is not None else None
        out = self._resampler.push(mono)
        return out.data if out is not None else None

    def _finish_streamed(self) -> str:
        with self._lock:
            decoder = self._decoder
            self._in_utterance = False
            try:
                tail = self._resampler.flush() if self._resampler is not None else None
                if tail is not None and tail.data.size:
                    decoder.process_raw(tail.data.tobytes(), False, False)
                decoder.end_utt()
                return _hypothesis(decoder)
            except Exception as exc:
                raise _decoding_error(exc) from exc
            finally:
                self._resampler = None

    def _decode_all(self, audio: npt.NDArray[np.int16]) -> str:
        with self._lock:
            decoder = self._ensure_decoder()
            if self._in_utterance:  # a push started one meanwhile: it loses to this call
                self._in_utterance = False
                decoder.end_utt()
            try:
                decoder.start_utt()
                for start in range(0, audio.shape[0], _SLICE_SAMPLES):
                    chunk = audio[start : start + _SLICE_SAMPLES]
                    decoder.process_raw(chunk.tobytes(), False, False)
                decoder.end_utt()
                return _hypothesis(decoder)
            except Exception as exc:
                raise _decoding_error(exc) from exc


def _decoding_error(exc: Exception) -> STTError:
    error = STTError(f"PocketSphinx decoding failed: {exc}")
    error.__cause__ = exc
    return error


def _hypothesis(decoder: Any) -> str:
    hypothesis = decoder.hyp()
    return str(hypothesis.hypstr).strip() if hypothesis is not None else ""


def _mono(frame: AudioFrame) -> AudioFrame:
    if frame.num_channels == 1:
        return frame
    mixed = frame.data.reshape(-1, frame.num_channels).mean(axis=1)
    return AudioFrame(np.round(mixed).astype(np.int16), frame.sample_rate)


def _utterance_16k(frames: Sequence[AudioFrame]) -> npt.NDArray[np.int16]:
    """The utterance as mono int16 at 16 kHz (each run of one rate resampled in one go)."""
    pieces: list[npt.NDArray[np.int16]] = []
    run: list[AudioFrame] = []

    def flush() -> None:
        if run:
            clip = AudioFrame(np.concatenate([f.data for f in run]), run[0].sample_rate)
            pieces.append(resample(clip, _SAMPLE_RATE).data)
            run.clear()

    for frame in frames:
        mono = _mono(frame)
        if run and mono.sample_rate != run[0].sample_rate:
            flush()
        run.append(mono)
    flush()
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
