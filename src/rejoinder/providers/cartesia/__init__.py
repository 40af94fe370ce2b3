"""Cartesia providers: streaming text to speech over the TTS WebSocket.

``from rejoinder.providers import cartesia; tts = cartesia.TTS(voice_id="...")`` goes in
the ``tts=`` slot; it takes the model's deltas as they come, shares one WebSocket between
its streams (one context each), and reports when each word is spoken, so an interrupted
reply keeps exactly the words that were heard.
"""

from .tts import TTS

__all__ = ["TTS"]
