"""Agent.session and RunContext.session are typed as PublicSession, so a member of
AgentSession missing there is one a user's type checker refuses on those paths."""

from __future__ import annotations

import inspect

import rejoinder as rj
from rejoinder.session.public_session import PublicSession
from rejoinder.testing import ScriptedLLM, ToolCall


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def _instance_attributes() -> set[str]:
    session = rj.AgentSession()
    return {name for name in vars(session) if not name.startswith("_")}


def test_every_public_member_of_the_session_is_in_the_protocol() -> None:
    members = _public(rj.AgentSession) | _instance_attributes()
    missing = sorted(members - _public(PublicSession))
    assert not missing, f"add these to PublicSession: {missing}"


def test_the_protocol_names_nothing_the_session_lacks() -> None:
    members = _public(rj.AgentSession) | _instance_attributes()
    extra = sorted(_public(PublicSession) - members)
    assert not extra, f"PublicSession names members AgentSession does not have: {extra}"


def test_the_protocol_keeps_the_session_signatures() -> None:
    for name in sorted(_public(PublicSession)):
        theirs = inspect.getattr_static(rj.AgentSession, name, None)
        ours = inspect.getattr_static(PublicSession, name)
        if not callable(theirs) or isinstance(ours, property):
            continue
        expected = list(inspect.signature(theirs).parameters)
        assert list(inspect.signature(ours).parameters) == expected, name


async def test_an_agent_and_a_tool_are_handed_the_session_itself() -> None:
    seen: list[object] = []

    class Looker(rj.Agent):
        instructions = "x"

        @rj.function_tool
        async def look(self, context: rj.RunContext) -> str:
            """Look."""
            seen.append(context.session)
            return "ok"

    session = rj.AgentSession(llm=ScriptedLLM([[ToolCall("look")], ["Done."]]))
    agent = Looker()
    async with session:
        await session.start(agent)
        await session.run(user_input="look")
        assert agent.session is session
        assert seen == [session]
