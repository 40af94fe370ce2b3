"""SileroVAD: the real model on eSpeak NG speech, and the event logic on scripted
probabilities (a fake session standing in for onnxruntime)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("espeakng_loader")

from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample
from rejoinder.models.vad import VADEvent, VADStream
from rejoinder.providers.local import EspeakTTS, SileroVAD
from rejoinder.providers.local import silero as silero_module
from rejoinder.providers.local.silero import SileroStream

try:
    silero_module.model_path()
except RuntimeError as exc:  # pragma: no cover - the local extra is incomplete
    pytest.skip(str(exc), allow_module_level=True)

TEXT = (
    "Hello, this is a test of the offline voice agent. "
    "Please call me back tomorrow at three o'clock."
)
W = 0.032  # one model window


async def speech(rate: int = 16000) -> AudioFrame:
    frames = [frame async for frame in EspeakTTS().synthesize(TEXT)]
    voice = AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate)
    return resample(voice, rate)


def padded(voice: AudioFrame, before: float = 1.0, after: float = 1.0) -> AudioFrame:
    rate = voice.sample_rate
    data = np.concatenate(
        [
            np.zeros(round(before * rate), np.int16),
            voice.data,
            np.zeros(round(after * rate), np.int16),
        ]
    )
    return AudioFrame(data, rate)


def feed(
    stream: VADStream, audio: AudioFrame, frame_seconds: float = 0.02
) -> list[tuple[float, VADEvent]]:
    """Push ``audio`` in frames; each event with the stream time after its frame."""
    step = round(frame_seconds * audio.sample_rate) * audio.num_channels
    out: list[tuple[float, VADEvent]] = []
    for start in range(0, audio.data.shape[0], step):
        chunk = audio.data[start : start + step]
        out += [
            ((start + chunk.shape[0]) / audio.num_channels / audio.sample_rate, event)
            for event in stream.push(AudioFrame(chunk, audio.sample_rate, audio.num_channels))
        ]
    return out


def onset(voice: AudioFrame) -> float:
    """Seconds into ``voice`` of the first clearly audible sample."""
    return float(np.argmax(np.abs(voice.data) > 1000)) / voice.sample_rate


async def test_one_utterance_gives_one_start_and_one_end() -> None:
    voice = await speech()
    audio = padded(voice)
    stream = SileroVAD(min_silence_duration=0.5).stream()  # the end is checked for 0.5 s
    speech_at = 1.0 + onset(voice)
    speech_end = 1.0 + voice.duration
    events = feed(stream, audio)
    assert [e.type for _, e in events] == ["start_of_speech", "end_of_speech"]
    (t_start, start), (t_end, end) = events
    # 4 windows (0.128 s) of min speech after the model reacts (measured: +0.17 s)
    assert speech_at <= t_start <= speech_at + 0.2
    # the start reports the speech that confirmed it: at least min_speech_duration
    assert 0.1 <= start.speech_duration <= 0.2
    assert start.silence_duration == pytest.approx(t_start - start.speech_duration, abs=0.05)
    assert start.probability >= 0.5
    # 16 windows (0.512 s) of silence after the model lets go; eSpeak's output ends with a
    # little near-silence of its own, so it can be a bit under 0.5 s (measured: +0.52-0.59 s)
    assert speech_end + 0.4 <= t_end <= speech_end + 0.7
    assert 0.5 <= end.silence_duration <= 0.6
    assert end.speech_duration == pytest.approx(voice.duration - onset(voice), abs=0.25)
    assert end.probability < 0.35
    assert not stream.speaking
    assert stream.speech_seconds == 0.0


async def test_speaking_and_speech_seconds_follow_the_audio() -> None:
    voice = await speech()
    # The pause between TEXT's two sentences is close to the default 0.3 s silence, and
    # eSpeak NG's output varies by a few samples with what it synthesized before in the
    # process: a longer silence keeps this test about speech_seconds, not that pause.
    stream = SileroVAD(min_silence_duration=0.5).stream()
    assert not stream.speaking
    feed(stream, padded(voice, after=0.0))
    assert stream.speaking
    assert stream.speech_seconds == pytest.approx(voice.duration - onset(voice), abs=0.25)
    feed(stream, AudioFrame.silence(0.2, 16000))
    assert stream.speaking  # a short pause is not the end
    assert stream.last_probability < 0.35
    feed(stream, AudioFrame.silence(0.5, 16000))
    assert not stream.speaking


@pytest.mark.parametrize(("rate", "channels"), [(22050, 1), (48000, 2), (8000, 1)])
async def test_other_rates_and_channels_are_converted(rate: int, channels: int) -> None:
    voice = await speech(rate)
    audio = padded(voice)
    if channels == 2:
        audio = AudioFrame(np.repeat(audio.data, 2), rate, 2)
    # 0.5 s of silence: at 8 kHz the pause at the sentence's comma reaches 0.3 s.
    events = feed(SileroVAD(min_silence_duration=0.5).stream(), audio)
    assert [e.type for _, e in events] == ["start_of_speech", "end_of_speech"]
    # soxr adds 20-30 ms of delay (measured: +0.17 s at 48 kHz, +0.21 s at 8 and 22.05 kHz)
    assert 1.0 + onset(voice) <= events[0][0] <= 1.0 + onset(voice) + 0.25
    assert 1.0 + voice.duration + 0.4 <= events[1][0] <= 1.0 + voice.duration + 0.8


@pytest.mark.parametrize("frame_seconds", [0.01, 0.032, 0.1])
async def test_frame_size_does_not_matter(frame_seconds: float) -> None:
    audio = padded(await speech())
    reference = [e for _, e in feed(SileroVAD().stream(), audio)]
    assert [e for _, e in feed(SileroVAD().stream(), audio, frame_seconds)] == reference


@pytest.mark.parametrize("batch", [1, 3])
async def test_buffers_bound_once_give_what_a_plain_run_gives_bit_for_bit(batch: int) -> None:
    # The stream runs the model on buffers bound once (onnxruntime's I/O binding); a
    # session without io_binding takes the plain run, the reference.
    vad = SileroVAD(batch_windows=batch)
    real = vad._get_session()

    class Plain:
        def run(self, outputs: None, feeds: dict[str, Any]) -> Any:
            return real.run(outputs, feeds)

    bound, plain = vad.stream(), SileroStream(vad, Plain())  # type: ignore[arg-type]
    assert bound._bound is not None and plain._bound is None
    audio = padded(await speech(), 0.5, 0.7)
    seen: list[tuple[list[float], list[float]]] = []
    for start in range(0, audio.data.shape[0], 320):
        frame = AudioFrame(audio.data[start : start + 320], 16000)
        events = bound.push(frame), plain.push(frame)
        assert [e.type for e in events[0]] == [e.type for e in events[1]]
        seen.append(([bound.last_probability], [plain.last_probability]))
    assert [b for b, _ in seen] == [p for _, p in seen]
    assert max(p[0] for _, p in seen) > 0.9  # the speech was heard, state carried along


async def test_silence_and_quiet_noise_give_no_events() -> None:
    stream = SileroVAD().stream()
    assert feed(stream, AudioFrame.silence(3.0, 16000)) == []
    assert stream.last_probability < 0.1
    noise = np.random.default_rng(7).normal(0, 100, 3 * 16000)  # about -50 dBFS
    assert feed(stream, AudioFrame(noise.astype(np.int16), 16000)) == []
    assert not stream.speaking


async def test_streams_of_one_vad_are_independent() -> None:
    audio = padded(await speech())
    vad = SileroVAD()
    alone = [e for _, e in feed(vad.stream(), audio)]
    talker, quiet = vad.stream(), vad.stream()
    step = 320
    got: list[VADEvent] = []
    for start in range(0, audio.data.shape[0], step):
        got += talker.push(AudioFrame(audio.data[start : start + step], 16000))
        assert quiet.push(AudioFrame.silence(0.02, 16000)) == []
    assert got == alone


@pytest.mark.parametrize("batch", [2, 4, 10])
async def test_batching_gives_the_same_events_a_little_later(batch: int) -> None:
    audio = padded(await speech())
    single = feed(SileroVAD().stream(), audio)
    batched = feed(SileroVAD(batch_windows=batch).stream(), audio)
    assert [e for _, e in batched] == [e for _, e in single]
    for (t1, _), (tn, _) in zip(single, batched, strict=True):
        assert t1 <= tn <= t1 + (batch - 1) * W + 0.02 + 1e-9


# The event logic, on scripted probabilities --------------------------------------------


class ScriptedSession:
    """Stands in for the onnxruntime session: returns the next probabilities, one per row."""

    def __init__(self, probabilities: Sequence[float]) -> None:
        self._probabilities = list(probabilities)
        self.calls = 0

    def run(self, _outputs: None, feeds: dict[str, Any]) -> tuple[np.ndarray, Any, Any]:
        rows = feeds["input"].shape[0]
        assert feeds["input"].shape == (rows, 576)
        taken, self._probabilities = self._probabilities[:rows], self._probabilities[rows:]
        self.calls += 1
        return np.array(taken, np.float32), feeds["h"], feeds["c"]


def scripted(probabilities: Sequence[float], **options: Any) -> list[tuple[float, VADEvent]]:
    """Events (with window-end times) for one probability per 32 ms window."""
    stream = SileroStream(SileroVAD(**options), ScriptedSession(probabilities))
    window = AudioFrame(np.zeros(512, np.int16), 16000)
    out: list[tuple[float, VADEvent]] = []
    for i in range(len(probabilities)):
        out += [(round((i + 1) * W, 6), e) for e in stream.push(window)]
    return out


def test_start_needs_min_speech_and_end_needs_min_silence() -> None:
    # 0.1 s of speech is 4 windows (rounded up); 0.5 s of silence is 16 windows
    probs = [0.0] * 5 + [0.9] * 3 + [0.0] + [0.9] * 4 + [0.9] * 10 + [0.0] * 16
    events = scripted(probs, min_silence_duration=0.5)
    assert events == [
        (pytest.approx(13 * W), VADEvent("start_of_speech", 4 * W, 9 * W, pytest.approx(0.9))),
        (pytest.approx(39 * W), VADEvent("end_of_speech", 14 * W, 16 * W, 0.0)),
    ]


def test_the_default_silence_is_ten_windows() -> None:
    # 0.3 s, under the session's default min_endpointing_delay (0.4 s from the end of
    # speech): the VAD does not add to the endpointing delay.
    events = scripted([1.0] * 4 + [0.0] * 9)
    assert [e.type for _, e in events] == ["start_of_speech"]
    events = scripted([1.0] * 4 + [0.0] * 10)
    assert events[1] == (pytest.approx(14 * W), VADEvent("end_of_speech", 4 * W, 10 * W, 0.0))


def test_silence_before_the_start_is_reported() -> None:
    events = scripted([0.0] * 10 + [1.0] * 4)
    assert events[0][1].silence_duration == pytest.approx(10 * W)
    # a blip too short to start speech counts as silence
    events = scripted([0.0] * 10 + [1.0] * 2 + [0.0] * 3 + [1.0] * 4)
    assert events[0][1].silence_duration == pytest.approx(15 * W)
    # after an end, the silence counts from the end of the previous speech
    events = scripted([1.0] * 4 + [0.0] * 20 + [1.0] * 4)
    assert [e.type for _, e in events] == ["start_of_speech", "end_of_speech", "start_of_speech"]
    assert events[2][1].silence_duration == pytest.approx(20 * W)


def test_hysteresis() -> None:
    # 0.4 is below activation (0.5) but above deactivation (0.35): it continues speech
    # that has begun, and never begins it.
    assert scripted([0.4] * 20) == []
    events = scripted([0.6] + [0.4] * 3 + [0.3] * 16)
    assert [e.type for _, e in events] == ["start_of_speech", "end_of_speech"]
    assert events[0][0] == pytest.approx(4 * W)
    assert events[1][1].speech_duration == pytest.approx(4 * W)


def test_a_short_pause_counts_as_speech() -> None:
    probs = [1.0] * 4 + [0.0] * 15 + [1.0] * 2 + [0.0] * 16
    events = scripted(probs, min_silence_duration=0.5)
    assert [e.type for _, e in events] == ["start_of_speech", "end_of_speech"]
    assert events[1][1].speech_duration == pytest.approx(21 * W)
    assert events[1][0] == pytest.approx(37 * W)


def test_speaking_and_speech_seconds() -> None:
    stream = SileroStream(
        SileroVAD(min_silence_duration=0.5), ScriptedSession([1.0] * 5 + [0.0] * 16)
    )
    window = AudioFrame(np.zeros(512, np.int16), 16000)
    for _ in range(3):
        stream.push(window)
    assert not stream.speaking
    assert stream.speech_seconds == 0.0
    stream.push(window)
    assert stream.speaking
    assert stream.speech_seconds == pytest.approx(4 * W)
    assert stream.last_probability == 1.0
    stream.push(window)
    for _ in range(15):
        stream.push(window)
        assert stream.speech_seconds == pytest.approx(5 * W)  # not the trailing silence
    assert stream.push(window)[0].type == "end_of_speech"
    assert not stream.speaking
    assert stream.speech_seconds == 0.0


def test_custom_durations_and_thresholds() -> None:
    options = {
        "activation_threshold": 0.8,
        "deactivation_threshold": 0.7,
        "min_speech_duration": 0.0,  # still one window
        "min_silence_duration": 0.1,  # 4 windows
    }
    events = scripted([0.75, 0.85, 0.75, 0.65, 0.65, 0.65, 0.65], **options)
    assert [(t, e.type) for t, e in events] == [
        (pytest.approx(2 * W), "start_of_speech"),
        (pytest.approx(7 * W), "end_of_speech"),
    ]


def test_batched_windows_go_to_the_model_together() -> None:
    session = ScriptedSession([0.0] * 5 + [1.0] * 7)
    stream = SileroStream(SileroVAD(batch_windows=4), session)
    window = AudioFrame(np.zeros(512, np.int16), 16000)
    results = [stream.push(window) for _ in range(12)]
    assert session.calls == 3
    # the start is confirmed by window 9, but that is judged only with window 12
    assert [i for i, events in enumerate(results) if events] == [11]


def test_context_is_the_previous_windows_last_64_samples() -> None:
    seen: list[np.ndarray] = []

    class Recorder(ScriptedSession):
        def run(self, outputs: None, feeds: dict[str, Any]) -> tuple[np.ndarray, Any, Any]:
            seen.append(feeds["input"].copy())
            return super().run(outputs, feeds)

    for batch in (1, 3):
        seen.clear()
        stream = SileroStream(SileroVAD(batch_windows=batch), Recorder([0.0] * 6))
        ramp = np.arange(6 * 512, dtype=np.int16)
        stream.push(AudioFrame(ramp, 16000))
        rows = np.concatenate(seen)
        assert rows.shape == (6, 576)
        expected = np.concatenate([np.zeros(64), ramp]).astype(np.float32) / 32768
        for i in range(6):
            assert np.array_equal(rows[i], expected[i * 512 : i * 512 + 576])


def test_invalid_options() -> None:
    with pytest.raises(ValueError, match="threshold"):
        SileroVAD(activation_threshold=0.3, deactivation_threshold=0.4)
    with pytest.raises(ValueError, match="threshold"):
        SileroVAD(deactivation_threshold=0.0)
    with pytest.raises(ValueError, match="negative"):
        SileroVAD(min_silence_duration=-1)
    with pytest.raises(ValueError, match="batch_windows"):
        SileroVAD(batch_windows=0)


# Installation and import ----------------------------------------------------------------


@pytest.fixture
def no_loaded_engine() -> Iterator[None]:
    """The process's engine is loaded once; these tests load it again, without it."""
    silero_module._load_session.cache_clear()
    yield
    silero_module._load_session.cache_clear()


@pytest.mark.usefixtures("no_loaded_engine")
def test_missing_silero_wheel_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = silero_module.importlib.util.find_spec
    monkeypatch.setattr(
        silero_module.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "silero_vad" else real(name, *a),
    )
    with pytest.raises(RuntimeError, match=re.escape("pip install --no-deps silero-vad==6.2.3")):
        SileroVAD().stream()


@pytest.mark.usefixtures("no_loaded_engine")
def test_missing_onnxruntime_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes the import fail
    with pytest.raises(RuntimeError, match="pip install onnxruntime"):
        SileroVAD().stream()


def test_importing_the_package_loads_no_heavy_library() -> None:
    code = (
        "import sys, rejoinder.providers.local as local\n"
        "heavy = {'onnxruntime', 'espeakng_loader', 'numpy', 'soxr'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert {'SileroVAD', 'EspeakTTS'} <= set(dir(local))\n"
        "local.SileroVAD\n"
        "assert 'onnxruntime' not in sys.modules  # the session is created on first stream()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------ the background gate

CROWD = (
    "The train to the airport leaves from platform nine in ten minutes.",
    "I think we should order another round before the kitchen closes.",
    "She told me the meeting was moved to Thursday afternoon again.",
    "Have you seen the new exhibition at the museum downtown yet?",
)


def level_db(pcm: np.ndarray) -> float:
    """The RMS of the 10 ms blocks within 40 dB of the loudest (speech, not pauses)."""
    blocks = pcm[: pcm.size // 160 * 160].astype(np.float64).reshape(-1, 160)
    rms = np.sqrt(np.mean(blocks**2, axis=1)) + 1e-9
    loud = rms[rms > rms.max() / 100]
    return float(20 * np.log10(np.sqrt(np.mean(loud**2)) / 32768))


async def crowd(seconds: float) -> np.ndarray:
    """Four people talking at once (eSpeak voices saying other sentences), at 16 kHz."""
    rng = np.random.default_rng(7)
    n = round(seconds * 16000)
    mix = np.zeros(n)
    for i, voice in enumerate(("en-us", "en+f3", "en+m3", "en-gb-x-rp")):
        frames = [f async for f in EspeakTTS(voice=voice).synthesize(CROWD[i])]
        talk = resample(
            AudioFrame(np.concatenate([f.data for f in frames]), frames[0].sample_rate), 16000
        ).data.astype(np.float64)
        looped = np.tile(talk, n // talk.size + 2)
        start = int(rng.integers(talk.size))
        mix += looped[start : start + n]
    return mix


async def in_a_crowd(snr_db: float, noise: str = "babble") -> tuple[AudioFrame, float, float]:
    """The user's sentence 3 s into a room of ``noise`` ``snr_db`` below it; the speech's
    start and end (s)."""
    voice = await speech()
    before, after = 3.0, 3.0
    total = before + voice.duration + after
    if noise == "babble":
        room = await crowd(total)
    else:
        room = np.random.default_rng(3).standard_normal(round(total * 16000))
    target = 32768 * 10 ** ((level_db(voice.data) - snr_db) / 20)
    room *= target / np.sqrt(np.mean(room**2))
    start = round(before * 16000)
    room[start : start + voice.data.size] += voice.data
    active = np.flatnonzero(np.abs(voice.data) > 1000)
    mic = AudioFrame(np.clip(room, -32768, 32767).astype(np.int16), 16000)
    return mic, before + active[0] / 16000, before + active[-1] / 16000


def speaking_at(events: list[tuple[float, VADEvent]], t: float) -> bool:
    kinds = [e.type for at, e in events if at <= t]
    return bool(kinds) and kinds[-1] == "start_of_speech"


async def test_in_a_crowd_the_users_speech_ends_where_their_voice_does() -> None:
    # Silero hears babble as speech: without the gate the user's turn never ended (the
    # conversation benchmark's babble rows: every turn missed).
    mic, begins, ends = await in_a_crowd(10.0)
    ungated = feed(SileroVAD(min_silence_duration=0.2, noise_gate_db=None).stream(), mic)
    assert not [t for t, e in ungated if e.type == "end_of_speech" and ends < t < ends + 2.5]
    events = feed(SileroVAD(min_silence_duration=0.2).stream(), mic)
    assert speaking_at(events, begins + 0.5), events
    [end, *_] = [t for t, e in events if e.type == "end_of_speech" and t > ends - 0.1]
    assert end < ends + 0.9, events
    assert not speaking_at(events, ends + 2.5), events
    # The crowd alone (after the first second, which the gate needs to hear the room)
    # rarely rises over the gate for long enough to start anything.
    crowd_starts = [t for t, e in events if e.type == "start_of_speech" and 1.5 < t < begins - 0.3]
    assert len(crowd_starts) <= 1, events


async def test_steady_noise_and_quiet_rooms_are_left_to_the_model() -> None:
    # Silero already ignores white noise; a level gate there would only chop syllables.
    mic, _, _ = await in_a_crowd(10.0, noise="white")
    gated = feed(SileroVAD(min_silence_duration=0.2).stream(), mic)
    assert gated == feed(SileroVAD(min_silence_duration=0.2, noise_gate_db=None).stream(), mic)
    quiet = padded(await speech())
    assert feed(SileroVAD().stream(), quiet) == feed(SileroVAD(noise_gate_db=None).stream(), quiet)


def test_the_noise_gate_is_a_margin_in_db() -> None:
    for bad in (-1.0, 41.0):
        with pytest.raises(ValueError, match="noise_gate_db"):
            SileroVAD(noise_gate_db=bad)
    assert SileroVAD().noise_gate_db == 8.0
    assert SileroVAD(noise_gate_db=None).noise_gate_db is None
