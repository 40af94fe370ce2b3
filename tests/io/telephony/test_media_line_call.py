"""The agent's keys and transfers on a phone call over a real socket on 127.0.0.1, in real
time: ``FakePhoneCall`` plays Twilio (μ-law, a jitter buffer, marks echoed as its playout
passes them) and decodes the DTMF in what it played from the audio alone.

Checked as the far end would notice it: the keys arrive decodable after the μ-law round
trip, in order, after the agent audio already queued, with the pauses kept, and
``send_dtmf`` returns when the last one was played; the tones never make the agent
``speaking`` nor reach the transcript; a barge-in's clear cuts tones still to play; a
transfer goes to the call control with the call's id, the agent ``thinking`` meanwhile,
and ends the session ``"transferred"``; without call control it fails and the call goes
on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.io.telephony import MarkedPlayback, TelephonyOptions, TransferFailed
from rejoinder.io.telephony.carriers.base import CarrierError
from rejoinder.io.telephony.keypad_tones import detect_dtmf
from rejoinder.io.telephony.media_line import DTMFInterrupted, MediaStreamLine
from rejoinder.testing import FakePhoneCall, ScriptedTTS, speech_frame

from .._client import scripted_session

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

RATE = 8000
TICK = 0.02
SECONDS_PER_CHAR = 0.05


def loop_time() -> float:
    return asyncio.get_running_loop().time()


class RecordingControl:
    """A provider's call control as the line sees it: records each request."""

    provider = "twilio"

    def __init__(self, refuse: CarrierError | None = None) -> None:
        self.transfers: list[tuple[float, str, str]] = []
        self.refuse = refuse

    async def transfer(self, call_id: str, target: str) -> None:
        await asyncio.sleep(0.3)  # the REST round trip: the caller waits on the agent
        if self.refuse is not None:
            raise self.refuse
        self.transfers.append((loop_time(), call_id, target))

    async def hangup(self, call_id: str) -> None:
        raise AssertionError("not expected")


class Served:
    def __init__(self, url: str) -> None:
        self.url = url
        self.sessions: list[rj.AgentSession[Any]] = []
        self.conns: list[Connection] = []
        self.states: list[tuple[float, str]] = []
        self.closes: list[str] = []

    @property
    def session(self) -> rj.AgentSession[Any]:
        return self.sessions[0]

    def state(self) -> str | None:
        return self.states[-1][1] if self.states else None


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    servers: list[TestServer] = []

    async def start(
        replies: list[list[Any]],
        transcripts: list[str],
        *,
        control: RecordingControl | None = None,
    ) -> Served:
        served: Served
        make = scripted_session(
            replies, transcripts, lambda: ScriptedTTS(seconds_per_char=SECONDS_PER_CHAR)
        )

        async def entrypoint(conn: Connection) -> None:
            if control is not None:
                # The service does not pass call control yet: the line it would build.
                assert isinstance(conn.audio_output, MarkedPlayback) and conn.call is not None
                conn.line = MediaStreamLine(conn.audio_output, conn.call, control)
            session = make()
            session.on(
                "agent_state_changed", lambda e: served.states.append((loop_time(), e.new_state))
            )
            session.on("close", lambda e: served.closes.append(e.reason))
            served.sessions.append(session)
            served.conns.append(conn)
            await conn.serve(session, rj.Agent(instructions="test"))

        app = create_app(
            entrypoint,
            telephony=["twilio"],
            telephony_options=TelephonyOptions(mark_interval=0.16),
            webrtc=False,
            page=False,
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        served = Served(str(server.make_url("/twilio")))
        return served

    yield start
    for server in servers:
        await server.close()


def assistant_texts(session: rj.AgentSession[Any]) -> list[str]:
    return [
        i.content
        for i in session.history.items
        if isinstance(i, rj.ChatMessage) and i.role == "assistant"
    ]


def tone_runs(audio: np.ndarray[Any, np.dtype[np.int16]]) -> list[tuple[int, int]]:
    """(first, last) sample of each run of tone in ``audio``: samples over 1000 (the
    scripted voice is at 300), runs split by 20 ms or more without one."""
    loud = np.flatnonzero(np.abs(audio.astype(np.int32)) > 1000)
    if loud.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(loud) > 160)
    starts = np.concatenate(([loud[0]], loud[breaks + 1]))
    ends = np.concatenate((loud[breaks], [loud[-1]]))
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


REPLY = "One moment, I am pressing the keys."


async def test_keys_play_after_the_queued_voice_decodable_in_order_with_their_pauses(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve([], [])
    async with FakePhoneCall.connect(served.url) as call:
        await call.until(lambda: served.state() == "listening", 5)
        conn = served.conns[0]
        served.session.say(REPLY)
        await call.until(lambda: call.received_samples > 0, 5)  # the voice is on its way
        await served.session.send_dtmf("1w2#")
        returned = loop_time()
        await call.until(lambda: served.state() == "listening", 5)

    voice = len(REPLY) * SECONDS_PER_CHAR
    heard = call.heard_audio()
    # All of the voice came first, then the keys, decoded from the μ-law audio alone.
    split = conn.audio_output.total_sent  # the voice's samples (its resampler's tail too)
    assert split == pytest.approx(voice * RATE, abs=2 * 160)
    assert detect_dtmf(heard[:split], RATE) == ""
    assert detect_dtmf(heard[split:], RATE) == "12#"
    assert call.keys_heard() == "12#"
    assert np.abs(heard[:split]).max() < 1000  # the scripted voice (~300), no tone in it
    # One run of tone per key, in the audio as played: "w" kept half a second of silence
    # between 1 and 2, the usual 70 ms gap before # (each tone has 5 ms ramps).
    (one, two, pound) = tone_runs(heard[split:])
    assert (two[0] - one[1]) / RATE == pytest.approx(0.5, abs=0.012)
    assert (pound[0] - two[1]) / RATE == pytest.approx(0.07, abs=0.012)
    # send_dtmf returned once the far end had played the last key (the mark behind it is
    # echoed on the next tick), not when the tones were sent: their mark reached the far
    # end long before they played.
    last_tone = max(call.audible_at(threshold=1000))
    first_tone = min(call.audible_at(threshold=1000))
    tones_mark = next(t for t, name in call.marks_received if name.startswith("rjs-"))
    assert last_tone <= returned <= last_tone + 0.3
    assert returned - tones_mark >= 0.5
    # The tones were never the agent's voice: one speaking, over by the first key; the
    # transcript has the reply only, and the playback counted the voice's samples only.
    speaking = [t for t, s in served.states if s == "speaking"]
    assert len(speaking) == 1
    listening = next(t for t, s in served.states if s == "listening" and t > speaking[0])
    assert listening <= first_tone + 0.25
    assert assistant_texts(served.session) == [REPLY]


async def test_keys_alone_never_make_the_agent_speaking(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve([], [])
    async with FakePhoneCall.connect(served.url) as call:
        await call.until(lambda: served.state() == "listening", 5)
        began = loop_time()
        await served.session.send_dtmf("5*")
        took = loop_time() - began
        await call.silence(0.2)  # a late state change would show here

    assert call.keys_heard() == "5*"
    assert 0.27 <= took <= 0.27 + 0.06 + 0.3  # 0.1 + 0.07 + 0.1 of tones, the jitter buffer
    assert [s for _, s in served.states if s == "speaking"] == []
    assert served.state() == "listening"
    assert assistant_texts(served.session) == []


LONG = "This is a long answer that keeps going for quite a while. " * 2


async def test_a_barge_in_clear_cuts_the_keys_still_to_play(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    served = await serve([["Yes?"]], ["Wait."])
    async with FakePhoneCall.connect(served.url) as call:
        await call.until(lambda: served.state() == "listening", 5)
        served.session.say(LONG)
        await call.until(lambda: call.heard_seconds() > 0.3, 5)
        pressing = asyncio.create_task(served.session.send_dtmf("123456789"))
        await call.say(speech_frame(0.6, RATE).data, RATE)  # the caller talks over it
        with pytest.raises(DTMFInterrupted):
            await asyncio.wait_for(pressing, 5)
        await call.until(lambda: len(assistant_texts(served.session)) == 2, 5)
        await call.silence(0.3)

    assert call.clears  # the line was cleared...
    assert call.keys_heard() == ""  # ...and no key was ever played
    cut, answer = [
        i
        for i in served.session.history.items
        if isinstance(i, rj.ChatMessage) and i.role == "assistant"
    ]
    assert cut.interrupted and LONG.startswith(cut.content)
    assert answer.content == "Yes?" and not answer.interrupted


async def test_a_transfer_goes_to_call_control_and_ends_the_session_transferred(
    serve: Callable[..., Awaitable[Served]],
) -> None:
    control = RecordingControl()
    served = await serve([], [], control=control)
    async with FakePhoneCall.connect(served.url) as call:
        await call.until(lambda: served.state() == "listening", 5)
        conn = served.conns[0]
        began = loop_time()
        await conn.transfer("sip:billing@pbx.example.com")
        ended = loop_time()
        await call.until(lambda: call.closed, 5)
        await call.until(lambda: bool(served.closes), 5)

    assert [(cid, target) for _, cid, target in control.transfers] == [
        (call.call_sid, "sip:billing@pbx.example.com")
    ]
    assert served.closes == ["transferred"] and conn.left_reason == "transferred"
    # The caller waited on the agent: thinking while the carrier took the call, not away.
    transferred = control.transfers[0][0]
    during = [(t, s) for t, s in served.states if began <= t <= transferred]
    assert [s for _, s in during] == ["thinking"] and during[0][0] - began < 0.05
    assert ended - began >= 0.3
    assert "away" not in {s for _, s in served.states}


@pytest.mark.parametrize(
    "refusal", [None, CarrierError("busy", status=409)], ids=["none", "refused"]
)
async def test_a_failed_transfer_leaves_the_call_with_the_agent(
    serve: Callable[..., Awaitable[Served]], refusal: CarrierError | None
) -> None:
    control = RecordingControl(refuse=refusal) if refusal is not None else None
    served = await serve([["Still here."]], ["Hello?"], control=control)
    async with FakePhoneCall.connect(served.url) as call:
        await call.until(lambda: served.state() == "listening", 5)
        with pytest.raises(TransferFailed, match="REST credentials" if control is None else "409"):
            await served.conns[0].transfer("+15551234567")
        await call.until(lambda: served.state() == "listening", 5)
        await call.say(speech_frame(0.4, RATE).data, RATE)
        await call.until(lambda: len(assistant_texts(served.session)) == 1, 5)
        assert not call.closed
        await call.hang_up()
    await call.until(lambda: bool(served.closes), 5)

    assert served.closes == ["call ended"]  # the hang-up at the end, not the transfer
    assert assistant_texts(served.session) == ["Still here."]
