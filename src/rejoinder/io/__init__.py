"""Transports and sinks."""

from .text import ConsoleTextOutput, MemoryTextOutput, TextOutput

__all__ = ["ConsoleTextOutput", "MemoryTextOutput", "TextOutput"]
