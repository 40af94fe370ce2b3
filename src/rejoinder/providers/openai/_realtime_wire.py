"""The OpenAI Realtime wire format, without state: the JSON the client sends and reads.

Its one job is the shape of the messages: builders for every client event (``session.update``,
history replay with tool calls narrated as notes, ``response.create`` ...), and tolerant
readers for the fields of server events (``ServerError``, ``require_str`` ...). What to send
when, and what a server event means for the conversation, is ``_realtime_protocol``'s job;
nothing here holds per-connection state or does I/O.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ...models.chat import (
    AgentHandoff,
    ChatContext,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    new_id,
)
from ...models.realtime import ResponseUsage

if TYPE_CHECKING:
    from ...models.audio import PCM16, AudioFrame
    from ...models.tools import ToolDefinition

JSONObject = dict[str, Any]

SAMPLE_RATE = 24000
"""The only PCM rate the API accepts and produces."""
PCM_FORMAT: Mapping[str, Any] = {"type": "audio/pcm", "rate": SAMPLE_RATE}
G711_RATE = 8000
"""G.711 (``audio/pcmu``, ``audio/pcma``) is telephone audio: 8 kHz, one byte a sample."""

AudioFormatName = Literal["pcm", "pcmu", "pcma"]
AudioFormatOption = Literal["pcm", "pcmu", "pcma", "auto"]
AUDIO_FORMAT_CHOICES = ("pcm", "pcmu", "pcma", "auto")
"""The ``audio_format`` values ``openai.Realtime`` and ``GPTLive`` accept."""


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """One wire audio format, shared by the Realtime API and GPT-Live (one per session,
    for input and output alike).

    ``pcm`` is 16-bit little-endian mono PCM at 24 kHz; ``pcmu``/``pcma`` are G.711
    μ-law/A-law at 8 kHz, one byte a sample. The GA Realtime API declares them as
    ``{"type": "audio/pcm", "rate": 24000}``, ``{"type": "audio/pcmu"}`` and
    ``{"type": "audio/pcma"}`` (``session.audio.input.format`` and ``.output.format``:
    https://developers.openai.com/api/reference/resources/realtime/client-events).
    """

    name: AudioFormatName
    rate: int

    @property
    def mime(self) -> str:
        return f"audio/{self.name}"

    @property
    def g711(self) -> bool:
        return self.name != "pcm"

    @property
    def chunk_samples(self) -> int:
        """100 ms of audio: the size of one input append."""
        return self.rate // 10

    def realtime_wire(self) -> JSONObject:
        """The Realtime API's format object (G.711 has no ``rate``: it is always 8 kHz)."""
        return dict(PCM_FORMAT) if self.name == "pcm" else {"type": self.mime}

    def encode(self, pcm: PCM16) -> bytes:
        """int16 mono samples at ``rate`` → wire bytes."""
        if self.name == "pcm":
            return pcm.astype("<i2", copy=False).tobytes()
        from ...models import g711

        return g711.ulaw_encode(pcm) if self.name == "pcmu" else g711.alaw_encode(pcm)

    def decode(self, data: bytes) -> AudioFrame:
        """Wire bytes → a mono ``AudioFrame`` at ``rate``. ``ValueError``: odd PCM bytes."""
        from ...models.audio import AudioFrame

        if self.name == "pcm":
            return AudioFrame.from_pcm(data, self.rate)
        from ...models import g711

        pcm = g711.ulaw_decode(data) if self.name == "pcmu" else g711.alaw_decode(data)
        return AudioFrame(pcm, self.rate)


AUDIO_FORMATS: Mapping[str, AudioFormat] = {
    "pcm": AudioFormat("pcm", SAMPLE_RATE),
    "pcmu": AudioFormat("pcmu", G711_RATE),
    "pcma": AudioFormat("pcma", G711_RATE),
}
PCM = AUDIO_FORMATS["pcm"]


def check_audio_format(option: str, owner: str) -> str:
    """``option`` if it is one of ``AUDIO_FORMAT_CHOICES``; else a ``ValueError``."""
    if option not in AUDIO_FORMAT_CHOICES:
        choices = ", ".join(repr(choice) for choice in AUDIO_FORMAT_CHOICES)
        raise ValueError(f"{owner}: audio_format must be one of {choices}, got {option!r}")
    return option


def choose_audio_format(option: str, input_rate: int | None) -> AudioFormat:
    """The session's format. ``auto``: G.711 μ-law when the microphone runs at 8 kHz (a
    phone call: its audio then crosses with no resampling either way), else 24 kHz PCM,
    which loses nothing of a wideband microphone."""
    if option == "auto":
        return AUDIO_FORMATS["pcmu"] if input_rate == G711_RATE else PCM
    return AUDIO_FORMATS[option]


# Error codes (or types) after which the same connection settings can never work.
FATAL_ERROR_CODES = frozenset(
    {"invalid_api_key", "insufficient_quota", "account_deactivated", "forbidden"}
    | {"billing_hard_limit_reached"}
)


# -- client event builders ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AudioSettings:
    """The per-model part of the session configuration (fixed for a session's lifetime)."""

    voice: str
    turn_detection: Mapping[str, Any] | None
    transcription_model: str | None


def session_config(
    settings: AudioSettings,
    instructions: str,
    tools: Sequence[ToolDefinition],
    audio: AudioFormat = PCM,
) -> JSONObject:
    """The complete ``session`` object of a GA ``session.update``; ``audio`` is the format
    of input and output alike."""
    turn_detection = dict(settings.turn_detection) if settings.turn_detection is not None else None
    transcription = (
        {"model": settings.transcription_model} if settings.transcription_model else None
    )
    return {
        "type": "realtime",
        "output_modalities": ["audio"],
        "instructions": instructions,
        "audio": {
            "input": {
                "format": audio.realtime_wire(),
                "turn_detection": turn_detection,
                "transcription": transcription,
            },
            "output": {"format": audio.realtime_wire(), "voice": settings.voice},
        },
        **tools_config(tools),
    }


def tools_config(tools: Sequence[ToolDefinition]) -> JSONObject:
    """``tools`` (the flat Realtime function form) and ``tool_choice``."""
    return {
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            }
            for tool in tools
        ],
        "tool_choice": "auto",
    }


def session_update(session: JSONObject) -> JSONObject:
    return {"type": "session.update", "event_id": new_id("evt"), "session": session}


def message_item(role: Literal["user", "assistant", "system"], text: str) -> JSONObject:
    # User and system content is input; assistant content is what the model produced.
    content_type = "output_text" if role == "assistant" else "input_text"
    return {
        "type": "message",
        "role": role,
        "content": [{"type": content_type, "text": text}],
    }


def image_item(data_url: str) -> JSONObject:
    """A user message that shows an image (``input_image``: the API takes a data URL)."""
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": data_url}],
    }


def function_call_output_item(call_id: str, output: str) -> JSONObject:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def item_create(item: JSONObject) -> JSONObject:
    return {"type": "conversation.item.create", "event_id": new_id("evt"), "item": item}


def item_truncate(item_id: str, audio_end_ms: int) -> JSONObject:
    return {
        "type": "conversation.item.truncate",
        "event_id": new_id("evt"),
        "item_id": item_id,
        "content_index": 0,
        "audio_end_ms": audio_end_ms,
    }


def response_create(instructions: str | None = None) -> JSONObject:
    event: JSONObject = {"type": "response.create", "event_id": new_id("evt")}
    if instructions is not None:
        event["response"] = {"instructions": instructions}
    return event


def response_cancel(response_id: str) -> JSONObject:
    return {"type": "response.cancel", "event_id": new_id("evt"), "response_id": response_id}


def audio_append(pcm: bytes) -> JSONObject:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")}


def audio_commit() -> JSONObject:
    return {"type": "input_audio_buffer.commit"}


# -- history replay -------------------------------------------------------------------------


def tool_output_note(name: str, output: str, *, is_error: bool = False) -> str:
    """A tool's result told as a system note, for a call the server does not know."""
    outcome = "failed" if is_error else "returned"
    return f"(The tool {name} {outcome}: {output})"


def history_items(history: ChatContext) -> list[JSONObject]:
    """``conversation.item.create`` events that replay a conversation into a new session.

    Tool calls and their outputs are narrated as short system notes rather than sent as
    ``function_call`` items: the server checks call/output pairing and call ids, and a
    history cut at any point (a call still running, an output whose call was trimmed)
    must never make the whole re-seed fail.
    """
    events: list[JSONObject] = []
    for item in history.items:
        if isinstance(item, ChatMessage):
            if not item.content and not item.images:
                continue
            role: Literal["user", "assistant", "system"] = "system"
            if item.role == "user" or item.role == "assistant":
                role = item.role
            if item.content:
                events.append(item_create(message_item(role, item.content)))
            if role == "user":
                # Shown images replay with the words (links cannot: the API takes bytes).
                events.extend(
                    item_create(image_item(image.data_url()))
                    for image in item.images
                    if image.data is not None
                )
        elif isinstance(item, FunctionCall):
            note = f"(The assistant called the tool {item.name} with {item.arguments or '{}'}.)"
            events.append(item_create(message_item("system", note)))
        elif isinstance(item, FunctionCallOutput):
            note = tool_output_note(item.name, item.output, is_error=item.is_error)
            events.append(item_create(message_item("system", note)))
        elif isinstance(item, AgentHandoff):
            continue  # bookkeeping for the session, not part of the conversation
    return events


# -- server event readers -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerError:
    """The ``error`` object of an ``error`` event."""

    message: str
    code: str | None
    kind: str | None
    event_id: str | None
    """The client event it answers, if any."""

    @property
    def fatal(self) -> bool:
        return self.code in FATAL_ERROR_CODES or self.kind in FATAL_ERROR_CODES

    @classmethod
    def parse(cls, event: JSONObject) -> ServerError:
        error = event.get("error")
        error = error if isinstance(error, dict) else {}
        return cls(
            message=opt_str(error, "message") or "no message",
            code=opt_str(error, "code"),
            kind=opt_str(error, "type"),
            event_id=opt_str(error, "event_id"),
        )


class Malformed(Exception):
    """A server event lacks a field it must have, or has it in the wrong type."""


def require_obj(event: JSONObject, key: str) -> JSONObject:
    value = event.get(key)
    if not isinstance(value, dict):
        raise Malformed(f"`{key}` is not an object")
    return value


def require_str(event: JSONObject, key: str) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        raise Malformed(f"`{key}` is missing or not a string")
    return value


def opt_str(event: JSONObject, key: str) -> str | None:
    value = event.get(key)
    return value if isinstance(value, str) else None


def status_error(status: str, details: JSONObject) -> str | None:
    """What went wrong with a response, from its ``status`` and ``status_details``."""
    error = details.get("error")
    if isinstance(error, dict):
        message = opt_str(error, "message") or opt_str(error, "code")
        if message:
            return message
    if status == "failed":
        return "the response failed (no details)"
    if status == "incomplete":
        return opt_str(details, "reason") or "the response is incomplete"
    return None


def response_usage(value: object) -> ResponseUsage | None:
    """A ``response.done``'s ``usage``: totals, and the text/audio split (and cached input)
    where reported. Anything malformed reads as not reported."""
    if not isinstance(value, dict):
        return None

    def count(obj: object, key: str) -> int | None:
        number = obj.get(key) if isinstance(obj, dict) else None
        return number if isinstance(number, int) and not isinstance(number, bool) else None

    inputs, outputs = value.get("input_token_details"), value.get("output_token_details")
    return ResponseUsage(
        input_tokens=count(value, "input_tokens") or 0,
        output_tokens=count(value, "output_tokens") or 0,
        input_text_tokens=count(inputs, "text_tokens"),
        input_audio_tokens=count(inputs, "audio_tokens"),
        output_text_tokens=count(outputs, "text_tokens"),
        output_audio_tokens=count(outputs, "audio_tokens"),
        cached_tokens=count(inputs, "cached_tokens"),
    )
