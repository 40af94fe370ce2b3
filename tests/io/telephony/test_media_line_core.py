"""The media stream's phone line without a socket, on virtual time: ``MarkedPlayback``'s
signals (audio that is not the agent's voice: ordered after the queued agent audio, paced,
marked, cut by a clear, never a segment) against a fake provider line, and
``MediaStreamLine``'s checks and transfers through a recording ``CallControl``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.io.telephony import TWILIO, MarkedPlayback, MediaStreamPeer, TransferFailed
from rejoinder.io.telephony.carriers.base import CarrierError
from rejoinder.io.telephony.dialects import CallInfo
from rejoinder.io.telephony.media_line import (
    DTMFInterrupted,
    MediaStreamLine,
    check_transfer_target,
)
from rejoinder.models.audio import AudioFrame, PlaybackFinished
from rejoinder.testing import advance

RATE = 8000
CHUNK = 160


def now() -> float:
    return asyncio.get_running_loop().time()


def voice(seconds: float) -> AudioFrame:
    return AudioFrame(np.full(round(seconds * RATE), 1000, np.int16), RATE)


def signal(seconds: float) -> AudioFrame:
    return AudioFrame(np.full(round(seconds * RATE), -7, np.int16), RATE)


class Line:
    """A fake provider line: what ``MarkedPlayback`` sends, in order, tagged voice or
    signal by its samples, and what the session's listener is told."""

    def __init__(self, **options: Any) -> None:
        self.log: list[tuple[str, Any]] = []
        self.times: list[float] = []
        """When each media message went out."""
        self.heard: list[Any] = []
        self.out = MarkedPlayback(
            RATE,
            send_media=self._media,
            send_mark=lambda name: self.log.append(("mark", name)),
            send_clear=lambda: self.log.append(("clear", None)),
            send_tail=self._tail,
            **options,
        )
        self.out.set_listener(lambda: self.heard.append("started"), self.heard.append)

    async def _media(self, frame: AudioFrame) -> None:
        self._tail(frame)

    def _tail(self, frame: AudioFrame) -> None:
        assert frame.samples_per_channel == CHUNK  # every message is 20 ms
        kind = "signal" if int(frame.data[0]) == -7 else "voice"
        self.times.append(now())
        self.log.append((kind, frame.samples_per_channel))

    def kinds(self) -> list[str]:
        """The log with runs of one kind of media collapsed: the order on the line."""
        out: list[str] = []
        for kind, value in self.log:
            item = f"mark {value}" if kind == "mark" else kind
            if not out or out[-1] != item or kind == "mark":
                out.append(item)
        return out

    def samples(self, kind: str) -> int:
        return sum(n for k, n in self.log if k == kind)


async def test_a_signal_plays_after_the_queued_voice_and_returns_on_its_echo() -> None:
    line = Line()
    await line.out.capture_frame(voice(0.1))
    line.out.flush()
    playing = asyncio.create_task(line.out.play_signal(signal(0.3)))
    await advance(0.5)
    assert line.kinds() == [
        "voice", "mark rj-0-160", "voice", "mark rj-0-800", "signal", "mark rjs-1",
    ]  # fmt: skip
    assert line.samples("signal") == 0.3 * RATE
    assert not playing.done()  # sent is not heard
    line.out.on_mark("rj-0-160")
    line.out.on_mark("rj-0-800")
    assert line.heard == ["started", PlaybackFinished(0.1, False)]
    assert not playing.done()
    line.out.on_mark("rjs-1")
    assert await asyncio.wait_for(playing, 1) is True
    # The signal never was a segment: no start, no end, no played samples of its own.
    assert line.heard == ["started", PlaybackFinished(0.1, False)]
    assert line.out.played_samples == 800 and not line.out.pending


async def test_a_segment_being_captured_ends_before_the_signal_and_the_next_waits() -> None:
    line = Line(lead=0.1)
    await line.out.capture_frame(voice(0.05))  # a reply still coming: not flushed
    playing = asyncio.create_task(line.out.play_signal(signal(0.5)))
    await advance(0.2)
    assert line.samples("signal") == 0  # waits for the end of the segment
    await line.out.capture_frame(voice(0.05))
    line.out.flush()
    await advance(0.1)
    assert line.samples("signal") > 0
    # Voice captured while the signal is paced out goes after it.
    t0 = now()
    await line.out.capture_frame(voice(0.04))
    line.out.flush()
    assert now() - t0 >= 0.25  # it waited for the signal's pacing
    assert line.kinds() == [
        "voice", "mark rj-0-160", "voice", "mark rj-0-800",
        "signal", "mark rjs-1",
        "voice", "mark rj-0-960", "voice", "mark rj-0-1120",
    ]  # fmt: skip
    # The next segment's positions count voice only: its echoes are its own samples.
    line.out.on_mark("rj-0-800")
    line.out.on_mark("rjs-1")
    line.out.on_mark("rj-0-1120")
    assert await asyncio.wait_for(playing, 1) is True
    assert line.heard == [
        "started", PlaybackFinished(0.1, False), "started", PlaybackFinished(0.04, False),
    ]  # fmt: skip


async def test_a_signal_is_paced_at_real_time_within_the_lead() -> None:
    line = Line(lead=0.2)
    t0 = now()
    playing = asyncio.create_task(line.out.play_signal(signal(1.0)))
    await advance(0.5)
    assert 0.5 * RATE <= line.samples("signal") <= 0.75 * RATE
    await advance(0.4)
    assert line.log[-1] == ("mark", "rjs-1")
    # Its 50 messages went out over 0.78 s: 1 s of it, the last 0.2 s (the lead) ahead.
    assert line.times[-1] - t0 == pytest.approx(0.78, abs=0.021)
    assert line.samples("signal") == RATE
    line.out.on_mark("rjs-1")
    assert await playing is True


@pytest.mark.parametrize("stop", ["clear", "close"])
async def test_a_clear_or_the_end_of_the_call_cuts_a_signal(stop: str) -> None:
    line = Line(lead=0.1)
    await line.out.capture_frame(voice(0.1))
    line.out.flush()
    line.out.on_mark("rj-0-160")
    playing = asyncio.create_task(line.out.play_signal(signal(1.0)))
    await advance(0.3)
    line.out.clear_buffer() if stop == "clear" else line.out.close()
    assert await asyncio.wait_for(playing, 1) is False
    assert line.samples("signal") < 0.5 * RATE  # the rest was never sent
    assert ("mark", "rjs-1") not in line.log
    if stop == "clear":
        assert line.log[-1] == ("clear", None)
    assert line.heard == ["started", PlaybackFinished(0.02, True)]
    # A late echo of a cut signal's mark (Twilio echoes pending marks on a clear) is nothing.
    line.out.on_mark("rjs-1")
    assert line.heard == ["started", PlaybackFinished(0.02, True)]


async def test_a_clear_with_only_a_signal_on_the_line_clears_it_and_moves_no_position() -> None:
    line = Line()
    await line.out.capture_frame(voice(0.02))
    line.out.flush()
    line.out.on_mark("rj-0-160")  # all of the voice heard
    playing = asyncio.create_task(line.out.play_signal(signal(0.3)))
    await advance(0.1)
    assert line.log[-1] == ("mark", "rjs-1")
    line.out.clear_buffer()
    assert await asyncio.wait_for(playing, 1) is False
    assert line.log[-1] == ("clear", None)
    # The voice that follows counts on from where it was.
    await line.out.capture_frame(voice(0.02))
    line.out.flush()
    assert line.log[-1] == ("mark", "rj-0-320")
    line.out.on_mark("rj-0-320")
    assert line.out.played_samples == 320
    assert line.heard[-2:] == ["started", PlaybackFinished(0.02, False)]


async def test_a_signal_never_echoed_is_taken_as_heard_after_the_echo_timeout() -> None:
    line = Line(echo_timeout=2.0)
    t0 = now()
    assert await line.out.play_signal(signal(0.2)) is True
    assert now() - t0 == pytest.approx(2.2, abs=0.05)


async def test_signals_play_in_the_order_they_were_asked_for() -> None:
    line = Line()
    first = asyncio.create_task(line.out.play_signal(signal(0.1)))
    second = asyncio.create_task(line.out.play_signal(signal(0.1)))
    await advance(0.05)
    assert [v for k, v in line.log if k == "mark"] == ["rjs-1", "rjs-2"]
    line.out.on_mark("rjs-2")
    assert await second is True and not first.done()
    line.out.on_mark("rjs-1")
    assert await first is True


async def test_a_signal_of_another_rate_is_refused() -> None:
    line = Line()
    with pytest.raises(ValueError, match="8000 Hz"):
        await line.out.play_signal(AudioFrame(np.zeros(320, np.int16), 16000))


# ------------------------------------------------------------------ the line


class RecordingControl:
    """The consumer side of ``CallControl``: records requests, refuses when told."""

    provider = "twilio"

    def __init__(self, refuse: CarrierError | None = None) -> None:
        self.transfers: list[tuple[str, str]] = []
        self.hangups: list[str] = []
        self.refuse = refuse

    async def transfer(self, call_id: str, target: str) -> None:
        await asyncio.sleep(0.2)  # a REST round trip
        if self.refuse is not None:
            raise self.refuse
        self.transfers.append((call_id, target))

    async def hangup(self, call_id: str) -> None:
        self.hangups.append(call_id)


CALL = CallInfo("twilio", "CA789", "MZ456", "mulaw", RATE)


def media_line(control: RecordingControl | None = None) -> tuple[Line, MediaStreamLine]:
    line = Line()
    return line, MediaStreamLine(line.out, CALL, control)


@pytest.mark.parametrize(
    "target", ["+15551234567", "+4930123456", "+861012345678901", "sip:desk@example.com",
               "sips:billing@pbx.example.com:5061;transport=tls", "SIP:100@10.0.0.1"],
)  # fmt: skip
def test_transfer_targets_e164_or_sip(target: str) -> None:
    assert check_transfer_target(target) == target


@pytest.mark.parametrize(
    "target", ["15551234567", "+1555123", "+1555123456789012", "+0551234567", "+1 555 123 4567",
               "tel:+15551234567", "sip:", "sip:a b@example.com", "", "+15551234567\n",
               "http://example.com", "sip:<x>"],
)  # fmt: skip
async def test_a_bad_transfer_target_is_refused_before_the_carrier_is_asked(
    target: str,
) -> None:
    control = RecordingControl()
    _, phone = media_line(control)
    with pytest.raises(ValueError, match=r"E\.164"):
        await phone.transfer(target)
    assert control.transfers == []


async def test_transfer_goes_to_the_carrier_with_the_call_id() -> None:
    control = RecordingControl()
    _, phone = media_line(control)
    await phone.transfer("sip:desk@example.com")
    assert control.transfers == [("CA789", "sip:desk@example.com")]


async def test_transfer_without_call_control_says_what_to_set() -> None:
    _, phone = media_line(None)
    with pytest.raises(TransferFailed, match="set the provider's REST credentials"):
        await phone.transfer("+15551234567")


async def test_a_carrier_refusal_is_a_transfer_failure_saying_why() -> None:
    refusal = CarrierError("the number is not reachable", status=400, code="21217")
    _, phone = media_line(RecordingControl(refuse=refusal))
    with pytest.raises(TransferFailed, match=r"HTTP 400.*not reachable") as caught:
        await phone.transfer("+15551234567")
    assert caught.value.__cause__ is refusal


async def test_no_transfer_once_the_call_ended() -> None:
    control = RecordingControl()
    line, phone = media_line(control)
    line.out.close()
    with pytest.raises(TransferFailed, match="ended"):
        await phone.transfer("+15551234567")
    assert control.transfers == []


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=12))
def test_send_dtmf_refuses_anything_but_keys_and_pauses(digits: str) -> None:
    async def attempt() -> str:
        line, phone = media_line()
        try:
            task = asyncio.create_task(phone.send_dtmf(digits))
            await asyncio.sleep(0)
            if task.done():
                task.result()  # raises the ValueError
            task.cancel()
            return "accepted"
        finally:
            line.out.close()

    valid = bool(digits) and all(c in "0123456789*#ABCDwW" for c in digits)
    if valid:
        assert asyncio.run(attempt()) == "accepted"
    else:
        with pytest.raises(ValueError, match="DTMF digits are"):
            asyncio.run(attempt())


async def test_send_dtmf_plays_tones_and_a_cut_raises() -> None:
    line, phone = media_line()
    pressing = asyncio.create_task(phone.send_dtmf("1w2"))
    await advance(0.2)
    assert round(0.7 * RATE) <= line.samples("voice") + line.samples("signal") <= 0.72 * RATE
    assert line.log[-1] == ("mark", "rjs-1")
    line.out.clear_buffer()
    with pytest.raises(DTMFInterrupted):
        await pressing
    assert phone.keys_sent == ""
    pressing = asyncio.create_task(phone.send_dtmf("9#"))
    await advance(1.0)
    line.out.on_mark("rjs-2")
    await asyncio.wait_for(pressing, 1)
    assert phone.keys_sent == "9#"


async def test_no_keys_once_the_call_ended() -> None:
    line, phone = media_line()
    line.out.close()
    with pytest.raises(DTMFInterrupted, match="the call has ended"):
        await phone.send_dtmf("1")
    assert line.log == []


# ----------------------------------------------------------------- the peer


async def test_the_peer_puts_its_line_on_the_connection_with_its_control() -> None:
    control = RecordingControl()
    peer = MediaStreamPeer(TWILIO, control=control)
    start = {
        "event": "start",
        "streamSid": "MZ1",
        "start": {"streamSid": "MZ1", "callSid": "CA1", "accountSid": "AC1"},
    }
    conn = peer.receive_text(json.dumps(start), 0)
    assert conn is not None and isinstance(conn.line, MediaStreamLine)
    assert conn.line is peer.line
    await conn.line.transfer("+15551234567")
    assert control.transfers == [("CA1", "+15551234567")]


# ----------------------------------------------------------- interleavings

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.integers(1, 5)),  # 20 ms pieces of voice, 1-5 of them
        st.tuples(st.just("flush"), st.just(0)),  # the reply's end
        st.tuples(st.just("press"), st.integers(1, 4)),  # keys: 20-80 ms of tones
        st.tuples(st.just("echo"), st.just(0)),  # the provider plays what it holds
        st.tuples(st.just("clear"), st.just(0)),  # a barge-in
        st.tuples(st.just("wait"), st.integers(1, 4)),  # loop turns pass
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_signals_never_enter_the_voice_and_never_count_as_it(ops: list[tuple[str, int]]) -> None:
    """Replies captured piece by piece (one producer, as a session's speech), keys asked
    for meanwhile from other tasks, echoes and barge-ins, in any order: a signal's tones
    go out whole and in the order asked, never inside a reply still being captured;
    the played count is voice only; every signal ends, heard or cut."""

    async def scenario() -> None:
        sent: list[tuple[str, int]] = []  # ("voice", 0) / ("signal", id) / ("mark", name)
        marks: list[str] = []
        echoed = 0
        state = {"open": False, "voice_in_open": False, "captured": 0}

        async def media(frame: AudioFrame) -> None:
            await asyncio.sleep(0)  # a suspension point in every send
            value = int(frame.data[0])
            if value <= -100:
                # A tone inside a reply being captured, after some of its voice: wrong.
                assert not state["voice_in_open"], "a signal inside an open reply"
                sent.append(("signal", -value))
            else:
                if state["open"]:
                    state["voice_in_open"] = True
                sent.append(("voice", 0))

        def tail(frame: AudioFrame) -> None:
            sent.append(("voice", 0))

        def mark(name: str) -> None:
            marks.append(name)
            sent.append(("mark", -1))

        out = MarkedPlayback(
            RATE, send_media=media, send_mark=mark, send_clear=lambda: None, send_tail=tail
        )
        out.set_listener(lambda: None, lambda _: None)
        voice_queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

        async def producer() -> None:
            while True:
                what, n = await voice_queue.get()
                if what == "say":
                    state["open"] = True
                    state["captured"] += n * CHUNK
                    await out.capture_frame(AudioFrame(np.full(n * CHUNK, 5, np.int16), RATE))
                elif what == "flush" and state["open"]:
                    out.flush()
                    state["open"] = state["voice_in_open"] = False
                voice_queue.task_done()

        producing = asyncio.create_task(producer())
        presses: list[asyncio.Task[bool]] = []
        asked: list[int] = []
        for what, n in ops:
            if what in ("say", "flush"):
                voice_queue.put_nowait((what, n))
            elif what == "press":
                tone = np.full(n * CHUNK, -100 - len(presses), np.int16)
                presses.append(asyncio.create_task(out.play_signal(AudioFrame(tone, RATE))))
                asked.append(n)
            elif what == "echo":
                for name in marks[echoed:]:
                    out.on_mark(name)
                echoed = len(marks)
            elif what == "clear":
                await voice_queue.join()
                out.clear_buffer()
                state["open"] = state["voice_in_open"] = False  # that reply is over
            for _ in range(n if what == "wait" else 1):
                await asyncio.sleep(0)
        voice_queue.put_nowait(("flush", 0))
        await voice_queue.join()
        cleared = any(what == "clear" for what, _ in ops)

        async def far_end() -> None:
            # From here on the far end echoes each mark as it comes: keys asked for late
            # are paced out after the lead, so their marks come after any echo above.
            nonlocal echoed
            while True:
                for name in marks[echoed:]:
                    out.on_mark(name)
                echoed = len(marks)
                await asyncio.sleep(0.002)

        echoing = asyncio.create_task(far_end())
        if not cleared:
            # Every key ends once heard, and the played count is the voice, whole.
            # Paced in real time: all the audio asked for, and a second to spare.
            audio_s = sum(n for what, n in ops if what in ("say", "press")) * CHUNK / RATE
            results = await asyncio.wait_for(asyncio.gather(*presses), 1 + audio_s)
            assert all(results)
            assert out.played_samples == state["captured"]
        echoing.cancel()
        out.close()
        results = await asyncio.wait_for(asyncio.gather(*presses), 1)  # none stuck
        producing.cancel()
        # Each signal went out whole, its tones together, in the order asked.
        runs: list[int] = []
        for kind, ident in sent:
            if kind == "signal" and (not runs or runs[-1] != ident):
                runs.append(ident)
        assert runs == sorted(runs) and len(runs) == len(set(runs))
        for index, heard in enumerate(results):
            if heard:  # heard: every one of its pieces went out
                length = sum(1 for kind, i in sent if kind == "signal" and i == 100 + index)
                assert length == asked[index]
        assert out.played_samples <= state["captured"]

    asyncio.run(scenario())
