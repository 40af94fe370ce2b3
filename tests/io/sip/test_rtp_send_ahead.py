"""RtpPlayback's send-ahead lead on virtual time.

Packets go out up to ``send_ahead`` before their play slot and never more, with their
timestamps on the slot clock; a stall of the event loop shorter than the lead leaves no
packet late at a far end that plays each packet on its timestamp's slot; a longer one
starts a new talkspurt and the lead builds up again; a clear sends nothing more, the
history keeps no more than was due, and the next reply plays after what was sent ahead.
At random (hypothesis): stalls, clears, slow producers and reply lengths against the
invariants: the heard position never ahead of what the far end has played, no packet
more than the lead early nor more than ``CATCH_UP`` late, timestamps never overlapping,
nothing of a cut reply sent after the clear, every other reply sent and heard whole.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.media import SipMediaOptions
from rejoinder.io.sip.rtp_playback import CATCH_UP, SEND_AHEAD, RtpPlayback
from rejoinder.models.audio import AudioFrame, PlaybackFinished

from ..._virtual_time import virtual_loop

RATE = 8000
DELAY = 0.15
PACKET = 0.02
CHUNK = 160
TS0 = 1000
EPS = 1e-4  # the media clock reads whole samples (1/8000 s): slots from timestamps round


def stall(seconds: float) -> None:
    """The event loop is busy for ``seconds``: its clock moves on and no callback runs
    meanwhile. (looptime keeps its virtual clock in whole microseconds in a private
    field; the check below fails should that ever change.)"""
    loop = asyncio.get_running_loop()
    before = loop.time()
    loop._LoopTimeEventLoop__now += round(seconds * 1_000_000)  # type: ignore[attr-defined]
    assert loop.time() == pytest.approx(before + seconds, abs=1e-6)


@dataclass
class Sent:
    at: float
    """Loop time it was sent (from the line's start)."""
    timestamp: int
    marker: bool
    data: np.ndarray

    @property
    def slot(self) -> float:
        """Its play slot: the timestamp read back on the media clock."""
        return (self.timestamp - TS0) / RATE


class Line:
    """An RtpPlayback on a media clock that reads TS0 at the line's start, the packets
    it sent and each reply's events. Reply ``r``'s audio is the value ``1000 + r``, so
    the far end can tell whose samples it plays."""

    def __init__(self, send_ahead: float = SEND_AHEAD, delay: float = DELAY) -> None:
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.packets: list[Sent] = []
        self.events: list[tuple[float, int, Any]] = []
        """(time, reply, "started" | PlaybackFinished | ("progress", samples heard))"""
        self.out = RtpPlayback(
            RATE,
            send_packet=self._send,
            timestamp_at=lambda t: TS0 + round((t - self.t0) * RATE),
            playout_delay=delay,
            send_ahead=send_ahead,
        )
        self.out.on_progress = self._progress
        self.finished: set[int] = set()

    def now(self) -> float:
        return self.loop.time() - self.t0

    def at(self, t: float, callback: Any, *args: Any) -> None:
        self.loop.call_at(self.t0 + t, callback, *args)

    def _send(self, frame: AudioFrame, timestamp: int, marker: bool) -> None:
        self.packets.append(Sent(self.now(), timestamp, marker, frame.data.copy()))

    def listen(self, reply: int) -> None:
        def finished(ev: PlaybackFinished) -> None:
            self.finished.add(reply)
            self.events.append((self.now(), reply, ev))

        self.out.set_listener(lambda: self.events.append((self.now(), reply, "started")), finished)

    def _progress(self, heard: float, length: float | None) -> None:
        # The segment being heard: the first one started and not finished.
        started = [r for _, r, e in self.events if e == "started" and r not in self.finished]
        self.events.append((self.now(), started[0], ("progress", round(heard * RATE))))

    async def say(self, reply: int, samples: int, frame: int = 4000) -> None:
        self.listen(reply)
        audio = np.full(samples, 1000 + reply, np.int16)
        for start in range(0, samples, frame):
            await self.out.capture_frame(AudioFrame(audio[start : start + frame], RATE))
        self.out.flush()


class FarEnd:
    """The phone: it plays each packet from its slot plus ``delay`` (a jitter buffer in
    step with our media clock), or, if it came later than that, from when it came (it
    was late: the line went quiet meanwhile), and never two at once."""

    def __init__(self, packets: list[Sent], delay: float) -> None:
        self.plays: list[tuple[float, Sent]] = []
        self.late: list[Sent] = []
        end = float("-inf")
        for packet in packets:
            due = packet.slot + delay
            if packet.at > due + EPS:
                self.late.append(packet)
            start = max(due, packet.at, end)
            self.plays.append((start, packet))
            end = start + PACKET

    def heard(self, reply: int, t: float) -> int:
        """Samples of ``reply`` played to their end by ``t``."""
        total = 0
        for start, packet in self.plays:
            (mine,) = np.nonzero(packet.data == 1000 + reply)
            total += int(np.count_nonzero(start + (mine + 1) / RATE <= t + EPS))
        return total


def claimed(event: Any) -> int:
    """Samples of its reply an event says were heard."""
    if event == "started":
        return 1
    if isinstance(event, PlaybackFinished):
        return round(event.position * RATE)
    return int(event[1])


def ends(line: Line) -> list[tuple[float, int, Any]]:
    """The starts and ends of the replies (the progress reports left out)."""
    return [(t, r, e) for t, r, e in line.events if not isinstance(e, tuple)]


# --------------------------------------------------------------------- the lead


@pytest.mark.looptime
@pytest.mark.parametrize("send_ahead", [0.0, 0.02, 0.04, 0.1])
async def test_packets_go_out_up_to_the_lead_before_their_slot_and_never_more(
    send_ahead: float,
) -> None:
    line = Line(send_ahead)
    await line.say(0, RATE)  # 1 s, produced at once
    await asyncio.sleep(2)
    packets = line.packets
    assert len(packets) == 50
    assert [p.timestamp for p in packets] == [TS0 + CHUNK * i for i in range(50)]
    assert [p.marker for p in packets] == [True] + [False] * 49
    # Each exactly the lead before its slot: the first on its own (nothing is earlier
    # than now), then the lead builds up at once.
    assert [p.at for p in packets] == pytest.approx(
        [max(0.0, p.slot - send_ahead) for p in packets], abs=1e-6
    )
    # Heard from the slots, not from the sending.
    assert [(t, e) for t, _, e in ends(line)] == [
        (pytest.approx(PACKET + DELAY), "started"),
        (pytest.approx(1.0 + DELAY), PlaybackFinished(1.0, interrupted=False)),
    ]


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("send_ahead", "stalls", "late"),
    [
        (0.04, 0.035, False),  # shorter than the lead: never heard
        (0.04, 0.06, True),  # longer: the far end waits (with no buffer of its own)
        (0.0, 0.005, True),  # on time exactly: any stall is late
    ],
)
async def test_a_stall_shorter_than_the_lead_leaves_no_packet_late(
    send_ahead: float, stalls: float, late: bool
) -> None:
    line = Line(send_ahead)
    for at in (0.3, 0.5111, 0.9, 1.234, 1.6):
        line.at(at, stall, stalls)
    await line.say(0, 2 * RATE)
    await asyncio.sleep(2)
    assert len(line.packets) == 100
    # A far end with no buffer at all: it plays every packet right on its slot.
    far = FarEnd(line.packets, delay=0.0)
    assert bool(far.late) is late
    # Within CATCH_UP: one talkspurt on the clock throughout, nothing early.
    assert [p.timestamp for p in line.packets] == [TS0 + CHUNK * i for i in range(100)]
    assert all(p.at >= p.slot - send_ahead - 1e-6 for p in line.packets)
    # Heard: never before the slot-based time (a stall may only make it later).
    last = line.events[-1]
    assert last[2] == PlaybackFinished(2.0, interrupted=False)
    assert last[0] >= line.packets[-1].slot + PACKET + DELAY - 1e-6


@pytest.mark.looptime
async def test_a_long_stall_starts_a_new_talkspurt_and_the_lead_builds_up_again() -> None:
    line = Line()
    line.at(0.5, stall, 0.2)  # the lead and CATCH_UP spent: the far end ran dry
    await line.say(0, RATE)
    await asyncio.sleep(2)
    packets = line.packets
    spurts = [i for i, p in enumerate(packets) if p.marker]
    assert len(spurts) == 2
    first = packets[spurts[1]]
    # After the stall: a talkspurt on the clock (the silence in its timestamps), sent on
    # its slot; the two after it at once (the lead again), the rest the lead early.
    assert first.at == pytest.approx(0.7) and first.slot == pytest.approx(0.7, abs=EPS)
    assert first.timestamp - packets[spurts[1] - 1].timestamp > CHUNK
    assert [p.at for p in packets[spurts[1] : spurts[1] + 3]] == pytest.approx([0.7] * 3)
    after = packets[spurts[1] + 3 :]
    assert [p.at for p in after] == pytest.approx([p.slot - SEND_AHEAD for p in after], abs=EPS)
    assert sum(np.count_nonzero(p.data) for p in packets) == RATE  # nothing lost
    assert all(p.at <= p.slot + CATCH_UP + EPS for p in packets)
    far = FarEnd(packets, delay=DELAY)
    for t, r, e in line.events:
        assert claimed(e) <= far.heard(r, t), (t, e)
    assert line.events[-1][2] == PlaybackFinished(1.0, interrupted=False)


@pytest.mark.looptime
async def test_a_clear_sends_nothing_more_and_keeps_no_more_than_was_due() -> None:
    line = Line()
    speaking = asyncio.ensure_future(line.say(0, 2 * RATE, frame=2 * RATE))
    await asyncio.sleep(0.5)
    line.out.clear_buffer()
    cleared_at, sent = line.now(), len(line.packets)
    for _ in range(3):
        await asyncio.sleep(0)  # a few turns of the loop, no time
    assert speaking.done() and line.now() == cleared_at, "the producer is let go at once"
    # Sent ahead when the clear came: the two packets whose slots are yet to come. They
    # play at the far end all the same, and cannot be taken back.
    ahead = [p for p in line.packets if p.slot > cleared_at + EPS]
    assert [p.slot for p in ahead] == pytest.approx([0.52, 0.54], abs=EPS)
    (_, _, started), (at, _, finished) = ends(line)
    assert started == "started" and at == pytest.approx(cleared_at)
    assert finished.interrupted
    # Kept: the packets whose slots, their 20 ms and the delay had passed; not those
    # sent ahead, nor those still in the playout delay.
    due = sum(1 for p in line.packets if p.slot + PACKET + DELAY <= cleared_at + EPS)
    assert finished.position == pytest.approx(due * PACKET)
    assert due == 17
    # The next reply at once: its slots come after what was sent, in the same stream
    # (no overlap at the far end), and it is heard only after that has played.
    await line.say(1, 800)
    await asyncio.sleep(1)
    assert all(np.all(p.data != 1000) for p in line.packets[sent:]), "nothing more of it"
    nxt = line.packets[sent]
    assert nxt.timestamp == line.packets[sent - 1].timestamp + CHUNK
    assert not nxt.marker  # no silence between: the far end hears one talkspurt
    assert nxt.slot == pytest.approx(0.56, abs=EPS)
    assert nxt.at == pytest.approx(0.52, abs=EPS)  # the lead before its own slot
    started_at = next(t for t, r, e in line.events if r == 1 and e == "started")
    assert started_at == pytest.approx(0.56 + PACKET + DELAY, abs=EPS)
    far = FarEnd(line.packets, delay=DELAY)
    for t, r, e in line.events:
        assert claimed(e) <= far.heard(r, t), (t, r, e)


@pytest.mark.looptime
async def test_on_hold_what_was_sent_ahead_is_not_heard_and_unhold_builds_the_lead() -> None:
    line = Line()
    speaking = asyncio.ensure_future(line.say(0, 2 * RATE, frame=2 * RATE))
    await asyncio.sleep(0.5)
    line.out.hold()
    held_at, sent = line.now(), len(line.packets)
    await speaking
    (_, _, _), (at, _, cut) = ends(line)
    assert at == pytest.approx(held_at)
    due = sum(1 for p in line.packets if p.slot + PACKET + DELAY <= held_at + EPS)
    assert cut.interrupted and cut.position == pytest.approx(due * PACKET)
    waiting = asyncio.ensure_future(line.say(1, 800))
    await asyncio.sleep(1)
    assert len(line.packets) == sent, "nothing is sent on hold"
    line.out.unhold()
    await waiting
    await asyncio.sleep(1)
    resumed = line.packets[sent:]
    assert len(resumed) == 5 and resumed[0].marker
    assert [p.at - 1.5 for p in resumed] == pytest.approx([0, 0, 0, 0.02, 0.04], abs=EPS)
    assert [p.slot - 1.5 for p in resumed] == pytest.approx([0, 0.02, 0.04, 0.06, 0.08], abs=EPS)
    assert [e for _, r, e in ends(line) if r == 1] == [
        "started",
        PlaybackFinished(0.1, interrupted=False),
    ]


# ------------------------------------------------------------------ the option


def test_send_ahead_is_a_media_option_within_bounds() -> None:
    assert SipMediaOptions().send_ahead == SEND_AHEAD == 0.04
    assert SipMediaOptions(send_ahead=0.0).send_ahead == 0.0
    for bad in (-0.01, 0.25):
        with pytest.raises(ValueError, match="send_ahead"):
            SipMediaOptions(send_ahead=bad)


@pytest.mark.looptime
async def test_a_negative_lead_is_refused() -> None:
    with pytest.raises(ValueError, match="send_ahead"):
        Line(send_ahead=-0.02)


@pytest.mark.looptime(False)
async def test_the_calls_playback_takes_the_media_options_lead() -> None:
    from .test_media import Peer, open_call

    peer = await Peer.open()
    call = await open_call(peer, options=SipMediaOptions(rtp_ports=(0, 0), send_ahead=0.02))
    try:
        assert call.playback.send_ahead == 0.02
    finally:
        await call.aclose()
        peer.close()


# --------------------------------------------------------------------- at random


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    send_ahead=st.sampled_from([0.0, 0.02, 0.04, 0.1]),
    delay=st.sampled_from([CATCH_UP, 0.06, DELAY]),
    replies=st.lists(
        st.tuples(
            st.integers(0, 300),  # ms of quiet before it
            st.integers(1, 6000),  # samples
            st.sampled_from([80, 160, 333, 1200, 8000]),  # samples a frame
            st.sampled_from([0, 0, 10, 30, 70]),  # ms between frames (a slow producer)
        ),
        min_size=1,
        max_size=4,
    ),
    stalls=st.lists(st.tuples(st.integers(0, 2500), st.integers(1, 250)), max_size=4),
    clear_at=st.none() | st.integers(0, 2500),
)
def test_at_random_heard_never_leads_the_far_end_and_nothing_goes_too_early(
    send_ahead: float,
    delay: float,
    replies: list[tuple[int, int, int, int]],
    stalls: list[tuple[int, int]],
    clear_at: int | None,
) -> None:
    async def scenario() -> tuple[Line, dict[str, Any]]:
        line = Line(send_ahead, delay)
        for at, seconds in stalls:
            line.at(at / 1000, stall, seconds / 1000)
        clear: dict[str, Any] = {"cut": set()}
        begun: set[int] = set()

        def barge_in() -> None:
            clear["index"] = len(line.packets)
            clear["cut"] = begun - line.finished  # captured, not all heard yet
            line.out.clear_buffer()

        if clear_at is not None:
            line.at(clear_at / 1000, barge_in)
        for r, (quiet, samples, frame, gap) in enumerate(replies):
            await asyncio.sleep(quiet / 1000)
            line.listen(r)
            begun.add(r)
            audio = np.full(samples, 1000 + r, np.int16)
            for start in range(0, samples, frame):
                if r in clear["cut"]:
                    break  # the speech stops producing once it was cut
                await line.out.capture_frame(AudioFrame(audio[start : start + frame], RATE))
                await asyncio.sleep(gap / 1000)
            if r not in clear["cut"]:
                line.out.flush()
        await asyncio.sleep(3)
        return line, clear

    loop = virtual_loop()
    try:
        line, clear = loop.run_until_complete(asyncio.wait_for(scenario(), 600))
    finally:
        loop.close()

    packets = line.packets
    # Never more than the lead early, never more than CATCH_UP late.
    for p in packets:
        assert p.slot - send_ahead - EPS <= p.at <= p.slot + CATCH_UP + EPS, p
    # Timestamps only go forward, a packet's worth at least: nothing overlaps.
    for a, b in itertools.pairwise(packets):
        assert b.timestamp >= a.timestamp + CHUNK
    # The heard position never leads a far end that plays each packet playout_delay
    # after its slot (the longest delay the estimate stands for).
    far = FarEnd(packets, delay)
    assert not far.late
    for t, r, e in line.events:
        assert claimed(e) <= far.heard(r, t), (t, r, e)
    # A cut reply: nothing more of it after the clear; at most one end, interrupted.
    cut: set[int] = clear["cut"]
    for p in packets[clear.get("index", len(packets)) :]:
        assert not any(np.any(p.data == 1000 + r) for r in cut)
    for r, (_, samples, _, _) in enumerate(replies):
        ends = [e for _, q, e in line.events if q == r and isinstance(e, PlaybackFinished)]
        sent = sum(int(np.count_nonzero(p.data == 1000 + r)) for p in packets)
        if r in cut:
            assert sent <= samples and len(ends) <= 1
            assert all(e.interrupted for e in ends)
        else:  # every other reply: sent whole, heard whole
            assert sent == samples
            assert ends == [PlaybackFinished(samples / RATE, interrupted=False)]
