"""ElevenLabs providers: streaming text to speech over the stream-input WebSocket.

``from rejoinder.providers import elevenlabs; tts = elevenlabs.TTS(voice_id="...")`` goes in
the ``tts=`` slot; it takes the model's deltas as they come and reports when each word is
spoken, so an interrupted reply keeps exactly the words that were heard.
"""

from .tts import TTS

__all__ = ["TTS"]
