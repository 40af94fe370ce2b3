"""No pulse at session start, on virtual time: from ``initializing`` the first state
reported is the truth once the first agent has entered. An agent that greets goes
``initializing → thinking → speaking``, however long its ``on_enter`` takes before it
says so; one that says nothing goes ``initializing → listening`` when its ``on_enter``
returns; a greeting queued right after ``start()`` returns counts as the agent's. A first
agent that awaits a task from its ``on_enter`` has entered once the task took the floor
(the task's state is the truth from then on), and the user is heard from the start, while
the first agent is still entering."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import pytest

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioInput,
    MemoryAudioOutput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    StateTimeline,
    advance,
)


class Greeter(rj.Agent):
    def __init__(self, *, greets: bool, loading: float = 0.0) -> None:
        super().__init__(instructions="test")
        self.greets, self.loading = greets, loading

    async def on_enter(self) -> None:
        if self.loading:
            await advance(self.loading)  # fetching the caller's record, say
        if self.greets:
            self.session.say("Hello, how can I help?")


def session_and_timeline(**options: Any) -> tuple[rj.AgentSession[Any], StateTimeline]:
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM(lambda _: ["Sure."]), tts=ScriptedTTS(), user_away_timeout=1.0, **options
    )
    session.output.audio = MemoryAudioOutput(24000)
    return session, StateTimeline(session)


@pytest.mark.parametrize("loading", [0.0, 1.5])
async def test_an_agent_that_greets_is_thinking_first(loading: float) -> None:
    session, timeline = session_and_timeline()
    async with session:
        await session.start(Greeter(greets=True, loading=loading))
        await advance(10)
        assert timeline.agent_states() == ["initializing", "thinking", "speaking", "listening"]
        assert timeline.times_of("thinking") == [pytest.approx(loading)]


@pytest.mark.parametrize("loading", [0.0, 1.5])
async def test_an_agent_that_says_nothing_is_listening_once_it_entered(loading: float) -> None:
    session, timeline = session_and_timeline()
    async with session:
        await session.start(Greeter(greets=False, loading=loading))
        await advance(0.5)
        assert timeline.agent_states() == ["initializing", "listening"]
        assert timeline.times_of("listening") == [pytest.approx(loading)]
        # the user is not away while the agent was still entering
        assert timeline.times_of("away", who="user") == []
        await advance(1.0)
        assert session.user_state == "away"


async def test_a_greeting_right_after_start_has_no_listening_before_it() -> None:
    session, timeline = session_and_timeline()
    async with session:
        await session.start(Greeter(greets=False))
        session.say("Welcome!")
        await advance(10)
        assert timeline.agent_states() == ["initializing", "thinking", "speaking", "listening"]


async def test_a_session_closed_while_its_first_agent_enters_ends_listening() -> None:
    session, timeline = session_and_timeline(close_timeout=1.0)
    await session.start(Greeter(greets=True, loading=3.0))  # start() returns after the bound
    await session.aclose()
    assert session.agent_state == "listening"
    assert "speaking" not in timeline.agent_states()


class AskFirst(rj.AgentTask[str]):
    """Has no on_enter: it enters at once and waits for the user."""


class OpensWithATask(rj.Agent):
    def __init__(self, task: AskFirst) -> None:
        super().__init__(instructions="test")
        self.task = task
        self.answer: str | None = None

    async def on_enter(self) -> None:
        self.answer = await self.task
        self.session.say("Thanks, on we go.")


async def test_a_first_agent_awaiting_a_task_has_entered_once_the_task_took_the_floor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session, timeline = session_and_timeline()
    task = AskFirst(instructions="ask", id="ask")
    agent = OpensWithATask(task)
    caplog.set_level(logging.WARNING, logger="rejoinder")
    async with session:
        await asyncio.wait_for(session.start(agent), 0.1)  # not the 5 s entry bound
        await advance(3.0)
        # The task waits for the user: listening at once, never initializing for 5 s.
        assert timeline.agent_states() == ["initializing", "listening"]
        assert timeline.times_of("listening") == [pytest.approx(0.0, abs=0.01)]
        task.complete("ready")
        await advance(10.0)
        assert agent.answer == "ready"
        # The rest of on_enter is owed like any on_enter: no listening pulse before it.
        assert timeline.agent_states() == [
            "initializing",
            "listening",
            "thinking",
            "speaking",
            "listening",
        ]
    assert not [r for r in caplog.records if "on_enter" in r.getMessage()], caplog.text


class WaitsBeforeGreeting(rj.Agent):
    """Waits three seconds in on_enter (for who answered a call, say), then greets."""

    def __init__(self) -> None:
        super().__init__(instructions="test")

    async def on_enter(self) -> None:
        await advance(3.0)
        self.session.say("Hello there.")


async def test_the_user_is_heard_while_the_first_agent_enters() -> None:
    mic = MemoryAudioInput(16000)
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM(lambda _: ["Hi!"]),
        stt=ScriptedSTT(["hello?"]),
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        user_away_timeout=None,
    )
    session.input.audio, session.output.audio = mic, MemoryAudioOutput(24000)
    heard: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    session.on(
        "user_input_transcribed",
        lambda e: heard.append((e.transcript, loop.time())) if e.is_final else None,
    )
    voice = np.concatenate(
        [np.zeros(8000), 3000 * np.sin(np.arange(12000) / 5.0), np.zeros(48000)]
    ).astype("<i2")
    async with session:
        starting = asyncio.create_task(session.start(WaitsBeforeGreeting()))
        line = asyncio.create_task(mic.push_pcm(voice.tobytes()))
        await advance(6.0)
        await starting
        line.cancel()
        # "hello?" (0.5 s to 1.25 s) is heard as it ends, not when on_enter returned.
        assert [text for text, _ in heard] == ["hello?"]
        assert heard[0][1] < 2.5
