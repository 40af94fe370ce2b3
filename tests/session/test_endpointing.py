"""The end of a user's turn, on virtual time: ``min_endpointing_delay`` counts from the end
of speech (the VAD's own silence is part of it, never added to it), and a recognizer that
does not stream is handed the utterance at the user's first pause, so its work overlaps
that delay instead of following the VAD's end."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.testing import (
    ScriptedSTT,
    now,
    speech_frame,
)

from ._mic_session import Call

AGENT_STATES = ["initializing", "listening", "thinking", "speaking", "listening"]


class SlowSTT(rj.STT):
    """Does not stream: each call takes ``latency`` seconds and says how much it heard."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.calls: list[tuple[float, float]] = []
        """(when, seconds of audio) of each call."""

    async def recognize(self, frames: Sequence[AudioFrame]) -> str:
        seconds = round(sum(frame.duration for frame in frames), 3)
        self.calls.append((now(), seconds))
        await asyncio.sleep(self.latency)
        return f"Heard {seconds:.2f} seconds."


async def test_the_delay_counts_from_the_end_of_speech() -> None:
    assert inspect.signature(rj.AgentSession).parameters["min_endpointing_delay"].default == 0.4
    # The VAD is sure 0.3 s after the speech ended; the turn ends 0.4 s after it ended,
    # not 0.3 + 0.4 s.
    async with Call(ScriptedSTT(["Hello there."]), min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + 0.4)]
        assert c.timeline.agent_states() == AGENT_STATES
        assert c.timeline.user_states() == ["listening", "speaking", "listening"]
        assert c.timeline.times_of("listening", who="user")[-1] == pytest.approx(1.0 + 0.3)


async def test_a_vad_slower_than_the_delay_ends_the_turn_when_it_is_sure() -> None:
    # The delay and the VAD's silence overlap: the later of the two ends the turn.
    async with Call(ScriptedSTT(["Hello there."]), min_silence=0.6) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + 0.6)]
        assert c.timeline.agent_states() == AGENT_STATES


async def test_a_non_streaming_recognizer_starts_at_the_first_pause() -> None:
    stt = SlowSTT(latency=0.25)
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        # Handed the utterance 0.1 s into the pause (t=1.1), done at 1.35: before the
        # delay is over (1.4). Waiting for the VAD's end (1.3) would have made it 1.55.
        assert stt.calls == [(pytest.approx(1.1), pytest.approx(1.1))]
        assert c.timeline.times_of("thinking") == [pytest.approx(1.0 + 0.4)]
        assert c.user_turns() == ["Heard 1.10 seconds."]
        assert c.timeline.agent_states() == AGENT_STATES
        assert c.timeline.user_states() == ["listening", "speaking", "listening"]


async def test_a_slow_recognizer_ends_the_turn_when_its_transcript_is_in() -> None:
    stt = SlowSTT(latency=0.5)
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(2.0)
        assert c.timeline.times_of("thinking") == [pytest.approx(1.1 + 0.5)]
        assert len(stt.calls) == 1


async def test_an_early_recognition_is_dropped_when_the_user_goes_on() -> None:
    stt = SlowSTT(latency=0.25)
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(0.2)  # a pause: recognized from t=1.1 ...
        await c.speak(0.5)  # ... but the user goes on (t=1.2 to 1.7)
        await c.mic.push_silence(2.0)
        # Every pause is recognized; the one the VAD ends the utterance in is the
        # transcript, with all the speech in it.
        assert stt.calls == [
            (pytest.approx(1.1), pytest.approx(1.1)),
            (pytest.approx(1.8), pytest.approx(1.8)),
        ]
        assert c.user_turns() == ["Heard 1.80 seconds."]
        assert c.timeline.times_of("thinking") == [pytest.approx(1.7 + 0.4)]
        assert c.timeline.agent_states() == AGENT_STATES
        assert c.timeline.user_states() == ["listening", "speaking", "listening"]


async def test_a_new_utterance_after_the_turn_is_recognized_on_its_own() -> None:
    stt = SlowSTT(latency=0.1)
    async with Call(stt, min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(3.0)
        t0 = now()
        await c.speak(0.5)
        await c.mic.push_silence(2.0)
        # The second utterance alone (with its pre-roll), from its own first pause.
        assert len(stt.calls) == 2
        assert stt.calls[1][0] == pytest.approx(t0 + 0.5 + 0.1)
        assert 0.6 <= stt.calls[1][1] <= 1.1
        assert c.timeline.times_of("thinking")[-1] == pytest.approx(t0 + 0.5 + 0.4)
        assert c.user_turns() == ["Heard 1.10 seconds.", f"Heard {stt.calls[1][1]:.2f} seconds."]


async def test_a_due_turn_end_waits_while_the_vad_hears_the_user_going_on() -> None:
    """A pause a little longer than the VAD's silence, and the user goes on: speech is
    heard again just before the delay runs out but is confirmed just after. The turn end
    waits for the VAD's verdict instead of answering half a sentence."""
    async with Call(ScriptedSTT(["Hello.", "How are you?"]), min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(0.36)  # the VAD ends the utterance at 1.3
        await c.speak(1.0)  # heard from 1.38, confirmed at 1.42; the delay ran out at 1.4
        await c.mic.push_silence(2.0)
        assert c.user_turns() == ["Hello. How are you?"]
        assert c.timeline.times_of("thinking") == [pytest.approx(2.36 + 0.4)]


async def test_a_noise_after_the_pause_holds_the_turn_end_only_briefly() -> None:
    async with Call(ScriptedSTT(["Hello."]), min_silence=0.3) as c:
        await c.speak(1.0)
        await c.mic.push_silence(0.38)
        await c.mic.push(speech_frame(0.02))  # a click at 1.40: heard, never confirmed
        await c.mic.push_silence(2.0)
        assert c.user_turns() == ["Hello."]
        [thinking] = c.timeline.times_of("thinking")
        assert 1.4 <= thinking <= 1.4 + 0.3 + 1e-6


class RecordingStreamingSTT(ScriptedSTT):
    """Keeps every frame a streaming recognizer is pushed."""

    def __init__(self) -> None:
        super().__init__(["Hello there."])
        self.pushed: list[AudioFrame] = []

    def push(self, frame: AudioFrame, on_interim: Any) -> None:
        self.pushed.append(frame)
        super().push(frame, on_interim)


async def test_a_streaming_recognizer_hears_the_onset_before_speech_was_confirmed() -> None:
    """What the VAD heard before it was sure (kept for the utterance's audio) reaches a
    streaming recognizer too, before the frames after it: the first word's onset."""
    stt = RecordingStreamingSTT()
    async with Call(stt, min_silence=0.3) as c:
        await c.mic.push_silence(1.0)
        await c.speak(1.0)
        await c.mic.push_silence(1.0)
        loud = [bool(abs(frame.data).max() > 1000) for frame in stt.pushed]
        # 0.5 s kept from before the confirmation (0.44 s of quiet, then the 0.06 s of
        # speech that confirmed it), then the rest of the speech, then the VAD's silence
        assert sum(f.duration for f in stt.pushed) == pytest.approx(0.5 + 0.94 + 0.3)
        assert loud == [False] * 22 + [True] * 50 + [False] * 15
        assert c.user_turns() == ["Hello there."]


async def test_a_streaming_recognizer_serves_one_running_session_at_a_time() -> None:
    """Its push()/reset() are one utterance stream: a second session would mix its
    microphone into the first one's transcript. A plain recognizer may be shared."""
    stt = ScriptedSTT(["Hello there."])
    async with Call(stt, min_silence=0.3):
        second = Call(stt, min_silence=0.3)
        with pytest.raises(RuntimeError, match="streaming recognizer already used"):
            await second.session.start(rj.Agent(instructions="voice"))
        shared = SlowSTT(latency=0.1)
        async with Call(shared, min_silence=0.3), Call(shared, min_silence=0.3):
            pass
    async with Call(stt, min_silence=0.3) as again:  # free once the first one closed
        await again.speak(1.0)
        await again.mic.push_silence(1.0)
        assert again.user_turns() == ["Hello there."]


def test_a_claim_is_on_the_model_itself_not_on_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session never closed leaves its claims; a new model that happens to get the same
    id (freed memory is reused) must not look taken."""
    from rejoinder.models import claims as model_claims
    from rejoinder.models.claims import ModelClaims

    old, new = ScriptedSTT(["a"]), ScriptedSTT(["b"])
    monkeypatch.setattr(model_claims, "_in_use", {id(new): (old, 1)})  # as after id reuse
    assert not ModelClaims.in_use(new)
    ModelClaims().claim([new])
    assert ModelClaims.in_use(new)
