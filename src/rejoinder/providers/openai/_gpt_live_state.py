"""GPT-Live state, sans I/O: one connection's server frames in, facts out.

``ConnectionState`` routes server events to the state machines: ``BackendTracker`` (what
the backend owes and what the client owes it, §4.3, §5), ``UserTurnTracker`` (§4.6) and
``models.bursts.BurstDetector`` (§4.4). They report ``RealtimeEvent`` facts through an
``emit`` callback and client events through a ``send`` callback. numpy is imported when a
``ConnectionState`` is made (for the burst detector), not with this module.
"""

from __future__ import annotations

import base64
import binascii
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from ...models import FunctionCall, FunctionCallOutput
from ...models.realtime import (
    BackendResponseEnded,
    BackendResponseStarted,
    ContinuationFailed,
    DelegationRequested,
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
from ._gpt_live_protocol import (
    SAMPLE_RATE,
    JSONObject,
    append_event,
    as_dict,
    as_ms,
    as_str,
    describe_error,
    error_code,
    is_fatal,
    logger,
    parse_server_event,
)

if TYPE_CHECKING:
    from ...models.bursts import BurstDetector

__all__ = ["BackendTracker", "ConnectionState", "UserTurnTracker"]

_MAX_REPLY_REQUESTS = 32
"""Reply requests remembered to match a refusal. The service acknowledges none, so the
oldest are dropped."""

# -- one connection --------------------------------------------------------------------------


class ConnectionState:
    """Everything one connection knows. A new connection is a new session (§4.8): nothing
    here carries over, so every connection (and the wait for one) gets a new instance."""

    def __init__(
        self,
        emit: Emit,
        send: Send,
        new_id: Callable[[str], str],
        *,
        user_turn_silence: float,
        burst_threshold: float,
        burst_end_silence: float,
        burst_pause_after: float,
    ) -> None:
        from ...models.bursts import BurstDetector

        self._emit = emit
        self.backend = BackendTracker(emit, send, new_id)
        self.turns = UserTurnTracker(emit, silence=user_turn_silence)
        self._bursts: BurstDetector = BurstDetector(
            sample_rate=SAMPLE_RATE,
            threshold=burst_threshold,
            end_silence=burst_end_silence,
            pause_after=burst_pause_after,
        )
        self.usage_seconds = 0.0
        """The service's cumulative voice seconds for this connection."""
        self._replies: deque[tuple[str, ...]] = deque(maxlen=_MAX_REPLY_REQUESTS)
        """The event ids of each reply request (``generate_reply``, ``send_user_text``)."""

    @property
    def quiet(self) -> bool:
        """A moment a connection can be replaced without anyone noticing: the agent is
        not speaking, the user is not in a turn, and the backend owes nothing."""
        return not self._bursts.in_burst and not self.turns.active and self.backend.idle

    def reply_requested(self, *event_ids: str) -> None:
        """A reply request went out as these events: an error naming one refuses it."""
        self._replies.append(event_ids)

    def on_frame(self, text: str) -> str | RealtimeError | None:
        """One text frame. Returns the reason of a ``session.closed``, a fatal error (the
        session is over), or None. Anything malformed is reported and skipped."""
        try:
            event = parse_server_event(text)
        except ValueError as exc:
            self._emit(ProviderError(RealtimeError(f"GPT-Live: {exc}")))
            return None
        kind = event["type"]
        if kind == "session.output_audio.delta":
            self._on_output_audio(event.get("delta"))
        elif kind in ("session.output_transcript.delta", "session.input_transcript.delta"):
            self._on_transcript(kind, event)
        elif kind == "response.event":
            delegation_id = as_str(event.get("delegation_id"))
            self.backend.on_response_event(delegation_id, as_dict(event.get("event")))
        elif kind == "session.delegation.created":
            self._on_delegation(as_dict(event.get("delegation")))
        elif kind == "error":
            return self._on_error(as_dict(event.get("error")))
        elif kind in ("session.usage.updated", "session.closed"):
            seconds = as_dict(event.get("usage")).get("seconds")
            if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                self.usage_seconds = float(seconds)
            if kind == "session.closed":
                return as_str(event.get("reason")) or "no reason given"
        else:
            # Acknowledgements and event types we do not know (§1.3).
            logger.debug("GPT-Live: ignored %r", kind)
        return None

    def _on_delegation(self, delegation: JSONObject) -> None:
        """§3.1: metadata only. A ``responses`` delegation is followed on the backend
        stream; a ``client`` one is the application's to answer (§5.1)."""
        delegation_id = as_str(delegation.get("id"))
        if delegation.get("target") != "client":
            return
        if not delegation_id:
            self._emit(ProviderError(RealtimeError("GPT-Live: a client delegation without an id")))
            return
        self._emit(DelegationRequested(delegation_id))

    def end(self) -> None:
        """The connection is gone. An open burst and an open user turn end here: what was
        heard and said still happened, and the session may record it before reseeding."""
        for event in self._bursts.end():
            self._emit(event)
        self.turns.end()

    def _on_output_audio(self, delta: object) -> None:
        from ...models.audio import AudioFrame

        try:
            if not isinstance(delta, str):
                raise ValueError("the delta is not a string")
            frame = AudioFrame.from_pcm(base64.b64decode(delta, validate=True), SAMPLE_RATE)
        except (binascii.Error, ValueError) as exc:
            self._emit(ProviderError(RealtimeError(f"GPT-Live sent unreadable audio: {exc}")))
            return
        for event in self._bursts.push(frame):
            self._emit(event)

    def _on_transcript(self, kind: str, event: JSONObject) -> None:
        text = as_str(event.get("delta"))
        if not text:
            return
        start_ms, end_ms = as_ms(event.get("start_ms")), as_ms(event.get("end_ms"))
        if kind == "session.input_transcript.delta":
            self.turns.on_fragment(text, start_ms, end_ms)
            self._emit(Transcript("user", text, start_ms, end_ms))
        else:
            self._emit(Transcript("assistant", text, start_ms, end_ms))

    def _on_error(self, error: JSONObject) -> RealtimeError | None:
        description = describe_error(error)
        code = error_code(error)
        if is_fatal(error):  # the caller reports it and ends the session
            return RealtimeError(f"GPT-Live: {description}", fatal=True, code=code)
        self._emit(ProviderError(RealtimeError(f"GPT-Live: {description}", code=code)))
        client_event_id = as_str(error.get("client_event_id"))
        request = next((r for r in self._replies if client_event_id in r), None)
        if request is not None:  # no reply follows a refused request
            self._replies.remove(request)
            self._emit(ReplyRefused(description))
        else:
            self.backend.on_error(description, client_event_id)
        return None


# -- backend tracking (§4.3, §5) -----------------------------------------------------------

Emit: TypeAlias = Callable[[RealtimeEvent], None]
Send: TypeAlias = Callable[[JSONObject], None]
_Status: TypeAlias = Literal["completed", "failed", "incomplete"]
_TERMINAL: dict[object, _Status] = {
    "response.completed": "completed",
    "response.failed": "failed",
    "response.incomplete": "incomplete",
}


@dataclass(slots=True)
class _Response:
    delegation_id: str | None
    call_ids: list[str] = field(default_factory=list)
    ended: bool = False


@dataclass(slots=True)
class _Call:
    name: str
    delegation_id: str | None
    state: Literal["open", "answered", "discarded"] = "open"


class BackendTracker:
    """What the backend owes and what the client owes it, for one connection.

    Follows each delegation's responses in order (item events name no response, §3.2),
    dispatches completed calls once, and sends exactly one ``response.create`` when no
    response runs and every open call has its output (§4.3 step 6). A new connection is a
    new session (§4.8): make a new tracker.
    """

    def __init__(self, emit: Emit, send: Send, new_id: Callable[[str], str]) -> None:
        self._emit = emit
        self._send = send
        self._new_id = new_id
        self._running: dict[str | None, str] = {}
        """Delegation → its running response: the last ``response.created`` seen under it."""
        self._responses: dict[str, _Response] = {}
        self._calls: dict[str, _Call] = {}
        self._awaiting_create: dict[str, str | None] = {}
        """Outputs sent with no ``response.create`` after them yet: call id → delegation."""
        self._outputs: dict[str, str] = {}
        """``response.item.create`` event id → call id, to tie a refusal to its call."""
        self._creates: dict[str, list[str | None]] = {}
        """Sent ``response.create`` event id → the delegations it continues, until each
        shows a ``response.created`` (or the create is refused)."""

    @property
    def busy(self) -> bool:
        """Backend work is running or a continuation is pending."""
        return bool(self._running) or bool(self._creates)

    @property
    def idle(self) -> bool:
        """Nothing is owed either way: no response runs, no continuation is pending, no
        call waits for its output, no output waits for its ``response.create``."""
        return (
            not self.busy
            and not self._awaiting_create
            and not any(call.state == "open" for call in self._calls.values())
        )

    # -- server side --------------------------------------------------------------------

    def on_response_event(self, delegation_id: str | None, event: JSONObject) -> None:
        kind = as_str(event.get("type"))  # a reshaped type must not reach `in _TERMINAL`
        response = as_dict(event.get("response"))
        if kind == "response.created":
            self._created(delegation_id, as_str(response.get("id")))
        elif kind == "response.output_item.done":
            self._item_done(delegation_id, as_dict(event.get("item")))
        elif kind in _TERMINAL:
            self._ended(delegation_id, _TERMINAL[kind], response)
        else:
            logger.debug("GPT-Live: ignored backend event %r", kind)

    def on_error(self, message: str, client_event_id: str | None) -> None:
        """A non-fatal ``error`` event (the caller reports the ``ProviderError``)."""
        if client_event_id is not None and client_event_id in self._creates:
            for delegation_id in self._creates.pop(client_event_id):
                self._emit(ContinuationFailed(delegation_id, message))
        elif client_event_id is not None and client_event_id in self._outputs:
            self._output_refused(self._outputs.pop(client_event_id), message)
        elif client_event_id is None and self.busy:
            # §5.3.3: an error names no response, yet it may be the only sign that backend
            # work died (an output-token limit). Waiting for a terminal event that may never
            # come would leave the conversation hanging, so running work counts as failed
            # and pending continuations as refused. A late terminal event is then ignored.
            for response_id in list(self._running.values()):
                self._finish(response_id, "failed", message)
            for delegations in self._creates.values():
                for delegation_id in delegations:
                    self._emit(ContinuationFailed(delegation_id, message))
            self._creates.clear()
            self._maybe_continue()

    def _created(self, delegation_id: str | None, response_id: str | None) -> None:
        if response_id in self._responses:
            logger.debug("GPT-Live: response.created for %s again, ignored", response_id)
            return
        if response_id is None:
            response_id = self._new_id("resp_local")  # the minimal fake sends no snapshot
        previous = self._running.get(delegation_id)
        if previous is not None:
            logger.debug("GPT-Live: %s replaced %s under %s", response_id, previous, delegation_id)
        self._running[delegation_id] = response_id
        self._responses[response_id] = _Response(delegation_id)
        for event_id, delegations in list(self._creates.items()):
            if delegation_id in delegations:
                delegations.remove(delegation_id)  # that continuation is now running
                if not delegations:
                    del self._creates[event_id]
                break
        self._emit(BackendResponseStarted(response_id, delegation_id))

    def _item_done(self, delegation_id: str | None, item: JSONObject) -> None:
        if item.get("type") != "function_call":
            return
        call_id, name = as_str(item.get("call_id")), as_str(item.get("name"))
        arguments = item.get("arguments")
        if isinstance(arguments, dict):
            try:
                arguments = _json.dumps(arguments)
            except ValueError:
                message = f"GPT-Live: the arguments of call {call_id!r} nest too deeply"
                self._emit(ProviderError(RealtimeError(message)))
                return
        if item.get("status") != "completed" or not call_id or not name:
            logger.debug("GPT-Live: not dispatching call item %r", item.get("id"))
            return
        if not isinstance(arguments, str) or call_id in self._calls:
            return
        self._calls[call_id] = _Call(name, delegation_id)
        response_id = self._running.get(delegation_id)
        if response_id is not None:
            self._responses[response_id].call_ids.append(call_id)
        # A call outside any known response stays open: it still needs an output (§4.3.3).
        self._emit(ToolCallRequested(FunctionCall(call_id, name, arguments), delegation_id))

    def _ended(self, delegation_id: str | None, status: _Status, response: JSONObject) -> None:
        response_id = as_str(response.get("id"))
        if response_id not in self._responses:
            response_id = self._running.get(delegation_id)
        if response_id is None or self._responses[response_id].ended:
            logger.debug(
                "GPT-Live: response.%s for no running response under %s", status, delegation_id
            )
            return
        error = None
        if status == "failed":
            error = as_str(as_dict(response.get("error")).get("message")) or "response failed"
        elif status == "incomplete":
            reason = as_str(as_dict(response.get("incomplete_details")).get("reason"))
            error = f"response incomplete: {reason or 'cut short'}"
        self._finish(response_id, status, error)
        self._maybe_continue()

    def _finish(self, response_id: str, status: _Status, error: str | None) -> None:
        record = self._responses[response_id]
        record.ended = True
        if self._running.get(record.delegation_id) == response_id:
            del self._running[record.delegation_id]
        self._emit(
            BackendResponseEnded(
                response_id,
                status,
                record.delegation_id,
                expects_answer=status == "completed" and not record.call_ids,
                error=error,
            )
        )
        if status != "completed":
            # The service discards the calls of a failed or incomplete response and refuses
            # outputs for them (§4.3), so they no longer hold back a response.create, and an
            # output already sent for one leads nowhere.
            for call_id in record.call_ids:
                self._calls[call_id].state = "discarded"
            self._drop_outputs(record.call_ids, error or status)

    def _output_refused(self, call_id: str, message: str) -> None:
        call = self._calls.get(call_id)
        if call is None:
            return
        call.state = "discarded"
        self._drop_outputs([call_id], message)
        self._maybe_continue()

    def _drop_outputs(self, call_ids: list[str], message: str) -> None:
        """Outputs that will not reach a continuation. A delegation left with no output in
        the batch will not continue: its ``ContinuationFailed`` ends the wait for one."""
        dropped = {self._awaiting_create.pop(c) for c in call_ids if c in self._awaiting_create}
        for delegation_id in dropped:
            if delegation_id not in self._awaiting_create.values():
                self._emit(ContinuationFailed(delegation_id, message))

    # -- client side --------------------------------------------------------------------

    def submit(self, output: FunctionCallOutput) -> ToolOutputFate:
        call = self._calls.get(output.call_id)
        if call is None or call.state != "open":
            # Unknown (a dropped connection's call), discarded (its response failed), or
            # already answered: the service would refuse it, so the voice model gets it as
            # silent context instead.
            state = "unknown" if call is None else call.state
            logger.debug("GPT-Live: output for %s call %s sent as context", state, output.call_id)
            verb = "failed with" if output.is_error else "returned"
            text = f"The tool {output.name} (call {output.call_id}) {verb}: {output.output}"
            delegation_id = call.delegation_id if call is not None else None
            self._send(append_event("thinking", text, self._new_id("ctx"), delegation_id))
            return "silent"
        call.state = "answered"
        event_id = self._new_id("out")
        self._outputs[event_id] = output.call_id
        self._send(
            {
                "type": "response.item.create",
                "event_id": event_id,
                "item": {
                    "type": "function_call_output",
                    "call_id": output.call_id,
                    "output": output.output,
                },
            }
        )
        self._awaiting_create[output.call_id] = call.delegation_id
        self._maybe_continue()
        # The service voices every continuation (no silent close, §4.3), whatever the
        # application wanted.
        return "continue"

    def _maybe_continue(self) -> None:
        """Send the one ``response.create`` once the batch is whole (§4.3 step 6).

        A pending continuation (sent, not yet started) does not block the next one: a
        server that never starts it would otherwise hold back every later tool call.
        """
        if not self._awaiting_create or self._running:
            return
        if any(call.state == "open" for call in self._calls.values()):
            return
        delegations = list(dict.fromkeys(self._awaiting_create.values()))
        self._awaiting_create.clear()
        event_id = self._new_id("rc")
        self._creates[event_id] = delegations
        self._send({"type": "response.create", "event_id": event_id})


# -- user turns (§4.6) -----------------------------------------------------------------------


class UserTurnTracker:
    """Infers user turns from input transcript fragments and the audio the client pushed.

    A turn starts with the first non-empty fragment. It ends after ``silence`` seconds of
    *pushed* input audio with no new fragment (sample counts, not wall time), or when a
    fragment starts more than ``silence`` after the previous one ended; that fragment then
    starts the next turn.
    """

    def __init__(self, emit: Emit, *, silence: float = 0.8, sample_rate: int = SAMPLE_RATE):
        self._emit = emit
        self._silence_ms = silence * 1000
        self._silence_samples = round(silence * sample_rate)
        self._text: list[str] = []
        self._active = False
        self._last_end_ms: int | None = None
        self._quiet_samples = 0

    @property
    def active(self) -> bool:
        return self._active

    def on_fragment(self, text: str, start_ms: int | None, end_ms: int | None) -> None:
        if not text:
            return
        gap_ms = None
        if start_ms is not None and self._last_end_ms is not None:
            gap_ms = start_ms - self._last_end_ms
        if self._active and gap_ms is not None and gap_ms > self._silence_ms:
            self.end()
        if not self._active:
            self._active = True
            self._emit(UserSpeechStarted())
        self._text.append(text)
        self._quiet_samples = 0
        if end_ms is not None or start_ms is not None:
            self._last_end_ms = end_ms if end_ms is not None else start_ms

    def on_audio_pushed(self, samples: int) -> None:
        if not self._active:
            return
        self._quiet_samples += samples
        if self._quiet_samples >= self._silence_samples:
            self.end()

    def end(self) -> None:
        """End the open turn now (also used when the connection goes away)."""
        if not self._active:
            return
        text = "".join(self._text).strip()
        self._active = False
        self._text = []
        self._quiet_samples = 0
        self._emit(UserTurnEnded(text))
