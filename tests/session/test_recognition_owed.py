"""An utterance being recognized is owed to the user, on virtual time: from the VAD's end
of speech until its transcript (or the recognizer's failure) is in, the user is not
marked away, however slow the recognizer; one slower than the ``recognition`` watchdog
is stopped, with an error event, and the utterance is dropped, never silently."""

from __future__ import annotations

from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedSTT

from ._mic_session import Call

SILENCE = 0.3  # the VAD's min_silence


async def test_a_slow_recognizer_does_not_make_the_user_away() -> None:
    # The case: a 10 s recognizer, a 5 s away timeout.
    async with Call(
        ScriptedSTT(["Hello there."], latency=10.0), min_silence=SILENCE, user_away_timeout=5.0
    ) as c:
        await c.speak(1.0)
        await c.mic.push_silence(9.0)  # 10 s in: still recognizing
        assert c.session.user_state == "listening"
        assert c.session.agent_state == "listening"  # owed work, but no reply promised yet
        await c.mic.push_silence(3.0)
        assert c.user_turns() == ["Hello there."]
        assert "away" not in c.timeline.user_states()
        assert not c.errors


async def test_a_recognizer_over_its_watchdog_is_stopped_with_an_error() -> None:
    stt = ScriptedSTT(["Too late."], latency=60.0)
    async with Call(stt, min_silence=SILENCE, obligation_timeouts={"recognition": 20}) as c:
        await c.speak(1.0)
        await c.mic.push_silence(1.0 + 20.0)
        [error] = c.errors
        assert error.source == "watchdog"
        assert isinstance(error.error, rj.ObligationExpiredError)
        assert error.error.kind == "recognition"
        assert "utterance" in str(error.error)
        await c.mic.push_silence(45.0)  # the recognizer would have answered by now
        assert c.user_turns() == []  # dropped, and said so
        assert c.timeline.agent_states() == ["initializing", "listening"]


async def test_the_next_utterance_is_heard_after_a_dropped_one() -> None:
    class OnceSlow(ScriptedSTT):
        async def transcribe(self, frames: Any) -> rj.Transcript:
            if not self.utterances:
                self.latency = 60.0
            else:
                self.latency = 0.0
            return await super().transcribe(frames)

    stt = OnceSlow(["Second try."])  # the stopped recognition never took its transcript
    async with Call(stt, min_silence=SILENCE, obligation_timeouts={"recognition": 5}) as c:
        await c.speak(1.0)
        await c.mic.push_silence(6.0)
        assert len(c.errors) == 1
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.user_turns() == ["Second try."]


@pytest.mark.parametrize("seconds", [0.0, 2.0])
async def test_away_counts_from_when_the_words_are_in(seconds: float) -> None:
    async with Call(
        ScriptedSTT([""], latency=seconds), min_silence=SILENCE, user_away_timeout=3.0
    ) as c:
        await c.speak(0.5)  # a sound the recognizer finds no words in
        await c.mic.push_silence(SILENCE + seconds + 3.0 - 0.05)
        assert c.session.user_state == "listening"
        await c.mic.push_silence(0.1)
        assert c.session.user_state == "away"
