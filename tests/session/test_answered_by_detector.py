"""The answering detector on synthesized calls (``_answering_audio``), sans-I/O: a
person's "hello?", a machine's greeting with and without a beep, beeps at several
frequencies and lengths under line noise, a short tone inside speech that is no beep,
screening phrases, the bounds that decide ``unknown``; at 8 kHz through μ-law and at 16
kHz. Accuracy is measured on the tuned set and on the held-out set; a hypothesis test
feeds it junk."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rejoinder.models.audio import AudioFrame
from rejoinder.session.hearing.answering import AnsweredByDetector, DetectorOptions, Verdict
from rejoinder.session.hearing.answering.detector import FOLLOWS

from ._answering_audio import (
    HELD_OUT,
    TUNED,
    SynthCall,
    Voices,
    assemble,
    machine,
    person,
    silence,
    speech,
    tone,
    with_chirp,
)

RATES = (8000, 16000)


def run(call: SynthCall, frame: float = 0.02) -> list[Verdict]:
    """Feed ``call`` as a phone line would (``frame`` seconds a message, arriving when
    its last sample was captured) and call ``due`` as a timer would."""
    detector = AnsweredByDetector(0.0)
    step = round(frame * call.rate)
    verdicts: list[Verdict] = []
    for start in range(0, call.audio.shape[0], step):
        chunk = call.audio[start : start + step]
        now = (start + chunk.shape[0]) / call.rate
        verdicts += detector.push(AudioFrame(chunk, call.rate), now)
        verdicts += detector.due(now)
    return verdicts


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_person_saying_hello_then_waiting_is_human(rate: int, seed: int) -> None:
    call = person(seed, TUNED, rate)
    verdicts = run(call)
    assert [v.answered_by for v in verdicts] == ["human"]
    # Decided about a second after they stopped: well inside the 3 s bound.
    assert verdicts[0].at < call.spoke_for + 0.6 + 1.2


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_greeting_is_a_machine_within_bounded_time(rate: int, seed: int) -> None:
    call = machine(seed, TUNED, rate, beep=False)
    verdicts = run(call)
    assert verdicts[0].answered_by == "machine"
    assert verdicts[0].at <= 0.6 + 3.0  # the lead-in, then the decision bound
    assert not any(v.beep for v in verdicts)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize(
    ("freq", "length"), [(440.0, 0.15), (1000.0, 0.5), (1400.0, 1.0), (1950.0, 0.25)]
)
def test_a_beep_after_the_greeting_is_the_moment_to_speak(
    rate: int, freq: float, length: float
) -> None:
    rng = np.random.default_rng(int(freq))
    greeting = speech(rng, 4.0, rate, 150.0)
    pieces = [(greeting, -24.0), (silence(0.4, rate), 0.0), (tone(freq, length, rate), -22.0)]
    pieces.append((silence(2.0, rate), 0.0))
    audio = assemble(pieces, rate, -50.0, rng, phone=rate == 8000)
    beep_end = greeting.shape[0] / rate + 0.4 + length
    verdicts = run(SynthCall("machine", audio, rate, beep_end, 4.0))
    assert [v.label for v in verdicts] == ["machine", "beep"]
    beep = verdicts[1]
    assert beep.answered_by == "machine"
    assert beep_end - 0.03 <= beep.at <= beep_end + 0.05  # at the tone's end
    assert f"{freq:.0f}"[:2] in beep.detail


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("chirp", [0.03, 0.06])
def test_a_short_tone_inside_speech_is_no_beep(rate: int, chirp: float) -> None:
    for seed in range(8):
        verdicts = run(with_chirp(seed, TUNED, rate, chirp))
        assert not any(v.beep for v in verdicts), (seed, verdicts)


def test_a_beep_decides_alone_only_when_it_is_long_enough() -> None:
    """Before any machine verdict a beep makes the call a machine's on its own: it must
    last ``lone_beep`` (0.2 s). A 120 ms tone after a short "hello" is not one (a voice's
    harmonic can hold that long); a 300 ms tone after a short greeting is."""
    rate = 8000
    for length, beep in ((0.12, False), (0.3, True)):
        rng = np.random.default_rng(11)
        said = speech(rng, 0.0, rate, 150.0, words=3)
        pieces = [(silence(0.3, rate), 0.0), (said, -24.0), (silence(0.3, rate), 0.0)]
        pieces += [(tone(1000.0, length, rate), -22.0), (silence(3.0, rate), 0.0)]
        audio = assemble(pieces, rate, -55.0, rng, phone=True)
        verdicts = run(SynthCall("machine", audio, rate, None, said.shape[0] / rate))
        assert verdicts[0].beep is beep, (length, verdicts)
        assert verdicts[0].answered_by == ("machine" if beep else "human")


def test_a_tone_as_long_as_a_line_tone_is_no_beep() -> None:
    rate = 8000
    rng = np.random.default_rng(0)
    greeting = speech(rng, 3.0, rate, 150.0)
    pieces = [(greeting, -24.0), (tone(425.0, 3.0, rate), -20.0), (silence(1.0, rate), 0.0)]
    audio = assemble(pieces, rate, -55.0, rng, phone=True)
    assert not any(v.beep for v in run(SynthCall("machine", audio, rate, None, 3.0)))


@pytest.mark.parametrize(
    "text",
    [
        "Hi, if you record your name and reason for calling, I'll see if this person is available.",
        "Hello, the person you're calling is using a screening service from Google",
        "Please stay on the line",
        "Hi, I'm Google Assistant. Say your name and the reason for your call.",
        "Samsung Call Assist: state your name and reason for calling",
    ],
)
def test_screening_phrases_decide_screening(text: str) -> None:
    detector = AnsweredByDetector(0.0)
    verdicts = detector.heard(text, 2.0)
    assert [(v.answered_by, v.at) for v in verdicts] == [("screening", 2.0)]
    assert detector.heard(text, 2.5) == []  # decided once


def test_ordinary_words_are_not_screening() -> None:
    detector = AnsweredByDetector(0.0)
    for text in ("hello?", "yeah who's this", "you've reached John, leave a message", ""):
        assert detector.heard(text, 1.0) == []


def test_screening_words_refine_a_machine_verdict() -> None:
    """A screening assistant talks as long as a greeting: the sound says machine first,
    its words (once transcribed) say screening."""
    call = machine(4, TUNED, 8000, beep=False)
    detector = AnsweredByDetector(0.0)
    for start in range(0, 4 * 8000, 160):
        detector.push(AudioFrame(call.audio[start : start + 160], 8000), (start + 160) / 8000)
    assert detector.last == "machine"
    refined = detector.heard("If you record your name and reason for calling", 4.5)
    assert [v.answered_by for v in refined] == ["screening"]
    assert detector.finished


def test_nobody_speaking_is_unknown_five_seconds_after_the_answer() -> None:
    detector = AnsweredByDetector(10.0)
    quiet = AudioFrame(np.zeros(160, np.int16), 8000)
    verdicts: list[Verdict] = []
    t = 10.0
    while t < 16.0:
        t += 0.02
        verdicts += detector.push(quiet, t)
    assert [v.answered_by for v in verdicts] == ["unknown"]
    assert verdicts[0].at == pytest.approx(15.0, abs=0.021)
    assert detector.next_deadline() is None


def test_unknown_three_seconds_after_they_first_spoke_when_nothing_fits() -> None:
    """Speech with pauses just long enough to restart the count, but never a short
    utterance then quiet: no rule fits, so the bound decides."""
    rate = 8000
    rng = np.random.default_rng(3)
    pieces: list[tuple[np.ndarray, float]] = [(silence(0.5, rate), 0.0)]
    for _ in range(4):  # 2 s of talk, then 0.9 s of quiet, again and again
        pieces += [(speech(rng, 2.0, rate, 140.0), -24.0), (silence(0.9, rate), 0.0)]
    audio = assemble(pieces, rate, -55.0, rng, phone=True)
    verdicts = run(SynthCall("human", audio, rate, None, 2.0))
    assert verdicts[0].answered_by == "unknown"
    assert 0.5 + 3.0 - 0.05 <= verdicts[0].at <= 0.5 + 3.0 + 0.1


def run_in_bursts(call: SynthCall, frames: int) -> list[Verdict]:
    """``call`` as a jittery network delivers it: ``frames`` frames of 20 ms at once,
    when the last of them was captured."""
    detector = AnsweredByDetector(0.0)
    step = round(0.02 * call.rate) * frames
    verdicts: list[Verdict] = []
    for start in range(0, call.audio.shape[0], step):
        burst = call.audio[start : start + step]
        now = (start + burst.shape[0]) / call.rate
        for i in range(0, burst.shape[0], step // frames):
            chunk = burst[i : i + step // frames]
            verdicts += detector.push(AudioFrame(chunk, call.rate), now)
    return verdicts


@pytest.mark.parametrize("frames", [5, 15])
def test_bursts_of_frames_decide_as_the_steady_line_does(frames: int) -> None:
    """The rules run on sample positions: a burst does not shrink the pauses in it."""
    for call in (person(1, TUNED), machine(1, TUNED), person(3, TUNED, 16000)):
        # A second of the idle line first: the first burst's own lateness cannot be told
        # (its frames are stamped when it came), and it falls on silence.
        lead = np.zeros(call.rate, np.int16)
        call = SynthCall(call.kind, np.concatenate((lead, call.audio)), call.rate, None, 0.0)
        steady, bursty = run(call), run_in_bursts(call, frames)
        assert [v.label for v in bursty] == [v.label for v in steady]
        for a, b in zip(steady, bursty, strict=True):
            assert abs(a.at - b.at) <= 0.021


def test_a_line_that_sends_nothing_for_a_while_was_quiet() -> None:
    """A "hello?", then no frames at all for 1.5 s (a transport that sends nothing in
    silence): the next frame finds a person who said a word and waited."""
    hello = person(2, TUNED)
    said = round((0.6 + hello.spoke_for) * 8000)
    detector = AnsweredByDetector(0.0)
    verdicts: list[Verdict] = []
    for start in range(0, said, 160):
        verdicts += detector.push(
            AudioFrame(hello.audio[start : start + 160], 8000), (start + 160) / 8000
        )
    assert verdicts == []
    later = said / 8000 + 1.5
    verdicts += detector.push(AudioFrame(np.zeros(160, np.int16), 8000), later)
    assert [v.answered_by for v in verdicts] == ["human"]
    assert verdicts[0].at == pytest.approx(later, abs=0.03)


def test_due_alone_decides_when_frames_stop_coming() -> None:
    detector = AnsweredByDetector(0.0)
    assert detector.next_deadline() == 5.0
    assert detector.due(4.9) == []
    assert [v.answered_by for v in detector.due(5.0)] == ["unknown"]


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="machine_speech"):
        DetectorOptions(machine_speech=0)
    with pytest.raises(ValueError, match="min_beep"):
        DetectorOptions(min_beep=2.0, max_beep=1.0)


# ------------------------------------------------------------------ accuracy


def accuracy(voices: Voices, rate: int, seeds: int) -> dict[str, tuple[float, float]]:
    """Per task, the shares right and wrong on ``seeds`` seeds of ``voices`` (the rest
    is ``unknown``, after which the agent greets: safe, if not right). Tasks: the first
    verdict for a person, for a machine (greetings with and without a beep); the beep
    found within 60 ms of the tone's end; no beep found where there is none (a short
    tone inside the greeting)."""
    right: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for seed in list(voices.seeds)[:seeds]:
        beeping = machine(seed + 500, voices, rate)
        calls = [
            ("human", person(seed, voices, rate)),
            ("machine", machine(seed, voices, rate, beep=False)),
            ("machine", beeping),
            ("beep", beeping),
            ("no beep", with_chirp(seed, voices, rate)),
        ]
        for task, call in calls:
            verdicts = run(call)
            beeps = [v for v in verdicts if v.beep]
            if task in ("human", "machine"):
                first = verdicts[0].answered_by if verdicts else "unknown"
                ok, bad = first == call.kind, first not in (call.kind, "unknown")
            elif task == "beep":
                assert call.beep_end is not None
                ok = len(beeps) == 1 and abs(beeps[0].at - call.beep_end) <= 0.06
                bad = not ok
            else:
                ok = not beeps
                bad = not ok
            right[task] += ok
            wrong[task] += bad
            total[task] += 1
    return {task: (right[task] / total[task], wrong[task] / total[task]) for task in total}


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize(
    ("voices", "least_right", "most_wrong"),
    [(TUNED, 0.85, 0.05), (HELD_OUT, 0.75, 0.1)],
    ids=["tuned", "held-out"],
)
def test_accuracy_on_synthesized_calls(
    voices: Voices, least_right: float, most_wrong: float, rate: int
) -> None:
    shares = accuracy(voices, rate, seeds=8)
    assert all(r >= least_right and w <= most_wrong for r, w in shares.values()), shares


# ------------------------------------------------------------------ junk


sounds = st.sampled_from(["silence", "noise", "tone", "speech", "click", "loud"])


@settings(max_examples=60, deadline=None)
@given(
    rate=st.sampled_from([8000, 16000, 11025, 48000]),
    parts=st.lists(
        st.tuples(sounds, st.floats(0.005, 1.5), st.floats(50, 4000), st.integers(0, 2**16)),
        max_size=12,
    ),
    words=st.lists(st.tuples(st.integers(0, 11), st.text(max_size=40)), max_size=4),
    frame=st.sampled_from([0.01, 0.02, 0.03, 0.0123]),
)
def test_junk_never_raises_and_verdicts_follow_the_table(
    rate: int,
    parts: list[tuple[str, float, float, int]],
    words: list[tuple[int, str]],
    frame: float,
) -> None:
    detector = AnsweredByDetector(0.0)
    chunks = []
    for kind, seconds, freq, seed in parts:
        rng = np.random.default_rng(seed)
        n = max(1, int(seconds * rate))
        if kind == "silence":
            x = np.zeros(n)
        elif kind == "noise":
            x = rng.normal(0, 0.05, n)
        elif kind == "tone":
            x = 0.3 * np.sin(2 * np.pi * freq * np.arange(n) / rate)
        elif kind == "speech":
            x = 0.05 * speech(rng, seconds, rate, 80 + freq / 20)[:n]
        elif kind == "click":
            x = np.zeros(n)
            x[0] = 0.99
        else:
            x = rng.choice([-1.0, 1.0], n)
        chunks.append(x)
    audio = np.clip(np.concatenate(chunks) if chunks else np.zeros(1), -1, 1)
    pcm = (audio * 32767).astype(np.int16)
    step = max(1, round(frame * rate))
    said = dict(words)
    verdicts: list[Verdict] = []
    for i, start in enumerate(range(0, pcm.shape[0], step)):
        now = (start + step) / rate
        verdicts += detector.push(AudioFrame(pcm[start : start + step], rate), now)
        if i in said:
            verdicts += detector.heard(said[i], now)
    verdicts += detector.due(1000.0)
    last = None
    for verdict in verdicts:
        assert verdict.label in FOLLOWS[last], verdicts
        last = verdict.label
    assert verdicts, "the bound always decides"
    times = [v.at for v in verdicts]
    assert times == sorted(times)
