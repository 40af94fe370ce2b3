"""Edge cases of realtime/duplex sessions (GPT-Live and OpenAI Realtime over real
loopback WebSockets, virtual time). Each test asserts the whole state timeline or the
exact history of a path the D-scenarios do not cover yet."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.providers.openai import GPTLive
from rejoinder.testing import (
    GPTLiveServer,
    MemoryAudioInput,
    MemoryAudioOutput,
    MemoryTextOutput,
    OpenAIRealtimeServer,
    StateTimeline,
    advance,
    now,
)

from .realtime_rig import (
    ANSWERED_AT_ONCE,
    Rig,
    Weather,
    answer,
    live,
    realtime,
    spoken,
    start_rig,
    user_asks,
    user_says,
)

pytestmark = pytest.mark.looptime(noop_cycles=2000)


def items(session: rj.AgentSession[Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for item in session.history.items:
        if isinstance(item, rj.ChatMessage):
            out.append((item.role, item.content))
        elif isinstance(item, rj.FunctionCall):
            out.append(("call", item.call_id))
        elif isinstance(item, rj.FunctionCallOutput):
            out.append(("output", item.call_id))
    return out


async def reply_heard(server: GPTLiveServer, text: str) -> None:
    """For a session started without a rig, once a reply was asked for: the model says
    ``text`` (1 s of speech), and it has played by the time this returns."""
    await advance(0.2)
    await server.output_transcript(text)
    await server.speech(1.0, then_silence=1.0)
    await advance(1.5)


# ------------------------------------------------------------------- history


async def test_two_bursts_back_to_back_keep_their_order_in_history(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """Two stretches of agent speech delivered faster than real time (the second is
    received while the first still plays): both are heard in order, so the history must
    hold them in that order, and the agent never reports listening between them."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Tell me two things.")
    t0 = now()
    await server.output_transcript("First thing.")
    await server.speech(1.0, then_silence=1.0)
    await server.output_transcript("Second thing.")
    await server.speech(1.0, then_silence=1.0)
    await rig.settle(3.0)

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "speaking",  # unsolicited speech owes nothing until heard: no 0 ms thinking
        "thinking",  # 0 ms: the second burst is queued, as with a queued pipeline reply (A7)
        "speaking",
        "listening",
    ], got
    assert rig.speaker.segments == [pytest.approx(1.0), pytest.approx(1.0)]
    assert rig.messages() == [
        ("user", "Tell me two things."),
        ("assistant", "First thing."),
        ("assistant", "Second thing."),
    ]
    assert rig.owed == 0


async def test_late_transcript_of_the_preamble_does_not_join_the_answer(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """D5 with the history checked: a transcript fragment for the preamble that already
    played (its timeline position is inside the preamble) must not be stored as part of
    the later answer's message."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    await server.response_created("dlg_1", "resp_1")
    await server.output_transcript("Let me check.", start_ms=3000, end_ms=3100)
    await server.speech(0.5, then_silence=1.0)
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await rig.settle(1.0)
    await server.output_transcript(" One moment.", start_ms=3100, end_ms=3500)
    await rig.settle(1.0)
    await answer(server, rig, "It is sunny in Oslo.")

    assistant = [c for r, c in rig.messages() if r == "assistant"]
    assert assistant[-1] == "It is sunny in Oslo."
    assert rig.owed == 0


# ------------------------------------------------------------------ handles


async def test_generate_reply_handle_resolves_when_the_connection_is_lost(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """A reply asked for with generate_reply is dropped with its connection (the owed
    answer closes): the handle must resolve too, or `await handle` / `session.run()`
    hangs for ever."""
    rig = await live(server, rigs, answer_timeout=3.0)
    t0 = now()
    handle = rig.session.generate_reply(instructions="Greet the caller.")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    await server.drop()
    await server.wait_connected(2)
    await rig.settle(10.0)

    assert (got := rig.timeline.agent_states(since=t0)) == ["listening", "thinking", "listening"], (
        got
    )
    assert rig.owed == 0
    assert handle.done()


async def test_aclose_during_playback_keeps_what_was_heard_and_resolves_the_handle(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """C3 on a duplex model: closing while the agent's answer plays keeps the heard part
    in the history (marked interrupted) and resolves the reply's handle."""
    rig = await live(server, rigs)
    handle = rig.session.generate_reply(user_input="Count to eight.")
    await rig.settle(0.2)
    await server.output_transcript("One two three four five six seven eight.")
    await server.speech(2.0, then_silence=1.0)
    await rig.settle(1.0)
    assert rig.session.agent_state == "speaking"
    await asyncio.wait_for(rig.session.aclose(), 30)
    rigs.remove(rig)
    await rig.aclose()

    said = [
        (m.content.split()[:2], m.interrupted)
        for m in rig.session.history.messages()
        if m.role == "assistant"
    ]
    assert (handle.done(), said) == (True, [(["One", "two"], True)])
    assert rig.timeline.agent_states() == [
        "initializing",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]


# ------------------------------------------------------------- barge-in


async def test_barge_in_drops_the_queued_second_burst(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """OpenAI Realtime barge-in while a second audio item of the response is already
    received and queued behind the playing one: after the user starts speaking nothing
    more is played, and the agent stays listening."""
    rig = await realtime(oai, rigs, rj.Agent(instructions="You run a shop."))
    await user_says(oai, rig, "Tell me two stories.")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.transcript("resp_1", "item_a", "Once upon a time there was a shop.")
    await oai.audio("resp_1", "item_a", seconds=1.0)
    await oai.audio_done("resp_1", "item_a")
    await oai.transcript("resp_1", "item_b", "And then another one.")
    await oai.audio("resp_1", "item_b", seconds=1.0)
    await oai.audio_done("resp_1", "item_b")
    await oai.response_done("resp_1")
    await rig.settle(0.5)
    assert rig.session.agent_state == "speaking"
    t_barge = now()
    await oai.speech_started(audio_start_ms=3000, item_id="item_user_2")
    await rig.settle(3.0)

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
    ], got
    rig.timeline.assert_never("speaking", between=(t_barge + 0.01, now()))
    assert len(rig.speaker.segments) == 1
    assert rig.speaker.played_seconds < 0.7
    assert rig.owed == 0


# ----------------------------------------------------------- handoff


class Billing(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You handle billing.", id="billing")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Greet the caller as the billing desk.")


class Front(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You are the front desk.", id="front")

    @rj.function_tool
    async def transfer_to_billing(self) -> rj.Agent:
        """Transfer the caller to billing."""
        return Billing()


async def test_handoff_tool_on_realtime_has_no_listening_gap(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """A tool that hands off to an agent whose on_enter speaks: the reply is owed from the
    user's turn until the new agent's greeting is audible, never listening in between."""
    rig = await realtime(oai, rigs, Front())
    await user_says(oai, rig, "Billing, please.")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.function_call("resp_1", "call_1", "transfer_to_billing", "{}")
    await oai.response_done("resp_1")
    await rig.settle(0.5)
    assert rig.session.current_agent.id == "billing"
    await oai.wait_for("response.create")
    await rig.settle(0.2)
    await spoken(oai, rig, "resp_2", "Billing desk, how can I help?", item="item_2")

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
    ], got
    assert rig.messages()[-1] == ("assistant", "Billing desk, how can I help?")
    assert rig.owed == 0


# --------------------------------------------------------- AgentTask


class GetEmail(rj.AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask for the caller's email.", id="get_email")

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Ask for the email address.")

    @rj.function_tool
    async def record_email(self, email: str) -> None:
        """Record the email.

        Args:
            email: the address
        """
        self.complete(email)


class Signup(rj.Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You sign people up.", id="signup")

    @rj.function_tool
    async def sign_up(self) -> str:
        """Sign the caller up."""
        email = await GetEmail()
        return f"signed up {email}"


async def test_agent_task_awaited_from_a_realtime_tool_listens_for_the_user(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """A realtime tool awaits an AgentTask that asks the user a question: once the
    question was heard, the agent waits for the user and must report listening (the
    paused caller's tool is not a reply owed now); then the task completes, the caller
    resumes and its answer is spoken."""
    rig = await realtime(oai, rigs, Signup())
    await user_says(oai, rig, "Sign me up.")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.function_call("resp_1", "call_1", "sign_up", "{}")
    await oai.response_done("resp_1")
    await rig.settle(0.5)
    assert rig.session.current_agent.id == "get_email"
    await oai.wait_for("response.create")
    await spoken(oai, rig, "resp_2", "What is your email?", item="item_2")
    await rig.settle(2.0)  # waiting for the user's answer
    await user_says(oai, rig, "It is a at b dot com.")
    await oai.response_created("resp_3")
    await oai.function_call("resp_3", "call_2", "record_email", json.dumps({"email": "a@b.com"}))
    await oai.response_done("resp_3")
    await rig.settle(0.5)
    assert rig.session.current_agent.id == "signup"
    await oai.wait_for("response.create", count=2)
    await spoken(oai, rig, "resp_4", "You are signed up.", item="item_4")

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "listening",  # the question was heard: the task waits for the user
        "thinking",
        "speaking",
        "listening",
    ], got
    assert rig.messages()[-1] == ("assistant", "You are signed up.")
    assert rig.owed == 0


# ------------------------------------------------------------ text output


async def test_agent_transcript_reaches_the_transcription_output(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """session.output.transcription gets what the agent says on a realtime model too
    (captions in a browser): one segment per reply, the text that was heard."""
    model = GPTLive(api_key="test", base_url=server.base_url)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
    speaker = MemoryAudioOutput(sample_rate=24000)
    text = MemoryTextOutput()
    session.output.audio = speaker
    session.output.transcription = text
    timeline = StateTimeline(session)
    await session.start(Weather())
    try:
        session.generate_reply(instructions="Say hello.")
        await reply_heard(server, "Hello there.")
        assert timeline.agent_states() == ANSWERED_AT_ONCE
        assert text.segments == ["Hello there."]
    finally:
        await session.aclose()


# ------------------------------------------------------------ output rate


async def test_output_at_48k_plays_the_whole_burst(server: GPTLiveServer) -> None:
    """Agent audio resampled to a 48 kHz output plays for its full duration, and the
    state follows it: thinking until audible, speaking for the burst, then listening."""
    model = GPTLive(api_key="test", base_url=server.base_url)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
    speaker = MemoryAudioOutput(sample_rate=48000)
    session.output.audio = speaker
    mic = MemoryAudioInput(sample_rate=24000)
    session.input.audio = mic
    timeline = StateTimeline(session)
    await session.start(Weather())
    feeder = asyncio.get_running_loop().create_task(mic.push_silence(600))
    try:
        handle = session.generate_reply(instructions="Say hello.")
        await reply_heard(server, "Hello there, caller.")
        assert handle.done()
        assert timeline.agent_states() == ANSWERED_AT_ONCE
        assert speaker.segments == [pytest.approx(1.0, abs=0.01)]
        assert [(m.role, m.content, m.interrupted) for m in session.history.messages()] == [
            ("assistant", "Hello there, caller.", False)
        ]
    finally:
        await session.aclose()
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)


# ------------------------------------------------------------ ctx.update


class Timer(rj.Agent):
    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__(instructions="You set timers.", id="timer")
        self.gate = gate

    @rj.function_tool
    async def set_timer(self, ctx: rj.RunContext[None]) -> str:
        """Start a timer."""
        await ctx.update("Timer started.")
        await self.gate.wait()
        return "Timer done."


async def test_released_tool_final_result_is_recorded_and_spoken(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """A realtime tool released with ctx.update(): the interim result is voiced, the user
    is never marked away while the tool still runs, and once it returns its final result
    is part of the history (a reconnect reseeds from it) and is spoken."""
    gate = asyncio.Event()
    rig = await live(server, rigs, Timer(gate), user_away_timeout=2.0)
    await user_asks(server, rig, "Set a timer.")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "set_timer", {})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await answer(server, rig, "Your timer is running.")
    await rig.settle(6.0)
    assert rig.session.user_state == "listening"
    gate.set()
    await rig.settle(0.5)
    await answer(server, rig, "Your timer is done.")

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
        "thinking",
        "speaking",
        "listening",
    ], got
    assert "away" not in rig.timeline.user_states(since=t0)
    texts = [
        getattr(item, "output", None) or getattr(item, "content", None)
        for item in rig.session.history.items
    ]
    assert any(t and "Timer done." in t for t in texts), texts
    assert rig.messages()[-1] == ("assistant", "Your timer is done.")
    assert rig.owed == 0


# ----------------------------------------------------------- fallback


async def test_fallback_primary_refusing_at_start_uses_the_backup(rigs: list[Rig]) -> None:
    """FallbackRealtime whose primary refuses the connection: the session starts on the
    backup and answers there; nothing is reported as owed meanwhile."""
    async with GPTLiveServer() as primary, GPTLiveServer() as backup:
        primary.refuse_connections = True
        model = rj.FallbackRealtime(
            [
                GPTLive(api_key="k", base_url=primary.base_url, max_reconnect_attempts=0),
                GPTLive(api_key="k", base_url=backup.base_url),
            ]
        )
        rig = await start_rig(model, Weather())
        rigs.append(rig)
        assert backup.connections == 1
        await user_asks(backup, rig, "Hello?")
        t0 = now()
        await backup.response_created("dlg_1", "resp_1")
        await backup.response_completed("dlg_1", "resp_1")
        await answer(backup, rig, "Hi there.")
        assert (got := rig.timeline.agent_states(since=t0)) == [
            "listening",
            "thinking",
            "speaking",
            "listening",
        ], got
        assert rig.messages() == [("user", "Hello?"), ("assistant", "Hi there.")]
        assert rig.owed == 0
        await rig.aclose()
        rigs.remove(rig)


def _our_tasks() -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    left = []
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        code = getattr(task.get_coro(), "cr_code", None)
        filename = code.co_filename if code is not None else ""
        if "/rejoinder/" in filename and "/testing/" not in filename:
            left.append(task)
    return left


async def test_fallback_with_every_model_down_fails_start_cleanly() -> None:
    """Both models refuse: start() raises a clear RealtimeError, and once the session and
    the model are closed nothing is left running."""
    async with GPTLiveServer() as primary, GPTLiveServer() as backup:
        primary.refuse_connections = backup.refuse_connections = True
        model = rj.FallbackRealtime(
            [
                GPTLive(api_key="k", base_url=primary.base_url, max_reconnect_attempts=0),
                GPTLive(api_key="k", base_url=backup.base_url, max_reconnect_attempts=0),
            ]
        )
        session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
        session.output.audio = MemoryAudioOutput()
        with pytest.raises(rj.RealtimeError, match="no realtime model could start"):
            await asyncio.wait_for(session.start(Weather()), 60)
        await session.aclose()
        await model.aclose()  # stops the model's own probes
        await advance(1.0)
        assert _our_tasks() == []
        assert session.agent_state == "listening"


async def test_fallback_fatal_error_on_primary_moves_to_backup(rigs: list[Rig]) -> None:
    """A fatal error event on the primary mid-response: the running response is owed no
    more (listening), the session stays open on the backup, and the error is reported as
    recoverable."""
    async with GPTLiveServer() as primary, GPTLiveServer() as backup:
        model = rj.FallbackRealtime(
            [
                GPTLive(api_key="k", base_url=primary.base_url),
                GPTLive(api_key="k", base_url=backup.base_url),
            ]
        )
        rig = await start_rig(model, Weather())
        rigs.append(rig)
        closed: list[rj.CloseEvent] = []
        rig.session.on("close", closed.append)
        await user_asks(primary, rig, "Weather?")
        t0 = now()
        await primary.response_created("dlg_1", "resp_1")
        await rig.settle(0.2)
        await primary.error("bad key", code="invalid_api_key")
        await backup.wait_connected(1, within=30)
        await rig.settle(1.0)
        assert closed == []
        assert (got := rig.timeline.agent_states(since=t0)) == [
            "listening",
            "thinking",
            "listening",
        ], got
        assert rig.errors and all(e.recoverable for e in rig.errors)
        await backup.response_created("dlg_2", "resp_2")
        await backup.response_completed("dlg_2", "resp_2")
        await answer(backup, rig, "Sunny.")
        assert rig.messages()[-1] == ("assistant", "Sunny.")
        assert rig.owed == 0
        await rig.aclose()
        rigs.remove(rig)


# -------------------------------------------------------------- aclose


async def test_aclose_while_start_is_connecting_is_bounded(server: GPTLiveServer) -> None:
    """aclose() while start() waits for session.started: both return within the close
    bound, and nothing of the session is left running."""
    server.answer_start = False
    model = GPTLive(api_key="test", base_url=server.base_url, connect_timeout=60.0)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=model, user_away_timeout=None, close_timeout=2.0
    )
    session.output.audio = MemoryAudioOutput()
    timeline = StateTimeline(session)
    starting = asyncio.get_running_loop().create_task(session.start(Weather()))
    await server.wait_connected(1)
    await advance(0.5)
    t0 = now()
    await asyncio.wait_for(session.aclose(), 30)
    await asyncio.wait_for(asyncio.gather(starting, return_exceptions=True), 30)
    assert now() - t0 < 5.0
    await advance(1.0)
    assert _our_tasks() == []
    assert timeline.agent_states() == ["initializing", "listening"], timeline.agent_states()
    assert session.history.items == []


async def test_aclose_during_a_running_tool(server: GPTLiveServer, rigs: list[Rig]) -> None:
    """aclose() while a realtime tool hangs: bounded, the user's turn stays in the
    history, no task is left running and nothing stays owed."""
    gate = asyncio.Event()
    rig = await live(server, rigs, Weather(gate), close_timeout=2.0)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await rig.settle(0.5)
    await asyncio.wait_for(rig.session.aclose(), 30)
    rigs.remove(rig)
    await rig.aclose()
    assert now() - t0 < 10.0
    await advance(1.0)
    assert _our_tasks() == []
    assert (got := rig.timeline.agent_states(since=t0)) == ["listening", "thinking", "listening"], (
        got
    )
    assert rig.messages() == [("user", "Weather in Oslo?")]
    assert rig.owed == 0


async def test_aclose_during_reconnect_backoff(server: GPTLiveServer) -> None:
    """aclose() while the provider waits between reconnect attempts: bounded, and the
    session ends listening with nothing owed and no task left."""
    model = GPTLive(
        api_key="test", base_url=server.base_url, max_reconnect_attempts=5, reconnect_backoff=20.0
    )
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=model, user_away_timeout=None, close_timeout=2.0
    )
    session.output.audio = MemoryAudioOutput()
    timeline = StateTimeline(session)
    await session.start(Weather())
    await advance(0.1)
    await server.response_created("dlg_1", "resp_1")
    await advance(0.1)
    server.refuse_connections = True
    await server.drop()
    await advance(1.0)  # the first retry failed at once; the next waits 20 s
    t0 = now()
    await asyncio.wait_for(session.aclose(), 60)
    assert now() - t0 < 5.0
    await advance(1.0)
    assert _our_tasks() == []
    assert timeline.agent_states() == ["initializing", "listening", "thinking", "listening"]


# ----------------------------------------------------------- text only


async def test_text_only_session_on_a_realtime_model(server: GPTLiveServer) -> None:
    """No audio output at all: a reply is owed (thinking) until the agent's output arrives,
    the reply is recorded, the generate_reply handle resolves, and it ends listening."""
    model = GPTLive(api_key="test", base_url=server.base_url)
    session: rj.AgentSession[Any] = rj.AgentSession(llm=model, user_away_timeout=None)
    timeline = StateTimeline(session)
    await session.start(Weather())
    try:
        handle = session.generate_reply(user_input="Hi!")
        await reply_heard(server, "Hello, caller.")
        assert handle.done()
        assert timeline.agent_states() == ANSWERED_AT_ONCE
        assert [(m.role, m.content) for m in session.history.messages()] == [
            ("user", "Hi!"),
            ("assistant", "Hello, caller."),
        ]
    finally:
        await session.aclose()


async def test_say_on_a_realtime_model_without_tts_is_a_clear_error(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """session.say() on a realtime model with no TTS raises at once (no speech is queued
    that nobody will voice) and leaves nothing owed."""
    rig = await live(server, rigs)
    with pytest.raises(RuntimeError, match="generate_reply"):
        rig.session.say("Hello!")
    await rig.settle(1.0)
    assert rig.timeline.agent_states() == ["initializing", "listening"]
    assert rig.owed == 0


# ------------------------------------------------------------- run()


async def test_run_waits_for_the_answer_not_the_preamble(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """`await session.run(user_input=...)` resolves when the whole reply, tool follow-up
    included, was played (the README's promise for `run`): a spoken preamble ("let me
    check") is not the end of the run; the result holds the tool call, its output and the
    answer."""
    rig = await live(server, rigs)
    t0 = now()
    running = asyncio.get_running_loop().create_task(rig.session.run(user_input="Weather in Oslo?"))
    await rig.settle(0.2)
    await server.response_created("dlg_1", "resp_1")
    await answer(server, rig, "Let me check.", seconds=0.5)
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.response_completed("dlg_1", "resp_1")
    await server.wait_for("response.create")
    await rig.settle(0.5)
    done_before_answer = running.done()
    await server.response_created("dlg_1", "resp_2")
    await server.response_completed("dlg_1", "resp_2")
    await answer(server, rig, "It is sunny in Oslo.")
    result = await asyncio.wait_for(running, 30)

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ], got
    assert not done_before_answer
    assert [m.content for m in result.messages] == ["Let me check.", "It is sunny in Oslo."]
    assert [c.call_id for c in result.function_calls] == ["call_1"]


# ------------------------------------------------------- OpenAI Realtime


async def test_openai_generate_reply_whose_response_fails_returns_to_listening(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """generate_reply on OpenAI Realtime: the response it asked for fails with no audio.
    Nothing will be said, so the agent goes back to listening at once (D3) instead of
    staying thinking until answer_timeout, and the handle resolves."""
    rig = await realtime(oai, rigs, rj.Agent(instructions="You run a shop."), answer_timeout=5.0)
    t0 = now()
    handle = rig.session.generate_reply(instructions="Greet the caller.")
    await oai.wait_for("response.create")
    await oai.response_created("resp_1")
    await rig.settle(0.2)
    await oai.response_done("resp_1", status="failed", error="server exploded")
    await rig.settle(0.3)
    t_failed = now()

    assert (got := rig.timeline.agent_states(since=t0)) == ["listening", "thinking", "listening"], (
        got
    )
    assert rig.timeline.times_of("listening")[-1] < t_failed
    assert handle.done()
    assert rig.owed == 0


async def test_openai_session_interrupt_cuts_and_truncates(
    oai: OpenAIRealtimeServer, rigs: list[Rig]
) -> None:
    """session.interrupt() on OpenAI Realtime while the agent speaks: playback stops at
    once (listening), the item is truncated where it was heard, the stored message holds
    only what was heard and is marked interrupted, and nothing stays owed."""
    rig = await realtime(oai, rigs, rj.Agent(instructions="You run a shop."))
    await user_says(oai, rig, "Tell me a story.")
    t0 = now()
    await oai.response_created("resp_1")
    await oai.transcript("resp_1", "item_1", "Once upon a time there was a small shop.")
    await oai.audio("resp_1", "item_1", seconds=2.0)
    await rig.settle(0.8)
    await asyncio.wait_for(rig.session.interrupt(), 5)
    await rig.settle(0.1)
    truncate = await oai.wait_for("conversation.item.truncate")
    await oai.response_done("resp_1", status="cancelled", reason="client_cancelled")
    await rig.settle(2.0)

    assert (got := rig.timeline.agent_states(since=t0)) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
    ], got
    assert truncate["item_id"] == "item_1"
    assert truncate["audio_end_ms"] == pytest.approx(800, abs=40)
    said = [m for m in rig.session.history.messages() if m.role == "assistant"]
    assert len(said) == 1 and said[0].interrupted
    assert said[0].content.startswith("Once upon")
    assert len(said[0].content) < len("Once upon a time there was a small shop.")
    assert rig.speaker.segments == [pytest.approx(0.8, abs=0.05)]
    assert rig.owed == 0


# ----------------------------------------------------- GPT-Live ordering


async def test_output_sent_before_its_response_fails_returns_to_listening(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    """A fast tool whose output is already queued when its backend response fails: no
    continuation follows (no response.create), nothing stays owed, and the agent goes
    back to listening without a stuck thinking."""
    rig = await live(server, rigs)
    await user_asks(server, rig, "Weather in Oslo?")
    t0 = now()
    await server.response_created("dlg_1", "resp_1")
    await server.function_call("dlg_1", "call_1", "get_weather", {"city": "Oslo"})
    await server.wait_for("response.item.create")
    await rig.settle(0.5)
    assert rig.session.agent_state == "thinking"
    await server.response_failed("dlg_1", "resp_1", "backend down")
    await rig.settle(0.5)
    await rig.settle(10.0)

    assert (got := rig.timeline.agent_states(since=t0)) == ["listening", "thinking", "listening"], (
        got
    )
    assert server.of_type("response.create") == []
    assert rig.owed == 0
    assert rig.messages() == [("user", "Weather in Oslo?")]
