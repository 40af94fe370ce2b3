"""Speech over a reply that may or may not be an interruption, on virtual time.

When the user starts speaking over an interruptible reply, the session pauses the reply
while it finds out whether this is a barge-in or only a noise. The paused reply is still
owed: the agent reports ``thinking`` (never ``listening``) until the reply resumes
(``speaking`` again) or is interrupted. A ``listening`` edge is final for the reply that
was playing, so a client that ends the user's turn on ``listening`` is never misled by a
cough. Observed before this rule: a 0.2 s noise gave ``speaking → listening`` for 1.44 s,
then ``speaking`` again with no new input.
"""

from __future__ import annotations

from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
    now,
    speech_frame,
)

MIN_SPEECH = 0.06  # ScriptedVAD: speech needed to confirm an utterance
MIN_SILENCE = 0.3  # ScriptedVAD: quiet needed to end one
RESUME_AFTER = 1.0  # false_interruption_timeout
REPLY = "Here is the whole answer, which is long enough to be talked over twice."


class Call:
    """A voice session: a test microphone, a pausable speaker, scripted models."""

    def __init__(self, transcripts: list[str], **options: Any) -> None:
        self.transcripts = transcripts
        self.options = {
            "user_away_timeout": None,
            "min_endpointing_delay": 0.5,
            "min_interruption_duration": 0.5,
            "false_interruption_timeout": RESUME_AFTER,
            **options,
        }
        self.mic = MemoryAudioInput(16000)
        self.speaker = MemoryAudioOutput(24000)
        self.tts = ScriptedTTS()
        self.edges: list[tuple[float, str]] = []
        """Every agent state a client was told, with its time."""

    async def start(self, replies: list[list[Any]]) -> rj.SpeechHandle:
        """Start, say a turn, and return the reply once it is audible."""
        self.session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM(replies),
            stt=ScriptedSTT(self.transcripts),
            tts=self.tts,
            vad=ScriptedVAD(),
            **self.options,
        )
        self.session.input.audio = self.mic
        self.session.output.audio = self.speaker
        self.session.output.transcription = MemoryTextOutput()
        self.timeline = StateTimeline(self.session)
        self.session.on(
            "agent_state_changed", lambda ev: self.edges.append((ev.created_at, ev.new_state))
        )
        await self.session.start(rj.Agent(instructions="voice"))
        await self.speak(1.0)
        await self.silence(1.0)  # the turn ends at 1.5 s and the reply is heard from then
        handle = self.session.current_speech
        assert handle is not None and self.session.agent_state == "speaking"
        return handle

    async def speak(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.02)):
            await self.mic.push(speech_frame(0.02))

    async def silence(self, seconds: float) -> None:
        await self.mic.push_silence(seconds)

    def listening_between(self, t0: float, t1: float) -> list[float]:
        return [at for at, state in self.edges if state == "listening" and t0 <= at <= t1]


async def test_noise_over_reply_never_reports_listening() -> None:
    c = Call(["Hi.", ""])
    handle = await c.start([[REPLY]])
    t_noise = now()
    await c.speak(0.2)  # a cough: shorter than min_interruption_duration, no words
    await c.silence(8.0)
    await handle
    assert not handle.interrupted
    assert c.speaker.segments == [pytest.approx(c.tts.duration_of(REPLY))]
    ended = c.timeline.times_of("listening")[-1]
    assert c.listening_between(t_noise, ended) == [ended]  # only the reply's own end
    assert c.timeline.agent_states(since=t_noise) == [
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    paused_at = c.timeline.times_of("thinking")[-1]
    resumed_at = c.timeline.times_of("speaking")[-1]
    # Paused when the VAD confirmed the noise; resumed false_interruption_timeout after
    # the noise's end was confirmed: 1.44 s of thinking, where it used to be listening.
    assert paused_at == pytest.approx(t_noise + MIN_SPEECH)
    assert resumed_at - paused_at == pytest.approx(0.2 - MIN_SPEECH + MIN_SILENCE + RESUME_AFTER)
    await c.session.aclose()


async def test_a_reply_that_resumes_never_passed_through_listening() -> None:
    """Two noises, the second before the first one's pause ran out: one pause, thinking
    throughout, and the reply goes on from where it stopped."""
    c = Call(["Hi.", "", ""])
    handle = await c.start([[REPLY]])
    t_noise = now()
    await c.speak(0.2)
    await c.silence(0.6)  # within false_interruption_timeout of the first noise's end
    await c.speak(0.2)
    await c.silence(8.0)
    await handle
    assert not handle.interrupted
    assert c.speaker.segments == [pytest.approx(c.tts.duration_of(REPLY))]
    assert c.timeline.agent_states(since=t_noise) == [
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    # Paused at the first noise's confirmation; the second one came before the resume
    # and restarted the wait from its own end.
    assert c.timeline.times_of("thinking")[-1] == pytest.approx(t_noise + MIN_SPEECH)
    second_end = t_noise + 0.2 + 0.6 + 0.2 + MIN_SILENCE
    assert c.timeline.times_of("speaking")[-1] == pytest.approx(second_end + RESUME_AFTER)
    await c.session.aclose()


async def test_a_confirmed_interruption_reports_listening_once_and_for_good() -> None:
    c = Call(["Hi.", "Stop please."])
    handle = await c.start([[REPLY], ["Sure, stopping."]])
    interrupted_at_edge: list[bool] = []
    c.session.on(
        "agent_state_changed",
        lambda ev: ev.new_state == "listening" and interrupted_at_edge.append(handle.interrupted),
    )
    t_user = now()
    await c.speak(1.0)  # words, and long enough: a real barge-in
    assert handle.interrupted
    await c.silence(3.0)
    # Paused (still owed) when the VAD confirmed speech; listening only once the reply
    # was interrupted (its words settled it), while the user still spoke; then the answer.
    assert c.timeline.agent_states(since=t_user) == [
        "speaking",
        "thinking",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    thinking, _ = c.timeline.times_of("thinking")[-2:]
    assert thinking == pytest.approx(t_user + MIN_SPEECH)
    interrupted_at = c.timeline.times_of("listening")[-2]
    assert t_user + MIN_SPEECH < interrupted_at < t_user + 1.0
    assert interrupted_at_edge[0]  # the edge came with the interruption, not before it
    # The interrupted reply said nothing after that edge: only what was heard before the
    # pause is in its segment, and the next audio is the new answer's.
    assert c.speaker.segments[0] == pytest.approx(t_user + MIN_SPEECH - 1.5)
    assert len(c.speaker.segments) == 2
    await c.session.aclose()


async def test_a_long_wordless_noise_keeps_the_reply_owed_until_it_resumes() -> None:
    """With min_interruption_words, speech long enough but without words (a long cough)
    pauses the reply and resumes it: thinking, never listening, in between."""
    c = Call(["Hi.", ""], min_interruption_words=2)
    handle = await c.start([[REPLY]])
    t_noise = now()
    await c.speak(1.0)
    await c.silence(10.0)
    assert handle.done() and not handle.interrupted
    assert c.timeline.agent_states(since=t_noise) == [
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    await c.session.aclose()


async def test_a_paused_reply_holds_the_away_timer() -> None:
    """The pause (1.44 s) outlasts user_away_timeout (1 s): the user, who just made the
    noise, is not away while the reply is still owed; the count starts at its end."""
    c = Call(["Hi.", ""], user_away_timeout=1.0)
    handle = await c.start([[REPLY]])
    t_noise = now()
    await c.speak(0.2)
    await c.silence(MIN_SILENCE)
    await handle
    ended = now()
    c.timeline.assert_never("away", between=(t_noise, ended), who="user")
    await advance(1.5)
    assert c.timeline.times_of("away", who="user") == [pytest.approx(ended + 1.0)]
    await c.session.aclose()
