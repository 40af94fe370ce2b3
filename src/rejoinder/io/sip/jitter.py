"""JitterBuffer: the caller's RTP packets back in order, one frame per 20 ms tick.

Packets cross the network out of order, twice, late or not at all. The buffer holds them
by (extended) sequence number and is read by a playout clock: ``pop()`` once per frame
period returns the next frame's payload, or ``None`` where a frame is missing (the
reader plays silence in its place). Playout runs ``depth`` frames behind the first
arrival, so a packet up to ``depth - 1`` frame periods later than its neighbours is
still in time.

Fixed depth, 3 frames (60 ms) by default, not adaptive. The listener is a speech
recognizer and a VAD, not an ear: a concealed frame costs them little, while every
frame of depth adds to the agent's reaction time on every turn. Carrier trunks run on
managed networks with a few ms of jitter, where an adaptive buffer would settle near
its floor anyway, and a fixed depth is predictable to reason about and to test. It still
follows the sender: when the buffer runs dry (silence suppression, a jitter spike, a
trunk that stops sending) playout goes idle, hands out silence, and re-primes on the next
packet with the same depth — the usual re-synchronisation at a talkspurt's start, which
also absorbs clock drift between the sender and us.

Rules (each one a test):

* in order: frames come out by sequence number; a packet older than the playout
  position (already played, or concealed) is dropped as late;
* duplicates: a packet already held or already played is dropped;
* loss: a missing frame with later ones waiting is concealed (``None``) when its turn
  comes, and playout moves on. (Frames lost while the buffer was dry are not added
  back: the idle stretch's silence stands for them, and playout re-primes on what
  arrives — a frame or two of timeline given up for a lower delay.)
* bounded: at most ``capacity`` packets are held; past that the oldest is played over
  (dropped) so the delay never grows without bound (a sender whose clock runs fast, a
  burst); a packet more than ``capacity`` frames ahead of playout or behind it (a
  sender that restarted its numbering) resets the buffer.

Sequence numbers wrap at 2^16; they are extended to a growing integer relative to the
playout position (RFC 3550 §A.1 arithmetic). Timestamps are not needed for order; a new
SSRC (another source, a restarted stream) is the caller's ``reset()``.

Framework-free and clock-free: the owner calls ``push`` as packets arrive and ``pop`` on
its own 20 ms clock, which makes it easy to drive in tests (hypothesis).
"""

from __future__ import annotations

from collections import deque

from .rtp import seq_delta

__all__ = ["JitterBuffer"]


class JitterBuffer:
    """Reorders ``push``-ed payloads by sequence number for a ``pop`` per frame period."""

    def __init__(self, depth: int = 3, capacity: int = 50) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1 frame")
        if capacity < depth:
            raise ValueError("capacity must be at least depth")
        self.depth = depth
        self.capacity = capacity
        self._held: dict[int, bytes] = {}
        """Payloads by extended sequence number."""
        self._cursor: int | None = None
        """Extended sequence number of the next frame to play (None: playout has not
        started since the last reset: any packet is welcome)."""
        self._played: set[int] = set()
        self._played_order: deque[int] = deque()
        """The last ``capacity`` frames played (to tell a duplicate from a late one)."""
        self._anchor: int | None = None
        """The 16-bit sequence number that extends to ``_anchor_ext``."""
        self._anchor_ext = 0
        self._playing = False
        self._primed_ticks = 0
        """Idle: ticks since the first packet held arrived."""
        self.late = 0
        self.duplicates = 0
        self.concealed = 0
        self.overflowed = 0
        self.resets = 0

    # ------------------------------------------------------------- reading

    def __len__(self) -> int:
        """Packets held."""
        return len(self._held)

    @property
    def playing(self) -> bool:
        """Playout is running (False: idle, priming on the next packets)."""
        return self._playing

    # ---------------------------------------------------------- receiving

    def push(self, sequence: int, payload: bytes) -> bool:
        """A packet arrived. Returns False when it is dropped (late or a duplicate)."""
        ext = self._extend(sequence)
        cursor = self._cursor
        if cursor is not None and not -self.capacity <= ext - cursor < self.capacity + self.depth:
            # Far from playout: the sender restarted its numbering (or skipped a long
            # stretch). Waiting for the frames in between would stall playout.
            self.reset()
            ext = self._extend(sequence)
        elif cursor is not None and ext < cursor:
            if ext in self._played:
                self.duplicates += 1
            else:
                self.late += 1
            return False
        if ext in self._held:
            self.duplicates += 1
            return False
        self._held[ext] = payload
        while len(self._held) > self.capacity:
            self._drop_oldest()
        return True

    def pop(self) -> bytes | None:
        """The next frame period: its payload, or None (silence: a lost frame, or idle)."""
        if not self._playing:
            if not self._held:
                return None
            self._primed_ticks += 1
            if self._primed_ticks < self.depth:
                return None
            self._playing = True
            self._cursor = min(self._held)
        assert self._cursor is not None
        if not self._held:
            # Dry: silence suppression, a trunk that stopped, or a spike. Idle until the
            # next packet, which re-primes playout at the same depth.
            self._playing = False
            self._primed_ticks = 0
            return None
        payload = self._held.pop(self._cursor, None)
        if payload is None:
            self.concealed += 1
        else:
            self._played.add(self._cursor)
            self._played_order.append(self._cursor)
            if len(self._played_order) > self.capacity:
                self._played.discard(self._played_order.popleft())
        self._cursor += 1
        return payload

    def reset(self) -> None:
        """Forget everything (a new SSRC: another sequence space)."""
        self._held.clear()
        self._played.clear()
        self._played_order.clear()
        self._cursor = None
        self._anchor = None
        self._playing = False
        self._primed_ticks = 0
        self.resets += 1

    # ------------------------------------------------------------ internal

    def _extend(self, sequence: int) -> int:
        if self._anchor is None:
            self._anchor, self._anchor_ext = sequence, 1 << 16  # room below for reordering
            return self._anchor_ext
        ext = self._anchor_ext + seq_delta(sequence, self._anchor)
        if ext > self._anchor_ext:
            self._anchor, self._anchor_ext = sequence, ext  # keep the anchor near the front
        return ext

    def _drop_oldest(self) -> None:
        oldest = min(self._held)
        del self._held[oldest]
        self.overflowed += 1
        if self._cursor is not None and self._cursor <= oldest:
            self._cursor = oldest + 1
