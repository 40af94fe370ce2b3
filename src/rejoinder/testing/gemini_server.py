"""A loopback Gemini API server that a test scripts reply by reply, and that checks each
request as the API would.

It listens on 127.0.0.1 (a free port) and serves ``POST
/v1beta/models/{model}:streamGenerateContent?alt=sse``
(https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent): each
event is ``data: <GenerateContentResponse JSON>`` and a blank line, with no end marker
(the stream ends when the reply does); an error is Google's ``{"error": {"code",
"message", "status"}}`` body (https://ai.google.dev/gemini-api/docs/troubleshooting), and
the key is read from ``x-goog-api-key`` (a wrong one is a 400 ``INVALID_ARGUMENT``, none
a 403 ``PERMISSION_DENIED``, as the API answers)::

    async with GeminiServer([StreamReply(reply("Hello", " there"))]) as server:
        llm = google.LLM(model="gemini-test", base_url=server.base_url, api_key="k")
        ...
        assert server.requests[0]["contents"] == [...]

Replies are ``StreamReply`` (steps: event dicts, ``RawData``, ``Pause``, ``CutConnection``)
and ``ErrorReply`` (``type`` is the status: ``RESOURCE_EXHAUSTED`` with 429 and
``retry_after``, ``UNAVAILABLE`` with 503, ...; derived from the HTTP status when it is
not an upper-case status name), as for the other chat servers; ``done`` has no meaning
here. ``reply`` builds a whole reply (text chunks, function calls, the finish reason and
usage), ``blocked_prompt`` and ``blocked_reply`` the filters' answers, ``error_event`` an
error mid-stream.

With ``check_requests`` (the default) a request the API would refuse is answered with a
400 ``INVALID_ARGUMENT`` naming the problem (see ``request_problem``): contents that do
not alternate between ``user`` and ``model`` or do not start with ``user``, a
``functionCall`` content not answered by as many ``functionResponse`` parts, in order and
by name, first in the next content, a part that is not exactly one kind of data, an
image whose data is not base64, a function declaration's schema outside the subset the
API takes, a tool config that names no declared function; and thought signatures: every
signature this server streamed must come back on a part calling the same function, an
unknown one is refused, and (``require_signatures``, as Gemini 3 does) the first call of
each step of the turn in progress must carry one.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from ._scripted_stream import (
    CutConnection,
    ErrorReply,
    Pause,
    RawData,
    Reply,
    Script,
    ScriptedStreamServer,
    StreamReply,
)

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "Call",
    "CutConnection",
    "ErrorReply",
    "GeminiServer",
    "Pause",
    "RawData",
    "Reply",
    "StreamReply",
    "blocked_prompt",
    "blocked_reply",
    "chunk",
    "encode_event",
    "error_event",
    "reply",
    "request_problem",
    "usage_metadata",
]

JSONObject: TypeAlias = dict[str, Any]
DEFAULT_MODEL = "gemini-test"
SKIP_SIGNATURE = "skip_thought_signature_validator"

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class Call:
    """A function call in a scripted ``reply``: ``args`` as given (so they can be odd on
    purpose), Gemini's ``id`` and the part's ``thoughtSignature`` when set."""

    def __init__(
        self,
        name: str,
        args: Any = None,
        *,
        id: str | None = None,
        signature: str | None = None,
    ) -> None:
        self.name, self.args, self.id, self.signature = name, args, id, signature

    def part(self) -> JSONObject:
        call: JSONObject = {"name": self.name, "args": {} if self.args is None else self.args}
        if self.id is not None:
            call["id"] = self.id
        part: JSONObject = {"functionCall": call}
        if self.signature is not None:
            part["thoughtSignature"] = self.signature
        return part


def chunk(
    *parts: JSONObject,
    finish_reason: str | None = None,
    usage: JSONObject | None = None,
    response_id: str = "resp_test",
) -> JSONObject:
    """One event: a candidate with ``parts`` (and the finish reason), usage, the model."""
    candidate: JSONObject = {"index": 0}
    if parts:
        candidate["content"] = {"role": "model", "parts": list(parts)}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    event: JSONObject = {"candidates": [candidate]}
    if usage is not None:
        event["usageMetadata"] = usage
    event["modelVersion"] = DEFAULT_MODEL
    event["responseId"] = response_id
    return event


def usage_metadata(
    prompt: int = 10, output: int = 5, *, cached: int = 0, thoughts: int = 0
) -> JSONObject:
    usage: JSONObject = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + thoughts,
    }
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def reply(
    *parts: str | Call,
    finish_reason: str = "STOP",
    prompt_tokens: int = 10,
    cached_tokens: int = 0,
    output_tokens: int = 5,
    thoughts_tokens: int = 0,
    response_id: str | None = None,
) -> list[JSONObject]:
    """A whole streamed reply: each string one text chunk, consecutive ``Call``s one chunk
    of parallel calls (as the API sends them). The last chunk has the finish reason and
    the whole usage; the others the prompt's count, as the API's do."""
    response_id = response_id or f"resp_{os.urandom(4).hex()}"
    groups: list[list[JSONObject]] = []
    for part in parts:
        if isinstance(part, Call):
            if groups and "functionCall" in groups[-1][-1]:
                groups[-1].append(part.part())
                continue
            groups.append([part.part()])
        else:
            groups.append([{"text": part}])
    running = {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens}
    events = [chunk(*group, usage=running, response_id=response_id) for group in groups[:-1]]
    last = groups[-1] if groups else []
    usage = usage_metadata(
        prompt_tokens, output_tokens, cached=cached_tokens, thoughts=thoughts_tokens
    )
    events.append(chunk(*last, finish_reason=finish_reason, usage=usage, response_id=response_id))
    return events


def blocked_prompt(reason: str = "SAFETY") -> JSONObject:
    """The answer to a prompt the filters blocked: no candidates, ``promptFeedback``."""
    return {
        "promptFeedback": {
            "blockReason": reason,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
            ],
        },
        "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
        "modelVersion": DEFAULT_MODEL,
    }


def blocked_reply(
    reason: str = "SAFETY", category: str = "HARM_CATEGORY_DANGEROUS_CONTENT"
) -> JSONObject:
    """A candidate withheld by a filter: a finish reason, no content."""
    event = chunk(finish_reason=reason, usage=usage_metadata(10, 0))
    event["candidates"][0]["safetyRatings"] = [
        {"category": category, "probability": "HIGH", "blocked": True}
    ]
    return event


def error_event(
    code: int = 503, status: str = "UNAVAILABLE", message: str = "The model is overloaded."
) -> JSONObject:
    """An error sent after the stream started."""
    return {"error": {"code": code, "message": message, "status": status}}


def encode_event(event: JSONObject) -> bytes:
    """``data: <json>`` and a blank line, CRLF-terminated as the API writes them."""
    return f"data: {json.dumps(event)}\r\n\r\n".encode()


class GeminiServer(ScriptedStreamServer):
    """Serves ``streamGenerateContent`` on 127.0.0.1 from a script (see the module)."""

    path = "/v1beta/models/{target}"

    def __init__(
        self,
        replies: Iterable[Reply] | Script = (),
        *,
        api_key: str | None = None,
        port: int = 0,
        check_requests: bool = True,
        require_signatures: bool = True,
    ) -> None:
        super().__init__(replies, api_key=api_key, port=port)
        self.check_requests = check_requests
        self.require_signatures = require_signatures
        self.models: list[str] = []
        """The model each request named, parallel to ``requests``."""
        self.rejected: list[str] = []
        """Why each request the checks refused was refused, in order."""
        self.signatures: dict[str, JSONObject] = {}
        """Each thought signature this server streamed, with the ``functionCall`` it
        signed."""

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give a client: ``http://127.0.0.1:<port>/v1beta``."""
        return f"http://127.0.0.1:{self.port}/v1beta"

    def _key_accepted(self, headers: Mapping[str, str]) -> bool:
        return headers.get("x-goog-api-key") == self._api_key

    def _unauthorized(self) -> ErrorReply:
        return ErrorReply(400, "API key not valid. Please pass a valid API key.")

    def _error_body(self, reply: ErrorReply) -> JSONObject:
        status = reply.type if reply.type.isupper() else _STATUS_NAMES.get(reply.status)
        return {
            "error": {
                "code": reply.status,
                "message": reply.message,
                "status": status or "UNKNOWN",
            }
        }

    def _encode(self, event: JSONObject) -> bytes:
        for part in _streamed_parts(event):
            signature, call = part.get("thoughtSignature"), part.get("functionCall")
            if isinstance(signature, str) and isinstance(call, dict):
                self.signatures[signature] = call
        return encode_event(event)

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].partition(":")
        if method != "streamGenerateContent":
            return self._refuse(request, None, ErrorReply(404, f"Method {method!r} not found."))
        if request.query.get("alt") != "sse":
            return self._refuse(request, None, ErrorReply(400, "this server streams alt=sse only"))
        self.models.append(model)
        try:
            body: object = json.loads(await request.read())
        except ValueError:
            body = None  # the base class answers it
        if self._api_key is not None and "x-goog-api-key" not in request.headers:
            message = "Method doesn't allow unregistered callers. Please use an API key."
            return self._refuse(request, body, ErrorReply(403, message))
        if (
            self.check_requests
            and isinstance(body, dict)
            and (self._api_key is None or self._key_accepted(request.headers))
        ):
            refused = request_problem(body, self.signatures, self.require_signatures)
            if refused is not None:
                self.rejected.append(refused)
                return self._refuse(request, body, ErrorReply(400, refused))
        return await super()._respond(request)

    def _refuse(self, request: web.Request, body: object, reply: ErrorReply) -> web.Response:
        if isinstance(body, dict):
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        return self._error(reply)


def _streamed_parts(event: JSONObject) -> list[JSONObject]:
    candidates = event.get("candidates")
    if not isinstance(candidates, list):
        return []
    parts: list[JSONObject] = []
    for candidate in candidates:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        found = content.get("parts") if isinstance(content, dict) else None
        if isinstance(found, list):
            parts.extend(p for p in found if isinstance(p, dict))
    return parts


# -- what the API would refuse --------------------------------------------------------------

_DATA_FIELDS = frozenset(
    {
        "text",
        "inlineData",
        "fileData",
        "functionCall",
        "functionResponse",
        "executableCode",
        "codeExecutionResult",
    }
)
_PART_FIELDS = _DATA_FIELDS | {"thought", "thoughtSignature", "videoMetadata"}
_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "items",
        "properties",
        "required",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "anyOf",
        "propertyOrdering",
    }
)
_SCHEMA_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"})
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")


def request_problem(
    body: JSONObject,
    signatures: Mapping[str, JSONObject] | None = None,
    require_signatures: bool = True,
) -> str | None:
    """What the API would refuse in ``body`` (a 400's message), or ``None``.
    ``signatures``: the thought signatures streamed so far, with the call each signed."""
    try:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return "contents must be a non-empty list"
        problem = _contents_problem(contents, signatures or {}, require_signatures)
        if problem is None:
            problem = _system_problem(body.get("systemInstruction"))
        if problem is None:
            problem = _tools_problem(body.get("tools"), body.get("toolConfig"))
        return problem
    except (AttributeError, KeyError, TypeError) as exc:  # a shape the checks did not expect
        return f"malformed request: {type(exc).__name__}: {exc}"


def _contents_problem(
    contents: list[Any], signatures: Mapping[str, JSONObject], require_signatures: bool
) -> str | None:
    turn_starts = 0
    for index, content in enumerate(contents):
        where = f"contents[{index}]"
        if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
            return f"{where}: the role must be 'user' or 'model'"
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            return f"{where}: a content needs at least one part"
        expected = "user" if index % 2 == 0 else "model"
        if content["role"] != expected:
            return (
                "Please ensure that multiturn requests alternate between user and model, "
                f"starting with user ({where} is {content['role']})"
            )
        for number, part in enumerate(parts):
            problem = _part_problem(part, content["role"], signatures)
            if problem is not None:
                return f"{where}.parts[{number}]: {problem}"
        if content["role"] == "user" and not _kinds(parts) <= {"functionResponse"}:
            turn_starts = index  # a user turn with words: the turn in progress starts here
        if content["role"] == "model" and "functionCall" in _kinds(parts):
            following = contents[index + 1] if index + 1 < len(contents) else None
            problem = _responses_problem(parts, following, index)
            if problem is not None:
                return problem
        elif content["role"] == "user" and "functionResponse" in _kinds(parts):
            before = contents[index - 1] if index else None
            if not isinstance(before, dict) or "functionCall" not in _kinds(before["parts"]):
                return f"{where}: a functionResponse must answer the functionCall turn before it"
    if require_signatures:
        for index in range(turn_starts, len(contents)):
            calls = [p for p in contents[index]["parts"] if "functionCall" in p]
            if calls and not isinstance(calls[0].get("thoughtSignature"), str):
                return (
                    f"Function call is missing a thought_signature in functionCall parts "
                    f"(contents[{index}], the first call of the step)"
                )
    return None


def _kinds(parts: list[Any]) -> set[str]:
    return {key for part in parts if isinstance(part, dict) for key in part if key in _DATA_FIELDS}


def _part_problem(part: Any, role: str, signatures: Mapping[str, JSONObject]) -> str | None:
    if not isinstance(part, dict):
        return "a part must be an object"
    unknown = set(part) - _PART_FIELDS
    if unknown:
        return f"unknown field(s) {sorted(unknown)}"
    kinds = set(part) & _DATA_FIELDS
    if len(kinds) != 1:
        return f"a part holds exactly one kind of data, not {sorted(kinds)}"
    kind = kinds.pop()
    value = part[kind]
    if kind == "text" and not isinstance(value, str):
        return "text must be a string"
    if kind == "inlineData":
        if not isinstance(value.get("mimeType"), str) or not isinstance(value.get("data"), str):
            return "inlineData needs mimeType and data"
        try:
            base64.b64decode(value["data"], validate=True)
        except (binascii.Error, ValueError):
            return "inlineData.data is not base64"
    if kind == "fileData" and not isinstance(value.get("fileUri"), str):
        return "fileData needs a fileUri"
    if kind == "functionCall":
        if role != "model":
            return "a functionCall belongs in a model content"
        if not isinstance(value.get("name"), str) or not isinstance(value.get("args", {}), dict):
            return "a functionCall needs a name and object args"
    if kind == "functionResponse":
        if role != "user":
            return "a functionResponse belongs in a user content"
        if not isinstance(value.get("name"), str) or not isinstance(value.get("response"), dict):
            return "a functionResponse needs a name and an object response"
    signature = part.get("thoughtSignature")
    if signature is not None:
        if not isinstance(signature, str):
            return "thoughtSignature must be a string"
        if signature != SKIP_SIGNATURE:
            signed = signatures.get(signature)
            if signed is None:
                return "Corrupted thought signature (not one this server streamed)"
            same = kind == "functionCall" and all(
                value.get(key, {} if key == "args" else None) == signed.get(key)
                for key in ("name", "args", "id")
            )
            if not same:
                return f"a thought signature came back on another part than its call {signed}"
    return None


def _responses_problem(parts: list[Any], following: Any, index: int) -> str | None:
    calls = [p["functionCall"] for p in parts if "functionCall" in p]
    if not isinstance(following, dict) or following.get("role") != "user":
        return f"contents[{index}]: a functionCall turn must be followed by its responses"
    answers = following["parts"][: len(calls)]
    responses = [p.get("functionResponse") for p in answers]
    more = [p for p in following["parts"][len(calls) :] if "functionResponse" in p]
    if len(responses) != len(calls) or None in responses or more:
        return (
            "Please ensure that the number of function response parts is equal to the number "
            f"of function call parts of the function call turn (contents[{index + 1}]), "
            "the responses first"
        )
    for call, response in zip(calls, responses, strict=True):
        if response["name"] != call["name"]:
            return (
                f"contents[{index + 1}]: the response to {call['name']} is named "
                f"{response['name']} (responses go in the calls' order)"
            )
        if "id" in call and response.get("id") != call["id"]:
            return f"contents[{index + 1}]: the response to call {call['id']} lacks its id"
    return None


def _system_problem(system: Any) -> str | None:
    if system is None:
        return None
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list) or not parts:
        return "systemInstruction needs parts"
    if not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts):
        return "systemInstruction parts must be text"
    return None


def _tools_problem(tools: Any, config: Any) -> str | None:
    names: list[str] = []
    if tools is not None:
        if not isinstance(tools, list):
            return "tools must be a list"
        for tool in tools:
            for number, declaration in enumerate(tool.get("functionDeclarations", [])):
                name = declaration.get("name")
                where = f"functionDeclarations[{number}]"
                if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                    return f"{where}: invalid function name {name!r}"
                names.append(name)
                if "parameters" in declaration:
                    problem = _schema_problem(declaration["parameters"], f"{where}.parameters")
                    if problem is not None:
                        return problem
    if config is not None:
        calling = config.get("functionCallingConfig", {})
        mode = calling.get("mode", "AUTO")
        if mode not in ("AUTO", "ANY", "NONE", "VALIDATED"):
            return f"functionCallingConfig.mode {mode!r} is not AUTO, ANY, NONE or VALIDATED"
        allowed = calling.get("allowedFunctionNames")
        if allowed is not None:
            if mode not in ("ANY", "VALIDATED"):
                return "allowedFunctionNames may only be set with mode ANY"
            if not set(allowed) <= set(names):
                return f"allowedFunctionNames {allowed} names an undeclared function"
    return None


def _schema_problem(schema: Any, where: str) -> str | None:
    if not isinstance(schema, dict):
        return f"{where}: a schema must be an object"
    unknown = set(schema) - _SCHEMA_KEYS
    if unknown:
        return f"{where}: Invalid JSON payload, unknown name(s) {sorted(unknown)}"
    kind = schema.get("type")
    if kind is None and "anyOf" not in schema:
        return f"{where}.type: must be specified"
    if kind is not None and str(kind).upper() not in _SCHEMA_TYPES:
        return f"{where}.type: unknown type {kind!r}"
    kind = str(kind).upper()
    fmt = schema.get("format")
    if kind == "STRING" and fmt is not None and fmt not in ("enum", "date-time"):
        return f"{where}.format: only 'enum' and 'date-time' are supported for STRING type"
    enum = schema.get("enum")
    if enum is not None and not (isinstance(enum, list) and all(isinstance(v, str) for v in enum)):
        return f"{where}.enum: values must be strings"
    properties = schema.get("properties")
    if properties is not None:
        if kind != "OBJECT" or not isinstance(properties, dict) or not properties:
            return f"{where}.properties: should be non-empty for OBJECT type"
        for name, value in properties.items():
            problem = _schema_problem(value, f"{where}.properties[{name}]")
            if problem is not None:
                return problem
    required = schema.get("required", [])
    if not set(required) <= set(properties or {}):
        return f"{where}.required: names a property that is not defined"
    if kind == "ARRAY":
        if "items" not in schema:
            return f"{where}.items: missing field"
        problem = _schema_problem(schema["items"], f"{where}.items")
        if problem is not None:
            return problem
    for number, member in enumerate(schema.get("anyOf", [])):
        problem = _schema_problem(member, f"{where}.anyOf[{number}]")
        if problem is not None:
            return problem
    return None
