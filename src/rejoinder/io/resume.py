"""Resuming a session: a client whose connection drops comes back within a grace period.

``ready`` gives the client its session's id and a fresh single-use ``resume_token``. When
the connection ends without the client's goodbye (a network change, a sleeping tab, a
ping timeout), the session is *detached* instead of closed: the ``ResumeRegistry`` keeps
it for ``grace`` seconds, then closes it as if the client had left. A new connection that
names the token (``start.resume``; WebRTC: ``?resume=`` on the offer's URL) takes the
session over: it gets a ``ready`` with ``resumed: true`` and a new token, then the state
snapshot. ``docs/protocol.md`` ("Resuming a session") is the client's side of it.

While detached (``Connection.lost``):

- the microphone hears silence at the real-time pace (``hear_silence``), so a turn the
  user was in the middle of ends as if they had stopped talking;
- the reply that was playing is cut where the client's last ``played`` report left it,
  as a barge-in cuts it but without a user turn: the history keeps what was heard,
  marked interrupted, and the rest of that reply's audio is dropped
  (``ReportedPlayback.detach``). Its words not heard are said again (``ReplyCut``): a
  new speech with the unheard rest of its text, queued as the cut reply ends, so it is
  owed (``thinking``) from then on and plays when the client is back (a realtime model,
  which speaks for itself and was told where it was cut as for a barge-in, is asked to
  say that rest: ``continue_instructions``);
- what the agent says meanwhile is held, never counted as heard, and played to the next
  client (the agent is ``thinking``, never ``speaking``, while nobody listens);
- everything owed (tools, a reply being generated) goes on.

The registry is per process (on Ray Serve, per replica): a token only resumes on the
process that issued it. Bounded: at most ``max_detached`` sessions wait (the oldest is
closed to make room), each for ``grace`` seconds; a token works once (two connections
racing with one token: the first wins), and a resume that races the grace's end either
wins (the timer is stopped) or finds the session closed (``resume_failed``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models.chat import ChatMessage
    from ..session import AgentSession, SpeechHandle
    from .connection import Connection
    from .microphone import PushAudioInput

__all__ = [
    "DEFAULT_GRACE",
    "ENTRY_TIMEOUT",
    "MAX_DETACHED",
    "ReplyCut",
    "ResumeRegistry",
    "continue_instructions",
    "hear_silence",
    "unheard_rest",
]

logger = logging.getLogger("rejoinder.io.resume")

DEFAULT_GRACE = 30.0
"""Seconds a detached session waits for its client (``create_app(resume_grace=...)``)."""
MAX_DETACHED = 1000
"""Detached sessions a process keeps at most; beyond, the oldest is closed."""
MAX_TOKEN_CHARS = 256
"""A ``start.resume`` longer than this is no token of ours."""
ENTRY_TIMEOUT = 30.0
"""Seconds an entry point gets to return after its detached session was closed."""


class ResumeRegistry:
    """The sessions of one process that can be resumed: each live session's current
    token, and the detached ones, each closed when its ``grace`` runs out."""

    def __init__(
        self,
        grace: float = DEFAULT_GRACE,
        *,
        max_detached: int = MAX_DETACHED,
        entry_timeout: float = ENTRY_TIMEOUT,
    ) -> None:
        if not grace > 0:  # NaN fails this too
            raise ValueError(f"grace must be positive (0 turns resuming off), got {grace!r}")
        if max_detached < 1:
            raise ValueError(f"max_detached must be at least 1, got {max_detached}")
        self.grace = grace
        self.max_detached = max_detached
        self.entry_timeout = entry_timeout
        self._tokens: dict[str, Connection] = {}
        """Tokens that can be used."""
        self._claimed: dict[str, Connection] = {}
        """Tokens used by a connection that has not taken over yet (WebRTC connecting)."""
        self._token_of: dict[Connection, str] = {}
        self._waiting: dict[Connection, asyncio.TimerHandle] = {}
        """Detached sessions, oldest first, each with its grace timer."""
        self.closed = False
        self.resumed_total = 0
        self.expired_total = 0
        self.evicted_total = 0
        self.refused_total = 0

    @property
    def detached(self) -> int:
        """Sessions waiting for their client now."""
        return len(self._waiting)

    def waiting(self, conn: Connection) -> bool:
        """``conn``'s session is detached, waiting for its client."""
        return conn in self._waiting

    # ---------------------------------------------------------------- tokens

    def issue(self, conn: Connection) -> str | None:
        """A new token for ``conn`` (its earlier one stops working); None once closed."""
        if self.closed:
            return None
        self._revoke(conn)
        token = secrets.token_urlsafe(24)
        self._tokens[token] = conn
        self._token_of[conn] = token
        return token

    def knows(self, token: object) -> bool:
        """``token`` can be used now (a resume may pass a full server's admission)."""
        return isinstance(token, str) and token in self._tokens

    def busy(self, token: object) -> bool:
        """``token`` was used by a connection that is still connecting."""
        return isinstance(token, str) and token in self._claimed

    def claim(self, token: object) -> Connection | None:
        """The session ``token`` names, once: None for an unknown, used or expired token.
        The claiming connection then calls ``Connection.attach`` (or ``unclaim`` if it
        failed before it could); until then the session's grace timer runs on."""
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_CHARS:
            self.refused_total += 1
            return None
        conn = self._tokens.pop(token, None)
        if conn is None or conn.left:
            self.refused_total += 1
            return None
        self._claimed[token] = conn
        return conn

    def unclaim(self, token: str) -> None:
        """The connection that claimed ``token`` failed before it took over: the token
        works again, if its session still waits."""
        conn = self._claimed.pop(token, None)
        if conn is not None and not conn.left and self._token_of.get(conn) == token:
            self._tokens[token] = conn

    # ------------------------------------------------------- the session side

    def detach(self, conn: Connection) -> bool:
        """``conn``'s client dropped: keep its session for ``grace`` seconds. False when
        it cannot be resumed (no token was given, or the registry is closed)."""
        if self.closed or conn not in self._token_of or conn.left:
            return False
        if conn in self._waiting:
            return True
        while len(self._waiting) >= self.max_detached:
            oldest = next(iter(self._waiting))
            self.evicted_total += 1
            self._expire(oldest, "too many sessions were waiting to be resumed")
        loop = asyncio.get_running_loop()
        why = f"the client did not come back within {self.grace:g} s"
        self._waiting[conn] = loop.call_later(self.grace, self._expired, conn, why)
        return True

    def attached(self, conn: Connection) -> None:
        """A connection took ``conn``'s session over: its grace timer stops."""
        timer = self._waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()
        for token in [t for t, c in self._claimed.items() if c is conn]:
            del self._claimed[token]
        self.resumed_total += 1

    def forget(self, conn: Connection) -> None:
        """``conn``'s session ended: its token and timer go."""
        timer = self._waiting.pop(conn, None)
        if timer is not None:
            timer.cancel()
        self._revoke(conn)
        for token in [t for t, c in self._claimed.items() if c is conn]:
            del self._claimed[token]

    def close(self) -> None:
        """The server is shutting down: every detached session closes now, and none is
        kept from here on."""
        self.closed = True
        for conn in list(self._waiting):
            self._expire(conn, "the server is shutting down")
        self._tokens.clear()
        self._claimed.clear()
        self._token_of.clear()

    def _revoke(self, conn: Connection) -> None:
        token = self._token_of.pop(conn, None)
        if token is not None:
            self._tokens.pop(token, None)

    def _expired(self, conn: Connection, why: str) -> None:
        self.expired_total += 1
        self._expire(conn, why)

    def _expire(self, conn: Connection, why: str) -> None:
        logger.info("session of %s closed: %s", conn.id, why)
        self.forget(conn)
        conn.give_up(why, self.entry_timeout)


# ------------------------------------------------------------------ silence


async def hear_silence(mic: PushAudioInput, frame_seconds: float = 0.02) -> None:
    """Push silence into ``mic`` at the real-time pace until cancelled: a detached
    session's microphone, as a muted one sounds (its VAD ends a turn the drop cut off)."""
    import numpy as np  # here: the CLI imports this module for its defaults

    from ..models.audio import AudioFrame

    loop = asyncio.get_running_loop()
    rate = mic.sample_rate
    samples = max(1, round(rate * frame_seconds))
    began, pushed = loop.time(), 0
    while True:
        mic.push(AudioFrame(np.zeros(samples, np.int16), rate))
        pushed += 1
        delay = began + pushed * frame_seconds - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -1.0:  # a blocked loop: go on from now, not with a burst
            began, pushed = loop.time(), 0
            await asyncio.sleep(0)


# -------------------------------------------------------- the reply a drop cut

_WORD = re.compile(r"\S+")


def unheard_rest(text: str, heard: str) -> str:
    """What of a reply's ``text`` the listener did not hear, when the history kept
    ``heard`` of it (whole words from its start): the text after as many words."""
    words = len(heard.split())
    if words == 0:
        return text.strip()
    for count, match in enumerate(_WORD.finditer(text), 1):
        if count == words:
            return text[match.end() :].strip()
    return ""


def continue_instructions(rest: str) -> str:
    """What a realtime model is asked, to say the rest of a reply a drop cut: it speaks
    for itself (no TTS to give the words to), and it was told where it was cut."""
    return (
        "The user's connection dropped while you were speaking, so they did not hear the "
        "end of your last reply. Say that part now, picking up where they stopped hearing "
        f"you, without repeating what they heard. The part they missed: {rest}"
    )


class ReplyCut:
    """The reply a drop cut short, until its unheard rest is said again.

    Made as the drop begins; ``heard`` is then set to the samples of it the client
    reported playing (0: nothing). Its whole text is known once its audio is over
    (``text_known``, from the playback's cut-over, when every delta has reached the agent
    text). Then the rest is queued with ``session.say``: at once when nothing was heard
    (the reply is still open: the agent stays owed), else as the history records the heard
    part (``recorded``, in the step that closes the reply), or, when the history kept
    nothing of it (cut in its first word), once its playout is over (``played_out``).

    A realtime model records the heard part at once, within the drop (it is told where it
    was cut, as for a barge-in): ``recorded`` then comes first, with the text the client
    was given of the reply, and the model is asked for the rest (``continue_instructions``)
    rather than a TTS given it."""

    def __init__(
        self, session: AgentSession[Any], handle: SpeechHandle | None, *, realtime: bool = False
    ):
        self._session = session
        self.heard: int | None = None
        """Samples of the reply the client reported playing; None until the drop says."""
        self._realtime = realtime
        self._text: str | None = None
        self.settled = False
        self.said: SpeechHandle | None = None
        """The speech saying the rest, once queued."""
        if handle is not None:
            waiting = asyncio.ensure_future(handle.wait_for_playout())
            waiting.add_done_callback(lambda _: self.played_out())

    def text_known(self, text: str, *, ended: bool) -> None:
        """The cut reply's audio is over: ``text`` is all of it (``ended`` False: it was
        stopped, by an interruption or the session closing: nothing is said again)."""
        if self.settled or self._text is not None:
            return
        if not ended:
            self.settled = True
            return
        self._text = text
        if self.heard == 0:
            self._say(text)

    def recorded(self, item: ChatMessage, text: str = "") -> None:
        """An interrupted agent message was recorded: the heard part of the cut reply.
        ``text``: the reply's text as the client was given it, for a reply whose text
        was not known yet (a realtime model's, recorded within the drop)."""
        if self.settled or not item.interrupted:
            return
        if self._text is None:
            if not text:
                return
            self._text = text
        self._say(unheard_rest(self._text, item.content))

    def played_out(self) -> None:
        if not self.settled and self._text is not None:
            self._say(self._text)  # the history kept none of it: all of it again
        self.settled = True

    def _say(self, rest: str) -> None:
        self.settled = True
        if not rest:
            return
        try:
            if self._realtime:
                self.said = self._session.generate_reply(instructions=continue_instructions(rest))
            else:
                self.said = self._session.say(rest)
        except RuntimeError as exc:  # the session is closing
            logger.info("the rest of a cut reply is not said: %s", exc)
