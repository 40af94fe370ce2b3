"""``filter_audio`` on a whole session, on virtual time: the VAD hears the filtered
microphone; the far end reaches the filters that want it while the agent is heard; a
failing filter costs nothing but its filtering; the transport's slots keep working."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.audio_filters import AudioFilter, EchoTap, FilteredAudioInput, filter_audio
from rejoinder.models.audio import PCM16, AudioFrame
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    speech_frame,
)


class Mute(AudioFilter):
    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        return AudioFrame(np.zeros_like(frame.data), frame.sample_rate)


class Listens(AudioFilter):
    """Passes audio on; keeps, per frame, the far end it was given."""

    uses_reference = True

    def __init__(self) -> None:
        self.references: list[PCM16 | None] = []

    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        self.references.append(None if reference is None else reference.copy())
        return frame


class Explodes(AudioFilter):
    def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
        raise RuntimeError("boom")


def make_session(**options: Any) -> tuple[rj.AgentSession[Any], MemoryAudioInput]:
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["Sure thing."]] * 3),
        stt=ScriptedSTT(["hello there"] * 3),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(min_silence=0.3),
        user_away_timeout=None,
        **options,
    )
    mic = MemoryAudioInput(16000)
    session.input.audio = mic
    session.output.audio = MemoryAudioOutput(24000)
    return session, mic


async def speak(mic: MemoryAudioInput, seconds: float) -> None:
    for _ in range(round(seconds / 0.02)):
        await mic.push(speech_frame(0.02))


def user_states(session: rj.AgentSession[Any]) -> list[str]:
    states: list[str] = []
    session.on("user_state_changed", lambda ev: states.append(ev.new_state))
    return states


@pytest.mark.parametrize("muted", [False, True])
async def test_the_vad_hears_the_filtered_microphone(muted: bool) -> None:
    session, mic = make_session()
    if muted:
        filter_audio(session, [Mute()])
    states = user_states(session)
    await session.start(rj.Agent(instructions="x"))
    await speak(mic, 0.6)
    await mic.push_silence(1.0)
    assert ("speaking" in states) is (not muted)
    user_turns = [m for m in session.history.messages() if m.role == "user"]
    assert len(user_turns) == (0 if muted else 1)
    await session.aclose()


async def test_the_slots_are_wrapped_at_the_start_and_forward_the_transports_members() -> None:
    session, mic = make_session()
    speaker = session.output.audio
    filter_audio(session, [Listens()])
    assert session.input.audio is mic  # nothing changes before the start
    await session.start(rj.Agent(instructions="x"))
    assert isinstance(session.input.audio, FilteredAudioInput)
    assert session.input.audio.inner is mic
    assert session.input.audio.sample_rate == 16000  # the transport's own attribute
    assert isinstance(session.output.audio, EchoTap)
    assert session.output.audio.inner is speaker
    assert session.output.audio.sample_rate == 24000
    assert session.output.audio.can_pause is speaker.can_pause
    await session.aclose()


async def test_without_a_filter_that_wants_it_the_speaker_is_left_alone() -> None:
    session, _ = make_session()
    speaker = session.output.audio
    filter_audio(session, [Mute()])
    await session.start(rj.Agent(instructions="x"))
    assert session.output.audio is speaker
    await session.aclose()


async def test_the_far_end_is_what_the_agent_plays_while_it_is_heard() -> None:
    session, mic = make_session()
    listens = Listens()
    filter_audio(session, [listens], reference_lead=0.0)
    states: list[str] = []
    session.on("agent_state_changed", lambda ev: states.append(ev.new_state))
    await session.start(rj.Agent(instructions="x"))
    await mic.push_silence(0.2)
    handle = session.say("Hello, how are you today?")  # ScriptedTTS: a level of 300
    await mic.push_silence(2.5)
    await handle
    await mic.push_silence(0.5)
    heard = [r for r in listens.references if r is not None]
    speaking_s = len(heard) * 0.02
    played = session.output.audio.inner.segments[0]  # type: ignore[union-attr]
    assert abs(speaking_s - played) <= 0.06  # a frame's worth either side
    middle = np.concatenate(heard[2:-2])
    assert abs(float(np.median(middle)) - 300) <= 3  # the TTS's level, resampled to 16 kHz
    assert listens.references[-1] is None  # silence again once it finished
    assert states[-2:] == ["speaking", "listening"]  # the reports reached the session
    await session.aclose()


async def test_an_interruption_cuts_the_far_end() -> None:
    session, mic = make_session(min_interruption_duration=0.2)
    listens = Listens()
    filter_audio(session, [listens], reference_lead=0.0)
    await session.start(rj.Agent(instructions="x"))
    handle = session.say("A long answer that goes on and on and on and on and on.")
    await mic.push_silence(0.5)
    await speak(mic, 0.6)  # the user talks over it
    await mic.push_silence(1.0)
    assert handle.interrupted
    pattern = "".join("." if r is None else "#" for r in listens.references)
    runs = [run for run in pattern.split(".") if run]
    # The reply is heard for 0.5 s and the VAD's onset (60 ms), then paused and cut: no
    # far end while the user speaks; the answer to the user's words is the next run.
    assert 25 <= len(runs[0]) <= 30
    gap = pattern[len(runs[0]) :].index("#")
    assert gap >= 27  # the rest of the user's 0.6 s, and the answer's making
    assert len(runs) == 2
    await session.aclose()


async def test_a_failing_filter_is_reported_once_and_the_session_still_hears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session, mic = make_session()
    chain = filter_audio(session, [Explodes()])
    states = user_states(session)
    with caplog.at_level(logging.ERROR, logger="rejoinder"):
        await session.start(rj.Agent(instructions="x"))
        await speak(mic, 0.6)
        await mic.push_silence(1.0)
    assert "speaking" in states
    assert [m.content for m in session.history.messages() if m.role == "user"] == ["hello there"]
    assert len([r for r in caplog.records if "Explodes failed" in r.getMessage()]) == 1
    assert len(chain.failures) == 1
    await session.aclose()


async def test_filter_audio_is_once_per_session_and_before_its_start() -> None:
    session, _ = make_session()
    filter_audio(session, [Mute()])
    with pytest.raises(RuntimeError, match="already"):
        filter_audio(session, [Mute()])
    other, _ = make_session()
    await other.start(rj.Agent(instructions="x"))
    with pytest.raises(RuntimeError, match="before the session starts"):
        filter_audio(other, [Mute()])
    await other.aclose()


@pytest.mark.looptime(False)
async def test_a_heavy_chain_runs_in_a_worker_thread_in_order() -> None:
    import threading

    threads: set[str] = set()

    class Heavy(AudioFilter):
        runs_in_thread = True

        def process(self, frame: AudioFrame, reference: PCM16 | None = None) -> AudioFrame:
            threads.add(threading.current_thread().name)
            return AudioFrame(frame.data + 1, frame.sample_rate)

    class Source(rj.AudioInput):
        async def __aiter__(self):  # type: ignore[override]
            for i in range(20):
                yield AudioFrame(np.full(160, i, np.int16), 8000)

    from rejoinder.audio_filters import FilterChain

    filtered = FilteredAudioInput(Source(), FilterChain([Heavy()]), in_thread=True)
    got = [int(frame.data[0]) async for frame in filtered]
    assert got == list(range(1, 21))
    assert threads and all(name.startswith("rejoinder-audio-filter") for name in threads)
