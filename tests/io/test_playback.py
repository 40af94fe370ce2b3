"""ReportedPlayback on virtual time: segments start and finish from the client's
``played`` reports, clears report what was heard and re-base the count, and a session
playing through it is ``speaking`` exactly while the (simulated) client plays."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.io.playback import CLEARED_WAIT, STALL_GRACE, ReportedPlayback
from rejoinder.models.audio import AudioFrame, PlaybackFinished
from rejoinder.testing import ScriptedLLM, ScriptedTTS, StateTimeline, advance

RATE = 1000  # 1 sample = 1 ms: positions read as milliseconds


def frame(samples: int) -> AudioFrame:
    return AudioFrame(np.ones(samples, np.int16), RATE)


class Rig:
    def __init__(self) -> None:
        self.sent: list[int] = []
        self.clears = 0
        self.events: list[Any] = []
        self.out = ReportedPlayback(RATE, self._send, self._clear)
        self.listen("a")

    def listen(self, name: str) -> None:
        self.out.set_listener(
            lambda: self.events.append((name, "started")),
            lambda ev: self.events.append((name, ev)),
        )

    async def _send(self, f: AudioFrame) -> None:
        self.sent.append(f.samples_per_channel)

    def _clear(self) -> None:
        self.clears += 1

    async def segment(self, *sizes: int, flush: bool = True) -> None:
        for size in sizes:
            await self.out.capture_frame(frame(size))
        if flush:
            self.out.flush()


async def test_started_only_once_played_passes_the_first_sample() -> None:
    rig = Rig()
    await rig.segment(100, 100)
    assert rig.sent == [100, 100] and rig.events == []  # sent is not heard
    rig.out.on_played(0)
    assert rig.events == []
    rig.out.on_played(1)
    assert rig.events == [("a", "started")]
    assert rig.out.playing


async def test_finished_when_played_reaches_the_end() -> None:
    rig = Rig()
    await rig.segment(100, 100)
    rig.out.on_played(150)
    rig.out.on_played(199)
    assert rig.events == [("a", "started")]
    rig.out.on_played(200)
    assert rig.events == [("a", "started"), ("a", PlaybackFinished(0.2, False))]
    assert not rig.out.pending


async def test_an_open_segment_finishes_at_flush_when_it_was_all_played() -> None:
    rig = Rig()
    await rig.segment(100, flush=False)
    rig.out.on_played(100)
    assert rig.events == [("a", "started")]  # more may come: not finished
    rig.out.flush()
    assert rig.events[-1] == ("a", PlaybackFinished(0.1, False))


async def test_clear_reports_interrupted_at_the_last_report() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(120)
    rig.out.clear_buffer()
    assert rig.clears == 1
    assert rig.events == [("a", "started"), ("a", PlaybackFinished(0.12, True))]
    # the client heard a little more before it processed the clear: that comes later
    # with the cleared report, and is not heard text any more
    rig.out.on_played(140, cleared=True)
    assert len(rig.events) == 2


async def test_clear_of_audio_not_heard_yet_reports_nothing() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.clear_buffer()
    assert rig.clears == 1 and rig.events == []  # never started: nothing to finish


async def test_clear_with_nothing_queued_at_the_client_sends_nothing() -> None:
    rig = Rig()
    await rig.segment(100)
    rig.out.on_played(100)
    rig.out.clear_buffer()
    assert rig.clears == 0


async def test_the_cleared_report_rebases_and_stale_reports_are_ignored() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(100)
    rig.out.clear_buffer()
    rig.listen("b")
    await rig.segment(200)  # sent after the clear: plays from where the client stopped
    rig.out.on_played(250)  # stale: sent before the client processed the clear
    assert rig.events[-1] == ("a", PlaybackFinished(0.1, True))
    rig.out.on_played(130, cleared=True)  # it stopped at 130
    assert rig.events[-1] == ("a", PlaybackFinished(0.1, True))
    rig.out.on_played(131)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(329)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(330)
    assert rig.events[-1] == ("b", PlaybackFinished(0.2, False))


async def test_a_client_that_never_confirms_a_clear_is_rebased_by_its_next_report() -> None:
    # A simpler client drops its queue on clear and goes on counting, without
    # `cleared: true`: the next reply must still be heard and finish.
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(100)
    rig.out.clear_buffer()
    rig.out.on_played(120)  # within CLEARED_WAIT: may be stale, ignored
    assert rig.events == [("a", "started"), ("a", PlaybackFinished(0.1, True))]
    await asyncio.sleep(CLEARED_WAIT)  # the user's turn; then the reply to it
    rig.listen("b")
    await rig.segment(200)
    rig.out.on_played(130)  # it stopped at 130: nothing of b could have played yet
    assert rig.events[-1] == ("a", PlaybackFinished(0.1, True))
    rig.out.on_played(131)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(330)
    assert rig.events[-1] == ("b", PlaybackFinished(0.2, False))
    assert not rig.out.pending


async def test_a_report_of_the_next_reply_already_playing_is_read_from_its_sending() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(100)
    rig.out.clear_buffer()
    await asyncio.sleep(CLEARED_WAIT)
    rig.listen("b")
    await rig.segment(200)  # sent at 0.5 s
    await asyncio.sleep(0.05)
    # The client stopped at 130 (unknown here) and has played 50 ms of b: 180. At most
    # 50 ms of b can have played since it was sent, so b is heard from 130 on.
    rig.out.on_played(180)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(329)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(330)
    assert rig.events[-1] == ("b", PlaybackFinished(0.2, False))


async def test_a_late_cleared_report_still_rebases_exactly() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(100)
    rig.out.clear_buffer()
    rig.listen("b")
    await rig.segment(200)
    await asyncio.sleep(CLEARED_WAIT)
    rig.out.on_played(110)  # stale, but late: taken as the stop
    rig.out.on_played(125, cleared=True)  # the truth arrives: 125
    rig.out.on_played(324)
    assert rig.events[-1] == ("b", "started")
    rig.out.on_played(325)
    assert rig.events[-1] == ("b", PlaybackFinished(0.2, False))


async def test_a_client_that_stops_reporting_is_estimated_then_leads_again() -> None:
    rig = Rig()
    stalls: list[str] = []
    rig.out.on_stall = stalls.append
    await rig.segment(300)  # 0.3 s of audio, sent at t = 0
    rig.out.on_played(50)
    assert rig.events == [("a", "started")]
    # Silent from here: at the real-time pace it would have played out 0.25 s later.
    await asyncio.sleep(0.25 + STALL_GRACE - 0.01)
    assert rig.events == [("a", "started")] and not stalls
    await asyncio.sleep(0.02)
    assert rig.events[-1] == ("a", PlaybackFinished(0.3, False))
    assert len(stalls) == 1 and "played" in stalls[0]
    # The next reply is paced on the server's clock: heard as sent, done when played.
    rig.listen("b")
    await rig.segment(200)
    assert rig.events[-1] == ("b", "started")
    await asyncio.sleep(0.19)
    assert rig.events[-1] == ("b", "started")
    await asyncio.sleep(0.02)
    assert rig.events[-1] == ("b", PlaybackFinished(0.2, False))
    # Reports come back: they lead again (no second warning).
    rig.listen("c")
    await rig.segment(100)
    rig.out.on_played(300)  # the client is still on b: c has not started
    rig.out.on_played(450)
    assert rig.events[-1] == ("c", "started")
    await asyncio.sleep(0.5)  # no estimate while the client reports: c is not done
    assert rig.events[-1] == ("c", "started")
    rig.out.on_played(600)
    assert rig.events[-1] == ("c", PlaybackFinished(0.1, False))
    assert len(stalls) == 1


async def test_a_client_that_never_reports_gets_its_replies_paced() -> None:
    rig = Rig()
    stalls: list[str] = []
    rig.out.on_stall = stalls.append
    await rig.segment(300)
    await asyncio.sleep(0.3 + STALL_GRACE + 0.01)
    assert rig.events == [("a", "started"), ("a", PlaybackFinished(0.3, False))]
    assert len(stalls) == 1
    assert not rig.out.pending


async def test_two_clears_before_their_reports_rebase_on_the_last() -> None:
    rig = Rig()
    await rig.segment(300)
    rig.out.on_played(50)
    rig.out.clear_buffer()
    rig.listen("b")
    await rig.segment(300)
    rig.out.clear_buffer()  # never heard: no reports for b
    rig.listen("c")
    await rig.segment(100)
    rig.out.on_played(60, cleared=True)  # the first clear: still one to come
    rig.out.on_played(200)
    assert [e for e in rig.events if e[0] != "a"] == []
    rig.out.on_played(70, cleared=True)
    rig.out.on_played(170)
    assert [e for e in rig.events if e[0] != "a"] == [
        ("c", "started"),
        ("c", PlaybackFinished(0.1, False)),
    ]


async def test_segments_back_to_back_each_keep_their_listener() -> None:
    rig = Rig()
    await rig.segment(100)
    rig.listen("b")
    await rig.segment(50, 50)
    rig.out.on_played(150)
    assert rig.events == [
        ("a", "started"),
        ("a", PlaybackFinished(0.1, False)),
        ("b", "started"),
    ]
    rig.out.on_played(200)
    assert rig.events[-1] == ("b", PlaybackFinished(0.1, False))


async def test_reports_out_of_order_or_beyond_what_was_sent() -> None:
    rig = Rig()
    await rig.segment(100, flush=False)
    rig.out.on_played(80)
    rig.out.on_played(40)  # reordered: counts only grow
    rig.out.on_played(10_000)  # more than was sent: capped
    rig.out.clear_buffer()
    assert rig.events[-1] == ("a", PlaybackFinished(0.1, True))


async def test_the_client_leaving_finishes_what_it_was_playing() -> None:
    rig = Rig()
    await rig.segment(100)
    rig.out.on_played(30)
    rig.out.close()
    assert rig.events[-1] == ("a", PlaybackFinished(0.03, True))
    await rig.segment(100)
    assert rig.sent == [100]  # nothing is sent to a client that left


async def test_progress_reports_what_of_the_segment_was_heard() -> None:
    rig = Rig()
    seen: list[tuple[float, float | None]] = []
    rig.out.on_progress = lambda heard, length: seen.append((heard, length))
    await rig.segment(100, flush=False)
    rig.out.on_played(40)
    rig.out.flush()  # its length is known now
    await rig.segment(50)  # a second segment queued behind
    rig.out.on_played(40)  # no news: nothing
    rig.out.on_played(90)
    rig.out.on_played(120)  # the first ends; the second is heard from here
    assert seen == [(0.04, None), (0.04, 0.1), (0.09, 0.1), (0.02, 0.05)]


async def test_wrong_audio_is_refused() -> None:
    rig = Rig()
    with pytest.raises(ValueError, match="Hz"):
        await rig.out.capture_frame(AudioFrame(np.ones(10, np.int16), 16000))


# ------------------------------------------------------- a session through it


class FakeClient:
    """Plays what it receives at the rate after ``delay`` s, reporting every 50 ms."""

    def __init__(self, rate: int, delay: float) -> None:
        self.rate, self.delay = rate, delay
        self.queued = 0
        self.played = 0
        self.first_audio: float | None = None
        self.reports: list[tuple[float, int]] = []
        self.output: ReportedPlayback | None = None
        self.clears = 0

    async def send(self, f: AudioFrame) -> None:
        loop = asyncio.get_running_loop()
        if self.first_audio is None:
            self.first_audio = loop.time()
        self.queued += f.samples_per_channel

    def clear(self) -> None:
        self.queued = 0
        self.clears += 1

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await advance(0.05)
            if self.first_audio is None or loop.time() < self.first_audio + self.delay:
                continue
            step = min(self.queued, round(0.05 * self.rate))
            if step:
                self.queued -= step
                self.played += step
                self.reports.append((loop.time(), self.played))
                assert self.output is not None
                self.output.on_played(self.played)


async def test_a_session_is_speaking_exactly_while_the_client_plays() -> None:
    client = FakeClient(24000, delay=0.3)
    output = ReportedPlayback(24000, client.send, client.clear)
    client.output = output
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Hello there."]]), tts=ScriptedTTS(), user_away_timeout=None
    )
    session.output.audio = output
    timeline = StateTimeline(session)
    player = asyncio.create_task(client.run())
    await session.start(rj.Agent(instructions="test"))
    try:
        await session.run(user_input="hi")
    finally:
        player.cancel()
        await session.aclose()
    assert timeline.agent_states() == [
        "initializing",  # no listening pulse: the input came right after start()
        "thinking",
        "speaking",
        "listening",
    ]
    assert client.first_audio is not None
    (spoke,) = timeline.times_of("speaking")
    listening = timeline.times_of("listening")[-1]
    assert spoke == client.reports[0][0] >= client.first_audio + 0.3
    # finished with the report that reached the end, not when the last frame was sent
    end = next(t for t, n in client.reports if n == output.total_sent)
    assert listening == end
    assert listening - spoke == pytest.approx(ScriptedTTS().duration_of("Hello there."), abs=0.06)


async def test_an_interruption_before_the_first_sample_is_heard_clears_the_client() -> None:
    client = FakeClient(24000, delay=1.0)  # a deep jitter buffer: heard 1 s after sent
    output = ReportedPlayback(24000, client.send, client.clear)
    client.output = output
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["A long answer that will be cut before it is heard."]]),
        tts=ScriptedTTS(),
        user_away_timeout=None,
    )
    session.output.audio = output
    player = asyncio.create_task(client.run())
    await session.start(rj.Agent(instructions="test"))
    try:
        session.generate_reply(user_input="hi")
        await advance(0.3)  # the reply's audio was sent, not yet heard
        assert client.first_audio is not None and client.played == 0
        await session.interrupt()  # the user talked over it before a sample was heard
        await advance(2.0)
    finally:
        player.cancel()
        await session.aclose()
    assert session.agent_state != "speaking"
    assert client.clears == 1  # the client dropped it ...
    assert client.played == 0  # ... so it never played what the agent no longer says


# ----------------------------------------------------------- random sequences

ops = st.lists(
    st.one_of(
        st.tuples(st.just("capture"), st.integers(0, 300)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("play"), st.integers(0, 400)),
        st.tuples(st.just("listen"), st.just(0)),
    ),
    max_size=40,
)


@given(ops)
@settings(max_examples=300, deadline=None)
def test_random_sequences_keep_the_output_contract(steps: list[tuple[str, int]]) -> None:
    """Whatever the order: a listener's segments start and finish in turn (finished
    exactly once per started segment), never more than was captured is heard, and a
    client that plays everything and answers every clear leaves nothing pending."""

    async def run() -> None:
        log: dict[int, list[Any]] = {}
        listener = 0
        client = {"played": 0, "queued": 0, "clears": 0}
        captured: dict[int, int] = {}

        async def send(f: AudioFrame) -> None:
            client["queued"] += f.samples_per_channel

        def clear() -> None:
            client["queued"] = 0
            client["clears"] += 1

        out = ReportedPlayback(RATE, send, clear)

        def listen(n: int) -> None:
            out.set_listener(
                lambda: log.setdefault(n, []).append("started"),
                lambda ev: log.setdefault(n, []).append(ev),
            )

        def answer_clears() -> None:
            while client["clears"]:
                client["clears"] -= 1
                out.on_played(client["played"], cleared=True)

        listen(listener)
        for op, n in steps:
            if op == "capture":
                await out.capture_frame(frame(n))
                captured[listener] = captured.get(listener, 0) + n
            elif op == "flush":
                out.flush()
            elif op == "clear":
                out.clear_buffer()
            elif op == "play":
                answer_clears()
                step = min(n, client["queued"])
                client["queued"] -= step
                client["played"] += step
                out.on_played(client["played"])
            else:
                out.flush()
                listener += 1
                listen(listener)
        out.flush()
        answer_clears()
        client["played"] += client["queued"]
        out.on_played(client["played"])
        assert not out.pending
        for n, events in log.items():
            assert events[0::2] == ["started"] * len(events[0::2])  # started, then finished
            finished = events[1::2]
            assert len(finished) == len(events[0::2])  # every started segment finished
            assert all(isinstance(ev, PlaybackFinished) for ev in finished)
            heard = sum(ev.position for ev in finished)
            assert 0 <= heard <= captured[n] / RATE + 1e-9

    asyncio.run(run())
