"""Where an OpenAI client's API key and base URL come from: one rule for every client."""

from __future__ import annotations

import os

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def api_key_from(api_key: str | None) -> str | None:
    """The key given, else ``$OPENAI_API_KEY``; None when neither is set (or empty)."""
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    return key or None


def require_api_key(api_key: str | None, client: str) -> str:
    key = api_key_from(api_key)
    if key is None:
        raise ValueError(f"{client} needs an API key: pass api_key=... or set OPENAI_API_KEY")
    return key


def base_url_from(base_url: str | None) -> str:
    """The URL given, else ``$OPENAI_BASE_URL``, else ``DEFAULT_BASE_URL`` (an empty value
    counts as unset, as an empty ``OPENAI_BASE_URL=`` line in a shell or .env file means
    "no override"). Each client derives its own endpoint (HTTP or WebSocket) from it."""
    return base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
