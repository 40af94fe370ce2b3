"""Wire-protocol edges of the realtime clients (GPT-Live, OpenAI Realtime), end to end.

Each test runs a real ``AgentSession`` on the real client over a loopback WebSocket
server, on virtual time, and asserts the whole state timeline or the exact history /
wire traffic. The docstring of each test names the promise it checks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.models.audio import AudioFrame
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import (
    GPTLiveServer,
    MemoryAudioInput,
    OpenAIRealtimeServer,
    advance,
    now,
)

from .realtime_rig import (
    Rig,
    Weather,
    answer,
    live,
    realtime,
    spoken,
    user_asks,
    user_says,
)

pytestmark = pytest.mark.looptime(noop_cycles=2000)


class SilenceStream:
    """The real GPT-Live streams output audio all the time: 100 ms frames, paced in real
    (virtual) time, zeros unless a test asks for speech."""

    def __init__(self, server: GPTLiveServer) -> None:
        self.server = server
        self.speech_frames = 0
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def speak(self, seconds: float) -> None:
        self.speech_frames += round(seconds * 10)

    async def _run(self) -> None:
        loud = (0x1000).to_bytes(2, "little", signed=True) * 2400
        quiet = bytes(4800)
        while True:
            await advance(0.1)
            if self.speech_frames > 0:
                self.speech_frames -= 1
                await self.server.audio(loud)
            else:
                await self.server.audio(quiet)
            self.sent += 1

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


# ------------------------------------------------------ continuous output silence


async def test_continuous_silence_round_trip_states_and_bounded_answer(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: with output silence streaming all the time (the real GPT-Live), silence
    is never `speaking`; the tool round trip is `thinking` until the answer is audible and
    `listening` after it; an answer that never comes is still bounded by answer_timeout;
    and the client keeps no state that grows with the silence it received."""
    rig = await live(server, rigs, answer_timeout=3.0)
    stream = SilenceStream(server)
    stream.start()
    try:
        await rig.settle(5.0)  # 5 s of pure silence: nothing happens
        assert rig.timeline.agent_states() == ["initializing", "listening"]
        assert stream.sent >= 45
        await user_asks(server, rig, "Weather in Paris?")
        t0 = now()
        await server.response_created("dlg_1", "resp_1")
        await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
        await server.response_completed("dlg_1", "resp_1")
        await server.wait_for("response.create")
        await server.response_created("dlg_1", "resp_2")
        await server.response_completed("dlg_1", "resp_2")
        await rig.settle(2.0)
        assert rig.session.agent_state == "thinking"
        await server.output_transcript("Sunny in Paris.")
        stream.speak(1.0)
        await rig.settle(4.0)
        assert rig.timeline.agent_states(since=t0) == [
            "listening",
            "thinking",
            "speaking",
            # The audio has played; until end_silence says the utterance is over it may
            # still resume, so the reply stays owed: thinking, never a false listening.
            "thinking",
            "listening",
        ]
        assert rig.speaker.segments == [pytest.approx(1.0, abs=0.02)]
        assert rig.messages()[-1] == ("assistant", "Sunny in Paris.")
        # A completed response with no audio after it, under continuous silence: bounded.
        t1 = now()
        await server.response_created("dlg_2", "resp_3")
        await server.response_completed("dlg_2", "resp_3")
        await rig.settle(3.5)
        assert rig.timeline.agent_states(since=t1) == ["listening", "thinking", "listening"]
        assert rig.owed == 0
        # Nothing accumulates from the silence (the burst detector holds no audio).
        live_session = rig.session._engine.provider_session  # type: ignore[attr-defined]
        detector = live_session._state._bursts
        assert not detector.in_burst
        assert detector._held_samples == 0 and detector._held == []
        assert detector._carry.size < 240
        assert rig.errors == []
    finally:
        await stream.stop()


async def test_speaking_ends_when_streamed_speech_stops_being_audible(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: `speaking` exactly while agent audio is audible. The real service streams
    speech then silence in real time; once the last audible sample has played, the agent
    is no longer `speaking` as soon as the silence is known to be a pause (the detector's
    ``pause_after``, 0.2 s, plus one 100 ms frame) — not 0.8 s later, when the gate decides
    the utterance is over. In between the reply is still owed (it may resume): `thinking`,
    then `listening` once the utterance ended."""
    rig = await live(server, rigs)
    stream = SilenceStream(server)
    stream.start()
    try:
        await rig.settle(1.0)
        t0 = now()
        await server.output_transcript("Hello there.")
        stream.speak(1.0)
        await rig.settle(0.05)
        await rig.settle(3.0)
        assert rig.timeline.agent_states(since=t0) == [
            "listening",
            "speaking",
            "thinking",
            "listening",
        ]
        assert rig.speaker.segments == [pytest.approx(1.0, abs=0.02)]
        (speaking,) = rig.timeline.times_of("speaking")
        (thinking,) = [t for t in rig.timeline.times_of("thinking") if t > speaking]
        # The audio is 1.0 s long; the pause is known within pause_after of its end.
        assert thinking - speaking == pytest.approx(1.1, abs=0.1)
        (ended,) = [t for t in rig.timeline.times_of("listening") if t > speaking]
        assert ended - speaking == pytest.approx(1.7, abs=0.1)  # end_silence 0.8 s
        assert rig.owed == 0
    finally:
        await stream.stop()


# ------------------------------------------------------------- transcripts


async def test_answer_transcript_during_the_preamble_tail_goes_to_the_answer(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: history is exact. A transcript runs ahead of playback; the answer's text
    (timeline 5400-7600 ms) arrives while the preamble's trailing silence is still being
    received. Its position on the timeline says it is not the preamble: the preamble's
    message stays "Let me check." and the answer's message is the answer."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Paris?")
    await server.response_created("dlg_1", "resp_1")
    await server.output_transcript("Let me check.", 3100, 3800)
    await server.speech(0.7, then_silence=0.3)
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Paris"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    # The answer's transcript, ahead of its audio, before the preamble burst has ended.
    await server.output_transcript("It's 18 degrees and sunny.", 5400, 7600)
    await server.silence(1.0)
    await rig.settle(1.0)
    await server.speech(1.0, then_silence=1.0)
    await rig.settle(1.5)

    assert rig.messages()[-2:] == [
        ("assistant", "Let me check."),
        ("assistant", "It's 18 degrees and sunny."),
    ]
    assert rig.session.agent_state == "listening"
    assert rig.owed == 0


async def test_transcript_after_its_audio_without_timing_is_not_prepended_to_the_next(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: history is exact. The minimal service sends transcripts with no
    start_ms/end_ms; here one arrives just after its (short) audio ended, while nothing is
    owed. It belongs to the speech that just played, not to the next thing said."""
    rig = await live(server, rigs)
    await server.speech(0.5, then_silence=1.0)
    await rig.settle(0.1)
    await server.output_transcript("Hi, how can I help?")
    await rig.settle(5.0)
    await user_asks(server, rig, "Weather in Paris?")
    await server.response_created("dlg_1", "resp_1")
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Sunny.")
    assert rig.messages() == [
        ("assistant", "Hi, how can I help?"),
        ("user", "Weather in Paris?"),
        ("assistant", "Sunny."),
    ]


# ------------------------------------------------------------- user turns


async def test_caller_answered_over_is_recorded_where_the_turn_began(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: exact history, user turns stamped where they began (§4.6.3). The caller
    starts talking, and the model answers over the caller before the turn has ended: the
    user's message comes before the agent's answer in the history."""
    rig = await live(server, rigs)
    t0 = now()
    await server.input_transcript("What time do you open", 1000, 2000)
    await rig.settle(0.2)
    assert rig.session.user_state == "speaking"
    await server.output_transcript("We open at nine.")
    await server.speech(0.5, then_silence=1.0)
    await server.input_transcript(" tomorrow?", 2000, 2400)
    await rig.settle(2.0)

    assert rig.timeline.user_states(since=t0) == ["listening", "speaking", "listening"]
    assert rig.session.agent_state == "listening"
    assert rig.speaker.segments == [pytest.approx(0.5, abs=0.02)]
    assert rig.messages() == [
        ("user", "What time do you open tomorrow?"),
        ("assistant", "We open at nine."),
    ]


async def test_mic_at_48k_stereo_ends_the_turn_after_800_ms(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: nothing hangs; audio goes out as 100 ms 24 kHz mono chunks whatever the
    microphone. With a 48 kHz stereo mic the user turn still ends after 0.8 s of audio
    sent since the last fragment (samples counted at 24 kHz), and the mixed audio reaches
    the wire intact."""
    mic = MemoryAudioInput(sample_rate=48000)
    model = GPTLive(api_key="test", base_url=server.base_url)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
    session.input.audio = mic
    from rejoinder.testing import MemoryAudioOutput, StateTimeline

    session.output.audio = MemoryAudioOutput(sample_rate=24000)
    timeline = StateTimeline(session)
    await session.start(Weather())

    async def feed() -> None:
        stereo = np.empty(960 * 2, np.int16)
        stereo[0::2], stereo[1::2] = 1000, 3000  # mixes to 2000
        for _ in range(300):
            await mic.push(AudioFrame(stereo, 48000, num_channels=2))

    feeder = asyncio.get_running_loop().create_task(feed())
    try:
        await advance(1.0)
        await server.input_transcript("Hello?", 500, 900)
        await advance(0.05)
        t0 = now()
        await advance(1.5)
        changes = [c for c in timeline.changes_of("user") if c.at >= t0 - 0.06]
        assert [c.new for c in changes] == ["speaking", "listening"]
        assert changes[1].at - changes[0].at == pytest.approx(0.8, abs=0.07)
        chunks = server.of_type("session.input_audio.append")
        assert len(chunks) >= 20
        pcm = np.frombuffer(base64.b64decode(chunks[10]["audio"]), "<i2")
        assert pcm.shape == (2400,)
        assert np.abs(pcm.astype(int) - 2000).max() <= 2
        assert [(m.role, m.content) for m in session.history.messages()] == [("user", "Hello?")]
    finally:
        await session.aclose()
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)


# ------------------------------------------------------------- reconnects


async def test_expired_session_while_a_tool_runs_reconnects_and_the_result_is_context(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: no lost history, nothing owed by a dead connection, the user not away
    while a tool works for them. The service ends the session (`expired`) while a tool
    runs; the client reconnects with the history, the tool finishes afterwards, and its
    result goes to the new session as silent context: no output, no response.create."""
    gate = asyncio.Event()
    rig = await live(server, rigs, Weather(gate), user_away_timeout=1.0)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await rig.settle(0.2)
    await server.session_closed("expired", seconds=12.0)
    await server.wait_connected(2)
    await rig.settle(3.0)
    assert rig.session.user_state == "listening"  # the tool still works for the user
    gate.set()
    await rig.settle(0.5)

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert "away" not in rig.timeline.user_states(since=t0)
    assert server.received_types(2)[0] == "session.start"
    seeded = [
        (i["role"], i["content"][0]["text"])
        for i in server.received_on(2)[0]["session"].get("input", [])
    ]
    assert ("user", "Weather in Oslo?") in seeded
    assert "response.item.create" not in server.received_types()
    assert "response.create" not in server.received_types()
    told = [e for e in server.received_on(2) if e["type"] == "session.thinking.append"]
    assert len(told) == 1 and "18 C and sunny in Oslo" in told[0]["content"]
    assert rig.owed == 0
    assert rig.errors == []
    assert rig.session._engine.provider_session.usage_seconds == 12.0  # type: ignore[union-attr]


# ------------------------------------------------------------- refusals


async def test_refused_commentary_append_ends_the_requested_reply(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: `thinking` exactly while a reply is owed. generate_reply goes out as a
    commentary append; the service refuses it with an error echoing its event id. No
    reply can follow, so the agent returns to `listening` at once (not after
    answer_timeout) and the handle resolves; the error is reported, recoverable."""
    rig = await live(server, rigs, answer_timeout=10.0)
    t0 = now()
    handle = rig.session.generate_reply(instructions="Greet the caller.")
    append = await server.wait_for("session.commentary.append")
    await rig.settle(0.2)
    assert rig.session.agent_state == "thinking"
    await server.error(
        "content exceeds 500 tokens", code="invalid_value", client_event_id=append["event_id"]
    )
    await rig.settle(0.5)

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert handle.done()
    assert rig.owed == 0
    assert [e.recoverable for e in rig.errors] == [True]


async def test_error_for_a_context_append_does_not_end_running_work(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: an error tied to a client event (here a thinking append) says nothing about
    the backend response that runs: the agent stays `thinking` until the answer is audible."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Plan my day.")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    rig.session._engine.provider_session.add_context("note")  # type: ignore[union-attr]
    ctx = await server.wait_for("session.thinking.append")
    await server.error("too long", code="invalid_value", client_event_id=ctx["event_id"])
    await rig.settle(1.0)
    assert rig.session.agent_state == "thinking"
    await server.response_completed("dlg_1", "resp_1")
    await answer(server, rig, "Here is your plan.")
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0


# ------------------------------------------------------------- delegations


async def test_two_delegations_interleaved_one_batch_one_continuation_each(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: D2 across delegations. Two delegations run at once, each with a call;
    the outputs wait until no response runs, then exactly one response.create follows
    both; both continuations run and one combined answer is voiced; nothing stays owed."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Paris, and in Rome?")
    t0 = now()
    await server.response_created("dlg_A", "resp_A1")
    await server.response_created("dlg_B", "resp_B1")
    await server.function_call("dlg_A", "call_A", "get_weather", {"city": "Paris"})
    await server.function_call("dlg_B", "call_B", "get_weather", {"city": "Rome"})
    await server.response_completed("dlg_A", "resp_A1")
    await rig.settle(0.5)
    assert server.of_type("response.create") == []  # dlg_B still runs
    await server.response_completed("dlg_B", "resp_B1")
    await server.wait_for("response.create")
    await rig.settle(0.5)
    types = [t for t in server.received_types() if t.startswith("response.")]
    assert types == ["response.item.create", "response.item.create", "response.create"]
    await server.response_created("dlg_A", "resp_A2")
    await server.response_created("dlg_B", "resp_B2")
    await server.response_completed("dlg_A", "resp_A2")
    await server.response_completed("dlg_B", "resp_B2")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    await answer(server, rig, "Paris 18, Rome 24.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0
    assert rig.errors == []


async def test_null_delegation_call_without_response_created_duplicates_and_statuses(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Promise: every call is answered once (§4.3.3, §5.3.6). A call arrives under a null
    delegation with no response.created before it, first `in_progress`, then `completed`
    twice (a duplicate), next to an `incomplete` call: the tool runs once, one output and
    one response.create go out, and the continuation's answer ends the wait."""
    agent = Weather()
    rig = await live(server, rigs, agent)
    await user_asks(server, rig, "Weather in Paris?")
    t0 = now()
    await server.function_call(
        None, "call_1", "get_weather", {"city": "Paris"}, status="in_progress"
    )
    await server.function_call(None, "call_2", "get_weather", {"city": "Rome"}, status="incomplete")
    await rig.settle(0.3)
    assert rig.session.agent_state == "listening"  # nothing dispatched yet
    await server.function_call(None, "call_1", "get_weather", {"city": "Paris"})
    await server.function_call(None, "call_1", "get_weather", {"city": "Paris"})
    await server.wait_for("response.create")
    await rig.settle(0.5)
    await server.response_created(None, "resp_2")
    await server.response_completed(None, "resp_2")
    await rig.settle(0.3)
    assert rig.session.agent_state == "thinking"
    await answer(server, rig, "Sunny in Paris.")

    assert agent.runs == ["Paris"]
    outputs = server.of_type("response.item.create")
    assert [o["item"]["call_id"] for o in outputs] == ["call_1"]
    assert len(server.of_type("response.create")) == 1
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    assert rig.owed == 0


# ------------------------------------------------------------- OpenAI Realtime


@pytest.mark.parametrize("status", ["incomplete", "failed"])
async def test_openai_response_ending_without_audio_returns_to_listening(
    oai: OpenAIRealtimeServer, rigs: list[Rig], status: str
) -> None:
    """Promise: D3 on OpenAI Realtime. The response to the user's turn ends `incomplete`
    or `failed` with no audio: the agent is `thinking` while it runs and `listening` at
    once after, nothing stays owed, and the next question is answered normally."""
    rig = await realtime(oai, rigs, answer_timeout=5.0)
    await user_says(oai, rig, "Hello?")
    t0 = now()
    await oai.response_created("resp_1")
    await rig.settle(0.3)
    await oai.response_done("resp_1", status=status)
    await rig.settle(0.2)
    t_done = now()
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert rig.timeline.times_of("listening")[-1] < t_done
    assert rig.owed == 0
    await user_says(oai, rig, "Hello again?")
    await spoken(oai, rig, "resp_2", "Hi!")
    assert rig.session.agent_state == "listening"
    assert rig.messages()[-1] == ("assistant", "Hi!")
    assert rig.owed == 0


async def test_openai_rejected_generate_reply_returns_to_listening(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """Promise: `thinking` exactly while a reply is owed. generate_reply sends a
    response.create that the server rejects (an error echoing its event_id): no response
    will run, so the agent returns to `listening` at once and the handle resolves."""
    rig = await realtime(oai, rigs, answer_timeout=10.0)
    t0 = now()
    handle = rig.session.generate_reply(instructions="Greet the caller.")
    create = await oai.wait_for("response.create")
    await rig.settle(0.2)
    assert rig.session.agent_state == "thinking"
    await oai.error(
        "Conversation already has an active response",
        code="conversation_already_has_active_response",
        event_id=create.get("event_id"),
    )
    await rig.settle(0.5)
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]
    assert handle.done()
    assert rig.owed == 0


async def test_openai_two_responses_with_calls_in_a_row(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """Promise: D1/D2 chained. The first response calls a tool; its continuation calls
    another; each gets one output and one response.create, and the final answer ends the
    wait: `thinking` throughout, `speaking` for the answer, `listening` after."""
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Do you have apples and pears?")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.function_call("resp_1", "call_1", "stock", '{"item": "apple"}')
    await oai.response_done("resp_1")
    await oai.wait_for("response.create")
    await rig.settle(0.3)
    await oai.response_created("resp_2")
    await oai.function_call("resp_2", "call_2", "stock", '{"item": "pear"}')
    await oai.response_done("resp_2")
    await oai.wait_for("response.create", count=2)
    await rig.settle(0.3)
    assert rig.session.agent_state == "thinking"
    await spoken(oai, rig, "resp_3", "Three of each.")

    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]
    outputs = [
        e["item"]["call_id"]
        for e in oai.of_type("conversation.item.create")
        if e["item"]["type"] == "function_call_output"
    ]
    assert outputs == ["call_1", "call_2"]
    assert len(oai.of_type("response.create")) == 2
    assert rig.owed == 0


async def test_openai_input_transcription_failed_ends_the_turn_and_the_answer_follows(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """Promise: bad provider input gets a clear error and loses nothing; nothing hangs.
    The user's transcription fails: the user turn ends (`listening`), a recoverable
    error names the failure, no empty user message is recorded, and the response to the
    turn is still heard and recorded."""
    rig = await realtime(oai, rigs)
    t0 = now()
    await user_says(oai, rig, None)
    assert rig.session.user_state == "listening"
    await spoken(oai, rig, "resp_1", "Sorry, could you repeat that?")
    assert rig.timeline.user_states(since=t0) == ["listening", "speaking", "listening"]
    assert rig.timeline.agent_states(since=t0)[-2:] == ["speaking", "listening"]
    assert rig.messages() == [("assistant", "Sorry, could you repeat that?")]
    assert len(rig.errors) == 1 and rig.errors[0].recoverable
    assert "audio too noisy" in str(rig.errors[0].error)
    assert rig.owed == 0


async def test_openai_interrupt_after_the_audio_finished_sends_no_truncate(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """Promise: exact wire traffic and history. session.interrupt() after the answer has
    played in full changes nothing: no truncate, no cancel, the message stays whole and
    not interrupted, and the agent stays `listening`."""
    rig = await realtime(oai, rigs)
    await user_says(oai, rig, "Hi")
    await spoken(oai, rig, "resp_1", "Hello, welcome to the shop.")
    await rig.settle(0.5)
    t0 = now()
    await asyncio.wait_for(rig.session.interrupt(), 5)
    await rig.settle(0.5)
    assert oai.of_type("conversation.item.truncate") == []
    assert oai.of_type("response.cancel") == []
    said = [m for m in rig.session.history.messages() if m.role == "assistant"]
    assert [(m.content, m.interrupted) for m in said] == [("Hello, welcome to the shop.", False)]
    assert rig.timeline.agent_states(since=t0) == ["listening"]
