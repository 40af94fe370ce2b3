"""Keys pressed on a SIP call: RFC 4733 telephone-events, both ways.

Each event packet's payload is 4 bytes: the event code (0-9, 10 ``*``, 11 ``#``, 12-15
``A``-``D``), the end bit, a reserved bit and the volume (6 bits, -dBm0), and the
duration so far in media clock ticks (16 bits). All the packets of one key press carry
the same RTP timestamp (the moment it began); the first has the marker bit; the sender
repeats updates with a growing duration while the key is held, and sends the final one
(end bit set) three times, because a lost end would otherwise leave the key held.

Receiving (``DtmfReceiver``): one key per event, identified by its timestamp. A key is
reported on the first packet of its event that arrives (an update or, if all the updates
were lost, an end), and every later packet of that event (updates, the end and its
retransmissions, in any order) is dropped. A key held longer than the 16-bit duration
allows (8 s at 8 kHz) continues in a new segment with a later timestamp (§2.5.1.3): that
is the same key, not a second one.

Sending (``key_packets``, ``plan``): a key is a 100 ms tone (ITU-T Q.24 asks at least
40 ms; 100 ms is what most gateways send), updates every 20 ms (the audio packet
interval, §2.5.1.2), the end packet three times, then 100 ms of quiet before the next
key; ``w`` is a 0.5 s pause and ``W`` 1 s, as on the media-stream providers.

References: RFC 4733 https://www.rfc-editor.org/rfc/rfc4733 (§2.3 payload, §2.5.1
sending, §2.5.2 receiving), the IANA telephone-event registry
https://www.iana.org/assignments/audio-telephone-event-registry (codes 0-15).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "KEYS",
    "DtmfReceiver",
    "KeyTone",
    "Pause",
    "TelephoneEvent",
    "build_event",
    "key_packets",
    "parse_event",
    "plan",
    "press",
]

KEYS = "0123456789*#ABCD"
"""The DTMF keys, in event-code order (RFC 4733 §3.2)."""
PAUSES = {"w": 0.5, "W": 1.0}

TONE_SECONDS = 0.1
GAP_SECONDS = 0.1
UPDATE_SECONDS = 0.02
END_REPEATS = 3
VOLUME = 10
"""-10 dBm0: a typical keypad's level."""

_EVENT = struct.Struct("!BBH")


@dataclass(frozen=True, slots=True)
class TelephoneEvent:
    """One telephone-event payload."""

    event: int
    end: bool
    volume: int
    duration: int

    @property
    def key(self) -> str | None:
        """The DTMF key, or None for other events (flash, modem tones)."""
        return KEYS[self.event] if self.event < len(KEYS) else None


def parse_event(payload: bytes) -> TelephoneEvent | None:
    """Decode a telephone-event payload (None when it is too short). Never raises."""
    if len(payload) < _EVENT.size:
        return None
    event, flags, duration = _EVENT.unpack_from(payload)
    return TelephoneEvent(event, bool(flags & 0x80), flags & 0x3F, duration)


def build_event(event: int, *, end: bool, duration: int, volume: int = VOLUME) -> bytes:
    return _EVENT.pack(event, (0x80 if end else 0) | (volume & 0x3F), min(duration, 0xFFFF))


class DtmfReceiver:
    """Turns received telephone-event packets into keys, one per event."""

    def __init__(self, remember: int = 16) -> None:
        self._seen: deque[int] = deque(maxlen=remember)
        """Timestamps of the latest events (retransmissions of these are dropped)."""
        self._last: tuple[int, TelephoneEvent] | None = None
        """The latest event: its timestamp and its last packet."""
        self.keys = 0
        self.ignored = 0

    def receive(self, timestamp: int, payload: bytes) -> str | None:
        """One packet of telephone-event payload type: the key when it starts a press."""
        event = parse_event(payload)
        if event is None:
            self.ignored += 1
            return None
        if timestamp in self._seen:
            if self._last is not None and self._last[0] == timestamp:
                self._last = (timestamp, event)
            return None
        continued = self._continues(timestamp, event)
        self._seen.append(timestamp)
        self._last = (timestamp, event)
        if continued:
            return None
        key = event.key
        if key is None:
            self.ignored += 1
            return None
        self.keys += 1
        return key

    def _continues(self, timestamp: int, event: TelephoneEvent) -> bool:
        """A new segment of a long key press still held (§2.5.1.3)."""
        if self._last is None:
            return False
        start, last = self._last
        if last.end or last.event != event.event:
            return False
        gap = (timestamp - start) % (1 << 32)
        return 0 < gap <= last.duration + 2 * 160  # (a few lost updates of slack)


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class KeyTone:
    event: int


def plan(digits: str) -> list[KeyTone | Pause]:
    """What ``digits`` sends, step by step. Raises ``ValueError`` for anything but
    ``0-9 * # A-D w W`` (and for nothing at all)."""
    if not isinstance(digits, str) or not digits:
        raise ValueError("digits must be a non-empty string of 0-9 * # A-D w W")
    steps: list[KeyTone | Pause] = []
    for char in digits:
        if char in PAUSES:
            steps.append(Pause(PAUSES[char]))
        elif char in KEYS:
            steps.append(KeyTone(KEYS.index(char)))
        else:
            raise ValueError(f"cannot press {char!r}: only 0-9 * # A-D, w and W")
    return steps


def key_packets(event: int, clock_rate: int = 8000) -> list[tuple[float, bytes, bool]]:
    """One key press: (seconds after it began, payload, marker) for each packet. Every
    packet carries the timestamp of the press's start (the caller's to set)."""
    step = round(UPDATE_SECONDS * clock_rate)
    total = round(TONE_SECONDS * clock_rate)
    packets = [
        (elapsed / clock_rate, build_event(event, end=False, duration=elapsed), elapsed == step)
        for elapsed in range(step, total, step)
    ]
    for repeat in range(END_REPEATS):
        at = (total + repeat * step) / clock_rate
        packets.append((at, build_event(event, end=True, duration=total), False))
    return packets


async def press(
    steps: list[KeyTone | Pause],
    *,
    timestamp_at: Callable[[float], int],
    send: Callable[[bytes, int, bool], None],
    check: Callable[[], None],
    clock_rate: int = 8000,
) -> None:
    """Send ``steps`` in real time: ``send(payload, timestamp, marker)`` puts one event
    packet on the wire; ``check()`` raises when sending must stop (it is called before
    each packet and pause)."""
    loop = asyncio.get_running_loop()
    for step in steps:
        check()
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            continue
        start = loop.time()
        timestamp = timestamp_at(start)
        for offset, payload, marker in key_packets(step.event, clock_rate):
            await _sleep_until(loop, start + offset)
            check()
            send(payload, timestamp, marker)
        await _sleep_until(loop, start + TONE_SECONDS + GAP_SECONDS)


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
