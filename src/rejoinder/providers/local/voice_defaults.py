"""The offline voice setup every shipped path uses (``make demo``, ``rejoinder dev`` and
``serve`` with the example agent, the console with a microphone, phone calls), in one
place, so what the benchmarks measure is what a user runs.

    session = rj.AgentSession(llm=llm, **local.voice_session_options())

The speech models take seconds to load, so by default every session of the process gets
the same Whisper and Piper (``rj.shared``: loaded once, closed by none of them); pass
``stt=`` / ``tts=`` for others. The small models (Silero, Smart Turn) are per session
objects over one engine per process, loaded once too.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ...models.claims import shared

if TYPE_CHECKING:
    from ...models.stt import STT
    from ...models.tts import TTS
    from .piper_tts import PiperTTS
    from .whisper import WhisperSTT


@functools.cache
def shared_whisper() -> WhisperSTT:
    """The process's ``WhisperSTT()`` (default settings), shared by every session."""
    from .whisper import WhisperSTT

    return shared(WhisperSTT())


@functools.cache
def shared_piper() -> PiperTTS:
    """The process's ``PiperTTS()`` (the default voice), shared by every session."""
    from .piper_tts import PiperTTS

    return shared(PiperTTS())


def voice_session_options(*, stt: STT | None = None, tts: TTS | None = None) -> dict[str, Any]:
    """``AgentSession`` keyword arguments for the offline conversation stack.

    Args:
        stt: the recognizer (default: the process's shared ``WhisperSTT()``).
        tts: the voice (default: the process's shared ``PiperTTS()``).

    The phone band (8 kHz G.711) gets the same stack: each model takes 8 kHz audio
    (Silero natively, Whisper and Smart Turn resampled, the onset classifier reads only
    0-4 kHz anyway); bench/recognition.py found no treatment of 8 kHz audio that helps
    Whisper.
    """
    from .onset_interruption import OnsetInterruptionDetector
    from .silero import SileroVAD
    from .smart_turn import SmartTurn

    return {
        # The turn model, not a long silence, decides: end utterances quickly.
        "vad": SileroVAD(min_silence_duration=0.2),
        "stt": stt if stt is not None else shared_whisper(),
        "tts": tts if tts is not None else shared_piper(),
        # Turn ends from the words and the audio model, not the recognizer's punctuation.
        "turn_detection": SmartTurn(),
        # A backchannel or a cough over the agent changes nothing; "wait" stops it.
        "interruption_detection": OnsetInterruptionDetector(),
    }
