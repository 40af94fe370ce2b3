"""A turn detector asked early (``judges_early``): at the user's first pause inside
speech, the utterance so far is judged while the VAD's silence runs. A "complete" from
then stands if nothing but quiet follows, so the turn ends when the VAD ends the
utterance, without a second judgement after it (Smart Turn's 40-80 ms on a 2-core
machine, on every turn); an "incomplete", a verdict on audio the user spoke after, or
one the quiet end of a word followed, does not. On virtual time.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.testing import ScriptedSTT
from rejoinder.testing.scripted_turn import ScriptedTurnDetector

from .._virtual_time import virtual_loop
from .test_early_recognition import faded_frame
from .test_turn_detection import ENDINGS, SILENCE, WAIT, Call, TextEnd

EARLY = 0.1  # the pause inside speech at which the early work starts


def verdicts(c: Call) -> list[dict[str, object]]:
    return list(c.session.timeline.entries("turn_verdict"))


async def test_an_early_complete_ends_the_turn_when_the_vad_ends_the_utterance() -> None:
    detector = ScriptedTurnDetector([0.9], delay=0.03, judges_early=True)
    async with Call(detector) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        # judged at the first 0.1 s of pause (in at 1.13); the VAD ends it at 1.2: the
        # turn ends then, not 0.03 s later after a second judgement
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + SILENCE)]
        [call] = detector.calls
        assert call.at == pytest.approx(1.0 + EARLY)
        assert call.audio_seconds == pytest.approx(1.0 + EARLY, abs=0.03)
        [verdict] = verdicts(c)
        assert verdict["early"] is True and verdict["complete"] is True
        assert c.user_turns() == ["Hello there."]
        assert not c.errors


async def test_without_judges_early_the_detector_is_asked_once_after_the_silence() -> None:
    detector = ScriptedTurnDetector([0.9], delay=0.03)
    async with Call(detector) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + SILENCE + 0.03)]
        assert [call.at for call in detector.calls] == [pytest.approx(1.0 + SILENCE)]
        assert verdicts(c)[0]["early"] is False


async def test_an_early_incomplete_is_judged_again_with_the_whole_silence() -> None:
    # Smart Turn says "complete" more often given more of the silence: an early
    # "incomplete" is no verdict yet.
    detector = ScriptedTurnDetector([0.2, 0.9], delay=0.03, judges_early=True)
    async with Call(detector) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert [call.at for call in detector.calls] == [
            pytest.approx(1.0 + EARLY),
            pytest.approx(1.0 + SILENCE),
        ]
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + SILENCE + 0.03)]
        [verdict] = verdicts(c)
        assert verdict["early"] is False and verdict["probability"] == pytest.approx(0.9)


async def test_a_slow_early_judgement_races_a_fresh_one_and_the_first_decision_wins() -> None:
    # 0.15 s a judgement: the early one (from 1.1) is still running when the VAD ends
    # the utterance (1.2), so it is judged again alongside; the early "complete" lands
    # first (1.25), ahead of the fresh one (1.35).
    detector = ScriptedTurnDetector([0.9, 0.1], delay=0.15, judges_early=True)
    async with Call(detector) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert len(detector.calls) == 2
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + EARLY + 0.15)]
        assert verdicts(c)[0]["early"] is True


async def test_an_early_complete_on_a_pause_the_user_spoke_after_is_stale() -> None:
    # "Complete" at the short pause (1.1), but the user goes on at 1.15: it must not end
    # the turn, at the second part's end or ever.
    detector = ScriptedTurnDetector([0.95, 0.05, 0.05], delay=0.03, judges_early=True)
    stt = ScriptedSTT(["Book a table for two at seven, please"])
    async with Call(detector, stt, max_endpointing_delay=3.0) as c:
        await c.speak(1.0)
        await c.mic.push_silence(0.15)  # shorter than the VAD's silence: one utterance
        await c.speak(1.0)  # 1.15 to 2.15
        await c.mic.push_silence(4.0)
        assert [call.at for call in detector.calls] == [
            pytest.approx(1.0 + EARLY),
            pytest.approx(2.15 + EARLY),
            pytest.approx(2.15 + SILENCE),
        ]
        # both of the utterance's verdicts said incomplete on whole words: 1 s
        assert c.timeline.times_of("thinking") == [pytest.approx(2.15 + 1.0)]
        assert c.user_turns() == ["Book a table for two at seven, please"]


async def test_an_early_complete_followed_by_the_quiet_end_of_a_word_does_not_stand() -> None:
    # The word fades out under the VAD's threshold: the VAD counts a pause (and the
    # early work starts), but the fade is sound, so the audio judged early was not
    # the utterance's end.
    detector = ScriptedTurnDetector([0.9, 0.2], delay=0.03, judges_early=True)
    async with Call(detector) as c:
        await c.speak(1.0)
        for _ in range(8):  # 0.16 s of a faded word
            await c.mic.push(faded_frame(450.0))
        await c.mic.push_silence(2.0)
        assert [call.at for call in detector.calls] == [
            pytest.approx(1.0 + EARLY),
            pytest.approx(1.0 + SILENCE),  # the VAD counted the fade as silence
        ]
        assert verdicts(c)[0]["early"] is False
        # whole words, incomplete audio: 1 s from the end of speech
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + 1.0)]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=True,
)
@given(
    pieces=st.lists(
        st.tuples(st.integers(5, 50), st.integers(3, 75)),  # speech, pause: 20 ms frames
        min_size=1,
        max_size=4,
    ),
    script=st.lists(st.sampled_from([0.05, 0.3, 0.7, 0.95]), min_size=1, max_size=8),
    delay=st.sampled_from([0.0, 0.03, 0.15, 0.4]),
    endings=st.lists(st.sampled_from(sorted(ENDINGS)), min_size=4, max_size=4),
)
def test_early_verdicts_end_turns_only_on_audio_that_was_the_end(
    pieces: list[tuple[int, int]], script: list[float], delay: float, endings: list[str]
) -> None:
    """Whatever the speech, pauses, words and verdicts: the detector is asked at every
    pause of 0.1 s and again when the VAD ends an utterance (unless the early answer was
    "complete" and in by then); the turn ends on the table's delay for the verdict that
    decided, never before it is in, and never on a verdict about a pause the user spoke
    after."""
    max_delay = 2.0
    expected: list[float] = []
    calls = 0
    t, in_turn, ended = 0.0, 0, 0

    def verdict_of(call: int) -> float:
        return script[min(call, len(script)) - 1]

    for index, (speech, pause) in enumerate(pieces):
        end = t + speech * 0.02
        resumes = end + pause * 0.02 if index + 1 < len(pieces) else float("inf")
        t = end + pause * 0.02
        if resumes - end + 1e-9 < EARLY:
            continue  # no pause to speak of
        calls += 1
        early = verdict_of(calls)
        early_in = end + EARLY + delay
        if resumes - end + 1e-9 < SILENCE:
            continue  # the user went on: the early verdict is stale
        assume(abs(early_in - (end + SILENCE)) > 1e-6)  # a tie is a race
        in_turn += 1
        ended += 1
        if early >= 0.5 and early_in < end + SILENCE:
            verdict, judged_at = early, end + SILENCE  # in already: it stands
        else:
            calls += 1  # judged again when the VAD ends the utterance
            fresh, fresh_in = verdict_of(calls), end + SILENCE + delay
            if early >= 0.5:  # still running then: the first to decide wins
                verdict, judged_at = early, early_in
            else:
                verdict, judged_at = fresh, fresh_in
        words = ENDINGS[endings[ended - 1]]  # one scripted transcript an utterance
        if in_turn > 1 and words is TextEnd.COMPLETE and verdict < 0.5:
            wait: float | None = 0.4  # a verdict on what followed a pause is no verdict
        else:
            wait = WAIT[words, verdict >= 0.5]
        if wait is None:  # broken off: 1.5 s, up to max_delay the less sure the model is
            wait = 1.5 + (max_delay - 1.5) * (1 - verdict)
        at = max(end + wait, judged_at)
        assume(abs(at - resumes) > 0.05)  # a tie with the user's next word is a race
        if at < resumes:
            expected.append(at)
            in_turn = 0

    async def scenario() -> None:
        detector = ScriptedTurnDetector(script, delay=delay, judges_early=True)
        stt = ScriptedSTT(endings[: len(pieces)])
        async with Call(detector, stt, max_endpointing_delay=max_delay) as c:
            for speech, pause in pieces:
                await c.speak(speech * 0.02)
                await c.mic.push_silence(pause * 0.02)
            await c.mic.push_silence(max_delay + 1.0)
            committed = [m.timestamp for m in c.metrics if isinstance(m, rj.EOUMetrics)]
            assert len(detector.calls) == calls
            assert committed == [pytest.approx(x, abs=1e-6) for x in expected]
            assert not c.errors

    loop = virtual_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 600))
    finally:
        loop.close()
