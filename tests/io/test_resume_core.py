"""The parts of resuming without sockets, on virtual time: the registry (tokens once, the
grace timer, a resume racing it, the bound on waiting sessions), the playback of a client
that drops and comes back (cut where its last report left it, held while away, handed to
the next client), and the words of a cut reply that were not heard."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rejoinder.io.playback import MAX_HELD, ReportedPlayback
from rejoinder.io.resume import ResumeRegistry, unheard_rest
from rejoinder.models.audio import AudioFrame, PlaybackFinished

RATE = 1000  # 1 sample = 1 ms


class Conn:
    """What the registry uses of a ``Connection``."""

    def __init__(self, name: str) -> None:
        self.id = name
        self.left = False
        self.gave_up: list[str] = []

    def give_up(self, reason: str, entry_timeout: float) -> None:
        self.left = True
        self.gave_up.append(reason)


def registry(grace: float = 10.0, **options: Any) -> ResumeRegistry:
    return ResumeRegistry(grace, **options)


# ------------------------------------------------------------------ registry


async def test_a_token_works_once_and_a_new_one_replaces_the_old() -> None:
    reg, conn = registry(), Conn("a")
    first = reg.issue(conn)  # type: ignore[arg-type]
    second = reg.issue(conn)  # type: ignore[arg-type]
    assert first and second and first != second and len(second) >= 32
    assert reg.claim(first) is None  # replaced by the next ready's
    assert reg.claim(second) is conn
    assert reg.claim(second) is None  # used
    assert reg.busy(second) and not reg.knows(second)
    assert reg.refused_total == 2


@pytest.mark.parametrize("token", [None, "", 7, "x" * 257, b"bytes", ["list"]])
async def test_junk_is_no_token(token: Any) -> None:
    reg = registry()
    reg.issue(Conn("a"))  # type: ignore[arg-type]
    assert reg.claim(token) is None and not reg.knows(token) and not reg.busy(token)


async def test_a_detached_session_closes_when_its_grace_runs_out() -> None:
    reg, conn = registry(grace=2.0), Conn("a")
    token = reg.issue(conn)  # type: ignore[arg-type]
    assert reg.detach(conn)  # type: ignore[arg-type]
    assert reg.waiting(conn) and reg.detached == 1  # type: ignore[arg-type]
    await asyncio.sleep(1.99)
    assert conn.gave_up == []
    await asyncio.sleep(0.02)
    assert conn.gave_up == ["the client did not come back within 2 s"]
    assert reg.detached == 0 and reg.expired_total == 1 and reg.claim(token) is None


async def test_a_resume_before_the_grace_stops_its_timer() -> None:
    reg, conn = registry(grace=2.0), Conn("a")
    token = reg.issue(conn)  # type: ignore[arg-type]
    reg.detach(conn)  # type: ignore[arg-type]
    await asyncio.sleep(1.5)
    assert reg.claim(token) is conn
    reg.attached(conn)  # type: ignore[arg-type]
    await asyncio.sleep(5.0)
    assert conn.gave_up == [] and reg.resumed_total == 1 and reg.detached == 0


@pytest.mark.parametrize("resume_first", [True, False])
async def test_a_resume_racing_the_grace_either_wins_or_finds_the_session_gone(
    resume_first: bool,
) -> None:
    """Both at the same instant, in either order: exactly one of them happens."""
    reg, conn = registry(grace=1.0), Conn("a")
    token = reg.issue(conn)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    claimed: list[object] = []

    def resume() -> None:
        got = reg.claim(token)
        if got is not None:
            reg.attached(got)
        claimed.append(got)

    if resume_first:
        loop.call_at(loop.time() + 1.0, resume)
        reg.detach(conn)  # type: ignore[arg-type]
    else:
        reg.detach(conn)  # type: ignore[arg-type]
        loop.call_at(loop.time() + 1.0, resume)
    await asyncio.sleep(2.0)
    if resume_first:
        assert claimed == [conn] and conn.gave_up == []
    else:
        assert claimed == [None] and len(conn.gave_up) == 1


async def test_the_oldest_waiting_session_makes_room_for_a_new_one() -> None:
    reg = registry(max_detached=2)
    conns = [Conn(name) for name in "abc"]
    for conn in conns:
        reg.issue(conn)  # type: ignore[arg-type]
        assert reg.detach(conn)  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
    assert conns[0].gave_up == ["too many sessions were waiting to be resumed"]
    assert [c.gave_up for c in conns[1:]] == [[], []]
    assert reg.detached == 2 and reg.evicted_total == 1


async def test_a_claim_that_fails_to_connect_gives_the_token_back() -> None:
    reg, conn = registry(), Conn("a")
    token = reg.issue(conn)  # type: ignore[arg-type]
    assert token is not None
    reg.detach(conn)  # type: ignore[arg-type]
    assert reg.claim(token) is conn and reg.busy(token)
    reg.unclaim(token)
    assert reg.knows(token) and reg.claim(token) is conn
    conn.left = True  # meanwhile the session ended: nothing to give back
    reg.unclaim(token)
    assert not reg.knows(token)


async def test_a_session_without_a_token_or_a_closed_registry_is_not_kept() -> None:
    reg = registry()
    assert not reg.detach(Conn("never given a token"))  # type: ignore[arg-type]
    waiting, later = Conn("a"), Conn("b")
    reg.issue(waiting)  # type: ignore[arg-type]
    reg.issue(later)  # type: ignore[arg-type]
    reg.detach(waiting)  # type: ignore[arg-type]
    reg.close()
    assert waiting.gave_up == ["the server is shutting down"]
    assert not reg.detach(later) and reg.issue(later) is None  # type: ignore[arg-type]


def test_the_grace_is_positive() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="grace"):
            ResumeRegistry(bad)
    with pytest.raises(ValueError, match="max_detached"):
        ResumeRegistry(1.0, max_detached=0)


# --------------------------------------------------------------- unheard rest


@pytest.mark.parametrize(
    ("text", "heard", "rest"),
    [
        ("Once upon a time there was a king.", "Once upon a", "time there was a king."),
        ("Once upon a time.", "", "Once upon a time."),
        ("Once upon a time.", "Once upon a time.", ""),
        ("First sentence.  Second one here.", "First sentence.", "Second one here."),
        ("Line one\nline two", "Line one", "line two"),
        ("Short.", "Short. and more words than it had", ""),
    ],
)
def test_the_rest_is_what_follows_the_words_heard(text: str, heard: str, rest: str) -> None:
    assert unheard_rest(text, heard) == rest


# ------------------------------------------------------------------ playback


def frame(samples: int) -> AudioFrame:
    return AudioFrame(np.ones(samples, np.int16), RATE)


class Rig:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []
        self.clears: list[str] = []
        self.events: list[Any] = []
        self.cut_over: list[bool] = []
        self.out = ReportedPlayback(RATE, self.sender("first"), lambda: self.clears.append("a"))
        self.out.on_cut_over = self.cut_over.append
        self.listen("a")

    def sender(self, client: str) -> Any:
        async def send(f: AudioFrame) -> None:
            self.sent.append((client, f.samples_per_channel))

        return send

    def listen(self, name: str) -> None:
        self.out.set_listener(
            lambda: self.events.append((name, "started")),
            lambda ev: self.events.append((name, ev)),
        )


async def test_a_drop_cuts_the_segment_where_the_last_report_left_it() -> None:
    rig = Rig()
    await rig.out.capture_frame(frame(300))
    rig.out.on_played(120)
    assert rig.out.detach() == 120
    assert rig.events == [("a", "started"), ("a", PlaybackFinished(0.12, True))]
    assert rig.out.detached and rig.out.cutting
    await rig.out.capture_frame(frame(200))  # the rest of the cut speech: dropped
    assert rig.sent == [("first", 300)] and rig.out.held_seconds == 0
    rig.out.flush()  # its end
    assert rig.cut_over == [True] and not rig.out.cutting


async def test_a_drop_seen_after_the_reports_stopped_cuts_at_the_last_report() -> None:
    """The client went away silently: its reports stopped, the server estimated its
    playback (as for a client that does not report: the reply that was playing counts
    as played out, the next one is paced on the server's clock), then saw the drop. What
    the estimate added to the reply still playing was never heard."""
    rig = Rig()
    stalls: list[str] = []
    rig.out.on_stall = stalls.append
    await rig.out.capture_frame(frame(300))
    rig.out.flush()
    rig.out.on_played(300)  # the last report: then the network vanished
    assert rig.events[-1] == ("a", PlaybackFinished(0.3, False))
    rig.listen("b")
    await rig.out.capture_frame(frame(2000))
    rig.out.flush()
    await asyncio.sleep(0.5)
    assert not stalls  # 2 s of audio outstanding: not yet
    await asyncio.sleep(3.1)  # past its end and the grace: estimated from here
    assert stalls and rig.events[-1] == ("b", PlaybackFinished(2.0, False))
    rig.listen("c")
    for _ in range(20):  # the next reply, paced on the server's clock, 100 ms a frame
        await rig.out.capture_frame(frame(100))
        await asyncio.sleep(0.1)
    assert rig.events[-1] == ("c", "started")  # estimated as playing
    assert rig.out.detach() == 0  # the drop: none of it was heard
    assert rig.events[-1] == ("c", PlaybackFinished(0.0, True))


async def test_audio_sent_but_never_reported_was_not_heard() -> None:
    rig = Rig()
    await rig.out.capture_frame(frame(300))
    rig.out.flush()
    assert rig.out.detach() == 0
    assert rig.events == [("a", PlaybackFinished(0.0, True))]
    assert not rig.out.cutting  # it had all been captured: nothing more comes


async def test_audio_while_away_is_held_unheard_and_given_to_the_next_client() -> None:
    rig = Rig()
    assert rig.out.detach() is None  # nothing was playing
    rig.listen("b")
    await rig.out.capture_frame(frame(200))
    await rig.out.capture_frame(frame(100))
    rig.out.flush()
    await asyncio.sleep(5.0)  # nobody reports: nothing starts, nothing is estimated
    assert rig.events == [] and rig.sent == [] and rig.out.held_seconds == 0.3
    rig.out.attach(rig.sender("second"), lambda: rig.clears.append("b"))
    await asyncio.sleep(0)
    assert rig.sent == [("second", 200), ("second", 100)]
    rig.out.on_played(1)  # the new client's count starts at its own zero
    assert rig.events == [("b", "started")]
    rig.out.on_played(300)
    assert rig.events == [("b", "started"), ("b", PlaybackFinished(0.3, False))]


async def test_a_clear_while_away_drops_what_was_held_and_tells_nobody() -> None:
    rig = Rig()
    rig.out.detach()
    await rig.out.capture_frame(frame(200))
    rig.out.clear_buffer()
    assert rig.clears == [] and rig.out.held_seconds == 0 and not rig.out.pending
    rig.out.attach(rig.sender("second"), lambda: rig.clears.append("b"))
    await asyncio.sleep(0)
    assert rig.sent == []


async def test_a_speech_stopped_while_cut_says_so() -> None:
    rig = Rig()
    await rig.out.capture_frame(frame(300))
    rig.out.on_played(10)
    rig.out.detach()
    rig.out.clear_buffer()  # the cut speech was interrupted (or the session closes)
    assert rig.cut_over == [False]


async def test_held_audio_is_bounded_the_producer_waits_for_the_client() -> None:
    rig = Rig()
    rig.out.detach()
    limit = round(MAX_HELD * RATE)
    await rig.out.capture_frame(frame(limit - 1))
    waiting = asyncio.ensure_future(rig.out.capture_frame(frame(10)))
    await asyncio.sleep(60.0)
    assert not waiting.done()
    rig.out.attach(rig.sender("second"), lambda: None)
    await asyncio.wait_for(waiting, 1.0)
    await asyncio.sleep(0)
    assert rig.sent == [("second", limit - 1), ("second", 10)]


@pytest.mark.parametrize(
    ("code", "goodbye"), [(1000, True), (0, True), (1001, False), (4000, False), (None, False)]
)
def test_a_close_frame_with_1000_or_no_code_is_a_goodbye(code: int | None, goodbye: bool) -> None:
    from rejoinder.io.websocket import _CloseFrameWatch

    watch = _CloseFrameWatch(None)  # type: ignore[arg-type]
    watch.client_code = code
    assert watch.said_goodbye() is goodbye
