"""Anthropic providers: Claude through the Messages API, streamed.

``from rejoinder.providers import anthropic; llm = anthropic.LLM(model="claude-sonnet-4-5")``
goes in the session's ``llm=`` slot (``$ANTHROPIC_API_KEY``). Test it against
``rejoinder.testing.AnthropicServer``, a loopback server speaking the same wire format.
"""

from .chat import LLM

__all__ = ["LLM"]
