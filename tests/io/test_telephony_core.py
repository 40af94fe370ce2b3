"""The phone media streams without a socket, on virtual time: ``MarkedPlayback`` against
a fake line (what it sends, what echoed marks make of it), each provider's ``Dialect`` on
its documented messages, and ``MediaStreamPeer`` fed good frames, junk and floods."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.io.outbox import CloseRequest
from rejoinder.io.protocol import CloseCode
from rejoinder.io.telephony import (
    PLIVO,
    TELNYX,
    TWILIO,
    Dialect,
    MarkedPlayback,
    MediaStreamPeer,
    TelephonyOptions,
)
from rejoinder.io.telephony.dialects import (
    CallInfo,
    Ignored,
    KeyPressed,
    MarkEchoed,
    Media,
    Started,
    Stopped,
)
from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame, PlaybackFinished
from rejoinder.testing import ScriptedLLM, advance

from ._client import written

RATE = 8000
CHUNK = 160  # 20 ms at 8 kHz
INTERVAL = 1280  # the default mark_interval, 0.16 s


def now() -> float:
    return asyncio.get_running_loop().time()


def audio(seconds: float) -> AudioFrame:
    samples = round(seconds * RATE)
    return AudioFrame(np.arange(samples, dtype=np.int16), RATE)


class Line:
    """A fake provider line: what ``MarkedPlayback`` sends, in order, and what the
    listener (the session, through ``set_listener``) is told."""

    def __init__(self, **options: Any) -> None:
        self.log: list[tuple[str, Any]] = []
        self.sent_at: list[tuple[float, int]] = []
        self.heard: list[Any] = []
        self.tails: list[AudioFrame] = []
        self.out = MarkedPlayback(
            RATE,
            send_media=self._media,
            send_mark=self._mark,
            send_clear=self._clear,
            send_tail=self._tail,
            **options,
        )
        self.out.set_listener(lambda: self.heard.append("started"), self.heard.append)

    async def _media(self, frame: AudioFrame) -> None:
        self.sent_at.append((now(), frame.samples_per_channel))
        self.log.append(("media", frame.samples_per_channel))

    def _tail(self, frame: AudioFrame) -> None:
        self.sent_at.append((now(), frame.samples_per_channel))
        self.log.append(("media", frame.samples_per_channel))
        self.tails.append(frame)

    def _mark(self, name: str) -> None:
        self.log.append(("mark", name))

    def _clear(self) -> None:
        self.log.append(("clear", None))

    def marks(self) -> list[str]:
        return [name for kind, name in self.log if kind == "mark"]

    def media(self) -> list[int]:
        return [n for kind, n in self.log if kind == "media"]

    async def say(self, *seconds: float) -> None:
        for s in seconds:
            await self.out.capture_frame(audio(s))
        self.out.flush()

    def echo(self, *names: str) -> None:
        for name in names:
            self.out.on_mark(name)


def done(seconds: float, interrupted: bool = False) -> PlaybackFinished:
    return PlaybackFinished(seconds, interrupted)


# ------------------------------------------------------------- MarkedPlayback


async def test_marks_follow_the_first_chunk_then_every_interval_then_the_end() -> None:
    line = Line()
    await line.say(0.45)  # 3600 samples: 22 chunks and a half
    # Every piece is 20 ms (Telnyx takes no less): the last is padded with silence.
    assert line.media() == [CHUNK] * 23
    tail = line.tails[-1].data
    assert tail[80:].tolist() == [0] * 80 and tail[:80].any()
    # Each mark names the agent's samples before it (the padding is not the agent's).
    names = line.marks()
    assert names == ["rj-0-160", "rj-0-1440", "rj-0-2720", "rj-0-3600"]
    assert line.log[1] == ("mark", "rj-0-160")  # right after the first 20 ms
    assert line.log[-2:] == [("media", CHUNK), ("mark", "rj-0-3600")]
    await line.say(0.1, 0.06)  # the next segment has a start mark of its own
    assert line.marks()[4:] == ["rj-0-3760", "rj-0-4880"]
    assert line.out.marks_sent == 6


async def test_a_segment_ending_on_a_mark_gets_no_second_one_and_pieces_span_frames() -> None:
    line = Line()
    await line.say(0.02)
    assert line.log == [("media", CHUNK), ("mark", "rj-0-160")]
    line = Line(mark_interval=0.04)
    await line.say(0.03, 0.07)  # 240 + 560 samples: what a frame leaves over starts the next
    assert line.media() == [160] * 5
    assert line.tails == []
    assert line.marks() == ["rj-0-160", "rj-0-480", "rj-0-800"]


async def test_an_end_mark_never_echoed_is_taken_as_heard_after_the_timeout() -> None:
    # A provider that echoes nothing (a one-way stream) must not keep the agent speaking.
    line = Line(echo_timeout=2.0, lead=10.0)
    await line.say(0.5)  # sent at once (lead 10 s): it should have played by t+0.5
    assert line.heard == []
    await advance(2.4)
    assert line.heard == []
    await advance(0.2)
    assert line.heard == ["started", done(0.5)]
    # An echo that comes in time leaves the timer nothing to do.
    await line.say(0.2)
    line.echo("rj-0-4160", "rj-0-5600")
    assert line.heard[-1] == done(0.2)
    await advance(5.0)
    assert len(line.heard) == 4


async def test_speaking_follows_the_echoes_not_the_sending() -> None:
    line = Line()
    await line.say(0.45)
    assert line.heard == [] and not line.out.playing  # all sent, nothing heard yet
    line.echo("rj-0-160")
    assert line.heard == ["started"] and line.out.playing
    line.echo("rj-0-1440", "rj-0-2720")
    assert line.heard == ["started"]
    line.echo("rj-0-3600")
    assert line.heard == ["started", done(0.45)]
    assert not line.out.pending and line.out.played_samples == 3600
    await line.say(0.02)
    await line.say(0.1)
    line.echo("rj-0-3760")  # the first of two segments sent back to back
    assert line.heard[2:] == ["started", done(0.02)]
    line.echo("rj-0-3920", "rj-0-4560")
    assert line.heard[2:] == ["started", done(0.02), "started", done(0.1)]


@pytest.mark.parametrize("dialect", [TWILIO, TELNYX, PLIVO], ids=lambda d: d.name)
async def test_a_clear_ends_the_segment_where_the_caller_heard_it(dialect: Dialect) -> None:
    line = Line()
    await line.say(0.45)
    line.echo("rj-0-160", "rj-0-1440")
    line.out.clear_buffer()
    assert line.log[-1] == ("clear", None)
    assert line.heard == ["started", done(0.18, True)]
    if dialect.marks_echoed_on_clear:  # Twilio, Telnyx: the dropped marks come back
        line.echo("rj-0-2720", "rj-0-3600")
    assert line.heard == ["started", done(0.18, True)]
    assert line.out.played_samples == 1440
    await line.say(0.1)  # the next reply: a new epoch, counted from where the clear was
    assert line.marks()[-2:] == ["rj-1-160", "rj-1-800"]
    line.echo("rj-0-3600")  # a late echo from before the clear still says nothing
    assert line.heard == ["started", done(0.18, True)]
    line.echo("rj-1-160")
    assert line.heard[-1] == "started"
    line.echo("rj-1-800")
    assert line.heard[-1] == done(0.1) and line.out.played_samples == 1440 + 800


async def test_a_clear_before_any_echo_reports_nothing_heard() -> None:
    line = Line()
    await line.say(0.1)
    line.out.clear_buffer()
    assert line.heard == [] and line.log[-1] == ("clear", None)
    line.echo("rj-0-160")
    assert line.heard == [] and not line.out.pending
    line.out.clear_buffer()  # nothing held: no second clear
    assert [kind for kind, _ in line.log].count("clear") == 1


@pytest.mark.parametrize("stop", ["clear", "close"])
async def test_a_clear_or_a_close_stops_a_frame_being_paced_out(stop: str) -> None:
    line = Line(lead=0.1)
    sending = asyncio.create_task(line.out.capture_frame(audio(1.0)))
    await advance(0.2)
    line.echo(line.marks()[0])
    line.out.clear_buffer() if stop == "clear" else line.out.close()
    await asyncio.wait_for(sending, 1)
    assert sum(line.media()) < 0.4 * RATE  # the rest of the frame was never sent
    assert line.log[-1] == (("clear", None) if stop == "clear" else ("media", CHUNK))
    assert line.heard == ["started", done(0.02, True)]


FORGED = [
    "rj-0-99999", "rj-0-3601",  # past what was sent
    "rj-1-160",  # an epoch that has not begun
    "rj-0-" + "9" * 16, "rj-" + "9" * 10 + "-160", "rj-0-" + "9" * 15,  # huge numbers
    "hello", "", "rj-0-160 ", "rj-0-160\n", "rj-0-1e3", "rj--1-160", "rj-0-+160", "RJ-0-160",
    "rj-0-\u0661\u0666\u0660",  # Arabic-Indic 160: a Unicode digit, not our format
]  # fmt: skip


@pytest.mark.parametrize("name", FORGED)
async def test_marks_we_did_not_send_are_ignored(name: str) -> None:
    line = Line()
    await line.say(0.45)
    line.echo(name)
    assert line.heard == [] and line.out.played_samples == 0 and line.out.marks_echoed == 0
    line.echo("rj-0-160")
    assert line.heard == ["started"]


async def test_audio_is_sent_at_most_lead_seconds_ahead() -> None:
    line = Line(lead=0.5)
    t0 = now()
    await line.out.capture_frame(audio(2.0))
    elapsed = now() - t0
    assert 1.45 <= elapsed <= 1.55  # 2 s of audio, 0.5 s of it sent ahead
    sent = 0
    for at, samples in line.sent_at:
        assert samples == CHUNK
        assert sent / RATE <= at - t0 + 0.5 + 1e-6  # each piece starts within the lead
        sent += samples
    await advance(5)  # idle: the lead is loop time ahead, not a debt
    t1 = now()
    await line.out.capture_frame(audio(0.5))
    assert now() - t1 < 0.05


async def test_close_ends_open_segments_interrupted() -> None:
    line = Line()
    await line.say(0.45)
    await line.say(0.1)
    line.echo("rj-0-160", "rj-0-1440")
    line.out.close()
    assert line.heard == ["started", done(0.18, True)]  # the unstarted one: nothing heard
    line.echo("rj-0-3600")
    await line.say(0.1)
    # Nothing more went out: 0.45 s (its last piece padded to 20 ms) and 0.1 s.
    assert line.heard == ["started", done(0.18, True)] and sum(line.media()) == 3680 + 800


# ------------------------------------------------------------------ dialects

PAYLOAD = base64.b64encode(bytes(range(160))).decode()


def msg(**fields: Any) -> str:
    return json.dumps(fields)


TWILIO_START = """{"event": "start", "sequenceNumber": "1", "streamSid": "MZ456",
  "start": {"accountSid": "AC123", "streamSid": "MZ456", "callSid": "CA789", "tracks": ["inbound"],
    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    "customParameters": {"FirstName": "Jane", "From": "+15550001", "To": "+15550002"}}}"""
TELNYX_START = """{"event": "start", "sequence_number": "1", "stream_id": "32DE0DEA",
  "start": {"user_id": "3E6F995F", "call_control_id": "v2:T02llQ", "call_session_id": "ff55",
    "from": "+13122010094", "to": "+13122123456", "tags": ["TAG1", "TAG2"],
    "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
    "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}}}"""
PLIVO_START = """{"event": "start", "sequenceNumber": 1,
  "start": {"callId": "12345678-aa", "streamId": "87654321-bb", "accountId": "MAXXXX",
    "tracks": ["inbound"], "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000}},
  "extra_headers": "userId=12345;sessionId=abc-xyz"}"""
STARTS = {"twilio": TWILIO_START, "telnyx": TELNYX_START, "plivo": PLIVO_START}


def test_twilio_messages() -> None:
    n1, n2 = "+15550001", "+15550002"
    params = {"FirstName": "Jane", "From": n1, "To": n2}
    call = CallInfo("twilio", "CA789", "MZ456", "mulaw", 8000, "AC123", n1, n2, params)
    p = TWILIO.parse
    assert p(msg(event="connected", protocol="Call", version="1.0.0")) == Ignored("connected")
    assert p(TWILIO_START) == Started(call)
    media = {"track": "inbound", "chunk": "2", "timestamp": "5", "payload": PAYLOAD}
    assert p(msg(event="media", sequenceNumber="4", media=media, streamSid="MZ")) == Media(
        bytes(range(160))
    )
    outbound = msg(event="media", media={**media, "track": "outbound"})
    assert p(outbound) == Ignored("media")
    dtmf = msg(event="dtmf", streamSid="MZ", dtmf={"track": "inbound_track", "digit": "1"})
    assert p(dtmf) == KeyPressed("1")
    assert p(msg(event="mark", streamSid="MZ", mark={"name": "my label"})) == MarkEchoed("my label")
    stop = msg(event="stop", sequenceNumber="5", stop={"accountSid": "AC", "callSid": "CA"})
    assert p(stop) == Stopped()


def test_telnyx_messages() -> None:
    p = TELNYX.parse
    assert p(msg(event="connected", version="1.0.0")) == Ignored("connected")
    started = p(TELNYX_START)
    n1, n2, state = "+13122010094", "+13122123456", {"client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d"}
    call = CallInfo("telnyx", "v2:T02llQ", "32DE0DEA", "mulaw", 8000, "3E6F995F", n1, n2, state)
    assert started == Started(call)
    alaw = json.loads(TELNYX_START)
    alaw["start"]["media_format"]["encoding"] = "PCMA"
    fact = p(json.dumps(alaw))
    assert isinstance(fact, Started) and fact.call.codec == "alaw"
    media = {"track": "inbound", "chunk": "2", "timestamp": "5", "payload": PAYLOAD}
    assert p(msg(event="media", media=media, stream_id="32")) == Media(bytes(range(160)))
    assert p(msg(event="media", media={**media, "track": "outbound"})) == Ignored("media")
    dtmf = msg(event="dtmf", occurred_at="2025-06-05T08:54:19Z", dtmf={"digit": "#"})
    assert p(dtmf) == KeyPressed("#")
    assert p(msg(event="mark", mark={"name": "some_mark_name"})) == MarkEchoed("some_mark_name")
    assert p(msg(event="stop", stop={"user_id": "3E", "call_control_id": "v2"})) == Stopped()
    error = p(msg(event="error", payload={"code": 100003, "title": "malformed_frame"}))
    assert isinstance(error, Ignored) and error.event == "error" and error.problem is not None
    assert "100003" in error.problem and "malformed_frame" in error.problem


def test_plivo_messages() -> None:
    p = PLIVO.parse
    params = {"userId": "12345", "sessionId": "abc-xyz"}
    call = CallInfo("plivo", "12345678-aa", "87654321-bb", "mulaw", 8000, "MAXXXX", None, None)
    assert p(PLIVO_START) == Started(dataclasses.replace(call, parameters=params))
    fact = p(PLIVO_START.replace("userId=12345;sessionId=abc-xyz", "a=1,b=2"))
    assert isinstance(fact, Started) and dict(fact.call.parameters) == {"a": "1", "b": "2"}
    media = {"track": "inbound", "timestamp": "1705312200000", "chunk": 41, "payload": PAYLOAD}
    assert p(msg(event="media", sequenceNumber=42, media=media)) == Media(bytes(range(160)))
    dtmf = {"track": "inbound", "digit": "5", "timestamp": "1705312250000"}
    assert p(msg(event="dtmf", sequenceNumber=50, dtmf=dtmf)) == KeyPressed("5")
    played = msg(event="playedStream", sequenceNumber=75, streamId="87", name="greeting-complete")
    assert p(played) == MarkEchoed("greeting-complete")
    assert p(msg(event="clearedAudio", sequenceNumber=80, streamId="87")) == Ignored("clearedAudio")
    assert p(msg(event="mark", mark={"name": "x"})).problem == "unknown event"  # not Plivo's


@pytest.mark.parametrize(
    ("dialect", "path", "value", "hint"),
    [
        (TWILIO, ("mediaFormat", "encoding"), "audio/x-l16", "audio/x-mulaw at 8000"),
        (TWILIO, ("mediaFormat", "sampleRate"), 16000, "audio/x-mulaw at 8000"),
        (TELNYX, ("media_format", "encoding"), "G722", "stream_bidirectional_codec"),
        (TELNYX, ("media_format", "encoding"), "L16", "stream_codec"),
        (TELNYX, ("media_format", "sample_rate"), 16000, '"PCMU"'),
        (
            PLIVO,
            ("mediaFormat", "encoding"),
            "audio/x-l16",
            'contentType="audio/x-mulaw;rate=8000"',
        ),
    ],
)
def test_a_codec_we_cannot_speak_says_what_to_configure(
    dialect: Dialect, path: tuple[str, str], value: Any, hint: str
) -> None:
    start = json.loads(STARTS[dialect.name])
    start["start"][path[0]][path[1]] = value
    fact = dialect.parse(json.dumps(start))
    assert isinstance(fact, Ignored) and fact.event == "start"
    assert fact.problem is not None and hint in fact.problem and str(value) in fact.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{nope", "not JSON"),
        ("[" * 5000, "not JSON"),  # nested past the recursion limit
        ("[]", "not a JSON object"),
        ('{"event": "media", "media": "x"}', "malformed media: media is not an object"),
        ('{"event": "media", "media": {"payload": "%%%"}}', "malformed media: payload is not"),
        ('{"event": "start", "start": []}', "malformed start: start is not an object"),
        ('{"event": "dtmf", "dtmf": {"digit": "12"}}', "malformed dtmf:"),
        ('{"event": "mark", "mark": ["name"]}', "malformed mark:"),
        ('{"event": {"a": 1}}', "unknown event"),
    ],
)
def test_junk_is_ignored_with_a_reason(text: str, problem: str) -> None:
    fact = TWILIO.parse(text)
    assert isinstance(fact, Ignored) and fact.problem is not None
    assert fact.problem.startswith(problem)


ENVELOPES = {  # media "AAA", mark "m", clear: exactly as each provider documents them
    "twilio": ('{"event":"media","streamSid":"MZ456","media":{"payload":"AAA"}}',
               '{"event":"mark","streamSid":"MZ456","mark":{"name":"m"}}',
               '{"event":"clear","streamSid":"MZ456"}'),
    "telnyx": ('{"event":"media","media":{"payload":"AAA"}}',
               '{"event":"mark","mark":{"name":"m"}}', '{"event":"clear"}'),
    "plivo": ('{"event":"playAudio","media":{"contentType":"audio/x-mulaw","sampleRate":8000,'
              '"payload":"AAA"}}', '{"event":"checkpoint","streamId":"87654321-bb","name":"m"}',
              '{"event":"clearAudio","streamId":"87654321-bb"}'),
}  # fmt: skip


@pytest.mark.parametrize("dialect", [TWILIO, TELNYX, PLIVO], ids=lambda d: d.name)
def test_the_messages_we_send_are_the_documented_envelopes(dialect: Dialect) -> None:
    fact = dialect.parse(STARTS[dialect.name])
    assert isinstance(fact, Started)
    sent = (
        dialect.encode(dialect.media_message(fact.call, "AAA")),
        dialect.encode(dialect.mark_message(fact.call, "m")),
        dialect.encode(dialect.clear_message(fact.call)),
    )
    assert sent == ENVELOPES[dialect.name]


# ------------------------------------------------------------------- hypothesis

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = [
    "track", "payload", "digit", "name", "chunk", "encoding", "sampleRate", "sample_rate",
    "callSid", "streamSid", "call_control_id", "stream_id", "callId", "streamId", "code",
    "mediaFormat", "media_format", "customParameters", "custom_parameters", "client_state",
    "from", "to", "accountSid", "user_id", "title", "detail",
]  # fmt: skip
# Sizes bounded: unbounded nested dictionaries made drawing a message cost ~60 ms.
PART = JSON | st.dictionaries(
    st.sampled_from(FIELDS),
    JSON | st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4),
    max_size=6,
)
TOP = ["start", "media", "mark", "dtmf", "stop", "name", "payload", "streamSid", "stream_id",
       "streamId", "extra_headers", "sequenceNumber"]  # fmt: skip


def shaped(dialect: Dialect) -> st.SearchStrategy[Any]:
    """Messages shaped like the provider's events, any field of any JSON type."""
    events = st.sampled_from([*dialect.events, "junk"])
    fields = st.dictionaries(st.sampled_from(TOP), PART, max_size=4)
    return st.builds(lambda event, more: {"event": event, **more}, events, fields)


FACTS = (Started, Media, MarkEchoed, KeyPressed, Stopped, Ignored)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_never_raises_on_any_text(text: str) -> None:
    for dialect in (TWILIO, TELNYX, PLIVO):
        assert isinstance(dialect.parse(text), FACTS)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_parse_never_raises_on_event_shaped_json(data: st.DataObject) -> None:
    dialect = data.draw(st.sampled_from([TWILIO, TELNYX, PLIVO]))
    value = data.draw(shaped(dialect) | JSON)
    fact = dialect.parse(json.dumps(value))
    assert isinstance(fact, FACTS)
    if isinstance(fact, Ignored) and fact.problem is not None:
        assert len(fact.problem) <= 200


def good_frames(dialect: Dialect) -> list[str]:
    media = {"track": "inbound", "payload": PAYLOAD}
    mark = (
        {"event": "playedStream", "name": "rj-0-160"}
        if dialect is PLIVO
        else {"event": "mark", "mark": {"name": "rj-0-160"}}
    )
    return [
        STARTS[dialect.name],
        json.dumps({"event": "media", "media": media}),
        json.dumps({"event": "media", "media": {**media, "track": "outbound"}}),
        json.dumps({"event": "dtmf", "dtmf": {"digit": "7"}}),
        json.dumps(mark),
        json.dumps({"event": "stop", "stop": {}}),
        json.dumps({"event": "connected"}),
    ]


ALLOWED = {
    CloseCode.NORMAL,
    CloseCode.UNSUPPORTED_DATA,
    CloseCode.POLICY_VIOLATION,
    CloseCode.MESSAGE_TOO_BIG,
    CloseCode.SLOW_CLIENT,
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_peer_fed_random_frames_never_breaks(data: st.DataObject) -> None:
    dialect = data.draw(st.sampled_from([TWILIO, TELNYX, PLIVO]))
    frame = (
        st.sampled_from(good_frames(dialect))
        | st.text(max_size=40)
        | shaped(dialect).map(json.dumps)
        | st.binary(max_size=4)
    )
    steps = data.draw(st.lists(st.tuples(frame, st.floats(0, 0.05)), max_size=25))
    opts = TelephonyOptions(max_frame_bytes=400, max_messages_per_second=50, burst_seconds=0.2)
    peer = MediaStreamPeer(dialect, opts)
    t, built = 0.0, []
    for item, dt in steps:
        t += dt
        if isinstance(item, bytes):
            peer.receive_bytes(item)
        elif (conn := peer.receive_text(item, t)) is not None:
            built.append(conn)
    assert len(built) <= 1 and (not built or peer.connection is built[0])
    request = peer.outbox.close_request
    assert request is None or request.code in ALLOWED


# ---------------------------------------------------------------- MediaStreamPeer


def media_frame(payload: bytes) -> str:
    encoded = base64.b64encode(payload).decode()
    return msg(event="media", media={"track": "inbound", "payload": encoded})


async def test_media_reaches_the_microphone_only_after_start() -> None:
    peer = MediaStreamPeer(TWILIO)
    ulaw = g711.ulaw_encode(np.array([0, 1000, -1000, 32000], dtype=np.int16))
    assert peer.receive_text(media_frame(ulaw), 0) is None
    assert peer.junk == 1 and peer.connection is None
    conn = peer.receive_text(TWILIO_START, 0)
    assert conn is not None and conn.call == peer.call and conn.transport == "twilio"
    assert conn.audio_input.sample_rate == 8000 and conn.audio_output.sample_rate == 8000
    assert peer.receive_text(TWILIO_START, 0) is None  # a second start
    assert peer.junk == 2 and peer.connection is conn
    peer.receive_text(media_frame(ulaw), 0)
    peer.receive_text(msg(event="media", media={"track": "inbound", "payload": "@@"}), 0)
    assert peer.junk == 3  # bad base64
    conn.audio_input.close()
    frames = [f async for f in conn.audio_input]
    assert len(frames) == 1 and list(frames[0].data) == list(g711.ulaw_decode(ulaw))
    assert await written(peer.outbox) == []


async def test_telnyx_alaw_is_decoded_as_alaw() -> None:
    peer = MediaStreamPeer(TELNYX)
    start = json.loads(TELNYX_START)
    start["start"]["media_format"]["encoding"] = "PCMA"
    conn = peer.receive_text(json.dumps(start), 0)
    assert conn is not None
    alaw = g711.alaw_encode(np.array([5, 500, -5000], dtype=np.int16))
    peer.receive_text(media_frame(alaw), 0)
    conn.audio_input.close()
    frames = [f async for f in conn.audio_input]
    assert list(frames[0].data) == list(g711.alaw_decode(alaw))


async def test_a_real_call_rate_with_bursts_is_not_a_flood() -> None:
    peer = MediaStreamPeer(TWILIO)
    peer.receive_text(TWILIO_START, 0)
    frame = media_frame(bytes(160))
    t = 0.0
    for second in range(10):  # 50 a second, delivered in jittery bursts
        for i in range(50):
            peer.receive_text(frame, second + (0.0 if i < 40 else 0.9))
        t = second + 1.0
    for _ in range(150):  # a network stall releasing 3 s of audio at once
        peer.receive_text(frame, t + 3)
    assert peer.outbox.close_request is None


async def test_a_sustained_flood_closes_with_policy_violation() -> None:
    peer = MediaStreamPeer(TWILIO)
    peer.receive_text(TWILIO_START, 0)
    frame = media_frame(bytes(160))
    sent = 0
    while peer.outbox.close_request is None and sent < 10_000:
        peer.receive_text(frame, sent / 1000)  # 1000 a second
        sent += 1
    request = peer.outbox.close_request
    assert request is not None and request.code == CloseCode.POLICY_VIOLATION
    assert 400 <= sent <= 600  # the 2 s burst allowance at 200/s, then the excess
    assert peer.connection is not None and peer.connection.left


async def test_an_oversized_frame_closes_1009_and_a_binary_one_1003() -> None:
    peer = MediaStreamPeer(TWILIO)
    peer.receive_text(TWILIO_START, 0)
    peer.receive_text(" " * (64 * 1024 + 1), 0)
    assert (await written(peer.outbox))[-1].code == CloseCode.MESSAGE_TOO_BIG
    assert peer.receive_text(TWILIO_START, 0) is None  # nothing more is read
    peer = MediaStreamPeer(PLIVO)
    peer.receive_bytes(b"\x00\x01")
    assert (await written(peer.outbox))[-1].code == CloseCode.UNSUPPORTED_DATA
    assert peer.receive_text(PLIVO_START, 0) is None and peer.connection is None


async def test_a_refused_call_is_closed_and_gets_no_connection() -> None:
    asked: list[CallInfo] = []

    def admit(call: CallInfo) -> str | None:
        asked.append(call)
        return "unknown call"

    peer = MediaStreamPeer(TWILIO, admit=admit)
    assert peer.receive_text(TWILIO_START, 0) is None
    assert peer.connection is None and [c.call_id for c in asked] == ["CA789"]
    assert await written(peer.outbox) == [CloseRequest(CloseCode.POLICY_VIOLATION, "unknown call")]
    assert peer.receive_text(TWILIO_START, 1) is None and len(asked) == 1


async def test_stop_ends_the_call_and_a_drop_is_a_lost_connection() -> None:
    peer = MediaStreamPeer(TELNYX)
    conn = peer.receive_text(TELNYX_START, 0)
    assert conn is not None
    peer.receive_text(msg(event="stop", stop={}), 1)
    assert peer.stopped and conn.left and conn.left_reason == "call ended"
    assert await written(peer.outbox) == [CloseRequest(CloseCode.NORMAL, "call ended")]
    peer = MediaStreamPeer(PLIVO)
    conn = peer.receive_text(PLIVO_START, 0)
    assert conn is not None
    peer.client_left()
    assert not peer.stopped and conn.left_reason == "connection lost"


@pytest.mark.parametrize("dialect", [TWILIO, TELNYX, PLIVO], ids=lambda d: d.name)
async def test_the_speaker_writes_marked_media_and_a_clear_drops_what_was_unsent(
    dialect: Dialect,
) -> None:
    peer = MediaStreamPeer(dialect)
    conn = peer.receive_text(STARTS[dialect.name], 0)
    assert conn is not None and peer.call is not None
    out = conn.audio_output
    await out.capture_frame(AudioFrame(np.zeros(320, dtype=np.int16), 8000))
    out.flush()
    items = await written(peer.outbox)
    payload = base64.b64encode(g711.ulaw_encode(np.zeros(160, dtype=np.int16))).decode()
    media = dialect.media_message(peer.call, payload)
    marks = [dialect.mark_message(peer.call, f"rj-0-{n}") for n in (160, 320)]
    assert items == [media, marks[0], media, marks[1]]
    await out.capture_frame(AudioFrame(np.zeros(160, dtype=np.int16), 8000))
    out.clear_buffer()  # the media not written yet is dropped; the mark still goes out
    assert await written(peer.outbox) == [
        dialect.mark_message(peer.call, "rj-0-480"),
        dialect.clear_message(peer.call),
    ]


async def test_keys_pressed_before_the_session_runs_are_delivered() -> None:
    peer = MediaStreamPeer(TWILIO)
    peer.receive_text(msg(event="dtmf", dtmf={"digit": "9"}), 0)  # no call yet: dropped
    conn = peer.receive_text(TWILIO_START, 0)
    assert conn is not None
    for digit in "1#":
        peer.receive_text(msg(event="dtmf", dtmf={"track": "inbound_track", "digit": digit}), 0)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=ScriptedLLM([]), user_away_timeout=None)
    keys: list[str] = []
    session.on("dtmf", lambda e: keys.append(e.digit))
    serving = asyncio.create_task(conn.serve(session, rj.Agent(instructions="t")))
    await advance(0.5)
    assert keys == ["1", "#"]
    peer.receive_text(msg(event="dtmf", dtmf={"digit": "a"}), 1)
    assert keys == ["1", "#", "A"]
    peer.receive_text(msg(event="stop"), 2)
    await asyncio.wait_for(serving, 10)
    assert conn.left_reason == "call ended"


async def test_a_start_without_a_media_format_takes_the_provider_default() -> None:
    bare = json.loads(TWILIO_START)
    del bare["start"]["mediaFormat"]
    peer = MediaStreamPeer(TWILIO)
    conn = peer.receive_text(json.dumps(bare), 0)
    assert conn is not None and conn.call is not None and conn.call.codec == "mulaw"


async def test_a_start_the_call_cannot_go_on_with_closes_at_once_saying_why() -> None:
    l16 = json.loads(TWILIO_START)
    l16["start"]["mediaFormat"]["encoding"] = "audio/l16"
    peer = MediaStreamPeer(TWILIO)
    assert peer.receive_text(json.dumps(l16), 0) is None
    (close,) = await written(peer.outbox)
    assert isinstance(close, CloseRequest) and close.code == CloseCode.POLICY_VIOLATION
    assert close.reason.startswith("bad start: malformed start: audio 'audio/l16'")
    no_call = json.loads(TWILIO_START)
    del no_call["start"]["callSid"]
    peer = MediaStreamPeer(TWILIO)
    assert peer.receive_text(json.dumps(no_call), 0) is None
    assert "callSid is missing" in (await written(peer.outbox))[0].reason
