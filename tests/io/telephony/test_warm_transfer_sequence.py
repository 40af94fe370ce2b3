"""The warm transfer's parts on virtual time: the hold chime, hold audio on a
``MarkedPlayback`` (continuous, never the agent's voice, stopped at once without cutting
the agent's audio, surviving a barge-in's clear), and the sequence itself against the
person's status callbacks arriving in any order, duplicated (hypothesis)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine, Mapping
from typing import Any

import looptime
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.telephony.carriers.base import FINAL_STATUSES, STATUS_ORDER, StatusUpdate
from rejoinder.io.telephony.line import TransferFailed
from rejoinder.io.telephony.marks import MarkedPlayback
from rejoinder.io.telephony.outbound import OutboundCall
from rejoinder.io.telephony.warm_transfer import HoldAudio, hold_sound, run_warm_transfer
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import advance

RATE = 8000
VOICE = 1000  # the agent's audio here: a constant, never in the chime


def now() -> float:
    return asyncio.get_running_loop().time()


class Wire:
    """A provider's end of a ``MarkedPlayback``: plays media in real time, echoes each
    mark once the audio before it played, drops its buffer (and the echoes) on a clear."""

    def __init__(self) -> None:
        self.media: list[tuple[float, str]] = []
        """When each 20 ms message would play, and whether it is voice or hold."""
        self.clears: list[float] = []
        self._play_until = 0.0
        self._echoes: list[asyncio.TimerHandle] = []
        self.out = MarkedPlayback(
            RATE,
            send_media=self._send,
            send_mark=self._mark,
            send_clear=self._clear,
            send_tail=self._tail,
        )
        self.out.set_listener(lambda: None, lambda _: None)

    async def _send(self, frame: AudioFrame) -> None:
        self._tail(frame)

    def _tail(self, frame: AudioFrame) -> None:
        start = max(now(), self._play_until)
        self._play_until = start + frame.samples_per_channel / RATE
        data = frame.data
        kind = "voice" if int(data[0]) == VOICE else "hold" if np.any(data) else "quiet"
        self.media.append((start, kind))

    def _mark(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        self._echoes.append(loop.call_at(self._play_until, self.out.on_mark, name))

    def _clear(self) -> None:
        self.clears.append(now())
        for echo in self._echoes:
            echo.cancel()
        self._echoes = []
        t = now()
        self.media = [(at, kind) for at, kind in self.media if at < t]  # never played
        self._play_until = t

    def played(self, kind: str, start: float, end: float) -> list[float]:
        return [at for at, k in self.media if k == kind and start <= at < end]


def test_the_hold_chime_is_soft_periodic_and_starts_and_ends_quietly() -> None:
    pcm = hold_sound(RATE)
    assert pcm.dtype == np.int16 and len(pcm) == 2 * RATE
    peak = int(np.abs(pcm).max())
    assert 600 < peak < 0.06 * 32767  # audible on a phone line, well below speech level
    assert abs(int(pcm[0])) < 50 and abs(int(pcm[-1])) < 50  # no click when looped
    loud = np.abs(pcm) > 100
    assert loud[: RATE // 2].any() and not loud[RATE:].any()  # notes, then quiet
    assert len(hold_sound(16000)) == 2 * 16000
    with pytest.raises(ValueError, match="at least a second"):
        hold_sound(RATE, period=0.5)


async def test_hold_audio_plays_without_gaps_and_stops_at_once() -> None:
    wire = Wire()
    hold = HoldAudio(wire.out, RATE)
    began = now()
    hold.start()
    await advance(5.0)
    heard = wire.played("hold", began, now())
    assert heard and heard[0] - began < 0.05
    # continuous: every 20 ms of the 2 s pattern went out, loops joined end to end
    starts = [at for at, _ in wire.media]
    assert max(b - a for a, b in itertools.pairwise(starts)) <= 0.021
    assert hold.pieces_heard >= 1
    stopped = now()
    await hold.stop()
    assert wire.clears == [stopped]  # only hold audio on the line: the provider drops it
    assert not [at for at, _ in wire.media if at >= stopped]
    await advance(3.0)
    assert not [at for at, _ in wire.media if at >= stopped]
    assert not wire.out.pending  # nothing of it counted as the agent's audio


async def test_stopping_hold_audio_never_cuts_the_agents_words() -> None:
    wire = Wire()
    await wire.out.capture_frame(AudioFrame(np.full(RATE, VOICE, np.int16), RATE))
    wire.out.flush()  # one second of the agent, sent ahead of its playout
    hold = HoldAudio(wire.out, RATE)
    hold.start()
    await advance(0.3)
    assert wire.out.pending  # the agent's audio is still playing
    await hold.stop()
    assert wire.clears == []  # a clear would drop the agent's words too
    await advance(2.0)
    assert len(wire.played("voice", 0.0, now())) == RATE // 160  # all of it played
    assert not wire.out.pending


async def test_a_barge_in_clear_does_not_end_the_hold() -> None:
    wire = Wire()
    hold = HoldAudio(wire.out, RATE)
    hold.start()
    await advance(1.0)
    wire.out.clear_buffer()  # the caller spoke: the session cleared its output
    cleared = now()
    await advance(2.0)
    assert wire.played("hold", cleared + 0.1, now())  # the chime came back
    await hold.stop()


async def test_hold_audio_notices_the_call_ending() -> None:
    wire = Wire()
    hold = HoldAudio(wire.out, RATE)
    hold.start()
    await advance(0.5)
    wire.out.close()
    await asyncio.wait_for(hold.line_closed.wait(), 1)
    await hold.stop()


# ------------------------------------------------------------- the sequence


class Dialer:
    """The service's side of the sequence, recorded; its person is a real
    ``OutboundCall`` the test feeds status updates to."""

    provider = "twilio"

    def __init__(self, briefs_inline: bool, refuse: bool = False) -> None:
        self.briefs_inline = briefs_inline
        self.refuse = refuse
        self.refuse_join = False
        self.person: OutboundCall | None = None
        self.briefs: list[str] = []
        self.joins: list[tuple[str, str]] = []
        self.hangups: list[str] = []

    async def call_person(
        self, *, to: str, from_: str, summary: str, room: str, ring_timeout: float
    ) -> OutboundCall:
        if self.refuse:
            from rejoinder.io.telephony.carriers.base import CarrierError

            raise CarrierError("twilio: cannot call +1555: HTTP 400", status=400)
        self.person = OutboundCall(
            "p",
            to=to,
            from_=from_,
            control=self,
            parameters={},
            streams=False,  # type: ignore[arg-type]
        )
        self.person.call_id = "P1"
        return self.person

    async def brief(self, person: OutboundCall, summary: str) -> None:
        self.briefs.append(summary)

    async def join(self, caller_call_id: str, person: OutboundCall, room: str) -> None:
        if self.refuse_join:
            from rejoinder.io.telephony.carriers.base import CarrierError

            raise CarrierError("twilio: cannot move call C1 to the conference: HTTP 404")
        self.joins.append((caller_call_id, room))

    async def hangup(self, call_id: str) -> None:
        self.hangups.append(call_id)

    def read_status(self, form: Mapping[str, str] | None, body: bytes) -> StatusUpdate | None:
        return None


class Hold:
    def __init__(self) -> None:
        self.line_closed = asyncio.Event()
        self.started = self.stopped = 0

    def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1


def transfer(dialer: Dialer, hold: Hold) -> Coroutine[Any, Any, bool]:
    return run_warm_transfer(
        dialer=dialer,
        hold=hold,  # type: ignore[arg-type]
        caller_call_id="C1",
        target="+15559870000",
        from_="+15557650000",
        summary="Ana wants Tuesday moved.",
        ring_timeout=30.0,
        detect_timeout=5.0,
        brief_timeout=5.0,
    )


def expected(updates: list[StatusUpdate], inline: bool) -> bool:
    """Whether the caller is joined, told from the callbacks alone: the first of them
    after which a person answered (and, when the briefing is a command, it ended) joins;
    a machine or the call's end first gives the caller back; nothing decisive by the end
    joins only an answered call (no verdict in time: a person)."""
    rank, answered, done, machine, human, briefed = 0, False, False, False, False, False
    for update in updates:
        if update.answered_by is not None and not done:
            machine = machine or update.answered_by == "machine"
            human = human or update.answered_by != "machine"
        if update.briefed and not done:
            briefed = True
        if update.status is not None and STATUS_ORDER[update.status] > rank:
            rank = STATUS_ORDER[update.status]
            answered = answered or update.status == "answered"
            done = done or update.status in FINAL_STATUSES
        if machine or done:
            return False
        if answered and human and (inline or briefed):
            return True
    return answered


updates = st.one_of(
    st.sampled_from(sorted(STATUS_ORDER)).map(lambda s: StatusUpdate("P1", s)),  # type: ignore[arg-type]
    st.sampled_from(["human", "machine", "unknown"]).map(
        lambda kind: StatusUpdate("P1", answered_by=kind)  # type: ignore[arg-type]
    ),
    st.just(StatusUpdate("P1", briefed=True)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(updates, max_size=10), st.booleans(), st.data())
def test_the_person_callbacks_in_any_order_decide_the_same_way(
    sequence: list[StatusUpdate], inline: bool, data: st.DataObject
) -> None:
    # each callback may come twice (a provider's retry)
    doubled = [u for u in sequence for _ in range(data.draw(st.integers(1, 2)))]

    async def scenario() -> None:
        dialer, hold = Dialer(inline), Hold()
        task = asyncio.create_task(transfer(dialer, hold))
        await asyncio.sleep(0.01)
        assert dialer.person is not None
        for update in doubled:
            if task.done():
                break
            dialer.person.apply(update, now())
            await asyncio.sleep(0.01)  # the sequence reacts to each callback
        joined = await task
        assert joined is expected(doubled, inline)
        assert hold.started == hold.stopped == 1  # hold audio stopped, whatever happened
        assert dialer.joins == ([("C1", dialer.joins[0][1])] if joined else [])
        if joined:
            assert dialer.hangups == [] and dialer.joins[0][1].startswith("rj-")
        else:  # a leg that has not ended is hung up
            assert dialer.hangups == ([] if dialer.person.done else ["P1"])
        assert len(dialer.briefs) <= (0 if inline else 1)
        dialer.person.close()

    # hypothesis runs each example outside pytest's loop: a virtual-time loop of its own
    loop = looptime.new_event_loop(start=0, _enabled=True)
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 120))
    finally:
        loop.close()


async def test_nobody_answering_ends_at_the_ring_timeout_and_hangs_up() -> None:
    dialer, hold = Dialer(True), Hold()
    began = now()
    assert await transfer(dialer, hold) is False
    assert now() - began == pytest.approx(30.0, abs=0.05)
    assert dialer.hangups == ["P1"] and hold.stopped == 1


async def test_a_briefing_asked_for_then_joined_once_it_ended() -> None:
    dialer, hold = Dialer(False), Hold()
    task = asyncio.create_task(transfer(dialer, hold))
    await advance(0.5)
    assert dialer.person is not None
    dialer.person.apply(StatusUpdate("P1", "answered"), now())
    dialer.person.apply(StatusUpdate("P1", answered_by="human"), now())
    await advance(0.1)
    assert dialer.briefs == ["Ana wants Tuesday moved."] and not dialer.joins
    dialer.person.apply(StatusUpdate("P1", briefed=True), now())
    assert await asyncio.wait_for(task, 1) is True
    assert len(dialer.joins) == 1 and dialer.hangups == []


async def test_the_caller_leaving_during_the_hold_hangs_up_the_person() -> None:
    dialer, hold = Dialer(True), Hold()
    task = asyncio.create_task(transfer(dialer, hold))
    await advance(1.0)
    hold.line_closed.set()
    assert await asyncio.wait_for(task, 1) is False
    assert dialer.hangups == ["P1"] and hold.stopped == 1


async def test_a_refused_call_is_a_transfer_failure_and_stops_the_hold() -> None:
    dialer, hold = Dialer(True, refuse=True), Hold()
    with pytest.raises(TransferFailed, match="HTTP 400"):
        await transfer(dialer, hold)
    assert hold.started == hold.stopped == 1 and dialer.hangups == []


async def test_a_refused_join_gives_the_caller_back_and_hangs_up_the_person() -> None:
    dialer, hold = Dialer(True), Hold()
    dialer.refuse_join = True
    task = asyncio.create_task(transfer(dialer, hold))
    await advance(0.5)
    assert dialer.person is not None
    dialer.person.apply(StatusUpdate("P1", "answered"), now())
    dialer.person.apply(StatusUpdate("P1", answered_by="human"), now())
    assert await asyncio.wait_for(task, 1) is False
    assert dialer.joins == [] and dialer.hangups == ["P1"] and hold.stopped == 1
