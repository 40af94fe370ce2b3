"""G.711 audio on GPT-Live and the OpenAI Realtime API, and GPT-Live's service tiers.

A phone call's 8 kHz audio crosses as G.711 with no resampling: 8 kHz microphone frames
reach the loopback servers as exactly ``rejoinder.models.g711``'s encoding of the same
samples, and G.711 output deltas come out as 8 kHz frames equal to their decoding.
``audio_format="auto"`` (the default) picks μ-law for an 8 kHz microphone only.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

import rejoinder as rj
from rejoinder.io import Connection, create_app
from rejoinder.models import g711
from rejoinder.models.audio import PCM16, AudioFrame
from rejoinder.models.realtime import (
    AgentAudio,
    ProviderError,
    RealtimeConfig,
    RealtimeError,
    RealtimeEvent,
    RealtimeSession,
)
from rejoinder.providers.openai.gpt_live import GPTLive, GPTLiveSession
from rejoinder.providers.openai.realtime import OpenAIRealtimeSession, Realtime
from rejoinder.testing import FakePhoneCall, MemoryAudioInput, MemoryAudioOutput, advance
from rejoinder.testing.gpt_live_server import GPTLiveServer
from rejoinder.testing.openai_realtime_server import OpenAIRealtimeServer

# Real sockets on virtual time, as in test_gpt_live.py / test_openai_realtime.py.
pytestmark = pytest.mark.looptime(noop_cycles=2000)

Law = Literal["pcmu", "pcma"]
LAWS: tuple[Law, ...] = ("pcmu", "pcma")
ENCODE: dict[str, Callable[[PCM16], bytes]] = {"pcmu": g711.ulaw_encode, "pcma": g711.alaw_encode}
DECODE: dict[str, Callable[[bytes], PCM16]] = {"pcmu": g711.ulaw_decode, "pcma": g711.alaw_decode}


def voice_8k(seconds: float, seed: int = 7) -> PCM16:
    """Speech-like 8 kHz samples over most of the 16-bit range (every G.711 segment)."""
    rng = np.random.default_rng(seed)
    samples = round(seconds * 8000)
    t = np.arange(samples) / 8000
    wave = np.sin(2 * np.pi * 310 * t) * 9000 + rng.normal(0, 4000, samples)
    return np.clip(wave, -32768, 32767).astype(np.int16)


def frames(pcm: PCM16, rate: int, ms: int = 20) -> list[AudioFrame]:
    step = rate * ms // 1000
    return [AudioFrame(pcm[i : i + step].copy(), rate) for i in range(0, len(pcm), step)]


async def take_until(
    session: RealtimeSession, done: Callable[[list[RealtimeEvent]], bool], within: float = 5.0
) -> list[RealtimeEvent]:
    events: list[RealtimeEvent] = []
    iterator = session.events().__aiter__()
    async with asyncio.timeout(within):
        while not done(events):
            events.append(await anext(iterator))
    return events


def agent_audio(events: list[RealtimeEvent]) -> list[AudioFrame]:
    return [event.frame for event in events if isinstance(event, AgentAudio)]


# -- GPT-Live ----------------------------------------------------------------------------------


@pytest.fixture
async def live() -> AsyncIterator[GPTLiveServer]:
    async with GPTLiveServer() as server:
        yield server


async def live_session(
    server: GPTLiveServer, input_sample_rate: int | None = None, **options: Any
) -> GPTLiveSession:
    session = GPTLive(api_key="sk-test", base_url=server.base_url, **options).session()
    await session.start(RealtimeConfig("Be brief.", input_sample_rate=input_sample_rate))
    return session


@pytest.mark.parametrize("law", LAWS)
async def test_gpt_live_g711_input_is_the_exact_encoding_of_8khz_frames(
    live: GPTLiveServer, law: Law
) -> None:
    session = await live_session(live, audio_format=law)
    assert live.session_starts[0]["audio"]["format"] == {"type": f"audio/{law}", "rate": 8000}
    assert live.audio_format() == (f"audio/{law}", 8000)

    pcm = voice_8k(0.35)  # 3 whole 100 ms chunks and 50 ms still pending
    for frame in frames(pcm, 8000):
        session.push_audio(frame)
    await live.wait_for("session.input_audio.append", 3)
    await advance(0.05)
    appends = live.of_type("session.input_audio.append")
    assert [len(base64.b64decode(a["audio"])) for a in appends] == [800, 800, 800]
    assert live.input_audio() == ENCODE[law](pcm[:2400])  # sample for sample: no resampling
    assert live.input_pcm() == DECODE[law](ENCODE[law](pcm[:2400])).astype("<i2").tobytes()
    await session.aclose()


@pytest.mark.parametrize("law", LAWS)
async def test_gpt_live_g711_output_comes_out_as_8khz_frames_of_the_decoded_bytes(
    live: GPTLiveServer, law: Law
) -> None:
    session = await live_session(live, audio_format=law)
    speech = ENCODE[law](voice_8k(0.3, seed=3))
    await live.audio_raw(speech[:1200])
    await live.audio_raw(speech[1200:])
    await live.silence(1.0)  # 8 kHz G.711 silence, in the session's format
    events = await take_until(
        session, lambda seen: sum(len(f.data) for f in agent_audio(seen)) >= 2400
    )
    heard = agent_audio(events)
    assert {frame.sample_rate for frame in heard} == {8000}
    data = np.concatenate([frame.data for frame in heard])
    np.testing.assert_array_equal(data[:2400], DECODE[law](speech))
    await session.aclose()


async def test_gpt_live_server_sends_g711_speech_in_the_sessions_format(
    live: GPTLiveServer,
) -> None:
    session = await live_session(live, audio_format="pcma")
    await live.speech(0.2, then_silence=1.0)
    events = await take_until(session, lambda seen: bool(agent_audio(seen)))
    frame = agent_audio(events)[0]
    expected = int(g711.alaw_decode(g711.alaw_encode(np.array([0x1000], np.int16)))[0])
    assert frame.sample_rate == 8000
    assert int(frame.data[0]) == expected
    await session.aclose()


@pytest.mark.parametrize(
    ("rate", "wire"),
    [
        (8000, {"type": "audio/pcmu", "rate": 8000}),
        (16000, {"type": "audio/pcm", "rate": 24000}),
        (24000, {"type": "audio/pcm", "rate": 24000}),
        (48000, {"type": "audio/pcm", "rate": 24000}),
        (None, {"type": "audio/pcm", "rate": 24000}),
    ],
)
async def test_gpt_live_auto_picks_pcmu_for_an_8khz_microphone_only(
    live: GPTLiveServer, rate: int | None, wire: dict[str, Any]
) -> None:
    session = await live_session(live, input_sample_rate=rate)  # audio_format="auto"
    assert live.session_starts[0]["audio"]["format"] == wire
    mic_rate = rate or 24000
    pcm = voice_8k(0.1) if mic_rate == 8000 else np.full(mic_rate // 5, 1000, np.int16)
    for frame in frames(pcm, mic_rate):
        session.push_audio(frame)
    chunk = await live.wait_for("session.input_audio.append")
    size = len(base64.b64decode(chunk["audio"]))
    if mic_rate == 8000:
        assert live.input_audio()[:800] == g711.ulaw_encode(pcm[:800])
    else:
        assert size == 4800  # 100 ms of 24 kHz PCM16
    await session.aclose()


async def test_gpt_live_pcmu_resamples_a_16khz_microphone_to_8khz(live: GPTLiveServer) -> None:
    session = await live_session(live, audio_format="pcmu", input_sample_rate=16000)
    t = np.arange(16000) / 16000
    pcm = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)
    for frame in frames(pcm, 16000):
        session.push_audio(frame)
    await live.wait_for("session.input_audio.append", 5)
    decoded = np.frombuffer(live.input_pcm(), "<i2").astype(np.float64)
    assert len(decoded) % 800 == 0 and len(decoded) >= 4000  # 8 kHz chunks
    # A 440 Hz tone at 8 kHz: 18.18 samples a period, same level after resampling.
    tail = decoded[1000:4000]
    assert np.sqrt(np.mean(tail**2)) == pytest.approx(8000 / np.sqrt(2), rel=0.1)
    await session.aclose()


async def test_gpt_live_model_rate_follows_an_explicit_g711_format() -> None:
    assert GPTLive(api_key="k").sample_rate == 24000
    assert GPTLive(api_key="k", audio_format="pcm").sample_rate == 24000
    assert GPTLive(api_key="k", audio_format="pcmu").sample_rate == 8000
    assert Realtime(api_key="k", audio_format="pcma").sample_rate == 8000
    assert Realtime(api_key="k").sample_rate == 24000


async def test_gpt_live_service_tier_header_and_backend_tier(live: GPTLiveServer) -> None:
    session = await live_session(live, service_tier="flex", backend_service_tier="priority")
    assert live.headers[0]["OpenAI-Service-Tier"] == "flex"
    assert live.session_starts[0]["delegation"]["responses"]["service_tier"] == "priority"
    await session.aclose()

    session = await live_session(live, backend_service_tier="ultrafast")
    assert "OpenAI-Service-Tier" not in live.headers[1]
    assert live.session_starts[1]["delegation"]["responses"]["service_tier"] == "ultrafast"
    await session.aclose()

    session = await live_session(live)
    assert "OpenAI-Service-Tier" not in live.headers[2]
    assert "service_tier" not in live.session_starts[2]["delegation"]["responses"]
    await session.aclose()

    # service_tier alone sets both: the backend tier follows it unless given.
    session = await live_session(live, service_tier="auto")
    assert live.headers[3]["OpenAI-Service-Tier"] == "auto"
    assert live.session_starts[3]["delegation"]["responses"]["service_tier"] == "auto"
    await session.aclose()
    assert GPTLive(api_key="k", service_tier="priority").headers["OpenAI-Service-Tier"] == (
        "priority"
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"service_tier": "fast"}, "service_tier must be None or one of"),
        ({"backend_service_tier": "Priority"}, "backend_service_tier must be None or one of"),
        ({"audio_format": "g711_ulaw"}, "audio_format must be one of"),
        ({"audio_format": "audio/pcmu"}, "audio_format must be one of"),
    ],
)
def test_gpt_live_invalid_options_raise(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GPTLive(api_key="k", **options)


def test_realtime_invalid_audio_format_raises() -> None:
    with pytest.raises(ValueError, match="audio_format must be one of"):
        Realtime(api_key="k", audio_format="ulaw")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("declared", "param"),
    [
        ({"type": "audio/opus", "rate": 48000}, "session.audio.format.type"),
        ({"type": "audio/pcmu", "rate": 16000}, "session.audio.format.rate"),
        ({"type": "audio/pcm", "rate": 16000}, "session.audio.format.rate"),
        ("audio/pcmu", "session.audio.format"),
    ],
)
async def test_gpt_live_server_refuses_an_unknown_format(
    live: GPTLiveServer, declared: object, param: str
) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(live.base_url.replace("http", "ws") + "/live/sessions")
        start = {"model": "gpt-live-1", "audio": {"format": declared}}
        await ws.send_str(json.dumps({"type": "session.start", "event_id": "s1", "session": start}))
        reply = json.loads((await ws.receive()).data)
        assert reply["type"] == "error"
        assert reply["error"]["param"] == param
        assert reply["error"]["client_event_id"] == "s1"
        assert reply["error"]["code"] in ("invalid_value", "invalid_type")
        assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await ws.close()


# -- OpenAI Realtime ---------------------------------------------------------------------------


@pytest.fixture
async def oai() -> AsyncIterator[OpenAIRealtimeServer]:
    async with OpenAIRealtimeServer() as server:
        yield server


async def realtime_session(
    server: OpenAIRealtimeServer, input_sample_rate: int | None = None, **options: Any
) -> OpenAIRealtimeSession:
    model = Realtime(api_key="sk-test", base_url=server.base_url, **options)
    session = model.session()
    await session.start(RealtimeConfig("Be brief.", input_sample_rate=input_sample_rate))
    return session


@pytest.mark.parametrize("law", LAWS)
async def test_realtime_g711_formats_input_and_output(oai: OpenAIRealtimeServer, law: Law) -> None:
    session = await realtime_session(oai, audio_format=law)
    audio = oai.of_type("session.update")[0]["session"]["audio"]
    assert audio["input"]["format"] == {"type": f"audio/{law}"}
    assert audio["output"]["format"] == {"type": f"audio/{law}"}
    connection = oai.connections[0]
    assert (connection.input_format, connection.output_format) == (f"audio/{law}",) * 2

    pcm = voice_8k(0.3, seed=11)
    for frame in frames(pcm, 8000):
        session.push_audio(frame)
    await oai.wait_for("input_audio_buffer.append", 3)
    appends = oai.of_type("input_audio_buffer.append")
    assert [len(base64.b64decode(a["audio"])) for a in appends] == [800, 800, 800]
    assert oai.input_audio() == ENCODE[law](pcm)

    speech = ENCODE[law](voice_8k(0.2, seed=5))
    await oai.response_created("resp_1")
    await oai.audio_bytes("resp_1", "item_1", speech)
    await oai.audio("resp_1", "item_1", seconds=0.1)  # the server's tone, in the format
    events = await take_until(session, lambda seen: len(agent_audio(seen)) >= 2)
    first, tone = agent_audio(events)
    assert (first.sample_rate, tone.sample_rate) == (8000, 8000)
    np.testing.assert_array_equal(first.data, DECODE[law](speech))
    assert len(tone.data) == 800 and np.abs(tone.data).max() > 5000
    await session.aclose()


@pytest.mark.parametrize(
    ("rate", "wire"),
    [
        (8000, {"type": "audio/pcmu"}),
        (16000, {"type": "audio/pcm", "rate": 24000}),
        (24000, {"type": "audio/pcm", "rate": 24000}),
        (48000, {"type": "audio/pcm", "rate": 24000}),
    ],
)
async def test_realtime_auto_picks_pcmu_for_an_8khz_microphone_only(
    oai: OpenAIRealtimeServer, rate: int, wire: dict[str, Any]
) -> None:
    session = await realtime_session(oai, input_sample_rate=rate)
    audio = oai.of_type("session.update")[0]["session"]["audio"]
    assert audio["input"]["format"] == wire and audio["output"]["format"] == wire
    pcm = voice_8k(0.1) if rate == 8000 else np.full(rate // 5, 1000, np.int16)
    for frame in frames(pcm, rate):
        session.push_audio(frame)
    chunk = await oai.wait_for("input_audio_buffer.append")
    if rate == 8000:
        assert base64.b64decode(chunk["audio"]) == g711.ulaw_encode(pcm[:800])
    else:
        assert len(base64.b64decode(chunk["audio"])) == 4800
    await session.aclose()


async def test_realtime_pcm_output_stays_24khz(oai: OpenAIRealtimeServer) -> None:
    session = await realtime_session(oai, audio_format="pcm")
    await oai.response_created("resp_1")
    await oai.audio("resp_1", "item_1", seconds=0.1)
    events = await take_until(session, lambda seen: bool(agent_audio(seen)))
    frame = agent_audio(events)[0]
    assert (frame.sample_rate, len(frame.data)) == (24000, 2400)
    await session.aclose()


async def test_realtime_g711_deltas_of_odd_length_are_fine_but_pcm_ones_are_not(
    oai: OpenAIRealtimeServer,
) -> None:
    session = await realtime_session(oai, audio_format="pcmu")
    await oai.response_created("resp_1")
    await oai.audio_bytes("resp_1", "item_1", b"\x10\x20\x30")
    events = await take_until(session, lambda seen: bool(agent_audio(seen)))
    assert len(agent_audio(events)[0].data) == 3
    await session.aclose()

    session = await realtime_session(oai, audio_format="pcm")
    await oai.response_created("resp_2")
    await oai.audio_bytes("resp_2", "item_2", b"\x10\x20\x30")
    events = await take_until(session, lambda seen: any(isinstance(e, ProviderError) for e in seen))
    assert "odd byte count" in str(events[-1])
    await session.aclose()


@pytest.mark.parametrize(
    ("audio", "param"),
    [
        ({"input": {"format": {"type": "g711_ulaw"}}}, "session.audio.input.format.type"),
        (
            {"output": {"format": {"type": "audio/pcm", "rate": 8000}}},
            "session.audio.output.format.rate",
        ),
        ({"input": {"format": "audio/pcmu"}}, "session.audio.input.format"),
    ],
)
async def test_realtime_server_rejects_an_unknown_format(
    oai: OpenAIRealtimeServer, audio: dict[str, Any], param: str
) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(oai.base_url.replace("http", "ws") + "/realtime?model=m")
        assert json.loads((await ws.receive()).data)["type"] == "session.created"
        update = {
            "type": "session.update",
            "event_id": "u1",
            "session": {"type": "realtime", "audio": audio},
        }
        await ws.send_str(json.dumps(update))
        reply = json.loads((await ws.receive()).data)
        assert reply["type"] == "error"
        assert (reply["error"]["param"], reply["error"]["event_id"]) == (param, "u1")
        assert oai.connections[0].input_format == "audio/pcm"  # nothing was applied
        await ws.close()


async def test_realtime_client_fails_to_start_when_the_format_is_rejected(
    oai: OpenAIRealtimeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rejoinder.providers.openai import _realtime_wire as wire

    monkeypatch.setattr(wire.AudioFormat, "realtime_wire", lambda self: {"type": "g711_ulaw"})
    with pytest.raises(RealtimeError, match="rejected the session configuration"):
        await realtime_session(oai, audio_format="pcmu", max_retries=0)


# -- whole sessions ----------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [8000, 16000])
async def test_an_agent_session_with_an_8khz_microphone_talks_g711(
    live: GPTLiveServer, rate: int
) -> None:
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=GPTLive(api_key="k", base_url=live.base_url), user_away_timeout=None
    )
    mic = MemoryAudioInput(sample_rate=rate, frame_ms=100)
    speaker = MemoryAudioOutput(sample_rate=rate)
    session.input.audio, session.output.audio = mic, speaker
    await session.start(rj.Agent(instructions="You answer the phone."))
    try:
        expected = {"type": "audio/pcmu", "rate": 8000} if rate == 8000 else None
        fmt = live.session_starts[0]["audio"]["format"]
        assert fmt == (expected or {"type": "audio/pcm", "rate": 24000})
        pcm = voice_8k(0.3) if rate == 8000 else np.full(rate // 2, 500, np.int16)
        await mic.push_pcm(pcm.astype("<i2").tobytes())
        await live.wait_for("session.input_audio.append", 3)
        if rate == 8000:
            assert live.input_audio()[:2400] == g711.ulaw_encode(pcm)
    finally:
        await session.aclose()


@pytest.mark.looptime(False)
@pytest.mark.timeout(60)
async def test_a_phone_call_crosses_to_gpt_live_as_mulaw_unchanged() -> None:
    """Twilio μ-law → the telephony transport (8 kHz PCM) → GPT-Live μ-law: the caller's
    bytes reach the service as they were sent, and the service's μ-law reaches the
    caller's ear with no resampling (every sample the exact G.711 value)."""
    async with GPTLiveServer() as live:
        sessions: list[rj.AgentSession[Any]] = []

        async def entrypoint(conn: Connection) -> None:
            model = GPTLive(api_key="k", base_url=live.base_url)
            session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
            sessions.append(session)
            await conn.serve(session, rj.Agent(instructions="You answer the phone."))

        app = create_app(entrypoint, telephony=["twilio"], webrtc=False, page=False)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with FakePhoneCall.connect(str(server.make_url("/twilio"))) as call:
                await live.wait_connected(within=10)
                assert live.session_starts[0]["audio"]["format"] == {
                    "type": "audio/pcmu",
                    "rate": 8000,
                }
                said = voice_8k(0.5, seed=1)
                await call.say(said, 8000)
                await call.silence(0.3)
                assert g711.ulaw_encode(said) in live.input_audio()

                await live.speech(0.3, then_silence=1.0)
                level = int(g711.ulaw_decode(g711.ulaw_encode(np.array([0x1000], np.int16)))[0])
                await call.until(lambda: call.heard_seconds() >= 0.3, timeout=10)
                heard = call.heard_audio()
                loud = heard[np.abs(heard) > 200]
                assert len(loud) == 2400  # 0.3 s of 8 kHz: nothing resampled, dropped or added
                assert set(loud.tolist()) == {level}
        finally:
            for session in sessions:
                await session.aclose()
            await server.close()
