"""RtpPlayback: the agent's voice as RTP, a little ahead of time, with playback truth
from the media clock.

A media-stream provider echoes marks as it plays; RTP has nothing of the kind. RTCP
receiver reports say how many packets were lost and how much they jittered, never what
was played (and many trunks send none). So on SIP the truth is an *estimate from our own
media clock*, and exactly this one:

    a sample counts as heard ``playout_delay`` seconds after its play slot.

**Play slots.** Each 20 ms packet has a slot: the loop time its RTP timestamp stands for
on the media clock (``timestamp_at``). The far end plays packets by their timestamps, so
the slot is when the packet is meant to play, give or take the far end's fixed delay;
``playout_delay`` stands for that delay (the network, the carrier's jitter buffer and
the PSTN leg to the handset). Its default, 150 ms, is ITU-T G.114's planning bound for
one-way delay: most calls play sooner, so the estimate errs towards *later*. A packet
is counted whole once the last of the agent's samples in it is due
(``max(slot, sent) + its audio + playout_delay``): its first samples count up to 20 ms
late, and a packet sent after its slot counts from when it was sent.

**The send-ahead lead.** Packets go out up to ``send_ahead`` (default 40 ms, two packets)
*before* their slot, never earlier, and never with their timestamps moved: the timestamp
is the slot, not the send time. A jitter buffer takes early packets and holds them until
their timestamp's turn, so the far end holds up to ``send_ahead`` more of our audio than
it needs: an event-loop stall (a GC pause, many calls on one process, a VAD model run
inline) shorter than the lead plus the far end's own buffer is not heard at all. Sent
exactly on their slots, packets had only the far end's buffer to cover a stall, and
longer stalls were gaps the caller heard. The lead is small on purpose: an adaptive
jitter buffer that finds itself holding more than it aims for shrinks by discarding
frames, and a fixed one discards what overflows its size (PJMEDIA's and Asterisk's, see
below); and a clear cannot take back what was sent.

The rule every ``ReportedPlayback`` keeps: the reported heard position may lag what the
caller actually heard, never lead it. Here that holds because a sample counts from its
slot (when it plays), not from when it was sent (earlier now), and the delay is a bound.

* ``speaking`` starts once the reply's first packet has had its slot plus
  ``playout_delay``, and ends once its last one has.
* A packet that falls behind its slot (the loop was busy for longer than the lead, the
  TTS slow) goes at once, in the same talkspurt, while it is at most ``CATCH_UP`` behind:
  the far end's jitter buffer absorbs that. The lead buys nothing here (it is spent by
  then), so ``CATCH_UP`` is counted from the slot. Further behind, the far end has run
  dry: a new talkspurt starts on the clock (see below), and the lead builds up again.
* A clear stops sending at once: a packet not sent yet never is. What was already sent
  (up to ``send_ahead`` of audio, plus what the network and the far end hold) still
  plays there and cannot be taken back: the history keeps only what was due when the
  clear came (less than the caller hears, by the rule above), and the next reply's
  slots come after all of it (the same talkspurt when it follows at once: there is no
  silence between them at the far end).
* Hold (the far end sent ``sendonly``/``inactive``): sending stops, the reply playing
  ends interrupted where the clock had got to, and nothing captured during the hold
  counts as heard: it waits (``ReportedPlayback.detach``) and plays when the call is
  taken off hold (``attach``), counted from then.

RTP framing: 20 ms packets (160 samples at 8 kHz); a talkspurt's first packet has the
marker bit and a timestamp read from the media clock (so the gap since the last one is
the silence between them, and it never goes back over what was sent); the packets that
follow step by 160. A reply's last partial packet is padded with silence, which never
counts as the agent's audio. Between replies nothing is sent (silence suppression, RFC
3551 §4.1), except one packet of silence after every few seconds of quiet
(``keepalive``, RFC 6263 §4.6), for the NAT bindings and the far end's media timers.

References: RFC 3550 §5.1 (timestamps: the sampling instant)
https://www.rfc-editor.org/rfc/rfc3550, RFC 3551 §4.1 (marker bit, silence)
https://www.rfc-editor.org/rfc/rfc3551, PJMEDIA's adaptive jitter buffer and its discard
algorithms https://docs.pjsip.org/en/latest/api/generated/pjmedia/group/group__PJMED__JBUF.html,
Asterisk's JITTERBUFFER (200 ms by default)
https://wiki.asterisk.org/wiki/display/AST/Asterisk+11+Function_JITTERBUFFER.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from ...models.audio import PCM16, AudioFrame
from ..playback import ReportedPlayback

__all__ = ["PLAYOUT_DELAY", "SEND_AHEAD", "RtpPlayback"]

PLAYOUT_DELAY = 0.15
"""Seconds from a packet's play slot to the caller hearing it (see the module docstring)."""

SEND_AHEAD = 0.04
"""Seconds a packet may go out before its play slot: two packets, so that an event-loop
stall shorter than this (plus the far end's buffer) is never heard."""

CATCH_UP = 0.04
"""A packet this far behind its slot (the loop was busy for longer than the lead, a TTS
chunk came slow) is sent at once to catch up, in the same talkspurt: the far end's jitter
buffer (40-60 ms) absorbs it. Further behind, the far end has run dry: a new talkspurt
starts on the clock."""

_DUE = 1e-6
"""A packet this close to its send time is due (a timer may wake a hair early)."""

SendPacket = Callable[[AudioFrame, int, bool], None]
"""Sends one packet's audio: the frame, its RTP timestamp, the marker bit. Never raises."""


class RtpPlayback(ReportedPlayback):
    """``ReportedPlayback`` paced on the RTP clock, up to ``send_ahead`` early, and
    reporting from the packets' play slots (see above).

    ``send_packet`` puts one packet on the wire (the owner encodes and numbers it);
    ``timestamp_at(t)`` reads the RTP media clock at loop time ``t`` (one tick a sample).
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        send_packet: SendPacket,
        timestamp_at: Callable[[float], int],
        playout_delay: float = PLAYOUT_DELAY,
        send_ahead: float = SEND_AHEAD,
        packet_seconds: float = 0.02,
    ) -> None:
        if playout_delay < 0 or send_ahead < 0 or packet_seconds <= 0:
            raise ValueError(
                "playout_delay and send_ahead must be >= 0 and packet_seconds positive"
            )
        super().__init__(sample_rate, self._send_chunks, self._clear_sent)
        self.stall_grace = None  # our own clock is the report: it never stalls
        self._send_packet = send_packet
        self._timestamp_at = timestamp_at
        self.playout_delay = playout_delay
        self.send_ahead = send_ahead
        self._chunk = max(1, round(packet_seconds * sample_rate))
        self._period = self._chunk / sample_rate
        self._carry: PCM16 = np.zeros(0, np.int16)
        self._epoch = 0
        """Bumped by a clear, a hold and the close: a send waiting for its turn drops."""
        self._waiter: asyncio.Future[None] | None = None
        """The send waiting for its turn (woken early when the epoch moves on)."""
        self._generation = 0
        """Bumped by a hold and the close: reports due for earlier audio are void."""
        self._spurt: tuple[float, int] | None = None
        """The talkspurt under way: its first packet's slot and timestamp, from which
        every later slot is read (None: the next packet starts a talkspurt)."""
        self._next_timestamp = 0
        """The talkspurt's next packet's timestamp (and so its slot)."""
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

    @property
    def rate(self) -> int:
        assert self.sample_rate is not None
        return self.sample_rate

    # ---------------------------------------------------------------- sending

    async def _send_chunks(self, frame: AudioFrame) -> None:
        epoch = self._epoch
        data = np.concatenate((self._carry, frame.data)) if self._carry.size else frame.data
        self._carry = np.zeros(0, np.int16)
        whole = len(data) - len(data) % self._chunk
        loop = asyncio.get_running_loop()
        for start in range(0, whole, self._chunk):
            # Planned again after every wait: a stall may have made a new talkspurt due.
            while True:
                now = loop.time()
                slot, timestamp, marker = self._plan(now)
                early = slot - self.send_ahead - now
                if early <= _DUE:
                    break
                await self._pause(early)
                if epoch != self._epoch or self.closed:
                    return  # cleared, held or gone meanwhile: the rest is never sent
            self._commit(slot, timestamp, marker)
            self._emit(data[start : start + self._chunk], self._chunk, slot, timestamp, marker)
        self._carry = data[whole:]

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or until a clear, a hold or the close stops the sending
        (so that the producer's ``capture_frame`` returns at once)."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        handle = loop.call_later(seconds, _wake, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            if self._waiter is waiter:
                self._waiter = None

    def _drop_unsent(self) -> None:
        """What was not sent yet never is: the carry goes, and a send waiting for its
        turn drops at once."""
        self._epoch += 1
        self._carry = np.zeros(0, np.int16)
        if self._waiter is not None:
            _wake(self._waiter)

    def _plan(self, now: float) -> tuple[float, int, bool]:
        """The next packet's slot, RTP timestamp and marker bit if it went at ``now``:
        the talkspurt's next one, or (when there is none, or it fell more than
        ``CATCH_UP`` behind: the far end ran dry) a new talkspurt on the media clock."""
        if self._spurt is not None:
            slot = self._slot_of(self._next_timestamp)
            if slot >= now - CATCH_UP:
                return slot, self._next_timestamp, False
        timestamp, slot = self._timestamp_at(now), now
        if self._timestamp_end is not None and timestamp < self._timestamp_end:
            # What was sent last still has its turn to come (a keepalive just went):
            # the talkspurt starts after it, on the same clock.
            slot += (self._timestamp_end - timestamp) / self.rate
            timestamp = self._timestamp_end
        return slot, timestamp, True

    def _commit(self, slot: float, timestamp: int, marker: bool) -> None:
        """The planned packet is the talkspurt's next one."""
        if marker:
            self._spurt = (slot, timestamp)
            self.talkspurts += 1
        self._next_timestamp = timestamp + self._chunk

    def _slot_of(self, timestamp: int) -> float:
        """The loop time the talkspurt's ``timestamp`` plays at (before the far end's
        delay)."""
        assert self._spurt is not None
        first_slot, first_timestamp = self._spurt
        return first_slot + (timestamp - first_timestamp) / self.rate

    def _emit(self, chunk: PCM16, audio: int, slot: float, timestamp: int, marker: bool) -> None:
        """Send one packet holding ``audio`` samples of the agent's (the rest padding)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._send_packet(AudioFrame(chunk, self.rate), timestamp, marker)
        self.packets_sent += 1
        self._last_sent = now
        self._timestamp_end = timestamp + self._chunk
        self._count += audio
        # Heard once its last sample of the agent's has had its slot (or, sent late,
        # once it has been on its way as long), plus the far end's delay.
        heard_at = max(slot, now) + audio / self.rate + self.playout_delay
        loop.call_at(heard_at, self._heard, self._generation, self._count)

    def _heard(self, generation: int, count: int) -> None:
        if generation == self._generation and not self.closed:
            self.on_played(count)

    def _emit_tail(
        self, epoch: int, chunk: PCM16, audio: int, planned: tuple[float, int, bool]
    ) -> None:
        if epoch != self._epoch or self.closed:
            return
        slot, timestamp, marker = planned
        now = asyncio.get_running_loop().time()
        if self._spurt is None or slot < now - CATCH_UP:
            # The loop stalled past it (the far end has run dry and would drop it), or a
            # keepalive went meanwhile: a talkspurt of its own, on the clock.
            self._spurt = None
            slot, timestamp, marker = self._plan(now)
            self._commit(slot, timestamp, marker)
        self._emit(chunk, audio, slot, timestamp, marker)

    def flush(self) -> None:
        carry, self._carry = self._carry, np.zeros(0, np.int16)
        if carry.size and not self.closed and not self.detached:
            padded = np.zeros(self._chunk, np.int16)
            padded[: carry.size] = carry
            loop = asyncio.get_running_loop()
            now = loop.time()
            planned = slot, timestamp, marker = self._plan(now)
            # Taken now, so that the next reply's packets queue behind this one.
            self._commit(slot, timestamp, marker)
            due = slot - self.send_ahead
            if due <= now + _DUE:
                self._emit(padded, carry.size, slot, timestamp, marker)
            else:
                loop.call_at(due, self._emit_tail, self._epoch, padded, carry.size, planned)
        super().flush()

    def _clear_sent(self) -> None:
        # The talkspurt goes on: what was sent plays out at the far end, and the next
        # reply's slots come after it.
        self._drop_unsent()
        self._cleared = True

    def _stop_sending(self) -> None:
        self._drop_unsent()
        self._spurt = None  # the next packet starts a talkspurt

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
        if self._last_sent is not None and now - self._last_sent < quiet - _DUE:
            return False
        if self._spurt is not None and self._slot_of(self._next_timestamp) >= now - CATCH_UP:
            return False  # a talkspurt is under way
        timestamp = self._timestamp_at(now)
        if self._timestamp_end is not None and timestamp < self._timestamp_end:
            timestamp = self._timestamp_end
        self._send_packet(AudioFrame(np.zeros(self._chunk, np.int16), self.rate), timestamp, True)
        self._timestamp_end = timestamp + self._chunk
        self._last_sent = now
        self._spurt = None  # the agent's next audio starts a talkspurt of its own
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
        self._generation += 1  # reports not due yet are void: the line went quiet
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


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
