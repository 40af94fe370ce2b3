"""Deepgram providers: live speech to text over the ``/v1/listen`` WebSocket.

``from rejoinder.providers import deepgram; stt = deepgram.STT(model="nova-3")`` goes in
the session's ``stt=`` slot; it streams each utterance as it is spoken and reports
interim transcripts.
"""

from .stt import STT

__all__ = ["STT"]
