"""Scenarios C: lifecycle never hangs. C1: a speculative reply parked by a discarded
turn during uninterruptible speech never blocks an awaited AgentTask. C2/C3: handoff and
close stay bounded and keep what was heard. (More C2/C3 cases: tests/session/
test_session.py, test_agent_task.py, test_lifecycle_random.py, test_regressions.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import (
    MemoryAudioInput,
    ScriptedLLM,
    ScriptedSTT,
    ScriptedTTS,
    ScriptedVAD,
    ToolCall,
)

from .test_e_voice_turns import Call


class GetName(rj.AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Ask for the name.", id="get_name")

    async def on_enter(self) -> None:
        self.session.say("What is your name?")


@rj.function_tool
async def ask_name() -> str:
    """Ask the user's name."""
    return await GetName()


def model(ctx: rj.ChatContext) -> list[Any]:
    last = ctx.items[-1]
    if isinstance(last, rj.ChatMessage) and "name" in last.content:
        return [ToolCall("ask_name")]
    return ["A speculative answer nobody will use."]


async def test_c1_discarded_speculation_never_blocks_an_agent_task() -> None:
    llm = ScriptedLLM(model)  # type: ignore[arg-type]
    mic = MemoryAudioInput(16000)
    stt = ScriptedSTT(["Hello?", "Please ask my name."])
    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=llm,
        stt=stt,
        tts=ScriptedTTS(),
        vad=ScriptedVAD(),
        preemptive_generation=True,
        user_away_timeout=None,
    )
    session.input.audio = mic
    c = Call(session, mic, llm, stt, session.tts)  # type: ignore[arg-type]
    await session.start(rj.Agent(instructions="front", tools=[ask_name], id="front"))

    notice = session.say(
        "This notice cannot be interrupted, please bear with me.", allow_interruptions=False
    )
    await c.speak(0.6)
    await c.silence(1.0)  # final transcript (speculation starts), turn ends: discarded
    await notice
    floor = session._turn_state.floor
    assert all(ob.kind.value != "preemptive" for ob in floor.open_obligations())

    await c.speak(1.0)  # "Please ask my name." -> ask_name -> await GetName()
    await asyncio.wait_for(c.silence(2.0), 30)
    assert session.current_agent.id == "get_name"  # the task started
    assert c.text.segments[-1] == "What is your name?"
    await asyncio.wait_for(session.aclose(), 30)


async def test_c2_handoff_completes_when_the_old_agents_on_exit_hangs() -> None:
    class Stuck(rj.Agent):
        async def on_exit(self) -> None:
            await asyncio.Event().wait()

    session: rj.AgentSession[Any] = rj.AgentSession(llm=ScriptedLLM([]), close_timeout=2.0)
    await session.start(Stuck(instructions="stuck", id="stuck"))
    t0 = asyncio.get_running_loop().time()
    await asyncio.wait_for(session.update_agent(rj.Agent(instructions="next", id="next")), 30)
    assert asyncio.get_running_loop().time() - t0 == pytest.approx(2.0)
    assert session.current_agent.id == "next"
    await session.aclose()


async def test_c3_aclose_while_audio_plays_keeps_what_was_heard() -> None:
    from rejoinder.testing import MemoryAudioOutput, advance

    session: rj.AgentSession[Any] = rj.AgentSession(
        llm=ScriptedLLM([["One two three four. Five six seven eight."]]),
        tts=ScriptedTTS(word_timings=True),
        user_away_timeout=None,
    )
    session.output.audio = MemoryAudioOutput()
    await session.start(rj.Agent(instructions="t"))
    session.generate_reply(user_input="count")
    await advance(0.62)  # "One two three" heard ("four" is 0.70-0.90)
    await asyncio.wait_for(session.aclose(), 30)
    said = [m for m in session.history.messages() if m.role == "assistant"]
    assert [(m.content, m.interrupted) for m in said] == [("One two three", True)]
