"""local.OnsetInterruptionDetector in a session, on virtual time, with real speech from
eSpeak NG said over the agent: "wait, stop" stops it at the onset verdict; "uh-huh" lets
it talk on, with no state change and nothing added to the conversation."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.providers import local
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    speech_frame,
)

pytest.importorskip("espeakng_loader")

REPLY = "This is a long answer that goes on and on for quite a while, and then some more."


async def spoken(text: str) -> list[AudioFrame]:
    """``text`` in eSpeak's en-us voice, 16 kHz, in 20 ms frames from its first sound."""
    from rejoinder.providers.local import EspeakTTS

    tts = EspeakTTS(voice="en-us")

    frames = [frame async for frame in tts.synthesize(text)]
    pcm = resample(
        AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate), 16000
    )
    data = pcm.data[int(np.flatnonzero(np.abs(pcm.data) > 300)[0]) :]
    data = np.concatenate([data, np.zeros((-data.size) % 320, np.int16)])
    return [AudioFrame(data[i : i + 320], 16000) for i in range(0, data.size, 320)]


async def agent_talking(
    said: str, detector: rj.InterruptionDetector | None = None
) -> tuple[rj.AgentSession[Any], MemoryAudioInput, Any, Any]:
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([[REPLY], ["Sure."]]),
        stt=ScriptedSTT(["Hello?", said]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(threshold=300.0),
        user_away_timeout=None,
        interruption_detection=detector or local.OnsetInterruptionDetector(),
    )
    session.input.audio = mic
    session.output.audio = MemoryAudioOutput(24000)
    timeline = StateTimeline(session)
    await session.start(rj.Agent(instructions="voice"))
    for _ in range(50):
        await mic.push(speech_frame(0.02))
    await mic.push_silence(2.0)  # the reply is audible from 1.4
    handle = session.current_speech
    assert handle is not None and not handle.done()
    return session, mic, handle, timeline


async def say_over_the_agent(
    mic: MemoryAudioInput, clip: list[AudioFrame], handle: Any
) -> float | None:
    """Plays ``clip`` into the microphone; how long after its start the reply was
    interrupted (``None``: not while it played)."""
    loop = asyncio.get_running_loop()
    onset = loop.time()
    stopped: float | None = None
    for frame in clip:
        await mic.push(frame)
        if stopped is None and handle.interrupted:
            stopped = loop.time() - onset
    return stopped


@pytest.mark.parametrize("words", ["wait, stop", "no, Wednesday"])
async def test_a_real_interruption_stops_the_agent_within_300_ms(words: str) -> None:
    clip = await spoken(words)
    session, mic, handle, _ = await agent_talking(words)
    stopped_after = await say_over_the_agent(mic, clip, handle)
    await mic.push_silence(2.0)
    assert stopped_after is not None and stopped_after <= 0.3
    await session.aclose()


@pytest.mark.parametrize("words", ["uh-huh", "mm-hmm"])
async def test_a_backchannel_over_the_agent_changes_nothing(words: str) -> None:
    clip = await spoken(words)
    session, mic, handle, timeline = await agent_talking(words.capitalize() + ".")
    onset = asyncio.get_running_loop().time()
    for frame in clip:
        await mic.push(frame)
    await mic.push_silence(8.0)
    assert not handle.interrupted
    assert timeline.agent_states(since=onset) == ["speaking", "listening"]
    assert [m.role for m in session.history.messages()] == ["user", "assistant"]
    await session.aclose()


class RecordingClassifier:
    """Stands in for OnsetClassifier: records each window it is asked about."""

    threshold = 0.29

    def __init__(self, probability: float, window_seconds: float = 0.3) -> None:
        self.probability = probability
        self.window_seconds = window_seconds
        self.windows: list[np.ndarray] = []

    def backchannel_probability(self, pcm: np.ndarray, sample_rate: int) -> float:
        assert sample_rate == 16000
        self.windows.append(pcm)
        return self.probability


async def test_the_onset_is_judged_on_three_windows_around_the_vads_estimate() -> None:
    # The VAD's onset came 0-0.18 s after the real one (Silero on the benchmark's voices):
    # one window from 0.05 s before it cut the first syllable off. The session hands over
    # the audio from lead_seconds before its estimate to onset_seconds after it.
    classifier = RecordingClassifier(0.2)
    from rejoinder.providers import local

    detector = local.OnsetInterruptionDetector(classifier=classifier)  # type: ignore[arg-type]
    assert detector.lead_seconds == pytest.approx(0.2)
    assert detector.onset_seconds == pytest.approx(0.2)  # judged 0.2 s after the estimate
    sample = np.arange(round(0.4 * 16000), dtype=np.int16)  # sample i is at i / 16000 s
    verdict = await detector.at_onset([AudioFrame(sample, 16000)])
    assert verdict is rj.Interruption.INTERRUPT
    # windows of 0.3 s from 0.2, 0.15 and 0.1 s before the estimate (at 0.2 s here)
    assert [(int(w[0]), w.size) for w in classifier.windows] == [
        (0, 4800),
        (800, 4800),
        (1600, 4800),
    ]
    classifier.probability = 0.5  # the mean decides: feedback, let the words tell
    assert await detector.at_onset([AudioFrame(sample, 16000)]) is rj.Interruption.UNDECIDED


@pytest.mark.parametrize(
    ("words", "confidence", "verdict"),
    [
        ("Hold on.", 0.75, rj.Interruption.INTERRUPT),
        ("Sorry.", 0.74, rj.Interruption.INTERRUPT),
        ("Wait", None, rj.Interruption.INTERRUPT),
        # the start of an "mm-hmm" and of an "oh okay": not sure enough, wait on
        ("And I'm.", 0.43, rj.Interruption.UNDECIDED),
        ("Oh look.", 0.48, rj.Interruption.UNDECIDED),
        # a backchannel so far may go on "... but wait": never ignored while spoken
        ("Yeah", 0.9, rj.Interruption.UNDECIDED),
        ("", None, rj.Interruption.UNDECIDED),
    ],
)
def test_the_words_so_far_interrupt_only_when_sure_and_no_backchannel(
    words: str, confidence: float | None, verdict: rj.Interruption
) -> None:
    detector = local.OnsetInterruptionDetector()
    assert detector.interim_from == pytest.approx(0.3)
    assert detector.while_speaking(rj.Transcript(words, confidence=confidence)) is verdict


async def test_the_second_look_is_judged_on_three_half_second_windows() -> None:
    # Asked 0.4 s after the VAD's estimate, when the onset took the sound for feedback:
    # the same three window starts, each 0.5 s long.
    first, second = RecordingClassifier(0.9), RecordingClassifier(0.05, window_seconds=0.5)
    detector = local.OnsetInterruptionDetector(
        classifier=first,  # type: ignore[arg-type]
        second_look=second,  # type: ignore[arg-type]
    )
    assert detector.second_look_seconds == pytest.approx(0.4)
    sample = np.arange(round(0.6 * 16000), dtype=np.int16)
    assert await detector.at_onset([AudioFrame(sample[:6400], 16000)]) is rj.Interruption.UNDECIDED
    assert await detector.at_second_look([AudioFrame(sample, 16000)]) is rj.Interruption.INTERRUPT
    assert [(int(w[0]), w.size) for w in second.windows] == [(0, 8000), (800, 8000), (1600, 8000)]
    second.probability = 0.5
    assert await detector.at_second_look([AudioFrame(sample, 16000)]) is rj.Interruption.UNDECIDED


async def test_without_a_second_look_the_onset_is_the_only_look() -> None:
    detector = local.OnsetInterruptionDetector(second_look=False)
    assert detector.second_look is None and detector.second_look_seconds is None
    audio = [AudioFrame(np.zeros(9600, np.int16), 16000)]
    assert await detector.at_second_look(audio) is rj.Interruption.UNDECIDED


def test_a_second_look_must_hear_more_than_the_first() -> None:
    with pytest.raises(ValueError, match="longer than the onset"):
        local.OnsetInterruptionDetector(second_look=RecordingClassifier(0.1))  # type: ignore[arg-type]


def test_the_shipped_second_look_reads_half_a_second() -> None:
    detector = local.OnsetInterruptionDetector()
    assert detector.second_look is not None
    assert detector.second_look.window_seconds == pytest.approx(0.5)
    assert detector.second_look_seconds == pytest.approx(0.4)
    assert 0.0 < detector.second_look.threshold < 1.0


@pytest.mark.parametrize(
    ("words", "interrupts"),
    [
        ("wait, stop, I need to check something", True),
        ("hold on, that is not what I asked", True),
        ("uh-huh", False),
        ("mm-hmm", False),
    ],
)
async def test_the_shipped_second_look_on_real_speech_the_onset_took_for_feedback(
    words: str, interrupts: bool
) -> None:
    # The first look is made to say "feedback"; the real second look decides.
    detector = local.OnsetInterruptionDetector(classifier=RecordingClassifier(0.99))  # type: ignore[arg-type]
    clip = await spoken(words)
    session, mic, handle, _ = await agent_talking(
        words if interrupts else words.capitalize() + ".", detector
    )
    stopped_after = await say_over_the_agent(mic, clip, handle)
    await mic.push_silence(3.0)
    if interrupts:
        # the second look is due 0.4 s after the VAD's estimate of the onset
        assert stopped_after is not None and stopped_after <= 0.5
    else:
        assert not handle.interrupted
    await session.aclose()
