"""Conversions between rejoinder's provider-neutral types and the Gemini
``generateContent`` request (https://ai.google.dev/api/generate-content). Pure: tested by
feeding values.

A request the API refuses is answered with HTTP 400, which in a voice agent means a turn
with no reply, so the conversion guarantees the shape instead of passing the context
through:

- ``systemInstruction`` holds the context's leading system and developer messages; one
  that comes later stays where it was, as a user text part.
- ``contents`` alternate between ``user`` and ``model``: consecutive messages of one role
  become one content of several parts. The conversation starts and ends with a ``user``
  content (``(the conversation starts)`` before a greeting, ``(go on)`` after the agent's
  own last words), and empty texts are left out.
- Function calling (https://ai.google.dev/gemini-api/docs/function-calling): the calls
  of one step are ``functionCall`` parts of one ``model`` content, and the very next
  ``user`` content starts with their ``functionResponse`` parts, in the same order, with
  the call's name (``{"output": ...}``, or ``{"error": ...}`` for a failed tool). A call
  whose output is not in the context (interrupted, still running) is left out with its
  output, as is an output whose call is missing or was answered already. A call that
  comes after an earlier call's output is a new step: a new ``model`` content.
- Thought signatures (https://ai.google.dev/gemini-api/docs/thought-signatures): a call
  part goes back with the ``thoughtSignature`` it came with (from the LLM's
  ``CallMemory``), and with Gemini's own call ``id`` when it gave one. Gemini 3 answers
  400 when the first call of a step has none; a step the model did not make in this
  form (another model's or instance's calls, a background tool's final result, a signed
  call left out) gets ``skip_thought_signature_validator`` on its first call, the value
  the documentation gives for such history.
- A user message's images (``ChatMessage.images``) go before its text, as the image
  guide advises (https://ai.google.dev/gemini-api/docs/image-understanding): bytes as
  ``inlineData {mimeType, data}``, a URL as ``fileData {fileUri, mimeType}``. Gemini
  fetches a ``fileUri`` that is a Files API URI, a public or signed ``https`` URL, or a
  registered Cloud Storage object
  (https://ai.google.dev/gemini-api/docs/file-input-methods); a plain ``http`` URL or a
  private page is refused by the API, not here. The ``mimeType`` of a URL image is its
  own, else guessed from the URL's extension, else left out.
- Tools are ``functionDeclarations``. Their ``parameters`` take a subset of the OpenAPI
  3.0 schema (https://ai.google.dev/api/caching#Schema), so ``to_schema`` rewrites our
  JSON Schema into it: ``$ref`` to ``$defs``/``definitions`` inlined (a recursive one
  becomes an object without properties), ``allOf`` merged, ``oneOf`` read as ``anyOf``,
  a ``null`` type or member as ``nullable``, ``const`` and string ``enum`` as ``enum``
  (other enums are named in the description), a ``type`` list as ``anyOf``, tuples as
  arrays, upper-case type names; what it refuses is dropped (``additionalProperties``,
  ``$schema``, ``title``, ``default``, ``examples``, ``pattern``, string formats other
  than ``enum`` and ``date-time``), an empty ``properties`` is left out and an array
  without ``items`` gets string items. A tool without parameters has none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...models import (
    ChatContext,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    ImageContent,
    NamedToolChoice,
    ToolChoice,
    ToolDefinition,
)
from .._turn_edges import CONVERSATION_STARTS, GO_ON
from ._stream import CallMemory, CallRecord

JSONObject = dict[str, Any]

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The documented stand-in for a step's signature in history Gemini did not produce."""


def to_system_and_contents(
    chat_ctx: ChatContext, memory: CallMemory | None = None
) -> tuple[JSONObject | None, list[JSONObject]]:
    """The ``systemInstruction`` (or ``None``) and the ``contents`` for ``chat_ctx``."""
    memory = memory if memory is not None else CallMemory()
    items = chat_ctx.items
    outputs: dict[str, FunctionCallOutput] = {}
    for item in items:
        if isinstance(item, FunctionCallOutput):
            outputs.setdefault(item.call_id, item)

    system: list[JSONObject] = []
    turns = _Turns()
    answered: set[str] = set()
    leading = True
    for item in items:
        if isinstance(item, ChatMessage):
            if item.role in ("system", "developer"):
                if leading:
                    if item.content.strip():
                        system.append({"text": item.content})
                    continue
                turns.add("user", _text(item.content))
                continue
            leading = False
            if item.role == "user":
                for image in item.images:
                    turns.add("user", image_part(image))
                turns.add("user", _text(item.content))
            else:
                turns.add("model", _text(item.content))
        elif isinstance(item, FunctionCall):
            leading = False
            if item.call_id not in outputs or item.call_id in answered:
                continue  # no answer yet (or answered already): the pair is left out
            answered.add(item.call_id)
            record = memory.get(item.call_id)
            turns.call(
                _call_part(item, record), _response_part(item, outputs[item.call_id], record)
            )
        elif isinstance(item, FunctionCallOutput):
            turns.output_passed()
        # agent handoffs are not for the model

    contents = turns.contents()
    if not contents or contents[0]["role"] != "user":
        contents.insert(0, {"role": "user", "parts": [{"text": CONVERSATION_STARTS}]})
    if contents[-1]["role"] != "user":
        contents.append({"role": "user", "parts": [{"text": GO_ON}]})
    return ({"parts": system} if system else None), contents


class _Turns:
    """Contents with alternating roles; each step's calls in one ``model`` content, their
    responses first in the ``user`` content after it."""

    def __init__(self) -> None:
        self._contents: list[JSONObject] = []
        self._responses: list[JSONObject] = []
        """Responses owed to the calls of the last ``model`` content."""
        self._step_over = False
        """An output came after the calls owed: the next call starts a new step."""

    def add(self, role: str, part: JSONObject | None) -> None:
        """A text or an image: the responses owed go first (the user spoke while the
        tools ran, or the agent speaks again after them)."""
        if part is None:
            return
        self._flush_responses()
        self._append(role, part)

    def call(self, call_part: JSONObject, response_part: JSONObject) -> None:
        if self._step_over:
            self._flush_responses()
        last = self._contents[-1] if self._contents else None
        if last is None or last["role"] != "model" or not _has_call(last):
            # The first call of a step carries its signature, or the stand-in.
            call_part.setdefault("thoughtSignature", SKIP_SIGNATURE)
        self._append("model", call_part)
        self._responses.append(response_part)

    def output_passed(self) -> None:
        if self._responses:
            self._step_over = True

    def contents(self) -> list[JSONObject]:
        self._flush_responses()
        return self._contents

    def _flush_responses(self) -> None:
        self._step_over = False
        if self._responses:
            responses, self._responses = self._responses, []
            self._contents.append({"role": "user", "parts": responses})

    def _append(self, role: str, part: JSONObject) -> None:
        last = self._contents[-1] if self._contents else None
        if last is not None and last["role"] == role:
            last["parts"].append(part)
        else:
            self._contents.append({"role": role, "parts": [part]})


def _has_call(content: JSONObject) -> bool:
    return any("functionCall" in part for part in content["parts"])


def _text(content: str) -> JSONObject | None:
    return {"text": content} if content.strip() else None


def _call_part(call: FunctionCall, record: CallRecord | None) -> JSONObject:
    function_call: JSONObject = {"name": call.name, "args": _args(call)}
    part: JSONObject = {"functionCall": function_call}
    if record is not None:
        if record.gemini_id is not None:
            function_call["id"] = record.gemini_id
        if record.signature is not None:
            part["thoughtSignature"] = record.signature
    return part


def _args(call: FunctionCall) -> JSONObject:
    """The arguments as the object the API wants; what the model wrote that is not one
    (it was answered with an error already) goes as ``{"arguments": <text>}``."""
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except (ValueError, RecursionError):
        return {"arguments": call.arguments}
    return value if isinstance(value, dict) else {"arguments": value}


def _response_part(
    call: FunctionCall, output: FunctionCallOutput, record: CallRecord | None
) -> JSONObject:
    """The call's name (the one Gemini requires, whatever the output item says) and the
    output under ``output``, or ``error`` for a failed tool."""
    key = "error" if output.is_error else "output"
    response: JSONObject = {"name": call.name, "response": {key: output.output}}
    if record is not None and record.gemini_id is not None:
        response["id"] = record.gemini_id
    return {"functionResponse": response}


def image_part(image: ImageContent) -> JSONObject:
    """``inlineData`` for bytes, ``fileData`` for a URL."""
    if image.data is not None:
        return {"inlineData": {"mimeType": image.mime_type, "data": image.base64()}}
    assert image.url is not None
    file_data: JSONObject = {"fileUri": image.url}
    mime_type = image.mime_type or _guess_type(image.url)
    if mime_type is not None:
        file_data["mimeType"] = mime_type
    return {"fileData": file_data}


_IMAGE_EXTENSIONS = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".webp": "image/webp",
    ".gif": "image/gif",
}
"""The image types every provider takes (``ImageContent``'s), by a URL path's extension."""


def _guess_type(url: str) -> str | None:
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    return next((t for ext, t in _IMAGE_EXTENSIONS.items() if path.endswith(ext)), None)


# -- tools ----------------------------------------------------------------------------------


def to_tools(
    tools: Sequence[ToolDefinition], declarations: Declarations | None = None
) -> list[JSONObject]:
    """One ``Tool`` with a ``functionDeclarations`` entry per tool (from ``declarations``,
    when given, so each definition is converted once)."""
    made = declarations if declarations is not None else Declarations()
    return [{"functionDeclarations": [made.of(tool) for tool in tools]}]


def to_declaration(tool: ToolDefinition) -> JSONObject:
    declaration: JSONObject = {"name": tool.name, "description": tool.description}
    parameters = to_schema(tool.parameters)
    if parameters.get("type") != "OBJECT" or parameters.get("properties"):
        declaration["parameters"] = parameters
    return declaration


class Declarations:
    """Each tool's declaration, converted once per ``ToolDefinition`` object: a session
    offers the same definitions with every request, and converting eight schemas costs
    about 0.1 ms. Holds the last ``limit`` definitions (holding one keeps its ``id`` from
    being reused while it is cached)."""

    __slots__ = ("_limit", "_made")

    def __init__(self, limit: int = 256) -> None:
        self._made: dict[int, tuple[ToolDefinition, JSONObject]] = {}
        self._limit = limit

    def of(self, tool: ToolDefinition) -> JSONObject:
        hit = self._made.get(id(tool))
        if hit is None or hit[0] is not tool:
            hit = (tool, to_declaration(tool))
            self._made.pop(id(tool), None)
            self._made[id(tool)] = hit
            if len(self._made) > self._limit:
                del self._made[next(iter(self._made))]
        return hit[1]


def to_tool_config(tool_choice: ToolChoice) -> JSONObject:
    if isinstance(tool_choice, NamedToolChoice):
        config: JSONObject = {"mode": "ANY", "allowedFunctionNames": [tool_choice.name]}
    elif tool_choice == "auto":
        config = {"mode": "AUTO"}
    elif tool_choice == "required":
        config = {"mode": "ANY"}
    elif tool_choice == "none":
        config = {"mode": "NONE"}
    else:
        raise ValueError(f"unknown tool_choice: {tool_choice!r}")
    return {"functionCallingConfig": config}


_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
_FORMATS = {
    "STRING": frozenset({"enum", "date-time"}),
    "INTEGER": frozenset({"int32", "int64"}),
    "NUMBER": frozenset({"float", "double"}),
}
_BOUNDS = {
    "ARRAY": ("minItems", "maxItems"),
    "STRING": ("minLength", "maxLength"),
    "INTEGER": ("minimum", "maximum"),
    "NUMBER": ("minimum", "maximum"),
}
_MAX_DEPTH = 32


def to_schema(schema: Any) -> JSONObject:
    """``schema`` (JSON Schema) as the Schema subset Gemini takes (see the module)."""
    defs: dict[str, Any] = {}
    if isinstance(schema, dict):
        for key in ("$defs", "definitions"):
            found = schema.get(key)
            if isinstance(found, dict):
                defs.update(found)
    return _Schema(defs).convert(schema, (), 0)


class _Schema:
    def __init__(self, defs: dict[str, Any]) -> None:
        self._defs = defs

    def convert(self, node: Any, refs: tuple[str, ...], depth: int) -> JSONObject:
        """``node`` converted; ``refs`` are the ``$ref`` names being inlined above it."""
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            return {"type": "STRING"}
        resolved, refs = self._resolve(node, refs)
        if resolved is None:
            return {"type": "OBJECT", "description": "(a recursive structure)"}
        node = self._merge_all_of(resolved, refs)
        out: JSONObject = {}
        notes: list[str] = []
        nullable = False

        variants = node.get("anyOf", node.get("oneOf"))
        kind = node.get("type")
        if isinstance(variants, list):
            members = [v for v in variants if not _is_null(v)]
            nullable = len(members) < len(variants)
            converted = [self.convert(v, refs, depth + 1) for v in members]
            if len(converted) == 1:
                out.update(converted[0])
            elif converted:
                out["anyOf"] = converted
        elif isinstance(kind, list):
            names = [k for k in kind if isinstance(k, str) and k != "null"]
            nullable = len(names) < len(kind)
            if len(names) > 1:
                out["anyOf"] = [self.convert({**node, "type": k}, refs, depth + 1) for k in names]
            else:
                nullable = self._typed(node, names[0] if names else None, out, notes, refs, depth)
                nullable = nullable or len(names) < len(kind)
        else:
            nullable = self._typed(node, kind, out, notes, refs, depth)

        description = node.get("description")
        if not isinstance(description, str) or not description:
            description = out.get("description")  # a single anyOf member's
        text = " ".join(t for t in (description, *notes) if t)
        if text:
            out["description"] = text
        if "type" not in out and "anyOf" not in out:
            out["type"] = "STRING"  # a schema with no type (``Any``): the API needs one
        if nullable:
            out["nullable"] = True
        return out

    def _typed(
        self,
        node: JSONObject,
        kind: Any,
        out: JSONObject,
        notes: list[str],
        refs: tuple[str, ...],
        depth: int,
    ) -> bool:
        """Fill ``out`` for a node of one type (or none), adding what the schema cannot
        say to ``notes``; returns whether null is allowed."""
        nullable = bool(kind == "null")
        enum = [node["const"]] if "const" in node else node.get("enum")
        type_name = _TYPES.get(kind) if isinstance(kind, str) else None
        if type_name is None:
            if isinstance(node.get("properties"), dict):
                type_name = "OBJECT"
            elif "items" in node or "prefixItems" in node:
                type_name = "ARRAY"
            elif isinstance(enum, list) and all(isinstance(v, str | None) for v in enum):
                type_name = "STRING"
        if type_name is not None:
            out["type"] = type_name
        if isinstance(enum, list):
            nullable = nullable or None in enum
            values = [v for v in enum if v is not None]
            if values and type_name == "STRING" and all(isinstance(v, str) for v in values):
                out["enum"] = values
            elif values:
                notes.append(f"One of: {', '.join(json.dumps(v) for v in values)}.")
        fmt = node.get("format")
        if type_name in _FORMATS and isinstance(fmt, str) and fmt in _FORMATS[type_name]:
            out["format"] = fmt
        for key in _BOUNDS.get(type_name or "", ()):
            value = node.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = value
        if type_name == "OBJECT":
            self._object(node, out, notes, refs, depth)
        elif type_name == "ARRAY":
            out["items"] = self._items(node, refs, depth)
        return nullable

    def _object(
        self,
        node: JSONObject,
        out: JSONObject,
        notes: list[str],
        refs: tuple[str, ...],
        depth: int,
    ) -> None:
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            out["properties"] = {
                str(name): self.convert(value, refs, depth + 1)
                for name, value in properties.items()
            }
            required = node.get("required")
            if isinstance(required, list):
                kept = [name for name in dict.fromkeys(required) if name in out["properties"]]
                if kept:
                    out["required"] = kept
            ordering = node.get("propertyOrdering")
            if isinstance(ordering, list) and set(ordering) <= set(out["properties"]):
                out["propertyOrdering"] = ordering
        elif node.get("additionalProperties") not in (None, False):
            notes.append("An object with free-form keys.")

    def _items(self, node: JSONObject, refs: tuple[str, ...], depth: int) -> JSONObject:
        items = node.get("items")
        if isinstance(items, dict) and items:
            return self.convert(items, refs, depth + 1)
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            converted = [self.convert(v, refs, depth + 1) for v in prefix]
            unique = [v for i, v in enumerate(converted) if v not in converted[:i]]
            return unique[0] if len(unique) == 1 else {"anyOf": unique}
        return {"type": "STRING"}

    def _resolve(
        self, node: JSONObject, refs: tuple[str, ...]
    ) -> tuple[JSONObject | None, tuple[str, ...]]:
        """Follow ``$ref`` (keeping the referring node's description); ``None`` for a
        reference to a definition being inlined already (recursion)."""
        hops = 0
        while isinstance(node.get("$ref"), str) and hops < _MAX_DEPTH:
            hops += 1
            name = node["$ref"].rsplit("/", 1)[-1]
            if name in refs:
                return None, refs
            target = self._defs.get(name)
            if not isinstance(target, dict):
                described = node.get("description")
                return {"description": described or f"(unresolved reference {name})"}, refs
            refs = (*refs, name)
            description = node.get("description")
            node = dict(target)
            if isinstance(description, str) and description:
                node["description"] = description
        return node, refs

    def _merge_all_of(self, node: JSONObject, refs: tuple[str, ...]) -> JSONObject:
        members = node.get("allOf")
        if not isinstance(members, list):
            return node
        merged: JSONObject = {k: v for k, v in node.items() if k != "allOf"}
        for member in members:
            if not isinstance(member, dict):
                continue
            resolved, _ = self._resolve(member, refs)
            if resolved is None:
                continue
            for key, value in resolved.items():
                if key == "properties" and isinstance(value, dict):
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = [*merged.get("required", []), *value]
                else:
                    merged.setdefault(key, value)  # the outer node's keys win
        return merged


def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null" and len(node) <= 2
