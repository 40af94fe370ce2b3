"""Google providers: Gemini through the Gemini API's ``streamGenerateContent``, streamed.

``from rejoinder.providers import google; llm = google.LLM(model="gemini-2.5-flash")``
goes in the session's ``llm=`` slot (``$GEMINI_API_KEY``, else ``$GOOGLE_API_KEY``). Test
it against ``rejoinder.testing.gemini_server.GeminiServer``, a loopback server speaking
the same wire format.
"""

from .chat import LLM
from .live import Live

__all__ = ["LLM", "Live"]
