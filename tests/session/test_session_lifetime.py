"""A closed session is freed: nothing the framework keeps (metrics, the timeline, model
claims) holds it alive. A server runs thousands of sessions in one process."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import rejoinder as rj
from rejoinder.testing import MemoryAudioOutput, ScriptedLLM, ScriptedTTS, ToolCall


@rj.function_tool
async def lookup() -> str:
    """Look something up."""
    return "found"


async def test_a_closed_session_is_garbage_collected() -> None:
    async def one() -> weakref.ref[Any]:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([[ToolCall("lookup")], ["Found it."]]), tts=ScriptedTTS()
        )
        session.output.audio = MemoryAudioOutput()
        # User code's handlers usually refer to their session (never unsubscribed).
        session.on("agent_state_changed", lambda _: session.agent_state)
        await session.start(rj.Agent(instructions="t", tools=[lookup]))
        await session.run(user_input="look")  # metrics, timeline, tools, audio
        await session.aclose()
        return weakref.ref(session)

    refs = [await one() for _ in range(3)]
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
