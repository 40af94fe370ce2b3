"""SCENARIOS.md C1: a speculative reply parked by a discarded turn during uninterruptible
speech never blocks an awaited AgentTask (the task starts)."""

from __future__ import annotations

import asyncio
from typing import Any

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
