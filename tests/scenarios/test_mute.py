"""``session.mute_input()``: the microphone is heard as silence, on every kind of session.

In a pipeline session the VAD hears silence (no turn starts, a turn in progress ends);
on a realtime model the provider is sent silence, and GPT-Live is also told with
``session.input_audio.mute``, again after every reconnect (a new connection starts
unmuted, gpt-live §2.4, §4.1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.providers.openai import GPTLive, Realtime
from rejoinder.testing import (
    GPTLiveServer,
    MemoryAudioInput,
    MemoryAudioOutput,
    OpenAIRealtimeServer,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    speech_frame,
)

from .realtime_rig import Rig, Shop, Weather, start_rig

pytestmark = pytest.mark.looptime(noop_cycles=2000)


async def speak(mic: MemoryAudioInput, seconds: float) -> None:
    for _ in range(round(seconds / 0.02)):
        await mic.push(speech_frame(0.02))


async def test_a_muted_pipeline_session_hears_nothing_until_unmuted() -> None:
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Heard you."]]),
        stt=ScriptedSTT(["Hello there."]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        user_away_timeout=None,
    )
    session.input.audio = mic
    session.output.audio = MemoryAudioOutput(24000)
    timeline = StateTimeline(session)
    with pytest.raises(RuntimeError, match="started session"):
        session.mute_input()
    await session.start(rj.Agent(instructions="voice"))
    try:
        session.mute_input()
        assert session.input_muted
        await speak(mic, 1.0)
        await mic.push_silence(2.0)
        assert timeline.user_states() == ["listening"]  # never speaking
        assert [m.role for m in session.history.messages()] == []
        session.unmute_input()
        assert not session.input_muted
        await speak(mic, 1.0)
        await mic.push_silence(2.0)
        assert timeline.user_states() == ["listening", "speaking", "listening"]
        assert [(m.role, m.content) for m in session.history.messages()] == [
            ("user", "Hello there."),
            ("assistant", "Heard you."),
        ]
        assert [e["muted"] for e in session.timeline.entries("input")] == [True, False]
    finally:
        await session.aclose()


async def test_muting_mid_speech_ends_the_users_speech() -> None:
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Ok."]]),
        stt=ScriptedSTT(["Hello."]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(min_silence=0.3),
        user_away_timeout=None,
    )
    session.input.audio = mic
    session.output.audio = MemoryAudioOutput(24000)
    timeline = StateTimeline(session)
    await session.start(rj.Agent(instructions="voice"))
    try:
        await speak(mic, 0.5)
        assert session.user_state == "speaking"
        session.mute_input()
        await speak(mic, 0.5)  # still talking, but heard as silence
        assert session.user_state == "listening"
        # the VAD's 0.3 s of silence after the mute (to a frame)
        assert timeline.times_of("listening", who="user")[-1] == pytest.approx(0.5 + 0.3, abs=0.03)
    finally:
        await session.aclose()


def loud(pcm: bytes) -> bool:
    return bool(np.abs(np.frombuffer(pcm, np.int16)).max(initial=0) > 1000)


async def test_gpt_live_is_told_and_sent_silence_and_mute_survives_a_reconnect(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    model = GPTLive(api_key="test", base_url=server.base_url)
    rig = await start_rig(model, Weather())
    rigs.append(rig)
    rig.session.mute_input()
    await rig.settle(0.1)
    await rig.mic.push(speech_frame(0.4, 24000))  # the user talks while muted
    await rig.settle(0.5)
    assert [e["type"] for e in server.received_on(1) if "mute" in e["type"]] == [
        "session.input_audio.mute"
    ]
    assert not loud(server.input_pcm(1))  # the speech never left the process
    await server.drop()
    await server.wait_connected(2, within=10)
    await rig.settle(0.5)
    after_start = [e["type"] for e in server.received_on(2)]
    # Re-applied first, right after session.start (and before anything queued).
    assert after_start[:2] == ["session.start", "session.input_audio.mute"]
    rig.session.unmute_input()
    await rig.settle(0.1)
    await rig.mic.push(speech_frame(0.4, 24000))
    await rig.settle(0.5)
    assert [e["type"] for e in server.received_on(2) if "mute" in e["type"]] == [
        "session.input_audio.mute",
        "session.input_audio.unmute",
    ]
    assert loud(server.input_pcm(2))
    await server.drop()
    await server.wait_connected(3, within=10)
    await rig.settle(0.5)
    assert not [e for e in server.received_on(3) if "mute" in e["type"]]  # unmuted: nothing


async def test_openai_realtime_has_no_mute_event_and_is_sent_silence(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    model = Realtime(api_key="sk-test", base_url=oai.base_url)
    rig = await start_rig(model, Shop())
    rigs.append(rig)
    rig.session.mute_input()
    await rig.mic.push(speech_frame(0.4, 24000))
    await advance(0.5)
    muted = oai.input_pcm()
    assert muted and not loud(muted)
    rig.session.unmute_input()
    await rig.mic.push(speech_frame(0.4, 24000))
    await advance(0.5)
    assert loud(oai.input_pcm()[len(muted) :])
