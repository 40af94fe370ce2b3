"""Shared fixtures: sessions on virtual time (looptime) with scripted models."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.testing import MemoryTextOutput, ScriptedLLM, StateTimeline


@dataclass
class Harness:
    session: rj.AgentSession[Any]
    timeline: StateTimeline
    output: MemoryTextOutput
    llm: ScriptedLLM | None
    errors: list[rj.ErrorEvent] = field(default_factory=list)


MakeSession = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_session() -> AsyncIterator[MakeSession]:
    """Start a session (timeline attached before start) and close it after the test."""
    harnesses: list[Harness] = []

    async def factory(
        llm: ScriptedLLM | None = None, agent: rj.Agent | None = None, **options: Any
    ) -> Harness:
        options.setdefault("user_away_timeout", None)
        session: rj.AgentSession[Any] = rj.AgentSession(llm=llm, **options)
        output = MemoryTextOutput()
        session.output.transcription = output
        harness = Harness(session, StateTimeline(session), output, llm)
        session.on("error", harness.errors.append)
        await session.start(agent or rj.Agent(instructions="You are a test agent."))
        harnesses.append(harness)
        return harness

    yield factory
    for harness in harnesses:
        await harness.session.aclose()
