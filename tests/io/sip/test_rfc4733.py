"""RFC 4733 telephone-events: one key per event however its packets arrive, and the
packets we send for a key (marker, durations, three ends, one timestamp)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rejoinder.io.sip.rfc4733 import (
    DtmfReceiver,
    KeyTone,
    Pause,
    build_event,
    key_packets,
    parse_event,
    plan,
)


def press(event: int, *, updates: int = 4, ends: int = 3) -> list[bytes]:
    packets = [build_event(event, end=False, duration=160 * (i + 1)) for i in range(updates)]
    packets += [build_event(event, end=True, duration=160 * (updates + 1))] * ends
    return packets


def test_one_key_per_event_end_retransmissions_dropped() -> None:
    receiver = DtmfReceiver()
    keys = [receiver.receive(1000, p) for p in press(5)]
    assert keys == ["5", None, None, None, None, None, None]
    # The same key pressed again is a new event (a new timestamp).
    keys = [receiver.receive(3000, p) for p in press(5)]
    assert [k for k in keys if k] == ["5"]
    assert receiver.keys == 2


@given(st.data())
def test_any_order_loss_and_duplication_gives_each_key_once(data: st.DataObject) -> None:
    digits = data.draw(st.lists(st.sampled_from(range(16)), min_size=1, max_size=6))
    packets: list[tuple[int, bytes]] = []
    for i, event in enumerate(digits):
        timestamp = 1000 + 1600 * i
        mine = [(timestamp, p) for p in press(event)]
        kept = data.draw(st.lists(st.sampled_from(mine), min_size=1, max_size=10))
        packets.extend(kept)
    # Reordered within a key, never across keys (a key takes 200 ms; jitter is ms).
    receiver = DtmfReceiver()
    heard = [k for t, p in packets if (k := receiver.receive(t, p))]
    assert heard == ["0123456789*#ABCD"[e] for e in digits]


def test_a_long_press_continued_in_a_new_segment_is_one_key() -> None:
    receiver = DtmfReceiver()
    assert receiver.receive(0, build_event(1, end=False, duration=65535)) == "1"
    assert receiver.receive(65535, build_event(1, end=False, duration=800)) is None
    assert receiver.receive(65535, build_event(1, end=True, duration=1600)) is None
    assert receiver.receive(80000, build_event(1, end=False, duration=160)) == "1"


def test_junk_and_other_events_are_ignored() -> None:
    receiver = DtmfReceiver()
    assert receiver.receive(0, b"\x01") is None
    assert receiver.receive(10, build_event(16, end=False, duration=160)) is None  # flash
    assert receiver.ignored == 2 and receiver.keys == 0


def test_a_key_is_sent_as_updates_then_three_ends() -> None:
    packets = key_packets(11)  # '#'
    events = [parse_event(p) for _, p, _ in packets]
    assert all(e is not None and e.key == "#" for e in events)
    durations = [e.duration for e in events if e is not None]
    ends = [e.end for e in events if e is not None]
    assert durations == [160, 320, 480, 640, 800, 800, 800]
    assert ends == [False] * 4 + [True] * 3
    assert [m for _, _, m in packets] == [True] + [False] * 6
    assert [round(at, 3) for at, _, _ in packets] == [0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.14]


def test_plan_validates_and_spells_pauses() -> None:
    assert plan("1w#W") == [KeyTone(1), Pause(0.5), KeyTone(11), Pause(1.0)]
    for bad in ("", "12x", "a", " 1"):
        with pytest.raises(ValueError, match=r"non-empty|cannot press"):
            plan(bad)
