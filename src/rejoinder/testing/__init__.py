"""Public test kit: scripted models, state timelines, in-memory sinks, loopback servers
that speak the providers' wire protocols, and fake phone calls and carriers."""

from ..io.text import MemoryTextOutput
from .anthropic_server import AnthropicServer
from .assemblyai_server import AssemblyAIServer
from .carriers import CallOutcome, FakePlivo, FakeTelnyx, FakeTwilio
from .cartesia_server import CartesiaServer
from .clock import advance, now
from .deepgram_server import DeepgramServer
from .elevenlabs_server import ElevenLabsServer
from .gemini_live_server import GeminiLiveServer
from .gemini_server import GeminiServer
from .gpt_live_server import GPTLiveServer
from .memory_audio import MemoryAudioInput, MemoryAudioOutput
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
from .scripted_audio import ScriptedSTT, ScriptedVAD, speech_frame
from .scripted_interruption import OnsetCall, ScriptedInterruptionDetector
from .scripted_llm import Delay, Fail, Gate, ScriptedCall, ScriptedLLM, ToolCall
from .scripted_tts import ScriptedStreamingTTS, ScriptedTTS
from .scripted_turn import ScriptedTurnDetector, TurnCall
from .timeline import StateChange, StateTimeline

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
