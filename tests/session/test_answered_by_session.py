"""Answering detection inside a session, on virtual time: a placed call's line plays
synthesized audio; the detector on the microphone pushes ``answered_by`` events
(``source="audio"``), screening comes from the recognizer's transcripts, a provider's
verdict that came first wins unless ours says more, and ``wait_answered_by`` returns
within its bound so the agent speaks: ``unknown`` when nothing was decided."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.session.hearing.answering import detect_answered_by, wait_answered_by
from rejoinder.session.hearing.answering.tap import LineTap
from rejoinder.testing import ScriptedLLM, advance, now

from ._answering_audio import TUNED, assemble, machine, person, silence, speech
from ._placed_call import GREETING, INTRODUCTION, MESSAGE, Outbound, PlacedCall


async def placed(agent: rj.Agent | None = None, **options: object) -> PlacedCall:
    call = PlacedCall(**options)  # type: ignore[arg-type]
    await call.start(agent or rj.Agent(instructions="quiet"))
    return call


@pytest.mark.parametrize("rate", [8000, 16000])
async def test_a_greeting_then_a_beep_is_a_machine_then_the_moment_to_speak(rate: int) -> None:
    call = await placed(rate=rate)
    audio = machine(3, TUNED, rate)
    assert audio.beep_end is not None
    try:
        call.play(audio.audio)
        await advance(audio.audio.shape[0] / rate + 0.5)
        assert call.kinds() == [("machine", "audio", False), ("machine", "audio", True)]
        decided, beeped = (e.created_at - call.answered_at for e in call.events)
        assert decided <= 0.6 + 3.0
        assert audio.beep_end <= beeped <= audio.beep_end + 0.06
        assert "beep at" in call.events[1].detail
    finally:
        await call.aclose()


async def test_a_person_is_human_and_the_agent_greets_them_at_once() -> None:
    agent = Outbound()
    call = await placed(agent)
    hello = person(2, TUNED)
    try:
        call.play(hello.audio)
        await advance(4.0)
        assert call.kinds() == [("human", "audio", False)]
        assert agent.answered is not None
        kind, at = agent.answered
        assert kind == "human" and at == call.events[0].created_at  # no delay on top
        assert call.said() == [GREETING]
        assert call.played and call.played[0][0] < at + 0.1
        assert call.errors == []
    finally:
        await call.aclose()


async def test_screening_words_from_the_recognizer_make_the_agent_say_who_calls() -> None:
    """The assistant's words reach the detector through ``user_input_transcribed``."""
    agent = Outbound(timeout=6.0)
    words = "Hi the person you're calling is using a screening service from Google"
    call = await placed(agent, transcripts=[words], replies=[["Thanks."]] * 3)
    rng = np.random.default_rng(7)
    audio = assemble(
        [
            (silence(0.3, 8000), 0.0),
            (speech(rng, 4.5, 8000, 200.0), -22.0),
            (silence(3.0, 8000), 0.0),
        ],
        8000,
        -55.0,
        rng,
        phone=True,
    )
    try:
        call.play(audio)
        await advance(8.0)
        kinds = [k for k, _, _ in call.kinds()]
        assert "screening" in kinds and kinds[-1] == "screening"
        assert '"' in call.events[-1].detail  # the phrase it matched
        # The session hears the callee while the agent enters, so the words are
        # recognized two seconds in, before the sound alone would say machine (the
        # assistant talks as long as a greeting): no voicemail is even attempted.
        assert call.kinds() == [("screening", "audio", False)]
        assert call.events[0].created_at == pytest.approx(call.answered_at + 2.0, abs=0.1)
        assert agent.answered is not None and agent.answered[0] == "screening"
        assert agent.voicemail is None
        assert call.said()[0] == INTRODUCTION and MESSAGE not in call.said()
        assert call.errors == []
    finally:
        await call.aclose()


async def test_the_bounded_wait_returns_unknown_in_time_and_the_agent_speaks() -> None:
    agent = Outbound(timeout=2.0)
    call = await placed(agent)
    try:
        call.play(silence(6.0, 8000).astype(np.int16))
        await advance(2.5)
        assert agent.answered == ("unknown", pytest.approx(call.answered_at + 2.0, abs=0.01))
        assert call.said() == [GREETING]
        await advance(3.0)  # the detector's own bound: 5 s after the answer
        assert call.kinds() == [("unknown", "audio", False)]
        assert "nobody spoke" in call.events[0].detail
    finally:
        await call.aclose()


async def test_the_wait_ends_at_the_detectors_own_unknown() -> None:
    agent = Outbound(timeout=30.0)
    call = await placed(agent)
    try:
        call.play(silence(7.0, 8000).astype(np.int16))
        await advance(6.0)
        assert agent.answered == ("unknown", pytest.approx(call.answered_at + 5.0, abs=0.03))
        assert call.said() == [GREETING]
    finally:
        await call.aclose()


async def test_a_decision_already_made_is_returned_at_once() -> None:
    call = await placed()
    try:
        call.session.push_answered_by("human", source="provider")
        started = now()
        assert await wait_answered_by(call.session, timeout=3.0) == "human"
        assert now() == started
    finally:
        await call.aclose()


async def test_a_provider_verdict_first_wins_unless_ours_has_the_beep() -> None:
    call = await placed()
    audio = machine(5, TUNED)
    try:
        call.session.push_answered_by("machine", source="provider", detail="machine_start")
        call.play(audio.audio)
        await advance(audio.audio.shape[0] / 8000 + 0.5)
        # Our "machine" says nothing new: withheld; our beep says when to speak: pushed.
        assert call.kinds() == [("machine", "provider", False), ("machine", "audio", True)]
        assert call.listener is not None
        assert [v.answered_by for v in call.listener.withheld] == ["machine"]
    finally:
        await call.aclose()


async def test_our_verdict_refines_a_provider_unknown() -> None:
    call = await placed()
    try:
        call.session.push_answered_by("unknown", source="provider")
        call.play(person(4, TUNED).audio)
        await advance(4.0)
        assert call.kinds() == [("unknown", "provider", False), ("human", "audio", False)]
    finally:
        await call.aclose()


async def test_without_a_detector_the_wait_takes_the_providers_answer() -> None:
    agent = Outbound()
    call = await placed(agent, detect=False)
    try:
        await advance(0.7)
        call.session.push_answered_by("unknown", source="provider")
        await advance(0.1)
        assert agent.answered == ("unknown", pytest.approx(call.answered_at + 0.7))
    finally:
        await call.aclose()


async def test_the_wait_returns_unknown_when_the_session_closes() -> None:
    call = await placed(detect=False)
    waiting = asyncio.ensure_future(wait_answered_by(call.session, timeout=10))
    await advance(1.0)
    await call.aclose()
    await advance(0)
    assert waiting.done() and waiting.result() == "unknown"


async def test_detection_must_come_before_start_and_once() -> None:
    session: rj.AgentSession[None] = rj.AgentSession(llm=ScriptedLLM([]))
    detect_answered_by(session)
    with pytest.raises(RuntimeError, match="already"):
        detect_answered_by(session)
    other: rj.AgentSession[None] = rj.AgentSession(llm=ScriptedLLM([]))
    await other.start(rj.Agent(instructions="x"))
    try:
        with pytest.raises(RuntimeError, match="before the session starts"):
            detect_answered_by(other)
        with pytest.raises(ValueError, match="timeout"):
            await wait_answered_by(other, timeout=-1)
    finally:
        await other.aclose()


async def test_the_microphone_still_reaches_the_session_unchanged() -> None:
    """The detector sees frames on their way; the session's hearing gets every one."""
    call = await placed(transcripts=["hello"], replies=[["Hi there."]])
    try:
        call.play(person(2, TUNED).audio)
        await advance(4.0)
        assert [m.content for m in call.session.history.messages() if m.role == "user"] == ["hello"]
    finally:
        await call.aclose()


# ------------------------------------------------------------ the line's wrapper


class Line:
    """A microphone that yields ``count`` frames of 20 ms, then ends or fails."""

    def __init__(self, count: int, fail: Exception | None = None) -> None:
        self.count, self.fail = count, fail
        self.sample_rate = 8000

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for i in range(self.count):
            await advance(0.02)
            yield rj.AudioFrame(np.full(160, i, np.int16), 8000)
        if self.fail is not None:
            raise self.fail


async def read_all(tap: LineTap) -> list[int]:
    return [int(frame.data[0]) async for frame in tap]


async def test_the_wrapper_passes_every_frame_in_order_and_sees_each_once() -> None:
    seen: list[int] = []
    tap = LineTap(Line(50), lambda f: seen.append(int(f.data[0])))
    tap.start()
    await advance(0.51)  # nobody reads yet: the wrapper reads the line all the same
    assert seen == list(range(25))
    assert await read_all(tap) == list(range(50))
    assert seen == list(range(50))
    assert tap.sample_rate == 8000  # the transport's own members show through


async def test_the_lines_failure_reaches_the_sessions_reader() -> None:
    tap = LineTap(Line(3, fail=ConnectionError("line dropped")), lambda f: None)
    tap.start()
    frames: list[int] = []

    async def read() -> None:
        async for frame in tap:
            frames.append(int(frame.data[0]))

    with pytest.raises(ConnectionError, match="line dropped"):
        await read()
    assert frames == [0, 1, 2]


async def test_a_reader_that_never_comes_keeps_only_the_last_seconds() -> None:
    tap = LineTap(Line(2000), lambda f: None)  # 40 s of line
    tap.start()
    await advance(41.0)
    frames = await read_all(tap)
    assert len(frames) == 1500  # 30 s
    assert frames[-1] == 1999 and frames == sorted(frames)


# ---------------------------------------------------------- the wait, at random

answers = st.lists(
    st.tuples(
        st.integers(0, 40).map(lambda tenths: tenths / 10),
        st.sampled_from(["human", "machine", "screening", "unknown"]),
        st.sampled_from(["provider", "audio"]),
        st.booleans(),
    ),
    max_size=5,
)
# The wait starts, and its bound ends, between the events' tenths: no two things at once.
starts = st.integers(0, 30).map(lambda tenths: tenths / 10 + 0.05)
bounds = st.integers(0, 30).map(lambda tenths: tenths / 10 + 0.025)


def expected_answer(
    events: list[tuple[float, str, str, bool]], asked: float, bound: float, detect: bool
) -> tuple[str, float]:
    """What ``wait_answered_by`` should return and when (seconds after the answer): a
    decisive event ends it; an unknown from our detector ends it, as does any unknown
    when no detector listens; events before the wait count only when a detector
    listens (it records them)."""
    for at, kind, source, _ in events:
        ends = kind != "unknown" or source == "audio" or not detect
        if not ends or (at < asked and not detect):
            continue
        if at > asked + bound:
            break
        return kind if kind != "unknown" else "unknown", max(at, asked)
    return "unknown", asked + bound


@settings(max_examples=40, deadline=None)
@given(events=answers, wait_from=starts, bound=bounds, detect=st.booleans())
async def test_the_wait_returns_the_first_decisive_answer_or_unknown_in_time(
    events: list[tuple[float, str, str, bool]], wait_from: float, bound: float, detect: bool
) -> None:
    session: rj.AgentSession[None] = rj.AgentSession(llm=ScriptedLLM([]))
    if detect:
        detect_answered_by(session)
    started: list[float] = []
    session.on("session_started", lambda e: started.append(e.created_at))
    await session.start(rj.Agent(instructions="x"))
    # The call was answered when the session started (the detector counts from there),
    # not when start() returned: under load the loop's clock may move in between.
    start = started[0]
    timed = sorted(events, key=lambda e: e[0])

    async def answer() -> None:
        for at, kind, source, beep in timed:
            await advance(start + at - now())
            session.push_answered_by(kind, source=source, beep=beep)  # type: ignore[arg-type]

    pushing = asyncio.ensure_future(answer())
    try:
        await advance(start + wait_from - now())
        result = await wait_answered_by(session, timeout=bound)
        # With a detector, its own bound speaks too: nobody spoke in 5 s (no microphone).
        heard = [*timed, (5.0, "unknown", "audio", False)] if detect else timed
        kind, at = expected_answer(heard, wait_from, bound, detect)
        assert (result, now() - start) == (kind, pytest.approx(at, abs=1e-6))
    finally:
        pushing.cancel()
        await session.aclose()


async def test_a_finished_session_and_its_listener_are_freed() -> None:
    import gc
    import weakref

    from rejoinder.session.hearing.answering import listener

    call = PlacedCall()
    await call.start(rj.Agent(instructions="quiet"))
    call.play(person(1, TUNED).audio)
    await advance(3.0)
    assert call.kinds() == [("human", "audio", False)]
    await call.aclose()
    session = weakref.ref(call.session)
    assert session() in listener._listeners
    del call
    gc.collect()
    assert session() is None


@pytest.mark.parametrize("detector_first", [True, False])
async def test_detection_and_the_call_recorder_both_hear_the_line(
    detector_first: bool, tmp_path: object
) -> None:
    """Both wrap the microphone when the session starts, in either order: the recorder
    still records the caller, and the detector still decides."""
    import wave
    from pathlib import Path

    from rejoinder.recording import SessionRecorder

    path = Path(str(tmp_path)) / "call.wav"
    call = PlacedCall(detect=False)
    if detector_first:
        detect_answered_by(call.session)
        SessionRecorder(call.session, path)
    else:
        SessionRecorder(call.session, path)
        detect_answered_by(call.session)
    await call.start(rj.Agent(instructions="quiet"))
    call.play(person(1, TUNED).audio)
    await advance(3.5)
    await call.aclose()
    assert call.kinds() == [("human", "audio", False)]
    with wave.open(str(path)) as recorded:
        pcm = np.frombuffer(recorded.readframes(recorded.getnframes()), "<i2")
    left = pcm[0::2].astype(np.float64)
    assert float(np.sqrt(np.mean(left**2))) > 100  # the caller's "hello" is in it
