"""MarkedPlayback: playback truth on a phone line, from the marks the provider echoes.

A telephony provider plays the agent audio we send from its own buffer and tells us
nothing about it, except one thing: a *mark* we put between two media messages comes back
when the audio before it has been played to the caller. So we put marks in the stream —
one after the first 20 ms chunk of each agent segment (its start: the caller hears it
now), one every ``mark_interval`` of audio, and one at the segment's end — and turn each
echo into the played count ``ReportedPlayback`` reasons about: ``speaking`` starts and
ends from echoed marks, never from sending, and on a barge-in the history keeps the text
up to the last echoed mark (other frameworks estimate this by pacing).

A mark's name carries the *clear epoch* and the sample position it follows
(``rj-<epoch>-<position>``). A barge-in sends ``clear`` and starts a new epoch at the
position of the last echo; a provider that echoes the pending marks at once on a clear
(Twilio) and one that drops them both leave the truth intact, because marks of an old
epoch are ignored. Names in another format, or past what was sent, are ignored too.

Audio is sent at most ``lead`` seconds ahead of real time (a flow control, not a truth:
the provider would buffer minutes, and a clear makes it drop them anyway), in pieces of
exactly ``chunk`` (20 ms: Telnyx takes no less), so marks fall on 20 ms boundaries; what
is left of a frame waits for the next one, and a segment's last piece is padded with
silence (the padding plays, but never counts as the agent's audio).

A provider that echoes no marks at all (a one-way stream, say) must not leave the agent
``speaking`` forever: once a segment's end mark is ``echo_timeout`` seconds overdue (by
the send clock), the segment is taken as played, with a warning.

Audio that is not the agent's voice (keypad tones: ``play_signal``) goes down the same
line, in order: after the agent audio captured so far (and after the end of a segment still
being captured), before whatever the agent says next. It takes playout time but no sample
positions, so it never starts, extends or shows in a segment: ``speaking``, the played
count and the heard text stay about the voice. It ends with a mark of its own
(``rjs-<n>``) whose echo says the far end heard it all; a clear cuts it like agent audio.

Background audio between replies (``play_background``: an ambient loop, a thinking sound)
takes positions like the agent's audio but carries no marks, so a reply's first mark still
follows its first chunk; none is sent while a signal is on the line (a keypad tone must
reach the far end clean, and hold audio replaces the ambient).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

import numpy as np

from ...models.audio import PCM16, AudioFrame
from ..playback import ReportedPlayback

__all__ = ["MarkedPlayback"]

logger = logging.getLogger("rejoinder.io.telephony")

_MARK = re.compile(r"rj-([0-9]{1,9})-([0-9]{1,15})")  # not \d: it takes any Unicode digit
_SIGNAL_MARK = re.compile(r"rjs-[0-9]{1,12}")


class MarkedPlayback(ReportedPlayback):
    """``ReportedPlayback`` fed by echoed marks instead of ``played`` counts.

    ``send_media(frame)`` sends one chunk (awaiting it is the socket's backpressure),
    ``send_tail(frame)`` the last one of a segment without waiting, ``send_mark(name)``
    and ``send_clear()`` queue a control message; none may raise. The transport calls
    ``on_mark(name)`` for each mark the provider echoes.
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        send_media: Callable[[AudioFrame], Awaitable[None]],
        send_mark: Callable[[str], None],
        send_clear: Callable[[], None],
        send_tail: Callable[[AudioFrame], None],
        mark_interval: float = 0.16,
        chunk: float = 0.02,
        lead: float = 1.0,
        echo_timeout: float = 5.0,
    ) -> None:
        if not 0 < chunk <= mark_interval:
            raise ValueError("need 0 < chunk <= mark_interval")
        if lead < 0 or echo_timeout <= 0:
            raise ValueError("lead must be >= 0 and echo_timeout positive")
        super().__init__(sample_rate, self._send_chunks, self._clear_sent)
        # A carrier that stops echoing marks is bounded by echo_timeout (its echoes
        # trail the audio by its own jitter buffer), not by the client protocol's grace.
        self.stall_grace = None
        self._send_media = send_media
        self._send_mark = send_mark
        self._send_clear_message = send_clear
        self._send_tail = send_tail
        self._echo_timeout = echo_timeout
        self._overdue: asyncio.TimerHandle | None = None
        self._warned = False
        self._carry: PCM16 = np.zeros(0, np.int16)
        """The start of a chunk: what a frame left over for the next one."""
        self._chunk = max(1, round(chunk * sample_rate))
        self._interval = max(1, round(mark_interval * sample_rate))
        self._lead = lead
        self._epoch = 0
        self._epoch_base = 0
        """The played count at which this epoch's sample 0 plays."""
        self._epoch_sent = 0
        """Samples of this epoch sent."""
        self._marked: int | None = None
        """Position of this epoch's last mark (None: the segment has none yet)."""
        self._cleared = False
        self._due = 0.0
        """Loop time by which everything sent would have played (flow control only)."""
        self.marks_sent = 0
        self.marks_echoed = 0
        self._wire = asyncio.Lock()
        """Held while a frame of agent audio or a signal is being sent: one at a time."""
        self._signal_turn = asyncio.Lock()
        """Held by the signal whose turn it is (the others wait behind it, in order)."""
        self._segment_closed = asyncio.Event()
        """Set when the segment being captured ends (flushed, cleared, closed)."""
        self._signals: dict[str, asyncio.Future[bool]] = {}
        """Signals sent and not heard yet, by the name of their end mark."""
        self._signal_count = 0
        self._signals_sending = 0
        self._cuts = 0
        """Clears and the close so far: a signal that sees it change was cut."""
        self._signal_warned = False

    # ---------------------------------------------------------------- sending

    async def _send_chunks(self, frame: AudioFrame, marks: bool = True) -> None:
        epoch = self._epoch
        async with self._wire:  # behind a signal being sent
            if epoch != self._epoch or self.closed:
                return
            data = np.concatenate((self._carry, frame.data)) if self._carry.size else frame.data
            self._carry = np.zeros(0, np.int16)
            whole = len(data) - len(data) % self._chunk
            for start in range(0, whole, self._chunk):
                await self._pace()
                if epoch != self._epoch or self.closed:
                    return  # cleared (or gone) meanwhile: the rest of this frame is unheard
                await self._send_media(AudioFrame(data[start : start + self._chunk], self.rate))
                if epoch != self._epoch:
                    return
                self._sent_piece(self._chunk, self._chunk, marks)
            self._carry = data[whole:]

    def _sent_piece(self, audio: int, played: int, marks: bool = True) -> None:
        """``audio`` samples of the agent's went out, taking ``played`` samples of time."""
        self._epoch_sent += audio
        self._due = max(self._due, asyncio.get_running_loop().time()) + played / self.rate
        if not marks:
            return
        if self._marked is None or self._epoch_sent - self._marked >= self._interval:
            self._mark()

    async def _send_background(self, frame: AudioFrame) -> None:
        await self._send_chunks(frame, marks=False)

    @property
    def takes_background(self) -> bool:
        signals = self._signals_sending > 0 or bool(self._signals)
        return super().takes_background and not signals

    @property
    def rate(self) -> int:
        assert self.sample_rate is not None
        return self.sample_rate

    async def _pace(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._due = max(self._due, now)
        ahead = self._due - now - self._lead
        if ahead > 0:
            await asyncio.sleep(ahead)

    def flush(self) -> None:
        self._segment_closed.set()
        carry, self._carry = self._carry, np.zeros(0, np.int16)
        if carry.size and not self.closed:
            padded = np.zeros(self._chunk, np.int16)
            padded[: carry.size] = carry
            self._send_tail(AudioFrame(padded, self.rate))
            self._sent_piece(carry.size, self._chunk)
        super().flush()
        if self._marked is not None and self._marked != self._epoch_sent:
            self._mark()  # the segment's end: its echo is when the caller heard it all
        if self._marked is not None:
            self._expect_echo()
        self._marked = None  # the next segment starts with a mark of its own

    def _expect_echo(self) -> None:
        """Past ``echo_timeout`` after this audio should have played, take it as played."""
        if self._overdue is not None:
            self._overdue.cancel()
        loop = asyncio.get_running_loop()
        when = max(self._due, loop.time()) + self._echo_timeout
        self._overdue = loop.call_at(when, self._echo_overdue, self._epoch, self._epoch_sent)

    def _echo_overdue(self, epoch: int, position: int) -> None:
        self._overdue = None
        if epoch != self._epoch or self.played_samples >= self._epoch_base + position:
            return
        if not self._warned:
            self._warned = True
            logger.warning(
                "no mark echoed %.0f s after the audio should have played: taking it as "
                "heard (is the stream bidirectional?)",
                self._echo_timeout,
            )
        self.on_played(self._epoch_base + position)

    def _mark(self) -> None:
        self._marked = self._epoch_sent
        self.marks_sent += 1
        self._send_mark(f"rj-{self._epoch}-{self._epoch_sent}")

    def _clear_sent(self) -> None:
        if self._overdue is not None:
            self._overdue.cancel()
            self._overdue = None
        self._epoch += 1
        self._epoch_sent = 0
        self._carry = np.zeros(0, np.int16)
        self._marked = None
        self._due = 0.0
        self._cleared = True
        self._send_clear_message()

    def clear_buffer(self) -> None:
        agent_audio = self.pending  # sent or captured and not heard yet
        signals = self._signals_sending > 0 or bool(self._signals)
        self._cuts += 1
        self._segment_closed.set()
        super().clear_buffer()
        if signals and not agent_audio and not self.closed:
            # Only a signal is on the line (every agent sample has been heard, so the
            # agent's epoch and positions are untouched): the provider drops it.
            self._due = 0.0
            self._send_clear_message()
        self._cut_signals()
        if self._cleared:
            # The provider dropped its buffer: the new epoch plays from where the last
            # echo left us, and nothing it held (or echoes for it) counts as heard.
            self._cleared = False
            self._epoch_base = self.played_samples
            self.on_played(self._epoch_base, cleared=True)

    # ------------------------------------------------------------- reports

    def on_mark(self, name: str) -> None:
        """A mark echoed by the provider."""
        match = _MARK.fullmatch(name)
        if match is None and _SIGNAL_MARK.fullmatch(name):
            self._signal_heard(name)
            return
        if match is None:
            logger.debug("ignoring a mark we did not send: %r", name[:80])
            return
        epoch, position = int(match.group(1)), int(match.group(2))
        if epoch != self._epoch:
            return  # from before a clear: echoed as dropped, never heard
        if position > self._epoch_sent:
            logger.debug("ignoring mark %r: past what was sent", name)
            return
        self.marks_echoed += 1
        self.on_played(self._epoch_base + position)

    def close(self) -> None:
        if self._overdue is not None:
            self._overdue.cancel()
            self._overdue = None
        self._cuts += 1
        self._segment_closed.set()
        super().close()
        self._cut_signals()

    # ------------------------------------------------------------- signals

    async def play_signal(self, frame: AudioFrame) -> bool:
        """Play ``frame`` (mono, at this output's rate), audio that is not the agent's
        voice, after the agent audio captured so far: a segment still being captured
        ends first, and what is captured meanwhile waits for it. Paced like agent audio.
        Returns True once the far end has played it all (its end mark echoed; or, from a
        provider that echoes nothing, ``echo_timeout`` after it should have played),
        False when a clear or the call's end cut it (some of it may have been heard)."""
        if frame.sample_rate != self.sample_rate or frame.num_channels != 1:
            raise ValueError(f"a signal must be mono at {self.sample_rate} Hz")
        cuts = self._cuts
        if self.closed:
            return False
        self._signals_sending += 1
        try:
            async with self._signal_turn:  # in the order asked for
                while self._capturing():
                    self._segment_closed.clear()
                    await self._segment_closed.wait()
                    if cuts != self._cuts:
                        return False
                async with self._wire:
                    if cuts != self._cuts or not await self._send_signal(frame.data, cuts):
                        return False
                    self._signal_count += 1
                    name = f"rjs-{self._signal_count}"
                    heard: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
                    self._signals[name] = heard
                    self._send_mark(name)
        finally:
            self._signals_sending -= 1
        loop = asyncio.get_running_loop()
        due = max(self._due, loop.time()) + self._echo_timeout
        overdue = loop.call_at(due, self._signal_overdue, name)
        try:
            return await heard
        finally:
            overdue.cancel()
            self._signals.pop(name, None)

    def stop_signals(self) -> bool:
        """Cut the signals being played or waiting to (hold audio, keys), and none of the
        agent's audio: each ``play_signal`` returns False. When no agent audio is still
        unheard, the provider is also told to drop what it buffered (its clear message),
        so the signal stops at once; otherwise what was sent plays out (at most ``lead``
        seconds), as a clear would cut the agent's words too. Whether any was cut."""
        if not (self._signals_sending > 0 or self._signals) or self.closed:
            return False
        self._cuts += 1
        if not self.pending:
            self._due = 0.0
            self._send_clear_message()
        self._cut_signals()
        return True

    def _capturing(self) -> bool:
        """A segment of agent audio is being captured (its end is still to come)."""
        return bool(self._segments) and not self._segments[-1].flushed

    async def _send_signal(self, data: PCM16, cuts: int) -> bool:
        loop = asyncio.get_running_loop()
        for start in range(0, len(data), self._chunk):
            piece = data[start : start + self._chunk]
            if piece.size < self._chunk:  # the last piece, padded: every message is 20 ms
                piece = np.concatenate((piece, np.zeros(self._chunk - piece.size, np.int16)))
            await self._pace()
            if cuts != self._cuts:
                return False
            await self._send_media(AudioFrame(piece, self.rate))
            if cuts != self._cuts:
                return False
            self._due = max(self._due, loop.time()) + self._chunk / self.rate
        return True

    def _signal_heard(self, name: str) -> None:
        heard = self._signals.pop(name, None)  # unknown: cut by a clear, echoed anyway
        if heard is not None and not heard.done():
            heard.set_result(True)

    def _signal_overdue(self, name: str) -> None:
        if name not in self._signals:
            return
        if not self._signal_warned:
            self._signal_warned = True
            logger.warning(
                "no mark echoed %.0f s after a signal should have played: taking it as "
                "heard (is the stream bidirectional?)",
                self._echo_timeout,
            )
        self._signal_heard(name)

    def _cut_signals(self) -> None:
        signals, self._signals = self._signals, {}
        for heard in signals.values():
            if not heard.done():
                heard.set_result(False)
