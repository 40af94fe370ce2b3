"""OpenAI-compatible providers.

``from rejoinder.providers import openai; llm = openai.LLM(model="gpt-4o-mini")``
"""

from .chat import LLM, Timeout

__all__ = ["LLM", "Timeout"]
