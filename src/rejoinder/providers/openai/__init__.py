"""OpenAI providers: the Chat Completions API (and compatible servers), GPT-Live, the
Realtime API, and speech (transcriptions, text to speech).

``from rejoinder.providers import openai; llm = openai.LLM(model="gpt-4o-mini")``;
``openai.GPTLive(...)`` and ``openai.Realtime(...)`` go in the same ``llm=`` slot;
``openai.STT()`` and ``openai.TTS()`` in ``stt=`` and ``tts=``.
"""

from .._timeout import Timeout
from .chat import LLM
from .gpt_live import GPTLive
from .realtime import Realtime
from .stt import STT
from .tts import TTS

__all__ = ["LLM", "STT", "TTS", "GPTLive", "Realtime", "Timeout"]
