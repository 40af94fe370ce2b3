"""What ``rejoinder dev`` and ``serve`` log: one line per session and per turn, for a
person to read or as JSON lines.

``SessionLines.watch(conn)`` follows the session a connection serves through its events
(nothing is added to the session): a line when its first agent has entered, one when its
greeting was first heard, one per user turn, one when it ends::

    14:02:07 session_3f2a started: websocket from 127.0.0.1, agent VoiceAssistant
    14:02:08 session_3f2a greeting: first audio heard 0.61 s after the session began
    14:02:11 session_3f2a turn: heard "weather in Paris?", first audio 0.42 s after the speech ended
    14:02:30 session_3f2a ended after 23.1 s (client left), 4 turns

A turn is the user's message (``conversation_item_added``; spoken when the user was
``speaking`` since the last one, else typed) up to the agent's ``listening`` again. Its
latency is the session's own ``voice_latency`` metric for a spoken turn (the end of the
user's speech to the first agent audio the listener heard), else the time from the
message to the agent's ``speaking``.

``configure(verbose=..., log_format=...)`` sets the ``rejoinder`` logger up for a server:
these lines and the runtime's warnings (everything with ``verbose``) on stderr, as text, or
as one JSON object a line, each with its ``session_id`` and ``agent_id``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TextIO

from .models.chat import ChatMessage
from .session.log_context import SessionLogFilter

if TYPE_CHECKING:
    from .io.connection import Connection
    from .session import AgentSession

__all__ = [
    "SESSIONS_LOGGER",
    "JsonLogFormatter",
    "SessionLines",
    "TextLogFormatter",
    "configure",
]

SESSIONS_LOGGER = "rejoinder.sessions"
LogFormat = Literal["text", "json"]
_QUOTE_CHARS = 160
"""A turn line quotes at most this much of what the user said."""


# ------------------------------------------------------------------- the lines


@dataclass(slots=True)
class _Turn:
    text: str
    spoken: bool
    at: float
    latency: float | None = None
    """From the voice_latency metric (spoken turns)."""
    first_speaking: float | None = None


class SessionLines:
    """Logs each watched session's start, turns and end to ``logger`` (INFO).
    ``transcripts``: quote what the user said (else only how many words)."""

    def __init__(self, *, transcripts: bool = True, logger: logging.Logger | None = None) -> None:
        self.transcripts = transcripts
        self.logger = logger or logging.getLogger(SESSIONS_LOGGER)

    def watch(self, conn: Connection) -> None:
        """Follow the session ``conn`` will serve (from ``conn.serve``)."""

        def observe(session: AgentSession[Any]) -> None:
            _Watch(self, session, conn.transport, conn.remote)

        conn.session_observers.append(observe)


class _Watch:
    """One session, from ``serve`` to its ``close`` event."""

    def __init__(
        self, lines: SessionLines, session: AgentSession[Any], transport: str, remote: str | None
    ) -> None:
        self._lines = lines
        self._session = session
        self._transport = transport
        self._remote = remote
        self._began = time.monotonic()
        self._opened = _loop_time()
        self._greeted = False
        """The agent has spoken (or been answered): the greeting's line is said once."""
        self._entered = False
        self._spoke = False
        """The user was heard speaking since their last message: the next one was spoken
        (a typed message is transcribed too, so transcripts cannot tell)."""
        self._turn: _Turn | None = None
        self._turns = 0
        self._handlers: list[tuple[Any, Any]] = [
            ("agent_state_changed", self._agent_state),
            ("user_state_changed", self._user_state),
            ("conversation_item_added", self._item),
            ("metrics_collected", self._metrics),
            ("close", self._close),
        ]
        for name, handler in self._handlers:
            session.on(name, handler)

    def _agent_id(self) -> str:
        try:
            return self._session.current_agent.id
        except RuntimeError:  # no agent yet, or none any more
            return "-"

    def _log(self, event: str, message: str, **fields: Any) -> None:
        self._lines.logger.info(
            message,
            extra={
                "rj_session_id": self._session.id,
                "rj_agent_id": self._agent_id(),
                "rj_fields": {"event": event, **fields},
            },
        )

    # ----------------------------------------------------------- the events

    def _agent_state(self, ev: Any) -> None:
        if not self._entered and ev.old_state == "initializing":
            self._entered = True
            where = f" from {self._remote}" if self._remote else ""
            self._log(
                "session_started",
                f"started: {self._transport}{where}, agent {self._agent_id()}",
                transport=self._transport,
                remote=self._remote,
            )
        if ev.new_state == "speaking" and not self._greeted:
            self._greeted = True
            if self._turn is None and self._turns == 0:
                # Spoken before anything was said to it: the greeting, whose wait is the
                # first thing a person notices.
                wait = max(ev.created_at - self._opened, 0.0)
                self._log(
                    "greeting",
                    f"greeting: first audio heard {wait:.2f} s after the session began",
                    latency=round(wait, 3),
                )
        turn = self._turn
        if turn is None:
            return
        if ev.new_state == "speaking" and turn.first_speaking is None:
            turn.first_speaking = ev.created_at
        elif ev.new_state == "listening":
            self._end_turn()

    def _user_state(self, ev: Any) -> None:
        if ev.new_state == "speaking":
            self._spoke = True

    def _item(self, ev: Any) -> None:
        item = ev.item
        if not isinstance(item, ChatMessage) or item.role != "user":
            return
        self._greeted = True  # the user spoke first: no greeting to time
        self._end_turn()  # a turn the agent never finished answering: the user went on
        spoken, self._spoke = self._spoke, False
        now = _loop_time()
        self._turn = _Turn(text=item.content, spoken=spoken, at=now)

    def _metrics(self, ev: Any) -> None:
        metrics = ev.metrics
        turn = self._turn
        if turn is not None and metrics["type"] == "voice_latency" and turn.latency is None:
            turn.latency = float(metrics["latency"])

    def _close(self, ev: Any) -> None:
        self._end_turn()
        for name, handler in self._handlers:
            self._session.off(name, handler)
        seconds = time.monotonic() - self._began
        reason = ev.reason + (f": {ev.error}" if ev.error is not None else "")
        self._log(
            "session_ended",
            f"ended after {seconds:.1f} s ({reason}), {self._turns} turn"
            f"{'' if self._turns == 1 else 's'}",
            transport=self._transport,
            duration=round(seconds, 3),
            reason=ev.reason,
            error=None if ev.error is None else f"{type(ev.error).__name__}: {ev.error}",
            turns=self._turns,
        )

    def _end_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        self._turns += 1
        how = "heard" if turn.spoken else "typed"
        words = len(turn.text.split())
        if self._lines.transcripts:
            what = f"{how} {_quote(turn.text)}"
        else:
            what = f"{how} {words} word{'' if words == 1 else 's'}"
        if turn.latency is not None:
            latency, since = turn.latency, "end_of_speech"
            answer = f"first audio {latency:.2f} s after the speech ended"
        elif turn.first_speaking is not None:
            latency, since = max(turn.first_speaking - turn.at, 0.0), "message"
            answer = f"answer began {latency:.2f} s after the message"
        else:
            latency, since = None, None
            answer = "no answer"
        fields: dict[str, Any] = {"input": how, "words": words}
        if self._lines.transcripts:
            fields["text"] = turn.text
        self._log(
            "turn",
            f"turn: {what}, {answer}",
            **fields,
            latency=None if latency is None else round(latency, 3),
            latency_from=since,
        )


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _QUOTE_CHARS:
        flat = flat[: _QUOTE_CHARS - 1] + "…"
    return json.dumps(flat, ensure_ascii=False)


def _loop_time() -> float:
    import asyncio

    return asyncio.get_running_loop().time()


# ----------------------------------------------------------------- formatting


class _Ids(SessionLogFilter):
    """The session and agent of a record: a session line names its own (its handler
    runs outside the session's context), any other record gets them from the context."""

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        session_id = getattr(record, "rj_session_id", None)
        if session_id is not None:
            record.session_id = session_id
            record.agent_id = getattr(record, "rj_agent_id", "-")
        return True


class TextLogFormatter(logging.Formatter):
    """Session lines as ``HH:MM:SS SESSION message``; the runtime's own records as
    ``LEVEL logger [SESSION AGENT]: message``."""

    def __init__(self) -> None:
        super().__init__(datefmt="%H:%M:%S")
        self._runtime = logging.Formatter(
            "%(levelname)s %(name)s [%(session_id)s %(agent_id)s]: %(message)s"
        )

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "rj_fields", None) is None:
            return self._runtime.format(record)
        session = getattr(record, "session_id", "-")
        return f"{self.formatTime(record, self.datefmt)} {session} {record.getMessage()}"


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, ``session_id`` and ``agent_id`` (``null`` outside a session), a session
    line's fields (``event``, ``duration``, ``latency``...) and ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, Any] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "session_id": _id(getattr(record, "session_id", "-")),
            "agent_id": _id(getattr(record, "agent_id", "-")),
        }
        fields = getattr(record, "rj_fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _id(value: object) -> str | None:
    return None if value in (None, "-") else str(value)


def configure(
    *, verbose: bool, log_format: LogFormat = "text", stream: TextIO | None = None
) -> logging.Handler:
    """Log the runtime's warnings (everything with ``verbose``) and the session lines to
    ``stream`` (stderr); returns the handler added to the ``rejoinder`` logger."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(_Ids())
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    logger = logging.getLogger("rejoinder")
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.addHandler(handler)
    logging.getLogger(SESSIONS_LOGGER).setLevel(logging.DEBUG if verbose else logging.INFO)
    return handler
