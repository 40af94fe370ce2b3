"""The offline voice setup every shipped path uses (``make demo``, ``rejoinder dev`` and
``serve`` with the example agent, the console with a microphone, phone calls), in one
place, so what the benchmarks measure is what a user runs.

    session = rj.AgentSession(llm=llm, **local.voice_session_options())

The speech models take seconds to load; pass ``stt=`` / ``tts=`` to share loaded ones
between sessions. Everything else is small and belongs to one session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...models.stt import STT
    from ...models.tts import TTS


def voice_session_options(*, stt: STT | None = None, tts: TTS | None = None) -> dict[str, Any]:
    """``AgentSession`` keyword arguments for the offline conversation stack.

    Args:
        stt: the recognizer (default: a new ``WhisperSTT()``).
        tts: the voice (default: a new ``PiperTTS()``).

    The phone band (8 kHz G.711) gets the same stack: each model takes 8 kHz audio
    (Silero natively, Whisper and Smart Turn resampled, the onset classifier reads only
    0-4 kHz anyway); bench/recognition.py found no treatment of 8 kHz audio that helps
    Whisper.
    """
    from .onset_interruption import OnsetInterruptionDetector
    from .piper_tts import PiperTTS
    from .silero import SileroVAD
    from .smart_turn import SmartTurn
    from .whisper import WhisperSTT

    return {
        # The turn model, not a long silence, decides: end utterances quickly.
        "vad": SileroVAD(min_silence_duration=0.2),
        "stt": stt if stt is not None else WhisperSTT(),
        "tts": tts if tts is not None else PiperTTS(),
        # Turn ends from the words and the audio model, not the recognizer's punctuation.
        "turn_detection": SmartTurn(),
        # A backchannel or a cough over the agent changes nothing; "wait" stops it.
        "interruption_detection": OnsetInterruptionDetector(),
    }
