"""The ``streamGenerateContent`` stream, sans I/O: each server-sent event's data → ``ChatChunk``s.

With ``alt=sse`` every event's data is a whole ``GenerateContentResponse``
(https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent):
``candidates[0].content.parts`` carry the new text and whole ``functionCall`` parts (a
call's arguments are not split across events), ``finishReason`` comes on the candidate of
the last event, ``usageMetadata`` on the events (the last one complete), and
``promptFeedback.blockReason`` replaces the candidates when the prompt itself was blocked.
There is no end marker: the stream ends when the server closes it, so an end without a
``finishReason`` is a cut-off reply. An error after the stream started comes as an event
``{"error": {"code", "message", "status"}}``.

What comes out:

- text as it comes; ``thought`` parts (thought summaries) are not spoken;
- a function call as a ``ToolCallRequest`` at once, its ``args`` as JSON text. Gemini's
  ``id`` is the call id when it gives one; otherwise the id is made here
  (``call_<random>_<n>``, fixed for the call's life). What our ``FunctionCall`` cannot
  hold, the id Gemini gave and the call part's ``thoughtSignature``
  (https://ai.google.dev/gemini-api/docs/thought-signatures), goes into the LLM's
  ``CallMemory``, so the next request sends them back on the same part;
- the ``finishReason``: ``STOP`` and ``MAX_TOKENS`` (logged) end the reply; ``SAFETY``,
  ``RECITATION``, ``BLOCKLIST``, ``PROHIBITED_CONTENT``, ``SPII`` and the other blocks are
  an ``LLMError`` naming the reason, never an empty reply; ``MALFORMED_FUNCTION_CALL`` and
  ``UNEXPECTED_TOOL_CALL`` too, retryable (a new sample usually calls correctly, and it is
  only retried before anything was yielded); a blocked prompt likewise;
- usage on the last chunk: ``promptTokenCount`` (cached tokens included, as the API
  counts them), ``candidatesTokenCount`` plus ``thoughtsTokenCount`` as the completion
  (thinking is billed as output, as OpenAI's reasoning tokens are), and
  ``cachedContentTokenCount`` (implicit or explicit caching) as ``cached_tokens``.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass

from ...models import ChatChunk, LLMError, ToolCallRequest, Usage
from .. import _json
from .._retry import transient_status

__all__ = ["BLOCKED_FINISH_REASONS", "CallMemory", "CallRecord", "StreamAssembler"]

logger = logging.getLogger("rejoinder.providers.google")

BLOCKED_FINISH_REASONS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "LANGUAGE",
        "MODEL_ARMOR",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
"""A candidate withheld by a filter: the reply is an error, not an empty answer."""
_BAD_CALL_FINISH_REASONS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})
_NORMAL_FINISH_REASONS = frozenset({"STOP", "MAX_TOKENS"})
_TRANSIENT_STATUSES = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """What Gemini said about one call that ``FunctionCall`` has no field for."""

    gemini_id: str | None = None
    """The ``functionCall.id`` Gemini gave (then it is also the call id), sent back on
    the call and its ``functionResponse``."""
    signature: str | None = None
    """The part's ``thoughtSignature``, sent back on the same part."""


class CallMemory:
    """The ``CallRecord`` of each call an LLM instance streamed, by call id, the oldest
    forgotten past ``limit`` (signatures are a few KB; only those of the turn in progress
    are checked by the API)."""

    __slots__ = ("_limit", "_records")

    def __init__(self, limit: int = 512) -> None:
        self._records: OrderedDict[str, CallRecord] = OrderedDict()
        self._limit = limit

    def remember(self, call_id: str, record: CallRecord) -> None:
        self._records[call_id] = record
        self._records.move_to_end(call_id)
        while len(self._records) > self._limit:
            self._records.popitem(last=False)

    def get(self, call_id: str) -> CallRecord | None:
        return self._records.get(call_id)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._records

    def __len__(self) -> int:
        return len(self._records)


class StreamAssembler:
    """Feed it each event's data (``feed``), then ``end()`` at the end of the connection.
    ``finish_reason`` is the candidate's, once an event said it."""

    __slots__ = ("_calls", "_id_prefix", "_memory", "_usage", "done", "events", "finish_reason")

    def __init__(self, memory: CallMemory | None = None) -> None:
        self._memory = memory if memory is not None else CallMemory()
        self._id_prefix = f"call_{os.urandom(4).hex()}"
        self._calls = 0
        self._usage: Usage | None = None
        self.done = False
        self.events = 0
        self.finish_reason: str | None = None

    def feed(self, data: str) -> ChatChunk | None:
        try:
            event = _json.loads(data)
        except ValueError as exc:
            raise _malformed(f"not JSON ({exc})", data) from None
        if not isinstance(event, dict):
            raise _malformed("not an object", data)
        self.events += 1
        if "error" in event:
            raise _stream_error(event["error"])
        usage = event.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
        feedback = event.get("promptFeedback")
        if isinstance(feedback, dict) and isinstance(feedback.get("blockReason"), str):
            raise LLMError(
                f"Gemini blocked the prompt (blockReason {feedback['blockReason']})"
                f"{_blocked_categories(feedback)}: nothing was generated"
            )
        candidates = event.get("candidates")
        if candidates is None:
            return None  # usage alone, or a field this client does not know
        if not isinstance(candidates, list) or not candidates:
            raise _malformed("candidates is not a non-empty list", data)
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            raise _malformed("a candidate that is not an object", data)
        chunk = self._content(candidate.get("content"), data)
        reason = candidate.get("finishReason")
        if reason is not None:
            if not isinstance(reason, str):
                raise _malformed("a finishReason that is not a string", data)
            self._finished(reason, candidate, produced=chunk is not None)
        return chunk

    def end(self) -> ChatChunk | None:
        """The connection ended: with a ``finishReason`` the reply is complete (usage goes
        out now); without one it was cut off."""
        if self.done:
            return None
        self.done = True
        if self.finish_reason is None:
            what = "before any event" if not self.events else "before a finishReason"
            raise LLMError(f"the stream ended {what} (the connection was cut)", retryable=True)
        return ChatChunk(usage=self._usage) if self._usage is not None else None

    # -- parts ------------------------------------------------------------------------------

    def _content(self, content: object, data: str) -> ChatChunk | None:
        if content is None:
            return None
        if not isinstance(content, dict):
            raise _malformed("a content that is not an object", data)
        parts = content.get("parts", [])
        if not isinstance(parts, list):
            raise _malformed("parts is not a list", data)
        text: list[str] = []
        calls: list[ToolCallRequest] = []
        for part in parts:
            if not isinstance(part, dict):
                raise _malformed("a part that is not an object", data)
            if part.get("thought") is True:
                continue  # a thought summary: not for the user's ears
            if "functionCall" in part:
                calls.append(self._call(part, data))
                continue
            value = part.get("text")
            if value is not None:
                if not isinstance(value, str):
                    raise _malformed("a text part whose text is not a string", data)
                text.append(value)
            # executableCode, inlineData and the like: nothing to say aloud
        delta = "".join(text)
        if not delta and not calls:
            return None
        return ChatChunk(delta=delta, tool_calls=tuple(calls))

    def _call(self, part: dict[str, object], data: str) -> ToolCallRequest:
        call = part["functionCall"]
        if not isinstance(call, dict):
            raise _malformed("a functionCall that is not an object", data)
        name, args, given_id = call.get("name"), call.get("args", {}), call.get("id")
        if not isinstance(name, str) or not name:
            raise _malformed("a functionCall without a name", data)
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise _malformed("a functionCall whose args are not an object", data)
        signature = part.get("thoughtSignature")
        if signature is not None and not isinstance(signature, str):
            raise _malformed("a thoughtSignature that is not a string", data)
        self._calls += 1
        if isinstance(given_id, str) and given_id:
            call_id, gemini_id = given_id, given_id
        else:
            call_id, gemini_id = f"{self._id_prefix}_{self._calls}", None
        if gemini_id is not None or signature is not None:
            self._memory.remember(call_id, CallRecord(gemini_id, signature))
        try:
            arguments = _json.dumps(args)
        except ValueError:
            raise _malformed("functionCall args nested too deeply", data) from None
        return ToolCallRequest(call_id, name, arguments)

    def _finished(self, reason: str, candidate: dict[str, object], *, produced: bool) -> None:
        self.finish_reason = reason
        if reason in BLOCKED_FINISH_REASONS:
            raise LLMError(
                f"Gemini withheld the reply (finishReason {reason}){_blocked_categories(candidate)}"
            )
        if reason in _BAD_CALL_FINISH_REASONS:
            detail = candidate.get("finishMessage")
            said = f": {detail}" if isinstance(detail, str) and detail else ""
            raise LLMError(
                f"the model made an invalid function call (finishReason {reason}){said}",
                retryable=True,
            )
        if reason == "MAX_TOKENS":
            logger.warning("the reply stopped early: finishReason MAX_TOKENS")
        elif reason not in _NORMAL_FINISH_REASONS:
            if not produced and not self._calls:
                raise LLMError(f"the model stopped without a reply (finishReason {reason})")
            logger.warning("the reply stopped: finishReason %s", reason)


def _usage(usage: dict[str, object]) -> Usage:
    return Usage(
        prompt_tokens=_count(usage, "promptTokenCount"),
        completion_tokens=_count(usage, "candidatesTokenCount")
        + _count(usage, "thoughtsTokenCount"),
        cached_tokens=_count(usage, "cachedContentTokenCount"),
    )


def _count(usage: dict[str, object], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def _blocked_categories(holder: dict[str, object]) -> str:
    """`` (HARM_CATEGORY_...)`` for the safety ratings that say ``blocked``."""
    ratings = holder.get("safetyRatings")
    if not isinstance(ratings, list):
        return ""
    names = [
        rating["category"]
        for rating in ratings
        if isinstance(rating, dict)
        and rating.get("blocked") is True
        and isinstance(rating.get("category"), str)
    ]
    return f" ({', '.join(names)})" if names else ""


def _stream_error(error: object) -> LLMError:
    """An ``{"error": {...}}`` event: retryable for the statuses a retry may cure."""
    code = error.get("code") if isinstance(error, dict) else None
    status = error.get("status") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        try:
            message = _json.dumps(error)
        except ValueError:
            message = "(an error object nested too deeply)"
        message = message if len(message) <= 500 else message[:499] + "…"
    status_code = code if isinstance(code, int) else None
    label = ", ".join(str(v) for v in (code, status) if isinstance(v, int | str))
    retryable = (status_code is not None and transient_status(status_code)) or (
        status in _TRANSIENT_STATUSES
    )
    return LLMError(
        f"the server reported an error mid-stream ({label or 'no code'}): {message}",
        retryable=retryable,
        status=status_code,
    )


def _malformed(problem: str, data: str) -> LLMError:
    excerpt = data.strip()
    excerpt = excerpt if len(excerpt) <= 200 else excerpt[:199] + "…"
    return LLMError(f"malformed stream event: {problem}: {excerpt!r}")
