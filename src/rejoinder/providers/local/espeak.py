"""Text to speech with eSpeak NG, offline, through a small ctypes binding.

The library and its voice data come from the ``espeakng-loader`` wheel (``pip install
espeakng-loader==0.2.4``, part of the ``local`` extra); nothing is downloaded at run time.

**Licence:** eSpeak NG is GPL-3.0-or-later. This module only calls the shared library that
espeakng-loader installs, but shipping a product that includes it brings GPL-3.0 code
into your distribution; choose another TTS where that matters.

The voice is robotic but very fast: a sentence takes a few milliseconds of CPU (real-time
factor about 0.002), so each ``synthesize`` call renders its whole text at once and then
yields 20 ms frames at 22050 Hz mono.

libespeak-ng keeps process-global state (one voice, one rate, one output callback), so
the library is initialized once per process behind a lock, and every synthesis holds that
lock in a worker thread (``asyncio.to_thread``): concurrent sessions take turns instead of
interleaving their audio, and the event loop is never blocked. Anything else in the
process that loads the same ``libespeak-ng.so`` (phonemizers, for example) shares that
state and must not run at the same time.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from ... import _extras
from ...models.audio import PCM16, AudioFrame
from ...models.tts import TTS, TTSError

SAMPLE_RATE = 22050
"""The rate libespeak-ng synthesizes at (reported by ``espeak_Initialize``)."""
FRAME_SECONDS = 0.02
MIN_RATE, MAX_RATE = 80, 450
"""The speaking rates (words per minute) eSpeak NG accepts."""

_PACKAGES = "espeakng-loader==0.2.4"

# speak_lib.h constants
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000  # report a bad data path instead of calling exit(1)
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_RATE = 1  # espeakRATE
_EE_OK = 0

_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


@dataclass
class _Engine:
    """The process's one libespeak-ng; use only while holding ``_LOCK``."""

    lib: ctypes.CDLL
    sample_rate: int
    chunks: list[PCM16] = field(default_factory=list)
    voice: str | None = None
    callback: object = None  # the ctypes callback; referenced here so it is never freed

    def collect(self, wav: ctypes._Pointer[ctypes.c_short], n: int, _events: int | None) -> int:
        if n > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).astype(np.int16))
        return 0  # 0: continue synthesis

    def synthesize(self, text: str, voice: str, rate: int) -> PCM16:
        lib = self.lib
        if voice != self.voice:
            if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
                self.voice = None
                raise TTSError(f"eSpeak NG has no voice named {voice!r}")
            self.voice = voice
        if lib.espeak_SetParameter(_RATE, rate, 0) != _EE_OK:
            raise TTSError(f"eSpeak NG rejected rate {rate}")
        data = text.encode("utf-8") + b"\0"
        self.chunks = []
        try:
            status = lib.espeak_Synth(
                data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None
            )
            if status != _EE_OK:
                raise TTSError(f"espeak_Synth failed (error {status})", retryable=True)
            status = lib.espeak_Synchronize()
            if status != _EE_OK:
                raise TTSError(f"espeak_Synchronize failed (error {status})", retryable=True)
            if not self.chunks:
                return np.zeros(0, np.int16)
            return np.concatenate(self.chunks)
        finally:
            self.chunks = []


_LOCK = threading.Lock()
_engine: _Engine | None = None


def _load() -> _Engine:
    """Initialize libespeak-ng once per process. Call with ``_LOCK`` held."""
    global _engine
    if _engine is not None:
        return _engine
    with _extras.needed("local", "EspeakTTS", error=TTSError, packages=_PACKAGES):
        import espeakng_loader  # type: ignore[import-untyped]  # ships no type information
    try:
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        data_path = str(espeakng_loader.get_data_path())
    except (OSError, RuntimeError) as exc:
        raise TTSError(f"cannot load libespeak-ng from espeakng-loader: {exc}") from exc
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_Synth.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_uint),
        ctypes.c_void_p,
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    lib.espeak_Synchronize.argtypes = []
    lib.espeak_Synchronize.restype = ctypes.c_int
    sample_rate = lib.espeak_Initialize(
        _AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), _INITIALIZE_DONT_EXIT
    )
    if sample_rate != SAMPLE_RATE:
        raise TTSError(
            f"espeak_Initialize failed (returned {sample_rate}, expected {SAMPLE_RATE} Hz; "
            f"data path {data_path})"
        )
    engine = _Engine(lib, sample_rate)
    callback = _SynthCallback(engine.collect)
    engine.callback = callback
    lib.espeak_SetSynthCallback(callback)
    _engine = engine
    return engine


def _render(text: str, voice: str, rate: int) -> PCM16:
    with _LOCK:
        return _load().synthesize(text, voice, rate)


class EspeakTTS(TTS):
    """eSpeak NG voice ``voice`` (e.g. ``"en-us"``, ``"en"`` (British), ``"de"``) at ``rate`` words
    per minute (80-450; eSpeak's default is 175)."""

    def __init__(self, *, voice: str = "en-us", rate: int = 175) -> None:
        super().__init__(sample_rate=SAMPLE_RATE, num_channels=1)
        if not MIN_RATE <= rate <= MAX_RATE:
            raise ValueError(f"rate must be {MIN_RATE}-{MAX_RATE} words per minute, got {rate}")
        if not voice or "\0" in voice:
            raise ValueError(f"invalid voice name {voice!r}")
        self.voice = voice
        self.rate = rate

    async def synthesize(self, text: str) -> AsyncIterator[AudioFrame]:
        if not text.strip():
            return
        try:
            pcm = await asyncio.to_thread(_render, text, self.voice, self.rate)
        except TTSError:
            raise
        except Exception as exc:  # a ctypes or numpy failure: report it as a TTS failure
            raise TTSError(f"eSpeak NG synthesis failed: {exc!r}") from exc
        step = round(FRAME_SECONDS * SAMPLE_RATE)
        for start in range(0, pcm.shape[0], step):
            yield AudioFrame(pcm[start : start + step], SAMPLE_RATE)
