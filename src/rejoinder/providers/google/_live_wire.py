"""The Gemini Live API wire format, without state: the JSON the client sends and reads.

Builders for every client message (``setup``, ``realtimeInput``, ``clientContent``,
``toolResponse``), the history replayed into a fresh session, and tolerant readers for
server messages (a reshaped field reads as absent, never as a crash). What to send when,
and what a server message means for the conversation, is ``_live_protocol``'s job;
nothing here holds per-connection state or does I/O.

Sources (read to learn the protocol; nothing is copied):

- Live API WebSockets reference: https://ai.google.dev/api/live
- Getting started with raw WebSockets (endpoint, ``?key=``, ``setup`` first):
  https://ai.google.dev/gemini-api/docs/live-api/get-started-websocket
- Tool use (``behavior: NON_BLOCKING``, ``scheduling`` SILENT / WHEN_IDLE / INTERRUPT):
  https://ai.google.dev/gemini-api/docs/live-api/tools and
  https://googleapis.github.io/dotnet-genai/api/Google.GenAI.Types.FunctionResponseScheduling.html
- Session limits, resumption, GoAway, context window compression:
  https://firebase.google.com/docs/ai-logic/live-api/sessions and
  https://googleapis.github.io/js-genai/release_docs/interfaces/types.LiveServerSessionResumptionUpdate.html
- Server content semantics (``interrupted``, ``generationComplete``, ``turnComplete``):
  https://googleapis.github.io/js-genai/release_docs/interfaces/types.LiveServerContent.html
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias
from urllib.parse import urlencode, urlsplit, urlunsplit

from ...models.chat import AgentHandoff, ChatContext, ChatMessage, FunctionCall, FunctionCallOutput
from ...models.realtime import RealtimeError, ResponseUsage
from ...models.tools import ToolDefinition
from .. import _json
from ._convert import to_schema

JSONObject: TypeAlias = dict[str, Any]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
ENDPOINT_PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
INPUT_RATE = 16000
"""The input audio the API takes: 16 kHz, 16-bit little-endian mono PCM."""
INPUT_MIME = f"audio/pcm;rate={INPUT_RATE}"
OUTPUT_RATE = 24000
"""The rate of the audio the model speaks (its ``mimeType`` says so too)."""

NonBlocking: TypeAlias = Literal["when_idle", "interrupt", "silent"]
"""How a non-blocking function's result is scheduled: ``when_idle`` (voiced once the
model is idle: the user is never cut off), ``interrupt`` (voiced at once, cutting off what
the model is saying) or ``silent`` (context only: nothing is said because of it)."""
NON_BLOCKING_CHOICES: tuple[str, ...] = ("when_idle", "interrupt", "silent")
Scheduling: TypeAlias = Literal["SILENT", "WHEN_IDLE", "INTERRUPT"]
SCHEDULING: Mapping[str, Scheduling] = {
    "when_idle": "WHEN_IDLE",
    "interrupt": "INTERRUPT",
    "silent": "SILENT",
}

MAX_HISTORY_CHARS = 32000
"""Replayed history is kept under this (the newest turns win): a fresh session's context
should leave room for the conversation to go on."""


# -- the endpoint ---------------------------------------------------------------------------


def live_url(base_url: str, api_key: str) -> str:
    """The WebSocket URL for an HTTP(S) or WS(S) root: the key goes in the query, as the
    API asks (it takes no header on this endpoint)."""
    parts = urlsplit(base_url.strip())
    schemes = {"https": "wss", "http": "ws", "wss": "wss", "ws": "ws"}
    scheme = schemes.get(parts.scheme.lower())
    if scheme is None or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) or ws(s) URL, got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith(ENDPOINT_PATH):
        path += ENDPOINT_PATH
    return urlunsplit((scheme, parts.netloc, path, urlencode({"key": api_key}), ""))


def redact(url: str) -> str:
    """``url`` without its key, for messages and logs."""
    return re.sub(r"([?&]key=)[^&]*", r"\1…", url)


def model_resource(model: str) -> str:
    """``models/<name>``, the form ``setup.model`` takes."""
    model = model.strip()
    if not model:
        raise ValueError("model must not be empty")
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


# -- setup ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetupOptions:
    """The part of ``setup`` fixed for a ``Live`` model's sessions."""

    model: str
    """As ``setup.model`` takes it: ``models/...``."""
    voice: str | None = None
    language: str | None = None
    temperature: float | None = None
    activity_detection: Mapping[str, Any] | None = field(default_factory=dict)
    """``realtimeInputConfig.automaticActivityDetection`` (the server's VAD); ``None``
    disables it: the client sends ``activityStart`` / ``activityEnd``."""
    input_transcription: bool = True
    output_transcription: bool = True
    context_window_compression: Mapping[str, Any] | None = None
    non_blocking: Mapping[str, NonBlocking] = field(default_factory=dict)
    """Function name → how its results are scheduled; those functions are declared
    ``NON_BLOCKING``."""


def setup_message(
    options: SetupOptions,
    instructions: str,
    tools: Sequence[ToolDefinition],
    handle: str | None,
) -> JSONObject:
    """The first message of every connection. ``handle``: resume that session (its
    conversation is restored on the server; the other settings may change)."""
    generation: JSONObject = {"responseModalities": ["AUDIO"]}
    speech: JSONObject = {}
    if options.voice:
        speech["voiceConfig"] = {"prebuiltVoiceConfig": {"voiceName": options.voice}}
    if options.language:
        speech["languageCode"] = options.language
    if speech:
        generation["speechConfig"] = speech
    if options.temperature is not None:
        generation["temperature"] = options.temperature
    setup: JSONObject = {"model": options.model, "generationConfig": generation}
    if instructions:
        setup["systemInstruction"] = {"parts": [{"text": instructions}]}
    declarations = [
        function_declaration(tool, non_blocking=tool.name in options.non_blocking) for tool in tools
    ]
    if declarations:
        setup["tools"] = [{"functionDeclarations": declarations}]
    detection = options.activity_detection
    setup["realtimeInputConfig"] = {
        "automaticActivityDetection": (
            {"disabled": True} if detection is None else {**dict(detection), "disabled": False}
        )
    }
    if options.input_transcription:
        setup["inputAudioTranscription"] = {}
    if options.output_transcription:
        setup["outputAudioTranscription"] = {}
    # Always asked for: the handles are what lets a connection be replaced seamlessly.
    setup["sessionResumption"] = {"handle": handle} if handle else {}
    if options.context_window_compression is not None:
        setup["contextWindowCompression"] = dict(options.context_window_compression)
    return {"setup": setup}


def function_declaration(tool: ToolDefinition, *, non_blocking: bool = False) -> JSONObject:
    """A ``FunctionDeclaration``; its JSON schema becomes the API's ``Schema`` subset the
    way ``google.LLM`` converts it (the Live API takes the same declarations)."""
    declaration: JSONObject = {"name": tool.name, "description": tool.description}
    parameters = to_schema(tool.parameters)
    # An OBJECT schema with no properties is refused: a function without arguments
    # declares no parameters at all.
    if parameters.get("type") != "OBJECT" or parameters.get("properties"):
        declaration["parameters"] = parameters
    if non_blocking:
        declaration["behavior"] = "NON_BLOCKING"
    return declaration


# -- realtime input, content, tool responses --------------------------------------------------


def audio_input(pcm: bytes) -> JSONObject:
    data = base64.b64encode(pcm).decode("ascii")
    return {"realtimeInput": {"audio": {"data": data, "mimeType": INPUT_MIME}}}


def activity_start() -> JSONObject:
    return {"realtimeInput": {"activityStart": {}}}


def activity_end() -> JSONObject:
    return {"realtimeInput": {"activityEnd": {}}}


def text_turn(role: Literal["user", "model"], text: str) -> JSONObject:
    return {"role": role, "parts": [{"text": text}]}


def image_turn(mime_type: str, data: str) -> JSONObject:
    """A user turn that shows an image (base64 ``data``), as an inline part."""
    return {"role": "user", "parts": [{"inlineData": {"mimeType": mime_type, "data": data}}]}


def client_content(turns: Sequence[JSONObject], *, turn_complete: bool) -> JSONObject:
    """Turns appended to the conversation; ``turn_complete`` asks the model to answer now
    (with no turns: answer what is there)."""
    content: JSONObject = {"turnComplete": turn_complete}
    if turns:
        content["turns"] = list(turns)
    return {"clientContent": content}


def function_response(
    call_id: str,
    name: str,
    output: str,
    *,
    is_error: bool = False,
    scheduling: Scheduling | None = None,
) -> JSONObject:
    """One ``functionResponses`` entry. The API reads ``output`` / ``error`` keys of the
    response object. ``scheduling`` (non-blocking functions only) goes both in the
    ``FunctionResponse`` field of the reference and inside the response object, where
    the tool-use guide's examples put it: each server reads one of them."""
    response: JSONObject = {"error": output} if is_error else {"output": output}
    entry: JSONObject = {"id": call_id, "name": name, "response": response}
    if scheduling is not None:
        response["scheduling"] = scheduling
        entry["scheduling"] = scheduling
    return entry


def tool_response(responses: Sequence[JSONObject]) -> JSONObject:
    return {"toolResponse": {"functionResponses": list(responses)}}


def tool_output_note(name: str, output: str, *, is_error: bool = False) -> str:
    """A tool's result told as text, for a call the server no longer knows."""
    return f"(The tool {name} {'failed' if is_error else 'returned'}: {output})"


def history_turns(history: ChatContext, limit: int = MAX_HISTORY_CHARS) -> list[JSONObject]:
    """The conversation as ``user``/``model`` turns for a fresh session (one that could
    not be resumed). There is no system role mid-session and a replayed tool call could
    not be paired with a live one, so system text and tool traffic are told as short
    user-side notes. Consecutive turns of one role are merged; the newest are kept."""
    turns: list[tuple[Literal["user", "model"], str]] = []
    for item in history.items:
        role: Literal["user", "model"] = "user"
        if isinstance(item, ChatMessage):
            text = item.content.strip()
            if not text:
                continue
            if item.role == "assistant":
                role = "model"
            elif item.role != "user":
                text = f"(Context: {text})"
        elif isinstance(item, FunctionCall):
            text = f"(The assistant called the tool {item.name} with {item.arguments or '{}'}.)"
        elif isinstance(item, FunctionCallOutput):
            text = tool_output_note(item.name, item.output, is_error=item.is_error)
        elif isinstance(item, AgentHandoff):
            continue  # bookkeeping for the session, not part of the conversation
        else:
            continue
        turns.append((role, text))
    kept: list[tuple[Literal["user", "model"], str]] = []
    size = 0
    for role, text in reversed(turns):
        size += len(text)
        if size > limit and kept:
            break
        kept.append((role, text))
    kept.reverse()
    merged: list[JSONObject] = []
    for role, text in kept:
        if merged and merged[-1]["role"] == role:
            merged[-1]["parts"].append({"text": text})
        else:
            merged.append(text_turn(role, text))
    return merged


# -- reading server messages ------------------------------------------------------------------


def parse_message(data: str | bytes) -> JSONObject:
    """One frame → its message object. The service sends JSON in binary frames as well as
    text ones. Raises ``ValueError`` for anything that is not a JSON object."""
    try:
        message: object = _json.loads(data)
    except _json.NestedTooDeeply:
        raise ValueError(f"a server message is nested too deeply: {excerpt(data)}") from None
    except ValueError:
        raise ValueError(f"a server message is not JSON: {excerpt(data)}") from None
    if not isinstance(message, dict):
        raise ValueError(f"a server message is not a JSON object: {excerpt(data)}")
    return message


def excerpt(data: str | bytes, limit: int = 160) -> str:
    text = data if isinstance(data, str) else data[: limit * 4].decode("utf-8", "replace")
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def as_dict(value: object) -> JSONObject:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def is_true(value: object) -> bool:
    return value is True


def duration_seconds(value: object) -> float | None:
    """A protobuf ``Duration`` as JSON: ``"50s"``, ``"1.5s"`` (or a bare number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.endswith("s"):
        try:
            seconds = float(value[:-1])
        except ValueError:
            return None
    else:
        return None
    return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None


def audio_rate(mime: object) -> int | None:
    """The rate of an ``audio/pcm;rate=24000`` blob (24 kHz when it names none); None for
    anything that is not PCM audio."""
    if not isinstance(mime, str) or not mime.startswith("audio/pcm"):
        return None
    match = re.search(r"rate=(\d+)", mime)
    if match is None:
        return OUTPUT_RATE
    rate = int(match.group(1))
    return rate if 0 < rate <= 192000 else None


def usage_of(value: object) -> ResponseUsage | None:
    """``usageMetadata`` as ``ResponseUsage``: totals, the text/audio split of each side
    where reported, and cached input. Anything malformed reads as not reported."""
    if not isinstance(value, dict):
        return None

    def count(key: str) -> int | None:
        number = value.get(key)
        return number if isinstance(number, int) and not isinstance(number, bool) else None

    def split(key: str, modality: str) -> int | None:
        total: int | None = None
        for entry in as_list(value.get(key)):
            entry = as_dict(entry)
            tokens = entry.get("tokenCount")
            if entry.get("modality") == modality and isinstance(tokens, int):
                total = (total or 0) + tokens
        return total

    return ResponseUsage(
        input_tokens=count("promptTokenCount") or 0,
        output_tokens=count("responseTokenCount") or 0,
        input_text_tokens=split("promptTokensDetails", "TEXT"),
        input_audio_tokens=split("promptTokensDetails", "AUDIO"),
        output_text_tokens=split("responseTokensDetails", "TEXT"),
        output_audio_tokens=split("responseTokensDetails", "AUDIO"),
        cached_tokens=count("cachedContentTokenCount"),
    )


# -- how a connection ended ---------------------------------------------------------------------

_FATAL_WORDS = ("api key", "api_key", "permission", "quota", "billing", "resource_exhausted")


def close_error(code: int | None, reason: str, *, during_setup: bool) -> RealtimeError:
    """The error a WebSocket close from the service stands for. The service reports its
    errors as close frames (1007 invalid argument, 1008 policy: a bad key, an unknown or
    denied model, 1011 internal). Fatal: the key or the account cannot be used, and,
    during set-up, an invalid argument or a policy refusal (the same setup would be
    refused again): retrying cannot help."""
    text = reason.strip() or "no reason given"
    lowered = text.lower()
    refused_setup = during_setup and code in (1007, 1008)
    fatal = refused_setup or any(word in lowered for word in _FATAL_WORDS)
    what = "refused the session" if during_setup else "closed the connection"
    label = f"code {code}" if code is not None else "no close code"
    return RealtimeError(
        f"Gemini Live {what} ({label}): {text}",
        fatal=fatal,
        code=f"ws_{code}" if code is not None else None,
    )
