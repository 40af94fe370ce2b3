"""Randomized: speech over the agent judged by an ``InterruptionDetector``, with random
onset verdicts (interrupt, undecided, a failure), with or without a second look of
random verdict, judging delays, speech lengths, words (and how sure the recognizer was of
them), moments in the reply, and with or without a recognizer that does not stream judging
the words so far (``interim_from``, passes of random latency). Against a model of the
rule, on virtual time:

* the reply never pauses (a backchannel must not stop it even for a moment);
* it is interrupted exactly when the rule says: an onset ``INTERRUPT`` that lands while
  it plays, a second look's ``INTERRUPT`` asked before the words are in, speech past
  ``max_undecided_seconds``, or words that are no backchannel and
  that the recognizer was not unsure of throughout; and at the first of these, or when a
  pass over the words so far that the recognizer is sure of returns while the user speaks;
* otherwise nothing changes: the agent only ever speaks until the reply ends, and no
  user turn is added; when interrupted, the user's words (if any) are the next turn;
* nothing is left: the session closes with no obligation open.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rejoinder as rj
from rejoinder.models.interruption import INTERIM_SURE, UNSURE_WORDS
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedInterruptionDetector,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    speech_frame,
)

from .._virtual_time import virtual_loop
from ._batch_stt import BatchSTT

REPLY = "This is a long answer that goes on and on for quite a while, and then some more."
WORDS = ["Uh-huh.", "Yeah, I see.", "", "(coughs)", "No, Wednesday.", "Wait, stop."]
VERDICTS = [rj.Interruption.INTERRUPT, rj.Interruption.UNDECIDED, RuntimeError("broke")]
MIN_SPEECH = 0.06  # ScriptedVAD's
MIN_SILENCE = 0.3  # ScriptedVAD's: the utterance ends this long after the speech
INTERIM_FROM = 0.3
STEP = 0.04  # frame length: coarse frames keep the test fast on virtual time
SECOND_AT = 0.4


@settings(
    max_examples=int(os.environ.get("REJOINDER_STRESS_EXAMPLES", 50)),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    verdict=st.sampled_from(VERDICTS),
    delay=st.sampled_from([0.0, 0.01, 0.05]),
    speech_steps=st.integers(2, 35),  # 0.08-1.4 s of speech
    said=st.sampled_from(WORDS),
    into_reply=st.sampled_from([0.2, 1.0, 2.5]),
    confidence=st.sampled_from([None, 0.05, 0.22, 0.6]),
    pass_latency=st.sampled_from([None, 0.0, 0.05, 0.15]),  # None: a streaming recognizer
    second=st.sampled_from([None, *VERDICTS]),  # None: the detector has no second look
)
def test_speech_over_the_agent_is_judged_by_the_rule(
    verdict: rj.Interruption | Exception,
    delay: float,
    speech_steps: int,
    said: str,
    into_reply: float,
    confidence: float | None,
    pass_latency: float | None,
    second: rj.Interruption | Exception | None,
) -> None:
    speech = speech_steps * STEP
    assume(abs(speech - 1.0) > STEP)  # at max_undecided_seconds itself it is a race
    onset_seconds, max_undecided = 0.2, 1.0
    # The rule, from the script alone.
    onset_decides = verdict is rj.Interruption.INTERRUPT and speech > MIN_SPEECH
    made_up = bool(said) and confidence is not None and confidence < UNSURE_WORDS
    words_decide = not rj.is_backchannel(said) and not made_up
    interrupted = onset_decides or speech >= max_undecided + STEP / 2 or words_decide
    # Passes over the words so far: the first at INTERIM_FROM, judged if it returns
    # before the VAD ends the utterance; one that is sure of words that are no
    # backchannel stops the agent then (the same words end the utterance: no new outcome).
    sure = bool(said) and (confidence is None or confidence >= INTERIM_SURE)
    so_far_at: float | None = None
    if pass_latency is not None and sure and not rj.is_backchannel(said):
        returns, ends = INTERIM_FROM + pass_latency, speech + MIN_SILENCE
        assume(abs(returns - ends) > STEP)
        so_far_at = returns if returns < ends else None
    # A second look is asked at SECOND_AT unless the utterance's words were in before.
    words_in = speech + MIN_SILENCE + (pass_latency or 0.0)
    second_decides = False
    if second is not None:
        assume(abs(words_in - (SECOND_AT + delay)) > STEP)
        assume(abs(speech + MIN_SILENCE - (SECOND_AT + delay)) > STEP)
        second_decides = (
            second is rj.Interruption.INTERRUPT
            and speech > MIN_SPEECH
            and words_in > SECOND_AT + delay
        )
    interrupted = interrupted or second_decides
    stops_at = [so_far_at] if so_far_at is not None else []
    if second_decides:
        stops_at.append(SECOND_AT + delay)
    if onset_decides:
        stops_at.append(onset_seconds + delay)
    if speech >= max_undecided + STEP / 2:
        stops_at.append(max_undecided)

    async def scenario() -> None:
        detector = ScriptedInterruptionDetector(
            [verdict], delay=delay, onset_seconds=onset_seconds,
            max_undecided_seconds=max_undecided,
            interim_from=None if pass_latency is None else INTERIM_FROM,
            second_look=None if second is None else [second], second_look_seconds=SECOND_AT,
        )  # fmt: skip
        words = ["Hello?", rj.Transcript(said, confidence=confidence)]
        stt: rj.STT = (
            ScriptedSTT(words) if pass_latency is None else BatchSTT(words, latency=pass_latency)
        )
        mic = MemoryAudioInput(16000, frame_ms=40)  # STEP-sized: half the loop turns
        speaker = MemoryAudioOutput(24000)
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([[REPLY], ["Sure."]]),
            stt=stt,
            tts=ScriptedTTS(),
            vad=ScriptedVAD(),
            user_away_timeout=None,
            interruption_detection=detector,
        )
        session.input.audio = mic
        session.output.audio = speaker
        timeline = StateTimeline(session)
        pauses: list[float] = []
        real_pause = speaker.pause
        speaker.pause = lambda: (pauses.append(0.0), real_pause())[1]  # type: ignore[method-assign]
        await session.start(rj.Agent(instructions="voice"))
        await mic.push(speech_frame(1.0))
        await mic.push_silence(0.5 + into_reply)
        handle = session.current_speech
        assert handle is not None and not handle.done()
        t_user = asyncio.get_running_loop().time()
        for _ in range(speech_steps):
            await mic.push(speech_frame(STEP))
        await mic.push_silence(12.0)
        assert pauses == []
        assert handle.interrupted is interrupted, (verdict, second, speech, said, confidence)
        users = [m.content for m in session.history.messages() if m.role == "user"]
        if not interrupted:
            assert timeline.agent_states(since=t_user) == ["speaking", "listening"]
            assert users == ["Hello?"]
        else:
            assert users == (["Hello?", said] if said else ["Hello?"])
            if stops_at:
                # stopped at the first decision (counted from the onset, t_user); the
                # reply was audible from 1.4 s
                assert speaker.segments[0] == pytest.approx(
                    t_user - 1.4 + min(stops_at), abs=1.5 * STEP
                ), (stops_at, pass_latency)
        await session.aclose()
        assert session._turn_state.owed() == []  # type: ignore[union-attr]

    loop = virtual_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 600))
    finally:
        loop.close()
