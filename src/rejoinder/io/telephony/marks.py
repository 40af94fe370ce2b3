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
the provider would buffer minutes, and a clear makes it drop them anyway), cut into
``chunk`` pieces so marks fall on 20 ms boundaries.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from ...models.audio import AudioFrame
from ..playback import ReportedPlayback

__all__ = ["MarkedPlayback"]

logger = logging.getLogger("rejoinder.io.telephony")

_MARK = re.compile(r"rj-([0-9]{1,9})-([0-9]{1,15})")  # not \d: it takes any Unicode digit


class MarkedPlayback(ReportedPlayback):
    """``ReportedPlayback`` fed by echoed marks instead of ``played`` counts.

    ``send_media(frame)`` sends one chunk (awaiting it is the socket's backpressure),
    ``send_mark(name)`` and ``send_clear()`` queue a control message; none may raise.
    The transport calls ``on_mark(name)`` for each mark the provider echoes.
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        send_media: Callable[[AudioFrame], Awaitable[None]],
        send_mark: Callable[[str], None],
        send_clear: Callable[[], None],
        mark_interval: float = 0.16,
        chunk: float = 0.02,
        lead: float = 1.0,
    ) -> None:
        if not 0 < chunk <= mark_interval:
            raise ValueError("need 0 < chunk <= mark_interval")
        if lead < 0:
            raise ValueError("lead must be >= 0")
        super().__init__(sample_rate, self._send_chunks, self._clear_sent)
        self._send_media = send_media
        self._send_mark = send_mark
        self._send_clear_message = send_clear
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

    # ---------------------------------------------------------------- sending

    async def _send_chunks(self, frame: AudioFrame) -> None:
        epoch = self._epoch
        data = frame.data
        for start in range(0, len(data), self._chunk):
            await self._pace()
            if epoch != self._epoch or self.closed:
                return  # cleared (or gone) meanwhile: the rest of this frame is unheard
            piece = AudioFrame(data[start : start + self._chunk], frame.sample_rate)
            await self._send_media(piece)
            if epoch != self._epoch:
                return
            self._epoch_sent += piece.samples_per_channel
            self._due += piece.samples_per_channel / frame.sample_rate
            if self._marked is None or self._epoch_sent - self._marked >= self._interval:
                self._mark()

    async def _pace(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._due = max(self._due, now)
        ahead = self._due - now - self._lead
        if ahead > 0:
            await asyncio.sleep(ahead)

    def flush(self) -> None:
        super().flush()
        if self._marked is not None and self._marked != self._epoch_sent:
            self._mark()  # the segment's end: its echo is when the caller heard it all
        self._marked = None  # the next segment starts with a mark of its own

    def _mark(self) -> None:
        self._marked = self._epoch_sent
        self.marks_sent += 1
        self._send_mark(f"rj-{self._epoch}-{self._epoch_sent}")

    def _clear_sent(self) -> None:
        self._epoch += 1
        self._epoch_sent = 0
        self._marked = None
        self._due = 0.0
        self._cleared = True
        self._send_clear_message()

    def clear_buffer(self) -> None:
        super().clear_buffer()
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
