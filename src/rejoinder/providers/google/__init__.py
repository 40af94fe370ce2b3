"""Google providers: Gemini through the Gemini API's ``streamGenerateContent``, streamed,
and Gemini Live, the speech-to-speech model over the BidiGenerateContent WebSocket.

``from rejoinder.providers import google; llm = google.LLM(model="gemini-2.5-flash")``
or ``google.Live(voice="Puck")`` goes in the session's ``llm=`` slot (``$GEMINI_API_KEY``,
else ``$GOOGLE_API_KEY``). Test them against ``rejoinder.testing.GeminiServer`` and
``GeminiLiveServer``, loopback servers speaking the same wire formats.
"""

from .chat import LLM
from .live import Live

__all__ = ["LLM", "Live"]
