"""No pulse at session start, on virtual time: from ``initializing`` the first state
reported is the truth once the first agent has entered. An agent that greets goes
``initializing → thinking → speaking``, however long its ``on_enter`` takes before it
says so; one that says nothing goes ``initializing → listening`` when its ``on_enter``
returns; a greeting queued right after ``start()`` returns counts as the agent's."""

from __future__ import annotations

from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import MemoryAudioOutput, ScriptedLLM, ScriptedTTS, StateTimeline, advance


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
