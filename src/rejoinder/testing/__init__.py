"""Public test kit: scripted models, state timelines, in-memory sinks, loopback servers
that speak the providers' wire protocols, and fake phone calls and carriers.

The scripted models load with the package; the loopback servers, the fake carriers and
the fake phone call load on first use (they bring aiohttp's server and the phone
transport), so an agent file that only needs ``ScriptedLLM`` starts quickly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from ..io.text import MemoryTextOutput
from .clock import advance, now
from .memory_audio import MemoryAudioInput, MemoryAudioOutput
from .scripted_audio import ScriptedSTT, ScriptedVAD, speech_frame
from .scripted_interruption import OnsetCall, ScriptedInterruptionDetector
from .scripted_llm import Delay, Fail, Gate, ScriptedCall, ScriptedLLM, ToolCall
from .scripted_tts import ScriptedStreamingTTS, ScriptedTTS
from .scripted_turn import ScriptedTurnDetector, TurnCall
from .timeline import StateChange, StateTimeline

if TYPE_CHECKING:
    from .anthropic_server import AnthropicServer
    from .assemblyai_server import AssemblyAIServer
    from .carriers import CallOutcome, FakePlivo, FakeTelnyx, FakeTwilio
    from .cartesia_server import CartesiaServer
    from .deepgram_server import DeepgramServer
    from .elevenlabs_server import ElevenLabsServer
    from .gemini_live_server import GeminiLiveServer
    from .gemini_server import GeminiServer
    from .gpt_live_server import GPTLiveServer
    from .openai_audio_server import (
        OpenAIAudioServer,
        SpeechReply,
        TranscriptionRequest,
        TranscriptReply,
        tone,
    )
    from .openai_chat_server import (
        CutConnection,
        ErrorReply,
        OpenAIChatServer,
        Pause,
        RawData,
        StreamReply,
    )
    from .openai_realtime_server import OpenAIRealtimeServer
    from .phone import FakePhoneCall, Heard, MenuNode

# name -> the submodule that defines it, imported on first use
_LAZY = {
    "AnthropicServer": ".anthropic_server",
    "AssemblyAIServer": ".assemblyai_server",
    "CallOutcome": ".carriers",
    "FakePlivo": ".carriers",
    "FakeTelnyx": ".carriers",
    "FakeTwilio": ".carriers",
    "CartesiaServer": ".cartesia_server",
    "DeepgramServer": ".deepgram_server",
    "ElevenLabsServer": ".elevenlabs_server",
    "GeminiLiveServer": ".gemini_live_server",
    "GeminiServer": ".gemini_server",
    "GPTLiveServer": ".gpt_live_server",
    "OpenAIAudioServer": ".openai_audio_server",
    "SpeechReply": ".openai_audio_server",
    "TranscriptionRequest": ".openai_audio_server",
    "TranscriptReply": ".openai_audio_server",
    "tone": ".openai_audio_server",
    "CutConnection": ".openai_chat_server",
    "ErrorReply": ".openai_chat_server",
    "OpenAIChatServer": ".openai_chat_server",
    "Pause": ".openai_chat_server",
    "RawData": ".openai_chat_server",
    "StreamReply": ".openai_chat_server",
    "OpenAIRealtimeServer": ".openai_realtime_server",
    "FakePhoneCall": ".phone",
    "Heard": ".phone",
    "MenuNode": ".phone",
}
__getattr__ = lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "AnthropicServer",
    "AssemblyAIServer",
    "CallOutcome",
    "CartesiaServer",
    "CutConnection",
    "DeepgramServer",
    "Delay",
    "ElevenLabsServer",
    "ErrorReply",
    "Fail",
    "FakePhoneCall",
    "FakePlivo",
    "FakeTelnyx",
    "FakeTwilio",
    "GPTLiveServer",
    "Gate",
    "GeminiLiveServer",
    "GeminiServer",
    "Heard",
    "MemoryAudioInput",
    "MemoryAudioOutput",
    "MemoryTextOutput",
    "MenuNode",
    "OnsetCall",
    "OpenAIAudioServer",
    "OpenAIChatServer",
    "OpenAIRealtimeServer",
    "Pause",
    "RawData",
    "ScriptedCall",
    "ScriptedInterruptionDetector",
    "ScriptedLLM",
    "ScriptedSTT",
    "ScriptedStreamingTTS",
    "ScriptedTTS",
    "ScriptedTurnDetector",
    "ScriptedVAD",
    "SpeechReply",
    "StateChange",
    "StateTimeline",
    "StreamReply",
    "ToolCall",
    "TranscriptReply",
    "TranscriptionRequest",
    "TurnCall",
    "advance",
    "now",
    "speech_frame",
    "tone",
]
