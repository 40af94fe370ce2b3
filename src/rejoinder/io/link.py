"""ClientLink: one transport connection carrying a session, for as long as it does.

A session lives in its ``Connection`` (the entry point's object: the session, its
microphone, its playback). The client's connection is a ``ClientLink``: what the session
sends goes out through the current link, and what a link receives (protocol messages,
microphone audio) reaches the session only while that link is the current one. A session
that is resumed (``rejoinder.io.resume``) is carried by several links, one after another;
a link that was replaced or lost is inert, so a late message from a dying socket never
reaches the session.

The transport tells its link how the client went: ``goodbye`` (it said so: the session
ends) or ``lost`` (the connection broke: the session waits for the client to resume, when
resuming is on). ``over`` is set once the link no longer carries the session (``why``:
``"lost"``, ``"replaced"``, ``"ended"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import numpy as np

from ..models.audio import AudioFrame
from .protocol import ClientMessage, ServerMessage

if TYPE_CHECKING:
    from ..models.audio_utils import Resampler
    from .connection import Connection

__all__ = ["ClientLink"]

logger = logging.getLogger("rejoinder.io")


class ClientLink:
    """One transport connection of a session.

    ``send`` delivers a protocol message to this link's client (it never raises, never
    blocks). ``send_audio`` and ``send_clear`` are the link's agent audio (see
    ``ReportedPlayback``); a session's first link may leave them out (its playback was
    built with them). ``mic_rate``: the rate of the PCM this link pushes, when it differs
    from the session's microphone (a resumed WebSocket client may give another rate in
    its ``start``): it is resampled to the session's.
    """

    def __init__(
        self,
        transport: str,
        send: Callable[[ServerMessage], None],
        *,
        send_audio: Callable[[AudioFrame], Awaitable[None]] | None = None,
        send_clear: Callable[[], None] | None = None,
        wants_timeline: bool = False,
        mic_rate: int | None = None,
    ) -> None:
        self.transport = transport
        """``"websocket"``, ``"webrtc"``, ..."""
        self.send = send
        self.send_audio = send_audio
        self.send_clear = send_clear
        self.wants_timeline = wants_timeline
        self.mic_rate = mic_rate
        self.connection: Connection | None = None
        """The session's connection this link carries (or carried)."""
        self.over = asyncio.Event()
        """Set once this link no longer carries the session."""
        self.why_over = ""
        self._resampler: Resampler | None = None
        self._odd = b""

    def __repr__(self) -> str:
        return f"<ClientLink {self.transport} current={self.current} over={self.why_over!r}>"

    @property
    def current(self) -> bool:
        """This link carries its session now."""
        conn = self.connection
        return conn is not None and conn.link is self

    def end(self, why: str) -> None:
        """It no longer carries the session (the ``Connection`` says so)."""
        if not self.over.is_set():
            self.why_over = why
            self.over.set()

    async def until_over(self, entry: Awaitable[None]) -> bool:
        """Wait until the session's entry point returned (True) or this link stopped
        carrying the session (False)."""
        task = asyncio.ensure_future(entry)
        over = asyncio.ensure_future(self.over.wait())
        try:
            await asyncio.wait((task, over), return_when=asyncio.FIRST_COMPLETED)
        finally:
            over.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await over
        return task.done()

    # -------------------------------------------------------- from the client

    def receive(self, message: ClientMessage) -> None:
        """A client message (after ``start``): to the session, if this link is current."""
        if self.current:
            assert self.connection is not None
            self.connection.receive(message)

    def push_pcm(self, pcm: bytes) -> bool:
        """Microphone audio, PCM16LE mono at this link's rate. False: it was dropped (the
        session does not keep up); audio of a link that is not current is dropped
        quietly (True)."""
        conn = self.connection
        if conn is None or conn.link is not self:
            return True
        mic = conn.audio_input
        if self.mic_rate is None or self.mic_rate == mic.sample_rate:
            return mic.push_pcm(pcm)
        if self._odd:
            pcm, self._odd = self._odd + pcm, b""
        if len(pcm) % 2:
            pcm, self._odd = pcm[:-1], pcm[-1:]
        if not pcm:
            return True
        if self._resampler is None:
            from ..models.audio_utils import Resampler  # soxr, only for another rate

            self._resampler = Resampler(self.mic_rate, mic.sample_rate)
        frame = AudioFrame(np.frombuffer(pcm, "<i2").astype(np.int16), self.mic_rate)
        out = self._resampler.push(frame)
        return True if out is None else mic.push(out)

    def goodbye(self, reason: str = "client left") -> None:
        """The client ended the session (it said goodbye, or the transport cannot tell a
        drop from a goodbye): the session closes."""
        if self.current:
            assert self.connection is not None
            self.connection.client_left(reason)

    def lost(self, reason: str) -> bool:
        """The connection broke without a goodbye. Returns True when the session goes on
        without this link (kept for its client to resume, or already carried by another
        link); False when it ends."""
        conn = self.connection
        if conn is None:
            return False
        if conn.link is not self:
            return not conn.left
        return conn.lost(reason)
