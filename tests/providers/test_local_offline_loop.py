"""The offline voice loop end to end, with real models and no network: Piper speaks a
sentence into the microphone, SileroVAD finds the utterance, WhisperSTT transcribes it,
the (scripted) model answers, and PiperTTS speaks the answer to the speaker.

Virtual time (looptime) stays on, and the test mixes it with real threads: the
microphone is paced on loop time (instant), while Whisper and Piper run in
``asyncio.to_thread``. looptime waits for executor futures in real time, advancing the
loop clock only as far as real time passed and only while a timer is due, so a pending
transcription holds the virtual clock back to real time instead of being skipped over.
The timing of states therefore depends on real model speed: only their order and
content are asserted, and every wait is bounded by ``asyncio.wait_for``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.providers.local.piper_tts import PiperTTS
from rejoinder.providers.local.whisper import WhisperSTT
from rejoinder.testing import MemoryAudioInput, MemoryAudioOutput, ScriptedLLM, StateTimeline

pytest.importorskip("faster_whisper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("piper", reason="needs the offline stack: rejoinder[local]")
pytest.importorskip("onnxruntime", reason="SileroVAD needs onnxruntime (rejoinder[local])")
if importlib.util.find_spec("silero_vad") is None:  # its data only: it needs torch to import
    pytest.skip("SileroVAD needs: pip install --no-deps silero-vad", allow_module_level=True)

from rejoinder.providers.local import SileroVAD

from .test_local_piper import SENTENCE, sentence_audio, shared_tts

REPLY = "Sure, I can help with that."
TIMEOUT = 60.0  # each wait; the real work (Whisper ≈ 1 s, Piper ≈ 0.5 s) is far less


def words(text: str) -> set[str]:
    return set(re.sub(r"[^a-z' ]", " ", text.lower()).split())


async def test_offline_voice_loop_hears_the_user_and_answers() -> None:
    speech = await sentence_audio()  # 22050 Hz, from the shared PiperTTS
    clip = AudioFrame(np.concatenate([frame.data for frame in speech]), speech[0].sample_rate)
    pcm = resample(clip, 16000).to_pcm()

    llm = ScriptedLLM([[REPLY]])
    tts: PiperTTS = shared_tts()  # loaded already by sentence_audio()
    stt = WhisperSTT()
    await asyncio.wait_for(stt.load(), TIMEOUT)
    mic = MemoryAudioInput(16000)
    speaker = MemoryAudioOutput(22050)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm,
        # SENTENCE has a 0.39 s pause at its comma: with the default silence (0.3 s) and
        # endpointing delay (0.4 s from the end of speech) that pause ends a turn, so
        # "Hello?" would be answered on its own. This test is about the whole loop.
        vad=SileroVAD(min_silence_duration=0.5),
        stt=stt,
        tts=tts,
        user_away_timeout=None,
    )
    session.input.audio = mic
    session.output.audio = speaker
    timeline = StateTimeline(session)
    transcripts: list[tuple[str, bool]] = []
    session.on(
        "user_input_transcribed", lambda ev: transcripts.append((ev.transcript, ev.is_final))
    )
    answered = asyncio.Event()

    def on_agent_state(ev: Any) -> None:
        if (ev.old_state, ev.new_state) == ("speaking", "listening"):
            answered.set()  # the reply was played out

    session.on("agent_state_changed", on_agent_state)
    await asyncio.wait_for(session.start(rj.Agent(instructions="voice")), TIMEOUT)
    try:
        await asyncio.wait_for(mic.push_silence(0.5), TIMEOUT)
        await asyncio.wait_for(mic.push_pcm(pcm), TIMEOUT)
        await asyncio.wait_for(mic.push_silence(2.0), TIMEOUT)
        try:
            await asyncio.wait_for(answered.wait(), TIMEOUT)
        except TimeoutError:
            pytest.fail(f"no answer was spoken; agent states: {timeline.agent_states()}")

        user = [m.content for m in session.history.messages() if m.role == "user"]
        assert len(user) == 1, user
        assert {"hello", "test", "offline", "voice"} <= words(user[0]), user
        # Piper samples its prosody (noise_scale): each run speaks SENTENCE a little
        # differently, and Whisper tiny.en now and then hears "of the" as "to be" (two
        # words out, two in). The key words above must be there every time.
        assert len(words(user[0]) ^ words(SENTENCE)) <= 4, user
        assert [t for t, final in transcripts if final] == user
        assert len(llm.calls) == 1
        assistant = [m.content for m in session.history.messages() if m.role == "assistant"]
        assert assistant == [REPLY]
        assert speaker.played_seconds > 0.5  # Piper's reply, at the output's 22050 Hz
        assert speaker.segments == [pytest.approx(speaker.played_seconds)]
        assert all(frame.sample_rate == 22050 for frame in speaker.frames)
        assert timeline.agent_states() == [
            "initializing",
            "listening",
            "thinking",
            "speaking",
            "listening",
        ]
        assert timeline.user_states() == ["listening", "speaking", "listening"]
    finally:
        await asyncio.wait_for(session.aclose(), TIMEOUT)
        await stt.aclose()
