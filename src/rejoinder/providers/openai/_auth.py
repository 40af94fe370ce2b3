"""Where an OpenAI client's API key comes from: one rule for every client."""

from __future__ import annotations

import os


def api_key_from(api_key: str | None) -> str | None:
    """The key given, else ``$OPENAI_API_KEY``; None when neither is set (or empty)."""
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    return key or None


def require_api_key(api_key: str | None, client: str) -> str:
    key = api_key_from(api_key)
    if key is None:
        raise ValueError(f"{client} needs an API key: pass api_key=... or set OPENAI_API_KEY")
    return key
