"""RtpPlayback: the agent's voice as RTP, with playback truth from the send clock.

A media-stream provider echoes marks as it plays; RTP has nothing of the kind. RTCP
receiver reports say how many packets were lost and how much they jittered, never what
was played (and many trunks send none). So on SIP the truth is an *estimate from our own
send clock*, and exactly this one:

    a sample counts as heard ``playout_delay`` seconds after the packet carrying it
    was sent.

Packets are sent at the real-time pace, one 20 ms packet per 20 ms (each at its slot on
the loop clock, never ahead), so "sent" means "entered the network at the moment it is
meant to play, give or take the far end's fixed delay". ``playout_delay`` stands for that
delay: the network, the carrier's jitter buffer and the PSTN leg to the handset. Its
default, 150 ms, is ITU-T G.114's planning bound for one-way delay: most calls play
sooner, so the estimate errs towards *later*, and what the history keeps as heard after
a barge-in errs towards *less* (the rule every ``ReportedPlayback`` keeps: the caller
may have heard a little more, never less).

* ``speaking`` starts ``playout_delay`` after the first packet of a reply was sent, and
  ends ``playout_delay`` after its last one.
* A late packet (the loop was busy, the TTS slow) up to ``CATCH_UP`` behind its slot
  goes at once, so the far end's jitter buffer absorbs it; later than that a new
  talkspurt starts (see below), counted from when it is sent.
* A clear stops sending at once: a packet not sent yet never is, and the next reply
  starts a new talkspurt. What was already sent (at most one packet plus what the
  network and the far end hold) still plays there and cannot be taken back; it counts
  from the reports that were due when the clear came (less, by the rule above).
* Hold (the far end sent ``sendonly``/``inactive``): sending stops, the reply playing
  ends interrupted where the clock had got to, and nothing captured during the hold
  counts as heard: it waits (``ReportedPlayback.detach``) and plays when the call is
  taken off hold (``attach``), counted from then.

RTP framing: 20 ms packets (160 samples at 8 kHz); a talkspurt's first packet has the
marker bit and a timestamp read from the media clock (so the gap since the last one is
the silence between them); the packets that follow step by 160. A reply's last partial
packet is padded with silence, which never counts as the agent's audio. Between replies
nothing is sent (silence suppression, RFC 3551 §4.1), except one packet of silence
after every few seconds of quiet (``keepalive``, RFC 6263 §4.6), for the NAT bindings
and the far end's media timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from ...models.audio import PCM16, AudioFrame
from ..playback import ReportedPlayback

__all__ = ["PLAYOUT_DELAY", "RtpPlayback"]

PLAYOUT_DELAY = 0.15
"""Seconds from sending a packet to the caller hearing it (see the module docstring)."""

CATCH_UP = 0.04
"""Audio that falls this far behind its pace (a busy loop, a slow TTS chunk) is sent at
once to catch up, in the same talkspurt: the far end's jitter buffer (40-60 ms) absorbs
it. Further behind, the far end has run dry: a new talkspurt starts on the clock."""

SendPacket = Callable[[AudioFrame, int, bool], None]
"""Sends one packet's audio: the frame, its RTP timestamp, the marker bit. Never raises."""


class RtpPlayback(ReportedPlayback):
    """``ReportedPlayback`` paced on the RTP clock and reporting from it (see above).

    ``send_packet`` puts one packet on the wire (the owner encodes and numbers it);
    ``timestamp_at(t)`` reads the RTP media clock at loop time ``t``.
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        send_packet: SendPacket,
        timestamp_at: Callable[[float], int],
        playout_delay: float = PLAYOUT_DELAY,
        packet_seconds: float = 0.02,
    ) -> None:
        if playout_delay < 0 or packet_seconds <= 0:
            raise ValueError("playout_delay must be >= 0 and packet_seconds positive")
        super().__init__(sample_rate, self._send_chunks, self._clear_sent)
        self.stall_grace = None  # our own clock is the report: it never stalls
        self._send_packet = send_packet
        self._timestamp_at = timestamp_at
        self.playout_delay = playout_delay
        self._chunk = max(1, round(packet_seconds * sample_rate))
        self._period = self._chunk / sample_rate
        self._carry: PCM16 = np.zeros(0, np.int16)
        self._epoch = 0
        """Bumped by a clear, a hold and the close: a send waiting for its slot drops."""
        self._generation = 0
        """Bumped by a hold and the close: reports due for earlier audio are void."""
        self._next_slot: float | None = None
        """Loop time of the talkspurt's next packet (None: the next one starts one)."""
        self._next_timestamp = 0
        self._timestamp_end: int | None = None
        """One past the last RTP timestamp sent (a new talkspurt never goes back)."""
        self._count = 0
        """The agent's samples sent (the cumulative count the reports give)."""
        self._cleared = False
        self._on_hold = False
        self.packets_sent = 0
        self.talkspurts = 0
        self.keepalives = 0
        self._last_sent: float | None = None

    @property
    def on_hold(self) -> bool:
        return self._on_hold

    # ---------------------------------------------------------------- sending

    async def _send_chunks(self, frame: AudioFrame) -> None:
        epoch = self._epoch
        data = np.concatenate((self._carry, frame.data)) if self._carry.size else frame.data
        self._carry = np.zeros(0, np.int16)
        whole = len(data) - len(data) % self._chunk
        for start in range(0, whole, self._chunk):
            slot, timestamp, marker = self._reserve()
            delay = slot - asyncio.get_running_loop().time()
            if delay > 0:
                await asyncio.sleep(delay)
            if epoch != self._epoch or self.closed:
                return  # cleared, held or gone meanwhile: the rest is never sent
            chunk = data[start : start + self._chunk]
            self._emit(chunk, self._chunk, timestamp, marker)
        self._carry = data[whole:]

    def _reserve(self) -> tuple[float, int, bool]:
        """The next packet's slot, RTP timestamp and marker bit (a talkspurt starts when
        the audio fell more than ``CATCH_UP`` behind its pace: there was a pause)."""
        now = asyncio.get_running_loop().time()
        marker = self._next_slot is None or self._next_slot < now - CATCH_UP
        if marker:
            timestamp = self._timestamp_at(now)
            if self._timestamp_end is not None and timestamp < self._timestamp_end:
                timestamp = self._timestamp_end
            self._next_slot, self._next_timestamp = now, timestamp
            self.talkspurts += 1
        assert self._next_slot is not None
        slot, timestamp = self._next_slot, self._next_timestamp
        self._next_slot += self._period
        self._next_timestamp += self._chunk
        return slot, timestamp, marker

    def _emit(self, chunk: PCM16, audio: int, timestamp: int, marker: bool) -> None:
        """Send one packet holding ``audio`` samples of the agent's (the rest padding)."""
        self._send_packet(AudioFrame(chunk, self.rate), timestamp, marker)
        self.packets_sent += 1
        self._last_sent = asyncio.get_running_loop().time()
        self._timestamp_end = timestamp + self._chunk
        self._count += audio
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + self.playout_delay, self._heard, self._generation, self._count)

    def _heard(self, generation: int, count: int) -> None:
        if generation == self._generation and not self.closed:
            self.on_played(count)

    def _emit_tail(self, epoch: int, chunk: PCM16, audio: int, timestamp: int) -> None:
        if epoch == self._epoch and not self.closed:
            self._emit(chunk, audio, timestamp, False)

    @property
    def rate(self) -> int:
        assert self.sample_rate is not None
        return self.sample_rate

    def flush(self) -> None:
        carry, self._carry = self._carry, np.zeros(0, np.int16)
        if carry.size and not self.closed and not self.detached:
            padded = np.zeros(self._chunk, np.int16)
            padded[: carry.size] = carry
            slot, timestamp, marker = self._reserve()
            loop = asyncio.get_running_loop()
            if marker:
                self._emit(padded, carry.size, timestamp, True)
            else:
                loop.call_at(slot, self._emit_tail, self._epoch, padded, carry.size, timestamp)
        super().flush()

    def _clear_sent(self) -> None:
        self._stop_sending()
        self._cleared = True

    def _stop_sending(self) -> None:
        self._epoch += 1
        self._carry = np.zeros(0, np.int16)
        self._next_slot = None

    def clear_buffer(self) -> None:
        super().clear_buffer()
        if self._cleared:
            # What was sent plays out at the far end and cannot be recalled: the next
            # reply's first sample comes after all of it.
            self._cleared = False
            self.on_played(self._count, cleared=True)

    def keepalive(self, quiet: float) -> bool:
        """Send one packet of silence, a talkspurt of its own, when nothing was sent for
        ``quiet`` seconds (and the line is not on hold): NAT bindings and the far end's
        media timers expire on a line that says nothing. Never counts as the agent's
        audio. Returns whether it sent one."""
        now = asyncio.get_running_loop().time()
        if self.closed or self._on_hold or self.detached:
            return False
        if self._last_sent is not None and now - self._last_sent < quiet:
            return False
        if self._next_slot is not None and self._next_slot >= now - CATCH_UP:
            return False  # a talkspurt is under way
        timestamp = self._timestamp_at(now)
        if self._timestamp_end is not None and timestamp < self._timestamp_end:
            timestamp = self._timestamp_end
        self._send_packet(AudioFrame(np.zeros(self._chunk, np.int16), self.rate), timestamp, True)
        self._timestamp_end = timestamp + self._chunk
        self._last_sent = now
        self._next_slot = None  # the agent's next audio starts a talkspurt of its own
        self.keepalives += 1
        return True

    # ------------------------------------------------------------------ hold

    def hold(self) -> None:
        """The far end stopped listening (put us on hold): stop sending; the reply
        playing ends interrupted where the clock had got to; later audio waits."""
        if self._on_hold or self.closed:
            return
        self._on_hold = True
        self._stop_sending()
        self._generation += 1  # audio sent in the last playout_delay: not heard
        self._count = 0  # detach restarts the count from zero
        self.detach()

    def unhold(self) -> None:
        """Off hold: what waited is sent now, counted from here."""
        if not self._on_hold:
            return
        self._on_hold = False
        self.attach(self._send_chunks, self._clear_sent)

    def close(self) -> None:
        self._stop_sending()
        self._generation += 1
        super().close()
