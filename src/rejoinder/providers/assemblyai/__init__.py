"""AssemblyAI providers: Universal-Streaming speech to text over the ``/v3/ws`` WebSocket.

``from rejoinder.providers import assemblyai; stt = assemblyai.STT()`` goes in the
session's ``stt=`` slot (key from ``$ASSEMBLYAI_API_KEY``); it streams each utterance as it
is spoken, reports partial transcripts, and gives the session's turn-end decision
AssemblyAI's end-of-turn probability as one more signal.
"""

from .stt import STT

__all__ = ["STT"]
