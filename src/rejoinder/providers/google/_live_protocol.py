"""The sans-I/O core of the Gemini Live client: server messages in, protocol facts out.

Nothing here touches a socket. ``LiveProtocol`` holds what one connection knows (the
model turn running, the user's turn, the tool calls and their batches, the newest
resumption handle, a GoAway) and reports ``RealtimeEvent`` facts through ``emit``;
client messages it must send because of a command go out through ``send``. The JSON
shapes are ``_live_wire``'s.

How the Live API's messages become our facts (``models.realtime``):

- There is no "response created": a *model turn* starts with its first output (audio,
  its transcription, a tool call) and is reported as ``BackendResponseStarted``; it ends
  with ``turnComplete`` (``completed``) or ``interrupted`` (``cancelled``). Its audio is
  one stretch (``AgentAudioStarted`` ... ``AgentAudioEnded``), closed at
  ``generationComplete`` (all of it was sent).
- A *blocking* call ends its turn (``completed``: the model waits for the result, and the
  call is the session's open ``tool`` obligation, owed by the agent whose tool runs: an
  ``AgentTask`` it awaits is not held up by a response of the session's). The results of
  one ``toolCall`` go back together in one ``toolResponse``; the model then continues in
  a new turn, which takes over the session's ``provider_continuation``. A
  ``turnComplete`` that arrives when a continuation or a requested reply is expected and
  no turn runs is reported as an empty turn, so nothing waits for speech that will not
  come.
- A *non-blocking* function (``behavior: NON_BLOCKING``) does not stop the turn. Its
  result is sent with a ``scheduling``: ``SILENT`` when the function is configured
  ``silent`` or the tool says no reply is required (the output's fate is ``silent``:
  nothing is owed), else ``WHEN_IDLE`` or ``INTERRUPT`` (``continue``: the next turn voices
  it). A ``silent`` function owes nothing from the moment it is called: its call is
  reported inside a zero-length response that ends ``cancelled``, which is how a
  provider says "no reply follows from these calls" (the tool keeps the user from being
  marked away while it runs, but the agent is not ``thinking`` for it).
- The user: the server's VAD sends no "speech started". A user turn opens with the first
  input transcription while the model is silent, or with ``interrupted`` (the server heard
  the user over the model); with our own turn detection it opens when our VAD hears
  speech. It ends when the model starts answering, or after ``user_turn_silence``
  seconds of pushed audio with no new words (with our VAD, counted once it heard the
  speech end: the words are transcribed after the audio, and the user's message is
  recorded when the turn ends). Words transcribed while the model answers, or within
  ``user_turn_silence`` of audio after it began, are reported as (interim) ``Transcript``
  facts only: the transcription lags and is not ordered with the model's turn, so they
  are most likely the end of the turn being answered (whose message was recorded when
  it ended), not a new one.
- ``interrupted`` after something of ours cut the running turn off (an ``INTERRUPT``
  result, a typed message, a requested reply), while the user said nothing, is that
  pre-emption: the turn ends ``cancelled`` and no user speech is reported.
- ``toolCallCancellation``: the server withdrew calls (the user interrupted the turn that
  made them). Their results are not sent (their output's fate is ``silent``), and the
  results of the rest of their ``toolCall`` go back without them. The session's tool
  keeps running until it returns: there is no fact that cancels a running tool.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ...models.chat import FunctionCall, FunctionCallOutput
from ...models.realtime import (
    AgentAudio,
    AgentAudioCut,
    AgentAudioEnded,
    AgentAudioStarted,
    BackendResponseEnded,
    BackendResponseStarted,
    ProviderError,
    RealtimeError,
    RealtimeEvent,
    ResponseUsage,
    ToolCallCancelled,
    ToolCallRequested,
    ToolOutputFate,
    Transcript,
    UserSpeechStarted,
    UserTurnEnded,
)
from .. import _json
from ._live_wire import (
    INPUT_RATE,
    SCHEDULING,
    JSONObject,
    NonBlocking,
    Scheduling,
    as_dict,
    as_list,
    as_str,
    audio_rate,
    client_content,
    duration_seconds,
    function_response,
    image_turn,
    is_true,
    parse_message,
    text_turn,
    tool_output_note,
    tool_response,
    usage_of,
)

logger = logging.getLogger("rejoinder.providers.google.live")

SILENT_DELEGATION = "gemini:silent"
"""The delegation id of the zero-length responses that carry ``silent`` calls: kept apart
from the conversation's own (``None``) so they never take over a pending continuation."""

EXPECT_BOUND = 10.0
"""Seconds a requested turn (a reply, a continuation) is waited for before a quiet
moment may come without it: the session bounds the obligation itself."""

Emit = Callable[[RealtimeEvent], None]
Send = Callable[[JSONObject], None]


class Malformed(Exception):
    """A server message lacks a field it must have, or has it in the wrong shape."""


@dataclass(slots=True, eq=False)
class _Turn:
    id: str
    audio: bool = False
    """A stretch of its audio is open."""
    muted: bool = False
    """Its playback was cut by the client: what still comes for it is dropped."""
    usage: ResponseUsage | None = None


@dataclass(slots=True, eq=False)
class _Call:
    name: str
    turn: str
    mode: NonBlocking | None
    """``None``: blocking."""
    state: Literal["open", "answered", "cancelled"] = "open"


@dataclass(slots=True, eq=False)
class _Batch:
    """The blocking calls of one ``toolCall`` message: their results go back together."""

    calls: list[str]
    responses: list[JSONObject] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _User:
    source: Literal["server", "vad"]
    text: list[str] = field(default_factory=list)
    quiet_samples: int = 0


class LiveProtocol:
    """One connection's state. Feed it server frames (``receive``) and the session's
    commands; facts come out through ``emit``, client messages through ``send``.

    A new connection is a new instance: a resumed session keeps the conversation on the
    server, but turn and call ids of the old connection mean nothing on the new one.
    """

    def __init__(
        self,
        emit: Emit,
        send: Send,
        *,
        connection: int = 1,
        non_blocking: Mapping[str, NonBlocking] | None = None,
        client_activity: bool = False,
        user_turn_silence: float = 1.2,
        clock: Callable[[], float],
    ) -> None:
        self._emit = emit
        self._send_message = send
        self._connection = connection
        self._non_blocking = dict(non_blocking or {})
        self._client_activity = client_activity
        """Our VAD opens and ends user turns (the server's activity detection is off)."""
        self._silence_samples = round(user_turn_silence * INPUT_RATE)
        self._clock = clock
        self._turn: _Turn | None = None
        self._turns = 0
        self._user: _User | None = None
        self._late_samples = 0
        """Input audio still to be pushed before words that come while the model is
        silent open a new user turn: right after the model began answering, they are
        more likely the end of the turn it answers (the transcription lags the audio)."""
        self._calls: dict[str, _Call] = {}
        self._batches: list[_Batch] = []
        self._expect_since: float | None = None
        """When we last asked for a turn (a reply, a continuation) that has not begun."""
        self._preempting = False
        """An ``INTERRUPT`` result went out while the model spoke: its ``interrupted`` is
        ours, not the user's."""
        self._interrupted_open = False
        """A turn was ``interrupted`` and no new one began: a bare ``turnComplete`` now
        ends that turn; it is not the model answering with nothing."""
        self.handle: str | None = None
        """The newest resumable session handle."""
        self.handle_fresh = False
        """``handle`` was issued after everything that changed the conversation since:
        resuming it loses nothing."""
        self.go_away_deadline: float | None = None
        """When the server said it will close this connection (``clock`` time)."""

    # -- what the session asks ------------------------------------------------------------

    @property
    def quiet(self) -> bool:
        """Nothing is under way: no model turn, no user turn, no call waiting for its
        result, no turn asked for recently. A connection can be replaced now."""
        return (
            self._turn is None
            and self._user is None
            and not any(call.state == "open" for call in self._calls.values())
            and not self._expecting()
        )

    @property
    def user_active(self) -> bool:
        return self._user is not None

    # -- server messages ------------------------------------------------------------------

    def receive(self, data: str | bytes) -> None:
        """Handle one server frame. Anything malformed is reported and skipped."""
        try:
            message = parse_message(data)
        except ValueError as exc:
            self._emit(ProviderError(RealtimeError(f"Gemini Live: {exc}")))
            return
        try:
            self._dispatch(message)
        except Malformed as exc:
            kinds = ", ".join(sorted(message)) or "empty"
            self._emit(ProviderError(RealtimeError(f"Gemini Live: malformed {kinds}: {exc}")))

    def _dispatch(self, message: JSONObject) -> None:
        # Usage first: it describes the turn that a turnComplete beside it ends.
        if "usageMetadata" in message:
            usage = usage_of(message["usageMetadata"])
            if self._turn is not None and usage is not None:
                self._turn.usage = usage
        if "serverContent" in message:
            self._server_content(as_dict(message["serverContent"]))
        if "toolCall" in message:
            self._tool_call(as_dict(message["toolCall"]))
        if "toolCallCancellation" in message:
            self._cancellation(as_dict(message["toolCallCancellation"]))
        if "sessionResumptionUpdate" in message:
            update = as_dict(message["sessionResumptionUpdate"])
            handle = as_str(update.get("newHandle"))
            if is_true(update.get("resumable")) and handle:
                self.handle, self.handle_fresh = handle, True
        if "goAway" in message:
            left = duration_seconds(as_dict(message["goAway"]).get("timeLeft"))
            self.go_away_deadline = self._clock() + (left if left is not None else 0.0)
            logger.info("Gemini Live: the server goes away in %s", left)

    def _server_content(self, content: JSONObject) -> None:
        transcription = as_dict(content.get("inputTranscription"))
        if transcription:
            self._input_text(
                as_str(transcription.get("text")) or "", is_true(transcription.get("finished"))
            )
        model_turn = content.get("modelTurn")
        if model_turn is not None:
            parts = as_dict(model_turn).get("parts")
            if not isinstance(parts, list):
                raise Malformed("`modelTurn.parts` is not a list")
            for part in parts:
                self._part(as_dict(part))
        output = as_str(as_dict(content.get("outputTranscription")).get("text"))
        if output:
            self._output_text(output)
        if is_true(content.get("interrupted")):
            self._interrupted()
        if is_true(content.get("generationComplete")) and self._turn is not None:
            self._close_audio(self._turn)
        if is_true(content.get("turnComplete")):
            self._turn_complete()

    def _part(self, part: JSONObject) -> None:
        if part.get("thought") is True:
            return  # the model's reasoning, never spoken
        blob = part.get("inlineData")
        if blob is None:
            return  # text parts are not spoken with AUDIO responses; code parts neither
        blob = as_dict(blob)
        rate = audio_rate(blob.get("mimeType"))
        if rate is None:
            logger.debug("Gemini Live: ignored inline data of type %r", blob.get("mimeType"))
            return
        data = blob.get("data")
        if not isinstance(data, str):
            raise Malformed("`inlineData.data` is not a string")
        try:
            pcm = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise Malformed("`inlineData.data` is not base64") from None
        if len(pcm) % 2:
            raise Malformed("the audio is not 16-bit PCM (odd byte count)")
        if not pcm:
            return
        turn = self._output_turn()
        if turn.muted:
            return
        from ...models.audio import AudioFrame  # numpy: on the first audio, not on import

        if not turn.audio:
            turn.audio = True
            self._emit(AgentAudioStarted())
        self._emit(AgentAudio(AudioFrame.from_pcm(pcm, rate)))

    def _output_text(self, text: str) -> None:
        turn = self._output_turn()
        if not turn.muted:
            self._emit(Transcript("assistant", text))

    def _input_text(self, text: str, finished: bool) -> None:
        user = self._user
        if (
            user is None
            and text.strip()
            and not self._client_activity
            and self._turn is None
            and self._late_samples <= 0
        ):
            user = self._open_user("server")
        if text and user is not None:
            user.text.append(text)
            user.quiet_samples = 0
        elif text:
            # Words of a turn that already ended (transcription is not ordered with the
            # model's turn): shown, but the user's message was recorded already.
            logger.debug("Gemini Live: late input transcription %r", text)
        if text:
            self._emit(Transcript("user", text))
        if finished and user is not None and user.source == "server":
            self._end_user()

    def _interrupted(self) -> None:
        turn = self._turn
        self._interrupted_open = turn is not None
        if self._preempting and turn is not None and self._user is None:
            # What we sent cut the model off (an INTERRUPT result, a typed message, a
            # requested reply): the user said nothing.
            self._preempting = False
            # What it sent that has not played is not to be heard: stop it now.
            self._emit(AgentAudioCut())
            self._end_turn(turn, "cancelled")
            return
        if self._user is None and not self._client_activity:
            self._open_user("server")  # the server's VAD heard the user over the model
        if turn is not None:
            self._end_turn(turn, "cancelled")

    def _turn_complete(self) -> None:
        turn = self._turn
        if turn is None:
            if self._interrupted_open:
                # The end of the turn that was interrupted: what waits for an answer (an
                # INTERRUPT result's continuation) still waits for the next turn.
                self._interrupted_open = False
                return
            if self._expecting():
                # The model answered with nothing: report the empty turn, so what waits
                # for it (a continuation, a requested reply) ends now.
                self._end_turn(self._start_turn(), "completed")
            return
        self._end_turn(turn, "cancelled" if turn.muted else "completed")

    # -- tool calls -----------------------------------------------------------------------

    def _tool_call(self, message: JSONObject) -> None:
        calls = message.get("functionCalls")
        if not isinstance(calls, list):
            raise Malformed("`functionCalls` is not a list")
        new: list[FunctionCall] = []
        for raw in calls:
            fields = as_dict(raw)
            call_id, name = as_str(fields.get("id")), as_str(fields.get("name"))
            if not call_id or not name:
                what = "Gemini Live: a function call without an id or a name"
                self._emit(ProviderError(RealtimeError(what)))
            elif call_id in self._calls or any(c.call_id == call_id for c in new):
                continue  # reported once per id
            else:
                try:
                    arguments = _json.dumps(fields.get("args") or {})
                    new.append(FunctionCall(call_id, name, arguments))
                except ValueError:
                    what = f"Gemini Live: the arguments of call {call_id!r} nest too deeply"
                    self._emit(ProviderError(RealtimeError(what)))
        if not new:
            return
        turn = self._output_turn()
        batch: list[str] = []
        for function_call in new:
            self._report_call(turn, function_call, batch)
        if batch:
            # The model waits for the results: its turn is over (the calls are owed),
            # and it goes on in a new one.
            self._batches.append(_Batch(batch))
            self._end_turn(turn, "cancelled" if turn.muted else "completed")

    def _report_call(self, turn: _Turn, call: FunctionCall, batch: list[str]) -> None:
        mode = self._non_blocking.get(call.name)
        if mode is None:
            self._calls[call.call_id] = _Call(call.name, turn.id, None)
            batch.append(call.call_id)
            self._emit(ToolCallRequested(call))
        elif mode == "silent":
            # Nothing is owed for it, from now: its own zero-length response ends
            # "cancelled", which leaves the tool running (work for the user) but
            # uncommitted (no reply follows from it).
            response_id = f"silent_{call.call_id}"
            self._calls[call.call_id] = _Call(call.name, response_id, mode)
            self._emit(BackendResponseStarted(response_id, SILENT_DELEGATION))
            self._emit(ToolCallRequested(call, SILENT_DELEGATION))
            self._emit(BackendResponseEnded(response_id, "cancelled", SILENT_DELEGATION))
        else:
            self._calls[call.call_id] = _Call(call.name, turn.id, mode)
            self._emit(ToolCallRequested(call))

    def _cancellation(self, message: JSONObject) -> None:
        for call_id in as_list(message.get("ids")):
            call = self._calls.get(call_id) if isinstance(call_id, str) else None
            if call is None or call.state != "open":
                continue
            logger.info("Gemini Live: the server withdrew the call %s (%s)", call_id, call.name)
            call.state = "cancelled"
            self._emit(ToolCallCancelled(call_id))
            if call.mode is None:
                self._settle(call_id)

    def submit_tool_output(
        self, output: FunctionCallOutput, reply_required: bool
    ) -> ToolOutputFate:
        call = self._calls.get(output.call_id)
        if call is None:
            # Not a call of this connection: the server waits for no result, so it goes
            # in as a note (and, if wanted, a reply to it).
            note = tool_output_note(output.name, output.output, is_error=output.is_error)
            self._send(client_content([text_turn("user", note)], turn_complete=reply_required))
            if reply_required:
                self._expect()
                return "continue"
            return "silent"
        if call.state != "open":
            if call.state == "answered":
                logger.warning("a second output for call %s changes nothing", output.call_id)
            else:
                logger.info("not sending the result of the withdrawn call %s", output.call_id)
            return "silent"
        call.state = "answered"
        if call.mode is None:
            response = function_response(
                output.call_id, output.name, output.output, is_error=output.is_error
            )
            self._settle(output.call_id, response)
            # The model waits for blocking results and always goes on after them.
            return "continue"
        scheduling: Scheduling = (
            "SILENT" if call.mode == "silent" or not reply_required else SCHEDULING[call.mode]
        )
        entry = function_response(
            output.call_id,
            output.name,
            output.output,
            is_error=output.is_error,
            scheduling=scheduling,
        )
        self._send(tool_response([entry]))
        if scheduling == "SILENT":
            return "silent"
        if scheduling == "INTERRUPT" and self._turn is not None:
            self._preempting = True
        self._expect()
        return "continue"

    def _settle(self, call_id: str, response: JSONObject | None = None) -> None:
        """A blocking call got its result (``response``) or was withdrawn (``None``):
        once its whole batch is settled, its results go back together, and the model
        continues from them."""
        for batch in self._batches:
            if call_id not in batch.calls:
                continue
            if response is not None:
                batch.responses.append(response)
            if all(self._calls[c].state != "open" for c in batch.calls):
                self._batches.remove(batch)
                if batch.responses:
                    self._send(tool_response(batch.responses))
                    self._expect()
            return

    # -- the session's other commands -----------------------------------------------------

    def request_reply(self, text: str | None) -> None:
        """``generate_reply`` (``text``: one-off instructions) or ``send_user_text``: a
        user turn, completed, so the model answers now."""
        turns = [text_turn("user", text)] if text else []
        self._send(client_content(turns, turn_complete=True))
        if self._turn is not None:
            self._preempting = True  # it cuts the running turn off: not the user
        self._expect()

    def add_context(self, text: str) -> None:
        self._send(client_content([text_turn("user", text)], turn_complete=False))

    def add_image(self, mime_type: str, data: str) -> None:
        """An image the user shows: in the conversation, answered with what they say next."""
        self._send(client_content([image_turn(mime_type, data)], turn_complete=False))

    def playback_cut(self) -> None:
        """The session cut the agent's audio (a barge-in): what still comes for the
        running turn must not play. The server ends the turn (``interrupted``) itself."""
        turn = self._turn
        if turn is not None and not turn.muted:
            turn.muted = True
            self._close_audio(turn)

    def activity_started(self) -> None:
        """Our VAD heard the user start (the session sent ``activityStart``)."""
        if self._user is None:
            self._open_user("vad")

    def activity_ended(self) -> None:
        """Our VAD heard the user stop (the session sent ``activityEnd``). The turn's
        words are transcribed after its audio, so it ends as a turn of the server's VAD
        does: when the model answers, or after ``user_turn_silence`` with no new words."""
        if self._user is not None and self._user.source == "vad":
            self._user.source = "server"
            self._user.quiet_samples = 0

    def audio_pushed(self, samples: int) -> None:
        """``samples`` of 16 kHz input went out: a user turn of the server's VAD ends
        after ``user_turn_silence`` of them with no new words."""
        self._late_samples = max(self._late_samples - samples, 0)
        user = self._user
        if user is None or user.source != "server":
            return
        user.quiet_samples += samples
        if user.quiet_samples >= self._silence_samples:
            self._end_user()

    def end(self) -> None:
        """The connection is gone. An open stretch of audio and an open user turn end
        here: what was heard and said still happened."""
        if self._turn is not None:
            self._close_audio(self._turn)
        self._end_user()

    # -- internals ------------------------------------------------------------------------

    def _send(self, message: JSONObject) -> None:
        self.handle_fresh = False
        self._send_message(message)

    def _expect(self) -> None:
        self._expect_since = self._clock()

    def _expecting(self) -> bool:
        since = self._expect_since
        return since is not None and self._clock() - since < EXPECT_BOUND

    def _output_turn(self) -> _Turn:
        return self._turn if self._turn is not None else self._start_turn()

    def _start_turn(self) -> _Turn:
        if self._user is not None and self._user.source == "server":
            self._end_user()  # the model answers: the server decided the user was done
            self._late_samples = self._silence_samples
        self._turns += 1
        turn = _Turn(f"turn_{self._connection}_{self._turns}")
        self._turn = turn
        self._expect_since = None
        self._preempting = False
        self._interrupted_open = False
        self.handle_fresh = False
        self._emit(BackendResponseStarted(turn.id))
        return turn

    def _end_turn(self, turn: _Turn, status: Literal["completed", "cancelled"]) -> None:
        self._close_audio(turn)
        if self._turn is turn:
            self._turn = None
        self.handle_fresh = False
        self._emit(BackendResponseEnded(turn.id, status, usage=turn.usage))

    def _close_audio(self, turn: _Turn) -> None:
        if turn.audio:
            turn.audio = False
            self._emit(AgentAudioEnded())

    def _open_user(self, source: Literal["server", "vad"]) -> _User:
        user = _User(source)
        self._user = user
        self.handle_fresh = False
        self._emit(UserSpeechStarted())
        return user

    def _end_user(self) -> None:
        user, self._user = self._user, None
        if user is not None:
            self._emit(UserTurnEnded("".join(user.text).strip()))
