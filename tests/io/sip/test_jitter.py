"""The jitter buffer: any arrival order, duplication and loss within its depth gives the
frames back in order, lost ones as silence, duplicates and late ones dropped, and it
never holds more than its capacity."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.sip.jitter import JitterBuffer


def payload(n: int) -> bytes:
    return n.to_bytes(4, "big")


def number(data: bytes | None) -> int | None:
    return None if data is None else int.from_bytes(data, "big")


def test_playout_starts_depth_frames_after_the_first_arrival() -> None:
    buffer = JitterBuffer(depth=3)
    buffer.push(10, payload(10))
    out = [buffer.pop()]
    buffer.push(11, payload(11))
    out.append(buffer.pop())
    buffer.push(12, payload(12))
    out.append(buffer.pop())
    out.append(buffer.pop())
    out.append(buffer.pop())
    assert [number(p) for p in out] == [None, None, 10, 11, 12]


def test_reordered_packets_come_out_in_order_and_a_lost_one_is_silence() -> None:
    buffer = JitterBuffer(depth=2)
    for seq in (1, 0, 3, 4):  # 2 is lost
        buffer.push(seq, payload(seq))
    out = [number(buffer.pop()) for _ in range(6)]
    assert out == [None, 0, 1, None, 3, 4]
    assert buffer.concealed == 1


def test_duplicates_and_late_packets_are_dropped() -> None:
    buffer = JitterBuffer(depth=1)
    assert buffer.push(5, payload(5))
    assert not buffer.push(5, payload(5))  # held twice
    assert buffer.push(6, payload(6))
    assert number(buffer.pop()) == 5
    assert not buffer.push(5, payload(5))  # already played
    assert number(buffer.pop()) == 6
    assert buffer.duplicates == 2
    # A frame concealed while it was missing is late when it finally comes.
    buffer.push(8, payload(8))
    assert buffer.pop() is None and buffer.concealed == 1  # 7 was missing
    assert not buffer.push(7, payload(7))
    assert buffer.late == 1
    assert number(buffer.pop()) == 8


def test_sequence_numbers_wrap() -> None:
    buffer = JitterBuffer(depth=1)
    for seq in (65534, 65535, 0, 1):
        buffer.push(seq, payload(seq))
    assert [number(buffer.pop()) for _ in range(4)] == [65534, 65535, 0, 1]


def test_running_dry_goes_idle_and_re_primes_on_the_next_talkspurt() -> None:
    buffer = JitterBuffer(depth=2)
    buffer.push(0, payload(0))
    assert [number(buffer.pop()) for _ in range(3)] == [None, 0, None]
    assert not buffer.playing
    # Silence suppression: nothing for a while, then the numbering goes on.
    assert [buffer.pop() for _ in range(10)] == [None] * 10
    buffer.push(1, payload(1))
    buffer.push(2, payload(2))
    assert [number(buffer.pop()) for _ in range(3)] == [None, 1, 2]


def test_a_restarted_numbering_resets_instead_of_stalling() -> None:
    buffer = JitterBuffer(depth=1, capacity=10)
    buffer.push(100, payload(100))
    assert number(buffer.pop()) == 100
    buffer.push(40000, payload(40000))  # far away: a new sequence space
    assert buffer.resets == 1
    assert number(buffer.pop()) == 40000


def test_capacity_bounds_what_is_held() -> None:
    buffer = JitterBuffer(depth=2, capacity=5)
    for seq in range(20):
        buffer.push(seq, payload(seq))
        assert len(buffer) <= 5
    assert buffer.overflowed == 15
    out = [number(buffer.pop()) for _ in range(7)]
    assert out == [None, 15, 16, 17, 18, 19, None]


DEPTH = 3


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(1, 60),
    data=st.data(),
)
def test_any_order_within_depth_plays_everything_in_order(count: int, data: st.DataObject) -> None:
    """Packet i is sent at tick i and arrives within DEPTH - 1 ticks (or is lost, or
    comes twice, the copy as late as it likes), in any order within a tick: every
    packet that arrived is played, in order, a lost one leaves silence, nothing plays
    twice, and the buffer stays within its capacity."""
    lost = data.draw(st.sets(st.integers(0, count - 1)))
    delays = data.draw(st.lists(st.integers(0, DEPTH - 1), min_size=count, max_size=count))
    copies = data.draw(st.lists(st.integers(0, 3 * DEPTH), max_size=count))
    arrivals: dict[int, list[int]] = {}
    for seq in range(count):
        if seq not in lost:
            arrivals.setdefault(seq + delays[seq], []).append(seq)
    for seq, delay in zip(range(count), copies, strict=False):
        if seq not in lost:
            arrivals.setdefault(seq + delay, []).append(seq)  # a duplicate, however late
    first = 50000  # across the 16-bit wrap
    buffer = JitterBuffer(depth=DEPTH, capacity=8)
    out: list[int | None] = []
    for tick in range(count + 4 * DEPTH + 2):
        for seq in data.draw(st.permutations(arrivals.get(tick, []))):
            buffer.push((first + seq) % 65536, payload(seq))
            assert len(buffer) <= 8
        out.append(number(buffer.pop()))
    played = [n for n in out if n is not None]
    assert played == sorted(set(played)), "in order, each once"
    delivered = [seq for seq in range(count) if seq not in lost]
    assert played == delivered
    # A missing frame leaves silence between its neighbours (one silent frame per
    # missing frame while playout runs; across a stretch where the buffer ran dry, the
    # silence is however long playout was idle).
    positions = {n: i for i, n in enumerate(out) if n is not None}
    for a, b in itertools.pairwise(played):
        assert positions[b] - positions[a] >= min(b - a, 2)
