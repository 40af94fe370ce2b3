"""The background-audio side of ``ReportedPlayback``: audio that is not the agent's voice.

``BackgroundAudio`` (``io.background_audio``) plays an ambient loop and a thinking sound
through the session's output. None of it may count as the agent speaking, so the output
carries it two ways, both outside the voice's accounting:

* **under the voice**, mixed into the voice's own frames (``ReportedPlayback.background``,
  a ``BackgroundMixer``): the voice keeps every one of its samples and positions, so a
  segment starts, ends and is cut exactly where it would without background;
* **between replies**, sent by ``play_background`` after everything sent so far. A client
  counts every sample it plays (the WebSocket protocol has no other kind), so these take
  stream positions, but they belong to no segment: they never start, extend or show in one,
  and ``speaking``, the progress and the heard text stay about the voice.

Background audio sent ahead sits in front of whatever comes next. So a reply that finds
some of it not yet heard takes it back first (``recall_background``: a clear, when no voice
is outstanding) and starts exactly as it would have without it; a thinking sound that must
stop now is taken back the same way. A client must answer that clear as the protocol asks
(``played`` with ``cleared: true``), as it does for a barge-in. A transport that cannot take
back what it sent (RTP) plays it out first: at most what it sends ahead.

At most one background frame is in flight; the voice waits for it (one frame, or until the
clear that took it back releases it), so the two never interleave on a transport.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from ..models.audio import AudioFrame, PlaybackFinished

if TYPE_CHECKING:
    from .playback import _Segment

__all__ = ["BackgroundGaps", "BackgroundMixer"]


class BackgroundMixer(Protocol):
    """What ``ReportedPlayback`` asks of the background audio it carries."""

    def under_voice(self, frame: AudioFrame) -> AudioFrame:
        """``frame`` of the agent's voice with the background mixed under it (same length)."""
        ...

    def cleared(self) -> None:
        """What was sent and not played yet is gone: a clear dropped it, or the client
        that held it dropped."""
        ...


class BackgroundGaps:
    """``ReportedPlayback``'s background audio between replies (see the module docstring)."""

    # ReportedPlayback's state, read here (declared for the type checker).
    sample_rate: int | None
    _segments: list[_Segment]
    _sent: int
    _closed: bool
    _detached: bool
    _held: deque[AudioFrame]
    _handing: asyncio.Task[None] | None
    _dropping: Callable[[PlaybackFinished], None] | None
    _send_audio: Callable[[AudioFrame], Awaitable[None]]

    _background_end = 0
    """One past the last background sample sent in this epoch (0: none)."""
    _background_sent: asyncio.Event | None = None
    """Clear while a background frame is being sent."""

    @property
    def takes_background(self) -> bool:
        """``play_background`` would send now: no voice is being captured, and a client is
        there with nothing held for it."""
        capturing = bool(self._segments) and not self._segments[-1].flushed
        return not (
            capturing
            or self._closed
            or self._detached
            or self._held
            or self._handing is not None
            or self._dropping is not None
        )

    async def play_background(self, frame: AudioFrame) -> bool:
        """Send ``frame`` (mono, at this output's rate), audio that is not the agent's
        voice, after everything sent so far. False, and nothing sent, unless
        ``takes_background`` (and no other background frame is being sent)."""
        if frame.sample_rate != self.sample_rate or frame.num_channels != 1:
            raise ValueError(f"background audio must be mono at {self.sample_rate} Hz")
        if not self.takes_background or frame.samples_per_channel == 0:
            return False
        sent = self._background_sent
        if sent is None:
            sent = self._background_sent = asyncio.Event()
        elif not sent.is_set():
            return False  # one at a time
        # Counted before the await, as the voice is: a clear during the send puts it in
        # the epoch it was sent in.
        self._sent += frame.samples_per_channel
        self._background_end = self._sent
        sent.clear()
        try:
            await self._send_background(frame)
        finally:
            sent.set()
        return True

    async def _send_background(self, frame: AudioFrame) -> None:
        """How a background frame goes out (a subclass may send it without marks)."""
        await self._send_audio(frame)

    async def _after_background(self) -> None:
        """Wait for the background frame being sent, if any (the voice goes after it)."""
        sent = self._background_sent
        if sent is not None and not sent.is_set():
            await sent.wait()

    def recall_background(self) -> bool:
        """With no voice outstanding, take back the background audio sent and not heard
        yet (a clear): a reply then starts at once, a thinking sound stops now. Whether a
        clear was sent."""
        if not self._background_end or self._segments or not self.takes_background:
            return False
        if not self._background_unheard():
            return False
        self.clear_buffer()
        return True

    def _background_unheard(self) -> bool:
        if not self._background_end:
            return False
        position = self._position()
        return position is None or position < self._background_end

    def _position(self) -> int | None:
        raise NotImplementedError  # ReportedPlayback's

    def clear_buffer(self) -> None:
        raise NotImplementedError  # ReportedPlayback's
