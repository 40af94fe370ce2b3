"""Offline providers: models that run on this machine, downloaded with their wheels.

``from rejoinder.providers import local; vad = local.SileroVAD(); tts = local.EspeakTTS()``

Install with ``pip install 'rejoinder[local]'`` plus ``pip install --no-deps
silero-vad==6.2.3`` (the Silero model without its torch dependency) and, for
``SmartTurn``, ``pip install --no-deps pipecat-ai==1.14.0`` (its model file only). Names load their
module (and its libraries) on first use, so importing this package costs nothing.
eSpeak NG (``EspeakTTS``) and piper-tts (``PiperTTS``) are GPL-3.0.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

# onnxruntime (Silero, Smart Turn, Piper) sends usage telemetry from Linux and writes a
# device id under ~/.cache unless this is set before its first session; an offline stack
# should not talk to anyone. A value you set yourself is kept.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

if TYPE_CHECKING:
    from .espeak import EspeakTTS
    from .onset_interruption import OnsetInterruptionDetector
    from .piper_tts import PiperTTS
    from .pocketsphinx_stt import PocketSphinxSTT
    from .silero import SileroVAD
    from .smart_turn import SmartTurn
    from .voice_defaults import voice_session_options
    from .whisper import WhisperSTT

# name -> submodule that defines it
_EXPORTS = {
    "SileroVAD": "silero",
    "EspeakTTS": "espeak",
    "WhisperSTT": "whisper",
    "PocketSphinxSTT": "pocketsphinx_stt",
    "PiperTTS": "piper_tts",
    "SmartTurn": "smart_turn",
    "OnsetInterruptionDetector": "onset_interruption",
    "voice_session_options": "voice_defaults",
}

__all__ = [
    "EspeakTTS",
    "OnsetInterruptionDetector",
    "PiperTTS",
    "PocketSphinxSTT",
    "SileroVAD",
    "SmartTurn",
    "WhisperSTT",
    "voice_session_options",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
