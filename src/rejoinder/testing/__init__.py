"""Public test kit: scripted models, state timelines, in-memory sinks."""

from ..io.text import MemoryTextOutput
from .scripted_llm import Delay, Fail, Gate, ScriptedCall, ScriptedLLM, ToolCall
from .timeline import StateChange, StateTimeline

__all__ = [
    "Delay",
    "Fail",
    "Gate",
    "MemoryTextOutput",
    "ScriptedCall",
    "ScriptedLLM",
    "StateChange",
    "StateTimeline",
    "ToolCall",
]
