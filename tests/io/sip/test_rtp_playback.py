"""RtpPlayback on virtual time: packets paced at 20 ms with RTP numbering, up to
``send_ahead`` before their play slot, and the playback truth on the slots — a packet is
heard once its audio has had its slot plus ``playout_delay``; a clear stops sending at
once; nothing counts as heard on hold. (The lead under stalls, clears and at random:
``test_rtp_send_ahead.py``.)"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rejoinder.io.sip.rtp_playback import RtpPlayback
from rejoinder.models.audio import AudioFrame, PlaybackFinished

RATE = 8000
DELAY = 0.15
AHEAD = 0.04
PACKET = 0.02


def loud(seconds: float) -> AudioFrame:
    return AudioFrame(np.full(round(seconds * RATE), 1000, np.int16), RATE)


class Rig:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.packets: list[tuple[float, int, bool, AudioFrame]] = []
        self.events: list[tuple[float, Any]] = []
        self.out = RtpPlayback(
            RATE,
            send_packet=self._send,
            timestamp_at=lambda t: 1000 + round((t - self.t0) * RATE),
            playout_delay=DELAY,
        )
        self.listen()

    def listen(self) -> None:
        self.out.set_listener(
            lambda: self.events.append((self.now(), "started")),
            lambda ev: self.events.append((self.now(), ev)),
        )

    def now(self) -> float:
        return round(self.loop.time() - self.t0, 4)

    @staticmethod
    def slot(timestamp: int) -> float:
        """The play slot of ``timestamp`` on the rig's media clock (seconds from t0)."""
        return round((timestamp - 1000) / RATE, 4)

    def _send(self, frame: AudioFrame, timestamp: int, marker: bool) -> None:
        self.packets.append((self.now(), timestamp, marker, frame))

    async def say(self, seconds: float) -> None:
        await self.out.capture_frame(loud(seconds))
        self.out.flush()


@pytest.mark.looptime
async def test_speaking_follows_the_play_slots_plus_the_playout_delay() -> None:
    rig = Rig()
    await rig.say(0.125)  # 6 whole packets and 5 ms
    await asyncio.sleep(1)
    stamps = [ts for _, ts, _, _ in rig.packets]
    assert stamps == [1000 + 160 * i for i in range(7)]
    # Paced, each AHEAD before its slot (the first three at once: the lead builds up).
    times = [t for t, _, _, _ in rig.packets]
    assert times == pytest.approx([max(0.0, 0.02 * i - AHEAD) for i in range(7)])
    assert [m for _, _, m, _ in rig.packets] == [True] + [False] * 6
    assert all(f.samples_per_channel == 160 for *_, f in rig.packets)
    tail = rig.packets[-1][3].data
    assert (tail[:40] == 1000).all() and (tail[40:] == 0).all()  # padded with silence
    # Heard once a packet's audio has had its slot, plus the delay: from the first
    # packet's end to the last sample's.
    assert rig.events == [
        (pytest.approx(PACKET + DELAY), "started"),
        (pytest.approx(0.125 + DELAY), PlaybackFinished(0.125, interrupted=False)),
    ]


@pytest.mark.looptime
async def test_a_pause_starts_a_new_talkspurt_on_the_media_clock() -> None:
    rig = Rig()
    await rig.say(0.04)
    await asyncio.sleep(0.5)
    rig.listen()
    await rig.say(0.04)
    await asyncio.sleep(0.5)
    (t1, ts1, m1, _), (_, ts2, m2, _), (t3, ts3, m3, _), (_, ts4, m4, _) = rig.packets
    assert (m1, m2, m3, m4) == (True, False, True, False)
    assert ts2 == ts1 + 160
    # The second talkspurt's timestamp is as far on as the time between them.
    assert ts3 - ts1 == round((t3 - t1) * RATE)
    assert ts4 == ts3 + 160


@pytest.mark.looptime
async def test_a_little_late_audio_catches_up_in_the_same_talkspurt() -> None:
    rig = Rig()
    await rig.say(0.02)
    await asyncio.sleep(0.05)  # the next chunk is 30 ms late: within CATCH_UP
    await rig.say(0.04)
    await asyncio.sleep(0.5)
    assert [(t, ts, m) for t, ts, m, _ in rig.packets] == [
        (0.0, 1000, True),
        (pytest.approx(0.05), 1160, False),
        (pytest.approx(0.05), 1320, False),  # sent at once: it is late too
    ]


@pytest.mark.looptime
async def test_a_clear_stops_sending_at_once_and_keeps_what_was_heard() -> None:
    rig = Rig()
    speaking = asyncio.ensure_future(rig.say(2.0))
    await asyncio.sleep(0.5)
    rig.out.clear_buffer()
    cleared_at = rig.now()
    await asyncio.sleep(0.01)
    assert speaking.done()
    sent = len(rig.packets)
    await asyncio.sleep(1)
    assert len(rig.packets) == sent, "nothing is sent after the clear"
    assert all(t <= cleared_at for t, *_ in rig.packets)
    assert rig.slot(rig.packets[-1][1]) == pytest.approx(cleared_at + AHEAD)  # sent ahead
    # Heard: the packets whose slot came playout_delay before the clear (the rest,
    # those sent ahead included, plays too, but the history errs towards less).
    (_, started), (at, finished) = rig.events
    assert started == "started"
    assert at == pytest.approx(cleared_at) and finished.interrupted
    heard_packets = sum(
        1 for _, ts, *_ in rig.packets if rig.slot(ts) + PACKET + DELAY <= cleared_at + 1e-9
    )
    assert finished.position == pytest.approx(heard_packets * 0.02)
    # The next reply starts a talkspurt of its own, numbered after the last one.
    last_ts = rig.packets[-1][1]
    rig.listen()
    rig.events.clear()
    await rig.say(0.1)
    await asyncio.sleep(1)
    first = rig.packets[sent]
    assert first[2] is True and first[1] > last_ts
    assert rig.slot(first[1]) == pytest.approx(first[0], abs=1e-4)  # on its slot
    assert rig.events[0] == (pytest.approx(first[0] + PACKET + DELAY, abs=1e-4), "started")
    assert rig.events[1][1] == PlaybackFinished(0.1, interrupted=False)


@pytest.mark.looptime
async def test_on_hold_nothing_is_sent_and_nothing_counts_as_heard() -> None:
    rig = Rig()
    speaking = asyncio.ensure_future(rig.say(2.0))
    await asyncio.sleep(0.5)
    rig.out.hold()
    held_at = rig.now()
    await asyncio.sleep(0.01)
    sent = len(rig.packets)
    (_, _), (at, finished) = rig.events
    assert at == pytest.approx(held_at) and finished.interrupted
    # Audio whose slot had not come playout_delay before was not heard: the line went
    # quiet.
    assert finished.position == pytest.approx(
        sum(1 for _, ts, *_ in rig.packets if rig.slot(ts) + PACKET + DELAY <= held_at + 1e-9)
        * 0.02
    )
    await speaking  # the rest of the cut reply is dropped
    # A reply while on hold waits: not sent, never started.
    rig.listen()
    rig.events.clear()
    waiting = asyncio.ensure_future(rig.say(0.2))
    await asyncio.sleep(2)
    assert len(rig.packets) == sent and rig.events == []
    rig.out.unhold()
    unheld_at = rig.now()
    await waiting
    await asyncio.sleep(1)
    resumed = rig.packets[sent:]
    assert len(resumed) == 10 and resumed[0][2] is True
    assert resumed[0][0] == pytest.approx(unheld_at)
    assert rig.slot(resumed[0][1]) == pytest.approx(unheld_at, abs=1e-4)
    last_slot = rig.slot(resumed[-1][1])
    assert last_slot == pytest.approx(unheld_at + 0.18, abs=1e-4)
    assert resumed[-1][0] == pytest.approx(last_slot - AHEAD, abs=1e-4)
    assert rig.events == [
        (pytest.approx(unheld_at + PACKET + DELAY, abs=1e-4), "started"),
        (
            pytest.approx(last_slot + PACKET + DELAY, abs=1e-4),
            PlaybackFinished(0.2, interrupted=False),
        ),
    ]


@pytest.mark.looptime
async def test_closing_stops_everything() -> None:
    rig = Rig()
    speaking = asyncio.ensure_future(rig.say(1.0))
    await asyncio.sleep(0.3)
    rig.out.close()
    await asyncio.sleep(0.05)
    sent = len(rig.packets)
    assert speaking.done()
    await asyncio.sleep(1)
    assert len(rig.packets) == sent
    assert rig.events[-1][1].interrupted


@pytest.mark.looptime
async def test_a_quiet_line_gets_a_packet_of_silence_now_and_then() -> None:
    rig = Rig()
    assert rig.out.keepalive(5.0)  # nothing sent yet: one now
    assert not rig.out.keepalive(5.0)  # just sent
    await asyncio.sleep(5)
    speaking = asyncio.ensure_future(rig.say(0.1))
    await asyncio.sleep(0.03)
    assert not rig.out.keepalive(0.01), "never in the middle of a talkspurt"
    await speaking
    await asyncio.sleep(5)
    assert rig.out.keepalive(5.0)
    rig.out.hold()
    await asyncio.sleep(10)
    assert not rig.out.keepalive(5.0), "on hold the line stays quiet"
    (t1, ts1, m1, f1), *audio, (t2, ts2, m2, f2) = rig.packets
    assert m1 and m2 and not f1.data.any() and not f2.data.any()  # silence, talkspurts
    assert len(audio) == 5 and audio[0][2] is True  # the reply: a talkspurt of its own
    assert audio[0][1] - ts1 == round((audio[0][0] - t1) * RATE)
    assert ts2 - audio[-1][1] == round((t2 - rig.slot(audio[-1][1])) * RATE)
    # Keepalives are not the agent's audio: the reply alone was heard.
    assert [e for _, e in rig.events] == ["started", PlaybackFinished(0.1, interrupted=False)]
