"""The sans-I/O core of the OpenAI Realtime client: server events in, protocol facts out.

Nothing here touches a socket. ``RealtimeProtocol`` holds the per-connection state (which
response is running, which audio item is playing, which tool calls belong to which
response) and turns each server event into ``RealtimeEvent`` values; client events it
must send because of what it saw (a continuation ``response.create``, a cancel, a
truncate) collect in an outbox the I/O layer drains. The JSON of those events, and of
the ones the I/O layer sends on its own, is built in ``_realtime_wire``.

Wire names follow the GA Realtime API (``response.output_audio.delta`` ...); the beta
names of the same events (``response.audio.delta`` ...) are accepted as aliases.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ...models.chat import FunctionCall, FunctionCallOutput
from ...models.realtime import (
    AgentAudio,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    ContinuationFailed,
    ProviderError,
    RealtimeError,
    RealtimeEvent,
    ReplyRefused,
    ToolCallRequested,
    ToolOutputFate,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from .. import _json
from ._realtime_wire import (
    PCM,
    AudioFormat,
    JSONObject,
    Malformed,
    ServerError,
    function_call_output_item,
    item_create,
    item_truncate,
    message_item,
    opt_str,
    require_obj,
    require_str,
    response_cancel,
    response_create,
    response_usage,
    status_error,
    tool_output_note,
)

if TYPE_CHECKING:
    from ...models.audio import AudioFrame

logger = logging.getLogger("rejoinder.providers.openai.realtime")

ResponseStatus = Literal["completed", "failed", "incomplete", "cancelled"]

# A response.cancel that crosses the server's own cancellation (server VAD) or the
# response's natural end draws this error; the outcome is the one we wanted.
_BENIGN_ERROR_CODES = frozenset({"response_cancel_not_active"})

_STATUSES: frozenset[str] = frozenset({"completed", "failed", "incomplete", "cancelled"})

_MAX_REPLY_REQUESTS = 32
"""Reply requests remembered for matching a refusal; older ones are dropped."""


# -- state --------------------------------------------------------------------------------


class _AudioTrack:
    """Which assistant audio item is streaming or was heard last, and how long it is.

    A stretch of agent audio (``AgentAudioStarted`` ... ``AgentAudioEnded``) is one audio
    item. The last item stays known after its stretch ends, because audio is generated
    faster than it is played: a barge-in usually lands after the server has finished.
    """

    def __init__(self) -> None:
        self._open_item: str | None = None
        self._open_response: str | None = None
        self._last_item: str | None = None
        self._last_received_ms = 0.0
        self._last_truncated = False
        self._muted_item: str | None = None
        self._muted_response: str | None = None

    def muted(self, response_id: str | None, item_id: str | None) -> bool:
        """Output of an interrupted item or response: it arrives late and must not play."""
        return (item_id is not None and item_id == self._muted_item) or (
            response_id is not None and response_id == self._muted_response
        )

    def delta(
        self, response_id: str | None, item_id: str, frame: AudioFrame
    ) -> list[RealtimeEvent]:
        events: list[RealtimeEvent] = []
        if self._open_item != item_id:
            events.extend(self.close())
            self._open_item, self._open_response = item_id, response_id
            self._last_item, self._last_received_ms, self._last_truncated = item_id, 0.0, False
            events.append(AgentAudioStarted())
        self._last_received_ms += frame.duration * 1000
        events.append(AgentAudio(frame))
        return events

    def item_done(self, item_id: str | None) -> list[RealtimeEvent]:
        return self.close() if item_id is not None and item_id == self._open_item else []

    def response_done(self, response_id: str) -> list[RealtimeEvent]:
        """The response ended; its audio is over even if no ``output_audio.done`` came."""
        return self.close() if self._open_response == response_id else []

    def close(self) -> list[RealtimeEvent]:
        if self._open_item is None:
            return []
        self._open_item = self._open_response = None
        return [AgentAudioEnded()]

    def interrupt(self, running_response: str | None) -> tuple[str, float] | None:
        """Mute what is still streaming; return the item to truncate and the ms received."""
        self._muted_response = running_response
        if self._last_item is None or self._last_truncated:
            return None
        self._muted_item = self._last_item
        self._last_truncated = True
        return self._last_item, self._last_received_ms


@dataclass(slots=True)
class _Batch:
    """The tool calls of one response and the outputs submitted for them."""

    calls: list[str] = field(default_factory=list)
    answered: set[str] = field(default_factory=set)
    reply_wanted: bool = False
    status: str | None = None
    """The response's final status; ``None`` while it runs."""
    continued: bool = False
    """The continuation ``response.create`` was sent."""

    @property
    def complete(self) -> bool:
        return all(call in self.answered for call in self.calls)

    @property
    def ready(self) -> bool:
        """Every call of a completed response has its output and one of them wants a reply."""
        return (
            self.status == "completed"
            and self.complete
            and self.reply_wanted
            and not self.continued
        )


class _ToolBatches:
    """Decides when tool outputs lead to exactly one continuation ``response.create``."""

    def __init__(self) -> None:
        self._batches: dict[str, _Batch] = {}
        self._response_of: dict[str, str] = {}
        self._continuations: set[str] = set()
        """event_ids of the continuation response.creates sent, to match rejections."""

    def add_call(self, response_id: str, call_id: str) -> bool:
        """Record a call; False if it was already known (reported once per call_id)."""
        if call_id in self._response_of:
            return False
        self._response_of[call_id] = response_id
        self._batches.setdefault(response_id, _Batch()).calls.append(call_id)
        return True

    def knows(self, call_id: str) -> bool:
        return call_id in self._response_of

    def submit(self, call_id: str, reply_required: bool) -> tuple[ToolOutputFate, bool]:
        """The fate of an output of a known call, and whether to send the continuation now."""
        batch = self._batches[self._response_of[call_id]]
        if call_id in batch.answered:
            logger.warning("a second output for tool call %s was sent; it changes nothing", call_id)
            return "silent", False
        if batch.status is not None and batch.status != "completed":
            batch.answered.add(call_id)
            return "silent", False  # the response died: its calls lead nowhere
        was_wanted = batch.reply_wanted
        batch.answered.add(call_id)
        batch.reply_wanted |= reply_required
        send = batch.ready
        if send:
            batch.continued = True
        completes_wanted = batch.complete and was_wanted
        return ("continue" if reply_required or completes_wanted else "silent"), send

    def response_done(self, response_id: str, status: str) -> tuple[bool, bool]:
        """(send the continuation now, a promised continuation is lost)."""
        batch = self._batches.get(response_id)
        if batch is None:
            return False, False
        batch.status = status
        if status != "completed":
            return False, batch.reply_wanted
        if batch.ready:
            batch.continued = True
            return True, False
        return False, False

    def sent_continuation(self, event_id: str) -> None:
        self._continuations.add(event_id)

    def rejected(self, event_id: str | None) -> bool:
        """An error answered one of our continuation ``response.create`` events."""
        if event_id is None or event_id not in self._continuations:
            return False
        self._continuations.discard(event_id)
        return True


# -- the protocol ---------------------------------------------------------------------------


class RealtimeProtocol:
    """The state of one connection. Feed it server text; drain ``take_outgoing``.

    One instance per connection: after a reconnect everything it knew (running
    response, audio item ids, call ids) refers to a session that no longer exists.
    """

    def __init__(self, *, transcribes_input: bool = True, audio: AudioFormat = PCM) -> None:
        self._transcribes_input = transcribes_input
        self._format = audio
        """The session's audio format: how output deltas decode."""
        self._audio = _AudioTrack()
        self._tools = _ToolBatches()
        self._running: str | None = None
        self._started: set[str] = set()
        self._outbox: list[JSONObject] = []
        self._replies: deque[tuple[str, ...]] = deque(maxlen=_MAX_REPLY_REQUESTS)
        """The event_ids of each ``request_reply`` not yet answered by a response.created,
        oldest first, to tie a refusal to its request."""

    def take_outgoing(self) -> list[JSONObject]:
        out, self._outbox = self._outbox, []
        return out

    # -- commands ---------------------------------------------------------------------------

    def submit_tool_output(
        self, output: FunctionCallOutput, reply_required: bool
    ) -> ToolOutputFate:
        if not self._tools.knows(output.call_id):
            # Not a call of this connection (it predates a reconnect): the server has no
            # such call, so the result goes in as a note and, if wanted, a fresh response.
            note = tool_output_note(output.name, output.output)
            self._outbox.append(item_create(message_item("system", note)))
            if not reply_required:
                return "silent"
            self._send_continuation()
            return "continue"
        self._outbox.append(item_create(function_call_output_item(output.call_id, output.output)))
        fate, send = self._tools.submit(output.call_id, reply_required)
        if send:
            self._send_continuation()
        return fate

    def request_reply(self, instructions: str | None = None, user_text: str | None = None) -> None:
        """A ``generate_reply`` (or, with ``user_text``, a ``send_user_text``) request: the
        typed message if any, then a ``response.create``. An error echoing one of their
        event_ids refuses the request (``ReplyRefused``)."""
        events = [item_create(message_item("user", user_text))] if user_text is not None else []
        events.append(response_create(instructions))
        self._replies.append(tuple(event["event_id"] for event in events))
        self._outbox.extend(events)

    def interrupt(self, heard_seconds: float) -> None:
        """Playback was cut: stop the running response and forget what was not heard.

        Server VAD (``interrupt_response``) cancels the response on its own when the user
        starts speaking, but the server cannot know how much of the audio it already sent
        was actually played: the conversation would keep words the user never heard. The
        truncate fixes that, so the model knows where it was cut off.
        """
        if self._running is not None:
            self._outbox.append(response_cancel(self._running))
        cut = self._audio.interrupt(self._running)
        if cut is None:
            return
        item_id, received_ms = cut
        # The server rejects an end beyond the audio it sent; the player may report a few
        # ms more than that (rounding, or padding on its side).
        end_ms = max(0, min(round(heard_seconds * 1000), int(received_ms)))
        self._outbox.append(item_truncate(item_id, end_ms))

    def _send_continuation(self) -> None:
        event = response_create()
        self._tools.sent_continuation(event["event_id"])
        self._outbox.append(event)

    # -- server events ----------------------------------------------------------------------

    def receive(self, text: str) -> list[RealtimeEvent]:
        try:
            event: object = _json.loads(text)
        except _json.NestedTooDeeply:
            return [_error(f"a server message is nested too deeply: {_excerpt(text)}")]
        except ValueError:
            return [_error(f"a server message is not JSON: {_excerpt(text)}")]
        if not isinstance(event, dict):
            return [_error(f"a server message is not a JSON object: {_excerpt(text)}")]
        kind = event.get("type")
        # Only a string names a handler (str() of an arbitrary value could even overflow).
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            return []  # events this client has no use for (rate limits, item bookkeeping, ...)
        try:
            return handler(self, event)
        except Malformed as exc:
            return [_error(f"malformed {event.get('type')} event: {exc}: {_excerpt(text)}")]

    def _response_created(self, event: JSONObject) -> list[RealtimeEvent]:
        response_id = require_str(require_obj(event, "response"), "id")
        self._running = response_id
        self._started.add(response_id)
        if self._replies:
            # The server answers client events in order: the oldest request was accepted.
            # (A response the server started itself, e.g. on server VAD, also lands here;
            # a refusal of that request then goes unmatched, and that response answers.)
            self._replies.popleft()
        return [BackendResponseStarted(response_id)]

    def _audio_delta(self, event: JSONObject) -> list[RealtimeEvent]:
        response_id, item_id = opt_str(event, "response_id"), require_str(event, "item_id")
        if self._audio.muted(response_id, item_id):
            return []
        delta = require_str(event, "delta")
        try:
            pcm = base64.b64decode(delta, validate=True)
        except (binascii.Error, ValueError):
            raise Malformed("`delta` is not base64") from None
        if len(pcm) % 2 and not self._format.g711:
            raise Malformed("`delta` is not 16-bit PCM (odd byte count)")
        if not pcm:
            return []
        # G.711 deltas become 8 kHz frames: a phone line plays them with no resampling.
        return self._audio.delta(response_id, item_id, self._format.decode(pcm))

    def _audio_done(self, event: JSONObject) -> list[RealtimeEvent]:
        return self._audio.item_done(opt_str(event, "item_id"))

    def _transcript_delta(self, event: JSONObject) -> list[RealtimeEvent]:
        delta = require_str(event, "delta")
        if not delta or self._audio.muted(opt_str(event, "response_id"), opt_str(event, "item_id")):
            return []
        return [Transcript("assistant", delta)]

    def _speech_started(self, event: JSONObject) -> list[RealtimeEvent]:
        return [UserSpeechStarted()]

    def _input_committed(self, event: JSONObject) -> list[RealtimeEvent]:
        # With transcription on, the turn ends when its text is known (completed/failed).
        return [] if self._transcribes_input else [UserTurnEnded("")]

    def _input_transcribed(self, event: JSONObject) -> list[RealtimeEvent]:
        text = (opt_str(event, "transcript") or "").strip()
        events: list[RealtimeEvent] = [Transcript("user", text)] if text else []
        events.append(UserTurnEnded(text))
        return events

    def _input_transcription_failed(self, event: JSONObject) -> list[RealtimeEvent]:
        error = event.get("error")
        message = opt_str(error, "message") if isinstance(error, dict) else None
        return [
            UserTurnEnded(""),
            _error(f"transcribing the user's speech failed: {message or 'no details'}"),
        ]

    def _output_item_done(self, event: JSONObject) -> list[RealtimeEvent]:
        item = require_obj(event, "item")
        if item.get("type") != "function_call":
            return []
        if item.get("status") == "incomplete":
            # Cut off mid-arguments (the response was cancelled or hit a limit): running
            # it would act on half-formed arguments.
            logger.debug("skipping incomplete function call %s", item.get("call_id"))
            return []
        return self._call(opt_str(event, "response_id"), item)

    def _arguments_done(self, event: JSONObject) -> list[RealtimeEvent]:
        # Some servers name the function here; without a name the call waits for
        # response.output_item.done, which always has it.
        if opt_str(event, "name") is None:
            return []
        return self._call(opt_str(event, "response_id"), event)

    def _call(self, response_id: str | None, fields: JSONObject) -> list[RealtimeEvent]:
        call_id, name = require_str(fields, "call_id"), require_str(fields, "name")
        arguments = opt_str(fields, "arguments") or "{}"
        if not self._tools.add_call(response_id or self._running or "", call_id):
            return []
        return [ToolCallRequested(FunctionCall(call_id=call_id, name=name, arguments=arguments))]

    def _response_done(self, event: JSONObject) -> list[RealtimeEvent]:
        response = require_obj(event, "response")
        response_id = require_str(response, "id")
        if self._running == response_id:
            self._running = None
        if response_id not in self._started:
            logger.debug("response.done for unknown response %s ignored", response_id)
            return []
        self._started.discard(response_id)
        raw_status = opt_str(response, "status") or "failed"
        details = response.get("status_details")
        details = details if isinstance(details, dict) else {}
        error = status_error(raw_status, details)
        status: ResponseStatus = raw_status if raw_status in _STATUSES else "failed"  # type: ignore[assignment]
        if raw_status not in _STATUSES:
            error = f"unexpected response status {raw_status!r}"
        events = self._audio.response_done(response_id)
        usage = response_usage(response.get("usage"))
        events.append(BackendResponseEnded(response_id, status, error=error, usage=usage))
        send, lost = self._tools.response_done(response_id, status)
        if send:
            self._send_continuation()
        if lost:
            why = error or opt_str(details, "reason")
            events.append(
                ContinuationFailed(
                    None,
                    f"the response ended {status}{f' ({why})' if why else ''}, so the tool "
                    "outputs submitted for it get no reply",
                )
            )
        return events

    def _error(self, event: JSONObject) -> list[RealtimeEvent]:
        error = ServerError.parse(event)
        if error.code in _BENIGN_ERROR_CODES:
            logger.debug("ignoring server error %s: %s", error.code, error.message)
            return []
        label = ", ".join(part for part in (error.kind, error.code) if part) or "unknown"
        failure = RealtimeError(
            f"server error ({label}): {error.message}", fatal=error.fatal, code=error.code
        )
        events: list[RealtimeEvent] = [ProviderError(failure)]
        if self._tools.rejected(error.event_id):
            events.append(ContinuationFailed(None, error.message))
        elif self._reply_refused(error.event_id):
            events.append(ReplyRefused(error.message))
        return events

    def _reply_refused(self, event_id: str | None) -> bool:
        """An error answered an event of a pending reply request (which is then forgotten)."""
        for request in self._replies:
            if event_id in request:
                self._replies.remove(request)
                return True
        return False


_Handler = Callable[[RealtimeProtocol, JSONObject], list[RealtimeEvent]]
_HANDLERS: dict[str, _Handler] = {
    "response.created": RealtimeProtocol._response_created,
    "response.output_audio.delta": RealtimeProtocol._audio_delta,
    "response.audio.delta": RealtimeProtocol._audio_delta,
    "response.output_audio.done": RealtimeProtocol._audio_done,
    "response.audio.done": RealtimeProtocol._audio_done,
    "response.output_audio_transcript.delta": RealtimeProtocol._transcript_delta,
    "response.audio_transcript.delta": RealtimeProtocol._transcript_delta,
    "input_audio_buffer.speech_started": RealtimeProtocol._speech_started,
    "input_audio_buffer.committed": RealtimeProtocol._input_committed,
    "conversation.item.input_audio_transcription.completed": RealtimeProtocol._input_transcribed,
    "conversation.item.input_audio_transcription.failed": (
        RealtimeProtocol._input_transcription_failed
    ),
    "response.output_item.done": RealtimeProtocol._output_item_done,
    "response.function_call_arguments.done": RealtimeProtocol._arguments_done,
    "response.done": RealtimeProtocol._response_done,
    "error": RealtimeProtocol._error,
}

# -- helpers -------------------------------------------------------------------------------


def _error(message: str, *, fatal: bool = False) -> ProviderError:
    return ProviderError(RealtimeError(message, fatal=fatal))


def _excerpt(text: str, limit: int = 200) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
