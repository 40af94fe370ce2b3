"""OpenAI providers: the Chat Completions API (and compatible servers), GPT-Live and the
Realtime API.

``from rejoinder.providers import openai; llm = openai.LLM(model="gpt-4o-mini")``;
``openai.GPTLive(...)`` and ``openai.Realtime(...)`` go in the same ``llm=`` slot.
"""

from .chat import LLM, Timeout
from .gpt_live import GPTLive
from .realtime import Realtime

__all__ = ["LLM", "GPTLive", "Realtime", "Timeout"]
