"""GPT-Live wire protocol, sans I/O: the endpoint, client event builders, startup history,
and tolerant readers for server events.

Section numbers (§) refer to the GPT-Live protocol reference. Nothing here does I/O or
imports numpy/aiohttp, so it is cheap to import and usable without a socket.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from ...models import AgentHandoff, ChatContext, ChatMessage, FunctionCall, FunctionCallOutput
from ...models.tools import ToolDefinition
from .. import _json
from .._retry import RetryPolicy
from ._realtime_wire import PCM, AudioFormat

logger = logging.getLogger("rejoinder.providers.openai.gpt_live")

JSONObject: TypeAlias = dict[str, Any]

SAMPLE_RATE = 24000
CHUNK_SAMPLES = 2400
"""100 ms of input audio per ``session.input_audio.append`` (§1.4)."""
SERVICE_TIERS = ("auto", "default", "flex", "priority", "ultrafast")
"""The ``OpenAI-Service-Tier`` values (§1.2), also those of the backend's
``service_tier`` (§2.1)."""
MAX_HISTORY_ITEMS = 128
MAX_HISTORY_CHARS = 24000
"""§2.1 caps startup history at 8192 tokens; ~3 characters a token keeps us under it."""
MAX_APPEND_CHARS = 1500
"""§2.5 caps an append at 500 tokens; ~3 characters a token (JSON is dense) stays under."""
_NARRATED_OUTPUT_CHARS = 600

FATAL_ERRORS = frozenset(
    {
        "insufficient_quota",
        "credit_balance_exhausted",
        "invalid_api_key",
        "account_deactivated",
        "billing_hard_limit_reached",
        "forbidden",
    }
)


# -- connection ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str
    azure: bool


def live_endpoint(base_url: str) -> Endpoint:
    """The WebSocket URL for an HTTP(S) base URL (§1.1)."""
    parts = urlsplit(base_url.strip())
    schemes = {"https": "wss", "http": "ws", "wss": "wss", "ws": "ws"}
    scheme = schemes.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) or ws(s) URL, got {base_url!r}")
    azure = (parts.hostname or "").lower().endswith(".openai.azure.com")
    path = parts.path.rstrip("/")
    if azure and path in ("", "/openai"):
        # Azure serves GPT-Live on its v1 surface only; /openai/live/sessions is a 404.
        path = "/openai/v1"
    if not path.endswith("/live/sessions"):
        path += "/live/sessions"
    return Endpoint(urlunsplit((scheme, parts.netloc, path, "", "")), azure)


def handshake_headers(
    api_key: str, *, azure: bool, service_tier: str | None = None
) -> dict[str, str]:
    """§1.2; ``service_tier`` is the voice session's tier (``None``: the account's)."""
    # Azure answers a bearer API key with a redirect to ?api-key=, which WebSocket
    # clients do not follow (§1.2), so it gets its own header.
    auth = {"api-key": api_key} if azure else {"Authorization": f"Bearer {api_key}"}
    headers = {**auth, "User-Agent": "rejoinder/0.1"}
    if service_tier is not None:
        headers["OpenAI-Service-Tier"] = service_tier
    return headers


def check_service_tier(value: str | None, name: str) -> str | None:
    """``value`` if it is ``None`` or one of ``SERVICE_TIERS``; else a ``ValueError``."""
    if value is not None and value not in SERVICE_TIERS:
        choices = ", ".join(repr(tier) for tier in SERVICE_TIERS)
        raise ValueError(f"GPTLive: {name} must be None or one of {choices}, got {value!r}")
    return value


Delegation = Literal["responses", "client"]
"""Where the voice model delegates work (§2.1 ``delegation.type``)."""


@dataclass(frozen=True, slots=True)
class Options:
    """A ``GPTLive`` model's settings, shared by its sessions."""

    model: str
    api_key: str
    endpoint: Endpoint
    voice: str | Mapping[str, str]
    backend: BackendSettings
    connect_timeout: float
    close_timeout: float
    max_reconnect_attempts: int
    reconnect_backoff: float
    user_turn_silence: float
    burst_threshold: float
    burst_end_silence: float
    burst_pause_after: float
    retry: RetryPolicy
    """Retries of the first connection (``start``); reconnects use the two fields above."""
    delegation: Delegation = "responses"
    recycle_after: float | None = None
    """Replace the connection at the first quiet moment after this many seconds."""
    audio_format: str = "auto"
    """``pcm``, ``pcmu``, ``pcma``, or ``auto`` (chosen from the microphone's rate)."""
    service_tier: str | None = None
    """The voice session's tier: the ``OpenAI-Service-Tier`` header (§1.2)."""


# -- errors -------------------------------------------------------------------------------


def is_fatal(error: Mapping[str, Any]) -> bool:
    """§3.3: check ``code`` and ``type``: the service has changed one and kept the other."""
    # `in` a frozenset hashes the value: a reshaped (list, object) code must not raise.
    return any(
        isinstance(value, str) and value in FATAL_ERRORS
        for value in (error.get("code"), error.get("type"))
    )


def describe_error(error: Mapping[str, Any]) -> str:
    message = error.get("message")
    text = message if isinstance(message, str) and message else "unspecified error"
    kind = error.get("code") or error.get("type")
    return f"{text} ({kind})" if isinstance(kind, str) and kind else text


def error_code(error: Mapping[str, Any]) -> str | None:
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
    return None


# -- client events ------------------------------------------------------------------------

# There is no "speak now" event (§2.5); a commentary append that asks for an immediate
# answer is how the known client makes the model talk first.
SPEAK_NOW = "Answer the caller now, aloud, without waiting for them to speak."
ANSWER_TYPED = (
    "The caller just typed a message (the last 'user:' line in your context). "
    "Answer it now, aloud, without waiting for them to speak."
)
NEW_INSTRUCTIONS = "Your instructions have changed. From now on, follow these instead:\n"


def clip(text: str, limit: int = MAX_APPEND_CHARS) -> str:
    """Shorten ``text`` to ``limit`` characters, at a word boundary when one is near."""
    if len(text) <= limit:
        return text
    marker = " … [truncated]"
    head = text[: limit - len(marker)]
    cut = head.rfind(" ")
    if cut > len(head) * 0.8:
        head = head[:cut]
    return head.rstrip() + marker


def append_event(
    kind: Literal["instructions", "thinking", "commentary"],
    content: str,
    event_id: str,
    delegation_id: str | None = None,
) -> JSONObject:
    # delegation_id is the one optional field sent even when null (§1.3, §2.5).
    return {
        "type": f"session.{kind}.append",
        "event_id": event_id,
        "delegation_id": delegation_id,
        "content": clip(content),
    }


def mute_event(muted: bool, event_id: str) -> JSONObject:
    """§2.4: the service hears silence in place of the microphone while muted."""
    kind = "mute" if muted else "unmute"
    return {"type": f"session.input_audio.{kind}", "event_id": event_id}


def tool_specs(tools: Iterable[ToolDefinition]) -> list[JSONObject]:
    """Responses-API tools in flat function form (§2.1)."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
        for tool in tools
    ]


def tool_choice_wire(choice: str | Mapping[str, Any]) -> str | JSONObject:
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return choice
        return {"type": "function", "name": choice}
    return dict(choice)


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """``delegation.responses`` (§2.1). ``None`` fields are left out: service default."""

    model: str | None = None
    instructions: str | None = None
    tool_choice: str | Mapping[str, Any] = "auto"
    parallel_tool_calls: bool | None = True
    reasoning: Mapping[str, Any] | None = None
    text: Mapping[str, Any] | None = None
    service_tier: str | None = None
    max_output_tokens: int | None = None

    def to_wire(self, tools: Sequence[ToolDefinition]) -> JSONObject:
        wire: JSONObject = {}
        if self.model is not None:
            wire["model"] = self.model
        if self.instructions is not None:
            wire["instructions"] = self.instructions
        if tools:
            wire["tools"] = tool_specs(tools)
        wire["tool_choice"] = tool_choice_wire(self.tool_choice)
        optional: dict[str, object] = {
            "parallel_tool_calls": self.parallel_tool_calls,
            "reasoning": dict(self.reasoning) if self.reasoning is not None else None,
            "text": dict(self.text) if self.text is not None else None,
            "service_tier": self.service_tier,
            "max_output_tokens": self.max_output_tokens,
        }
        wire.update({key: value for key, value in optional.items() if value is not None})
        return wire


def session_start(
    event_id: str,
    *,
    model: str,
    instructions: str,
    history: ChatContext,
    voice: str | Mapping[str, str],
    backend: BackendSettings,
    tools: Sequence[ToolDefinition],
    audio: AudioFormat = PCM,
    delegation: Delegation = "responses",
) -> JSONObject:
    """``audio``: the one format of input and output (§1.4): 24 kHz PCM, or G.711 at
    8 kHz (``{"type": "audio/pcmu", "rate": 8000}``, or ``audio/pcma``). ``delegation``
    ``"client"``: work goes to the application, so no backend settings (§4.2)."""
    session: JSONObject = {"model": model}
    if instructions:
        session["instructions"] = instructions
    items = history_input(history)
    if items:
        session["input"] = items
    session["audio"] = {
        "format": {"type": audio.mime, "rate": audio.rate},
        "output": {"voice": voice if isinstance(voice, str) else dict(voice)},
    }
    if delegation == "client":
        session["delegation"] = {"type": "client"}
    else:
        session["delegation"] = {"type": "responses", "responses": backend.to_wire(tools)}
    return {"type": "session.start", "event_id": event_id, "session": session}


def tools_update(event_id: str, tools: Sequence[ToolDefinition]) -> JSONObject:
    """Sparse ``session.update`` carrying the new tool list alone (§2.2)."""
    return {
        "type": "session.update",
        "event_id": event_id,
        "session": {"delegation": {"type": "responses", "responses": {"tools": tool_specs(tools)}}},
    }


def history_input(history: ChatContext) -> list[JSONObject]:
    """Startup ``input`` items (§2.1): newest kept, within the item and size caps.

    There is no system role and no tool-call item type: system text becomes developer
    text, and tool traffic is narrated as short developer prose. Handoffs are skipped.
    """
    items: list[JSONObject] = []
    for item in history.items:
        if isinstance(item, ChatMessage):
            if item.content.strip():
                items.append(_message(item.role, item.content))
        elif isinstance(item, FunctionCall):
            items.append(
                _message(
                    "developer",
                    f"Earlier the tool {item.name} was called with "
                    f"arguments {clip(item.arguments, _NARRATED_OUTPUT_CHARS)}.",
                )
            )
        elif isinstance(item, FunctionCallOutput):
            verb = "failed with" if item.is_error else "returned"
            result = clip(item.output, _NARRATED_OUTPUT_CHARS)
            items.append(_message("developer", f"The tool {item.name} {verb}: {result}"))
        elif isinstance(item, AgentHandoff):
            continue
    kept: list[JSONObject] = []
    size = 0
    for wire in reversed(items[-MAX_HISTORY_ITEMS:]):
        size += len(wire["content"][0]["text"])
        if size > MAX_HISTORY_CHARS and kept:
            break
        kept.append(wire)
    kept.reverse()
    return kept


def _message(role: str, text: str) -> JSONObject:
    wire_role = "developer" if role == "system" else role
    part = "output_text" if wire_role == "assistant" else "input_text"
    return {"type": "message", "role": wire_role, "content": [{"type": part, "text": text}]}


def parse_server_event(text: str) -> JSONObject:
    """One text frame → its event object. Raises ``ValueError`` for anything else."""
    try:
        event: object = _json.loads(text)
    except _json.NestedTooDeeply:
        raise ValueError(f"malformed server frame (nested too deeply): {_excerpt(text)}") from None
    except ValueError:
        raise ValueError(f"malformed server frame (not JSON): {_excerpt(text)}") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ValueError(f"malformed server frame (no event type): {_excerpt(text)}")
    return event


def _excerpt(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def as_dict(value: object) -> JSONObject:
    """Server events are read without validation (§1.3): a reshaped field reads as empty."""
    return value if isinstance(value, dict) else {}


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def as_ms(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
