"""rj.BackgroundAudio on virtual time, through a ``ReportedPlayback`` and a listener that
keeps what it heard: the ambient loop fills the gaps and runs under the voice, the thinking
sound starts after its delay in ``thinking`` and stops at once, and none of it is ever the
agent speaking: the same session has the same states at the same times, and keeps the
same heard text after a barge-in, with and without it."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import wave
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.io.background_audio import BUILTIN_SOUNDS, LEAD, BackgroundAudio, _resample_loop
from rejoinder.models.audio import AudioFrame, PlaybackFinished
from rejoinder.testing import (
    Delay,
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    speech_frame,
)

from ..session._lifecycle import run_on_virtual_time, stress_settings
from ._background_rig import (
    AMBIENT,
    AMBIENT_AMPLITUDE,
    AMBIENT_HZ,
    CHUNK,
    HEARD,
    RATE,
    THINKING,
    THINKING_HZ,
    TICK,
    Listener,
    StandInSession,
    level,
    sine,
)

ROOT = Path(__file__).resolve().parents[2]
SOUNDS = ROOT / "src/rejoinder/io/background_sounds"


def voice(seconds: float, value: int = 300) -> list[AudioFrame]:
    """The scripted voice's kind of audio: a constant, in 20 ms frames."""
    return [AudioFrame(np.full(CHUNK, value, np.int16), RATE)] * round(seconds / TICK)


def thinking_in(pcm: np.ndarray[Any, Any]) -> bool:
    return level(pcm, THINKING_HZ) > HEARD


# ------------------------------------------------------------------ the sounds


def test_the_shipped_sounds_are_small_loops_that_the_generator_writes(tmp_path: Path) -> None:
    files = sorted(SOUNDS.glob("*.wav"))
    assert [f.stem for f in files] == sorted(BUILTIN_SOUNDS)
    assert sum(f.stat().st_size for f in files) < 200_000
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools/make_background_sounds.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    for name, make in generator.SOUNDS.items():
        generator.write_wav(tmp_path / name, make())
        assert (tmp_path / name).read_bytes() == (SOUNDS / name).read_bytes(), name
    for f in files:
        with wave.open(str(f)) as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000)
            pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)
        steps = np.abs(np.diff(pcm))
        # Looped, the end runs into the start no harder than the sound moves anyway.
        assert abs(pcm[0] - pcm[-1]) <= np.percentile(steps, 99.9), f.name


@pytest.mark.parametrize("rate", [8000, 24000, 48000])
def test_a_loop_resampled_to_the_outputs_rate_stays_seamless(rate: int) -> None:
    tone = sine(500.0, 10000, 0.2).data.astype(np.float32)  # 100 whole cycles
    out = _resample_loop(tone, 16000, rate)
    assert out.size == round(0.2 * rate)
    looped = np.concatenate((out, out))
    t = np.arange(looped.size) / rate
    expected = 10000 * np.sin(2 * np.pi * 500.0 * t)
    assert np.max(np.abs(looped - expected)) < 150  # no click where it wraps around


def test_what_cannot_play_is_refused_when_it_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ambient sound, a thinking sound or both"):
        BackgroundAudio()
    with pytest.raises(ValueError, match="thinking_delay"):
        BackgroundAudio("room_tone", thinking_delay=-1)
    with pytest.raises(ValueError, match="volume"):
        BackgroundAudio("room_tone", volume=float("nan"))
    with pytest.raises(ValueError, match="lead"):
        BackgroundAudio("room_tone", lead=0.001)
    with pytest.raises(ValueError, match="neither a built-in sound"):
        BackgroundAudio("office")
    with pytest.raises(TypeError, match="a name, a WAV file's path or an AudioFrame"):
        BackgroundAudio(42)
    with pytest.raises(ValueError, match="empty"):
        BackgroundAudio(AudioFrame(np.zeros(0, np.int16), 16000))
    eight_bit = tmp_path / "eight.wav"
    with wave.open(str(eight_bit), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes(800))
    with pytest.raises(ValueError, match="16-bit PCM"):
        BackgroundAudio(eight_bit)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not a wav at all")
    with pytest.raises(ValueError, match="not a WAV file"):
        BackgroundAudio(str(junk))
    stereo = tmp_path / "stereo.wav"
    with wave.open(str(stereo), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.tile(np.array([1000, 3000], "<i2"), 800).tobytes())
    assert BackgroundAudio(stereo, thinking="keyboard").thinking_on is False  # mixed down, loads


# ------------------------------------------------- through an output, stood in


async def test_the_ambient_fills_the_gaps_a_lead_ahead_and_none_of_it_is_the_agents() -> None:
    listener = Listener()
    events: list[Any] = []
    listener.output.set_listener(lambda: events.append("started"), events.append)
    session = StandInSession(listener.output)
    background = BackgroundAudio(AMBIENT).attach(session)
    assert background.output is listener.output
    player = asyncio.create_task(listener.run())
    await advance(1.0)
    player.cancel()
    heard = [pcm for _, pcm in listener.heard]
    assert len(heard) >= 45  # from the jitter buffer on, every tick plays something
    assert all(pcm.size == CHUNK for pcm in heard)
    assert all(abs(level(pcm, AMBIENT_HZ) - AMBIENT_AMPLITUDE) < 30 for pcm in heard)
    # sent ahead by the lead (counted from sending: the client's own jitter buffer comes
    # on top), never more than that and a frame
    assert listener.queued <= round((LEAD + listener.jitter + TICK) * RATE)
    # none of it is the agent's: no segment, nothing started, nothing counted as sent
    assert events == [] and not listener.output.pending and listener.output.total_sent == 0
    background.detach()
    assert listener.output.background is None


async def _voice_once(with_background: bool) -> tuple[list[Any], Listener]:
    listener = Listener()
    events: list[Any] = []
    start = asyncio.get_running_loop().time()
    listener.output.set_listener(
        lambda: events.append(("started", round(listener.now - start, 6))),
        lambda ev: events.append((ev, round(listener.now - start, 6))),
    )
    session = StandInSession(listener.output)
    if with_background:
        BackgroundAudio(AMBIENT).attach(session)
    player = asyncio.create_task(listener.run())
    await advance(0.51)
    for frame in voice(0.5):
        await listener.output.capture_frame(frame)
    listener.output.flush()
    await advance(1.5)
    player.cancel()
    session.close()
    return events, listener


async def test_a_reply_takes_back_the_ambient_sent_ahead_and_plays_when_it_would_have() -> None:
    plain, alone = await _voice_once(False)
    mixed, listener = await _voice_once(True)
    assert plain == mixed  # started and finished at the same times, the same length heard
    assert mixed[1][0] == PlaybackFinished(0.5, False)
    assert alone.clears == 0 and listener.clears == 1  # the ambient queued was taken back
    assert listener.output.total_sent == alone.output.total_sent == round(0.5 * RATE)
    voice_chunks = [pcm for _, pcm in listener.heard if abs(float(np.mean(pcm)) - 300) < 20]
    assert len(voice_chunks) == 25  # the whole reply, each chunk under the ambient ...
    assert all(abs(level(pcm, AMBIENT_HZ) - AMBIENT_AMPLITUDE) < 30 for pcm in voice_chunks)
    # ... and the ambient went on after it
    last_voice = max(t for t, pcm in listener.heard if abs(float(np.mean(pcm)) - 300) < 20)
    after = [pcm for t, pcm in listener.heard if t > last_voice + 0.2]
    assert after and all(level(pcm, AMBIENT_HZ) > 500 for pcm in after)


async def test_under_a_loud_voice_the_background_gives_way_and_nothing_clips() -> None:
    listener = Listener()
    loud = sine(AMBIENT_HZ, 30000, 0.2)
    session = StandInSession(listener.output)
    BackgroundAudio(loud, thinking=sine(THINKING_HZ, 30000, 0.1)).attach(session)
    session.agent("thinking")
    await advance(1.0)  # the thinking sound is on: the gaps sum two full-scale sounds
    gaps = [pcm for _, pcm, pending in listener.sent if not pending]
    assert gaps and all(int(np.max(np.abs(pcm.astype(np.int32)))) <= 32767 for pcm in gaps)
    summed = [p for p in gaps if thinking_in(p)]
    assert summed and max(int(np.max(np.abs(p.astype(np.int32)))) for p in summed) > 30000
    session.agent("speaking")
    for value in (32767, -32768, 32500):
        await listener.output.capture_frame(AudioFrame(np.full(CHUNK, value, np.int16), RATE))
    listener.output.flush()
    sent = [pcm.astype(np.int32) for _, pcm, pending in listener.sent if pending]
    assert (sent[0] == 32767).all() and (sent[1] == -32768).all()  # full scale: no room
    assert int(np.max(sent[2])) <= 32767 and int(np.min(sent[2])) < 32500  # scaled, not clipped
    assert level((sent[2] - 32500).astype(np.int16), AMBIENT_HZ) == pytest.approx(267, abs=5)


async def test_the_thinking_sound_starts_only_once_thinking_lasted_the_delay() -> None:
    listener = Listener()
    session = StandInSession(listener.output)
    background = BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.5)
    background.attach(session)
    player = asyncio.create_task(listener.run())
    await advance(0.3)
    session.agent("thinking")
    await advance(0.4)  # shorter than the delay
    session.agent("listening")
    await advance(0.5)
    assert not any(thinking_in(pcm) for _, pcm, _ in listener.sent)
    began = listener.now
    session.agent("thinking")
    await advance(1.0)
    player.cancel()
    first = min(t for t, pcm, _ in listener.sent if thinking_in(pcm))
    assert began + 0.5 <= first < began + 0.5 + TICK
    assert background.thinking_on
    # heard once the lead of ambient sent before it has played
    heard = min(t for t, pcm in listener.heard if thinking_in(pcm))
    assert heard <= began + 0.5 + LEAD + 2 * TICK


@pytest.mark.parametrize("stop", ["user speaks", "agent listens", "agent speaks", "interrupt"])
async def test_the_thinking_sound_stops_within_a_frame(stop: str) -> None:
    listener = Listener()
    session = StandInSession(listener.output)
    background = BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.2)
    background.attach(session)
    player = asyncio.create_task(listener.run())
    session.agent("thinking")
    await advance(1.0)
    assert thinking_in(listener.heard[-1][1])
    at = listener.now
    if stop == "user speaks":
        session.user("speaking")
    elif stop == "agent listens":
        session.agent("listening")
    elif stop == "agent speaks":
        session.agent("speaking")  # (a text reply: no voice through this output)
    else:
        listener.output.clear_buffer()  # a barge-in's clear, the agent still thinking
    await advance(0.6)
    player.cancel()
    after = [pcm for t, pcm in listener.heard if t > at + TICK]
    assert len(after) >= 20
    if stop == "interrupt":
        # the clear dropped what was queued; the agent still thinks: the sound goes on
        assert listener.clears == 1 and thinking_in(after[-1])
        return
    assert not any(thinking_in(pcm) for pcm in after)
    assert all(level(pcm, AMBIENT_HZ) > 500 for pcm in after[5:])  # the ambient goes on
    assert listener.clears == 1  # what was queued of it was taken back
    assert not background.thinking_on


async def test_the_voice_never_carries_the_thinking_sound() -> None:
    listener = Listener()
    session = StandInSession(listener.output)
    BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.1).attach(session)
    player = asyncio.create_task(listener.run())
    session.agent("thinking")
    await advance(0.5)
    # The reply's audio comes while the agent is still thinking (it is not heard yet).
    for frame in voice(0.4):
        await listener.output.capture_frame(frame)
        await advance(TICK)
    listener.output.flush()
    await advance(1.0)  # still "thinking": the stand-in was never told otherwise
    player.cancel()
    assert not any(thinking_in(pcm) for _, pcm, pending in listener.sent if pending)
    assert any(thinking_in(pcm) for _, pcm, pending in listener.sent if not pending)
    voice_at = [t for t, pcm in listener.heard if abs(float(np.mean(pcm)) - 300) < 20]
    assert len(voice_at) == 20
    spoken = listener.heard_between(voice_at[0], voice_at[-1] + TICK)
    assert not any(thinking_in(pcm) for _, pcm in spoken)


# ------------------------------------------------------------------- sessions


async def _answered(with_background: bool, *, interrupt_at: float | None = None) -> Any:
    """One session, the same script: a question, a slow answer, a slow follow-up."""
    listener = Listener()
    llm = ScriptedLLM(
        [
            [Delay(1.2), "It is sunny in Paris today, with a light breeze from the west."],
            [Delay(0.7), "And tomorrow too."],
        ]
    )
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm, tts=ScriptedTTS(), user_away_timeout=None
    )
    session.output.audio = listener.output
    timeline = StateTimeline(session)
    background = None
    if with_background:
        background = BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.5).attach(session)
    start = listener.now
    player = asyncio.create_task(listener.run())
    await session.start(rj.Agent(instructions="test"))
    try:
        if interrupt_at is None:
            await session.run(user_input="Weather in Paris?")
            await session.run(user_input="And tomorrow?")
        else:
            session.generate_reply(user_input="Weather in Paris?")
            await advance(interrupt_at)
            await session.interrupt()
        await advance(0.5)
    finally:
        player.cancel()
        await session.aclose()
    states = [(c.new, round(c.at - start, 6)) for c in timeline.changes if c.who == "agent"]
    history = [(m.role, m.content, m.interrupted) for m in session.history.messages()]
    return SimpleNamespace(
        states=states,
        history=history,
        listener=listener,
        background=background,
        start=start,
        timeline=timeline,
    )


async def test_a_session_has_the_same_states_at_the_same_times_with_and_without_it() -> None:
    plain = await _answered(False)
    mixed = await _answered(True)
    assert mixed.states == plain.states
    assert [s for s, _ in mixed.states] == [
        "thinking",
        "speaking",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    assert mixed.history == plain.history
    assert mixed.listener.output.total_sent == plain.listener.output.total_sent
    # Its own audio played throughout: the thinking sound in each long wait, ...
    times = mixed.timeline.times_of
    for thinking_at, speaking_at in zip(times("thinking"), times("speaking"), strict=True):
        during = mixed.listener.heard_between(thinking_at, speaking_at)
        assert any(thinking_in(pcm) for _, pcm in during)
        first = min(t for t, pcm in during if thinking_in(pcm))
        assert first >= thinking_at + 0.5  # only after the delay
    # ... never while the agent was speaking, and the ambient under all of it
    for spoke, listened in zip(times("speaking"), times("listening"), strict=True):
        during = mixed.listener.heard_between(spoke, listened)
        assert during and not any(thinking_in(pcm) for _, pcm in during)
        assert all(level(pcm, AMBIENT_HZ) > 500 for _, pcm in during)


async def test_after_a_barge_in_the_history_keeps_the_same_heard_text() -> None:
    plain = await _answered(False, interrupt_at=2.0)
    mixed = await _answered(True, interrupt_at=2.0)
    assert mixed.states == plain.states
    assert mixed.history == plain.history
    (_, heard, interrupted) = mixed.history[-1]
    assert interrupted and 0 < len(heard) < len("It is sunny in Paris today, with a light")
    # the barge-in's clear left no thinking sound: the agent went listening
    after = mixed.listener.heard_between(mixed.timeline.times_of("listening")[-1] + TICK, 1e9)
    assert after and not any(thinking_in(pcm) for _, pcm in after)


async def test_the_user_speaking_stops_the_thinking_sound_within_a_frame() -> None:
    listener = Listener()
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([[Delay(3.0), "Here it is."], ["Okay."]]),
        stt=ScriptedSTT(["Find my order.", "Hurry up."]),
        vad=ScriptedVAD(min_silence=0.3),
        tts=ScriptedTTS(),
        user_away_timeout=None,
        min_endpointing_delay=0.1,
    )
    session.input.audio = mic
    session.output.audio = listener.output
    timeline = StateTimeline(session)
    BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.5).attach(session)
    player = asyncio.create_task(listener.run())
    feeding = asyncio.create_task(mic.push_silence(60))
    await session.start(rj.Agent(instructions="test"))
    try:
        await advance(0.2)
        feeding.cancel()
        for _ in range(25):
            await mic.push(speech_frame(0.02))
        feeding = asyncio.create_task(mic.push_silence(60))
        await advance(1.6)  # the agent has been thinking for over a second
        assert session.agent_state == "thinking"
        assert thinking_in(listener.heard[-1][1])
        feeding.cancel()
        for _ in range(25):
            await mic.push(speech_frame(0.02))
        feeding = asyncio.create_task(mic.push_silence(60))
        await advance(0.3)
    finally:
        feeding.cancel()
        player.cancel()
        await session.aclose()
    user_spoke = timeline.times_of("speaking", who="user")[-1]
    after = listener.heard_between(user_spoke + TICK, 1e9)
    assert len(after) >= 10 and not any(thinking_in(pcm) for _, pcm in after)
    before = listener.heard_between(user_spoke - 0.2, user_spoke)
    assert any(thinking_in(pcm) for _, pcm in before)


# ----------------------------------------------------------------- wiring


async def test_it_finds_the_playback_behind_a_wrapper_and_warns_about_other_outputs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    listener = Listener()
    wrapped = SimpleNamespace(inner=listener.output)  # as the session recorder wraps it
    session = StandInSession(wrapped, started=False)
    background = BackgroundAudio(AMBIENT).attach(session)
    assert background.output is None  # not started: nothing read yet
    session.start()
    assert background.output is listener.output and listener.output.background is not None
    session.close()
    assert background.output is None and listener.output.background is None

    other = StandInSession(MemoryAudioOutput(24000))
    with caplog.at_level(logging.WARNING, logger="rejoinder.io"):
        quiet = BackgroundAudio(AMBIENT).attach(other)
    assert quiet.output is None
    assert "MemoryAudioOutput: no background audio" in caplog.text
    with pytest.raises(RuntimeError, match="attached to a session already"):
        quiet.attach(other)
    BackgroundAudio(AMBIENT).attach(StandInSession(listener.output))
    with pytest.raises(RuntimeError, match="another BackgroundAudio"):
        BackgroundAudio(AMBIENT).attach(StandInSession(listener.output))


async def test_once_closed_or_detached_nothing_more_is_sent() -> None:
    listener = Listener()
    session = StandInSession(listener.output)
    background = BackgroundAudio(AMBIENT).attach(session)
    await advance(0.5)
    sent = len(listener.sent)
    background.detach()
    await advance(0.5)
    assert len(listener.sent) == sent and sent > 0
    listener.output.close()  # a client gone: the output takes nothing more either
    assert not listener.output.takes_background
    assert not await listener.output.play_background(AMBIENT_FRAME)


AMBIENT_FRAME = AudioFrame(np.zeros(CHUNK, np.int16), RATE)


async def test_a_refused_background_frame_never_holds_the_voice_back() -> None:
    listener = Listener()
    output = listener.output
    await output.capture_frame(voice(TICK)[0])  # a reply is being captured ...
    assert not output.takes_background
    assert not await output.play_background(AMBIENT_FRAME)  # ... so this is refused
    async with asyncio.timeout(1):
        await output.capture_frame(voice(TICK)[0])  # and the reply goes on at once
    output.flush()
    assert [pending for *_, pending in listener.sent] == [True, True]
    with pytest.raises(ValueError, match="mono at 24000 Hz"):
        await output.play_background(AudioFrame(np.zeros(160, np.int16), 8000))


# -------------------------------------------------------- random interleavings

steps = st.lists(
    st.one_of(
        st.tuples(st.just("think"), st.just(0)),
        st.tuples(st.just("listen"), st.just(0)),
        st.tuples(st.just("user"), st.sampled_from([0, 1])),
        st.tuples(st.just("reply"), st.integers(1, 30)),
        st.tuples(st.just("clear"), st.just(0)),
        st.tuples(st.just("wait"), st.integers(1, 40)),
    ),
    min_size=1,
    max_size=30,
)


@given(steps)
@stress_settings(default_examples=120)
def test_random_interleavings_never_make_the_background_the_agent_speaking(
    script: list[tuple[str, int]],
) -> None:
    """Thinking, replies, the user's speech, barge-in clears and time, in any order: the
    voice's segments start and finish at the same times with the same heard lengths with
    and without background audio, and no frame sent while a voice is outstanding, nor any
    chunk heard while the agent is speaking, carries the thinking sound."""

    async def play(with_background: bool) -> tuple[list[Any], Listener]:
        listener = Listener()
        output = listener.output
        session = StandInSession(output)
        start = listener.now
        log: list[Any] = []

        def started() -> None:
            log.append(("started", round(listener.now - start, 6)))
            session.agent("speaking")

        def finished(ev: PlaybackFinished) -> None:
            log.append((ev, round(listener.now - start, 6)))
            session.agent("listening")

        output.set_listener(started, finished)
        if with_background:
            BackgroundAudio(AMBIENT, THINKING, thinking_delay=0.1).attach(session)
        for op, n in script:
            if op == "think" and not output.playing:
                session.agent("thinking")
            elif op == "listen" and not output.playing:
                session.agent("listening")
            elif op == "user":
                session.user("speaking" if n else "listening")
            elif op == "reply" and not output.pending:  # as a session: one at a time
                for frame in voice(n * TICK):
                    await output.capture_frame(frame)
                output.flush()
            elif op == "clear":
                output.clear_buffer()
            elif op == "wait":
                for _ in range(n):
                    await advance(TICK)
                    listener.tick()
                    if output.playing and listener.heard:
                        assert not thinking_in(listener.heard[-1][1])
        for _ in range(100):  # let everything play out
            await advance(TICK)
            listener.tick()
        session.close()
        if with_background:
            assert not any(thinking_in(pcm) for _, pcm, pending in listener.sent if pending)
        return log, listener

    async def scenario() -> None:
        plain, _ = await play(False)
        mixed, listener = await play(True)
        assert mixed == plain
        assert listener.heard  # the background played

    run_on_virtual_time(scenario)
