"""GPT-Live client delegation, over a real loopback WebSocket: the voice model hands work
to the application (``session.delegation.created{target:"client"}``), our agent's own
LLM and tools make the answer, and it goes back as a commentary append with that id
(gpt-live §2.5, §4.2, §5.1). No server event closes the delegation: the session owns the
debt (a ``client_delegation`` obligation), so the user is never marked away and the
agent is ``thinking`` until the spoken answer is audible.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.providers.openai import GPTLive
from rejoinder.session.realtime.client_delegation import FAILED_NOTE
from rejoinder.testing import Delay, Fail, Gate, GPTLiveServer, ScriptedLLM, ToolCall, now

from .realtime_rig import Rig, answer, start_rig, user_asks

pytestmark = pytest.mark.looptime(noop_cycles=2000)


class Helper(rj.Agent):
    """Answers delegations with its own LLM and one tool."""

    def __init__(self, llm: rj.LLM, **kwargs: Any) -> None:
        super().__init__(instructions="You are a phone assistant.", llm=llm, **kwargs)
        self.lookups: list[str] = []

    @rj.function_tool
    async def get_weather(self, city: str) -> str:
        """Current weather for a city.

        Args:
            city: the city name
        """
        self.lookups.append(city)
        await asyncio.sleep(1.0)
        return f"18 C and sunny in {city}"


async def client_live(
    server: GPTLiveServer, rigs: list[Rig], agent: rj.Agent, **options: Any
) -> Rig:
    model = GPTLive(api_key="test", base_url=server.base_url, delegation="client")
    rig = await start_rig(model, agent, **options)
    rigs.append(rig)
    return rig


def commentary(server: GPTLiveServer) -> list[tuple[str | None, str]]:
    return [(e["delegation_id"], e["content"]) for e in server.of_type("session.commentary.append")]


def owed_kinds(rig: Rig) -> list[str]:
    return [o.kind for o in rig.session.owed()]


async def test_the_session_starts_with_client_delegation_and_no_backend_tools(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    await client_live(server, rigs, Helper(ScriptedLLM([["unused"]])))
    [start] = server.session_starts
    assert start["delegation"] == {"type": "client"}
    rigs[0].session.update_agent(rj.Agent(instructions="Another."))
    await rigs[0].settle(0.5)
    assert server.of_type("session.update") == []  # no tool channel to update (§4.2)


async def test_a_delegation_is_answered_by_the_agents_llm_and_tools(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    llm = ScriptedLLM(
        [
            [ToolCall("get_weather", {"city": "Paris"})],
            [Delay(0.5), "It is 18 degrees and sunny in Paris."],
        ]
    )
    agent = Helper(llm)
    # A short away timer: the answer takes 1.5 s to make, and nobody is away meanwhile.
    rig = await client_live(server, rigs, agent, user_away_timeout=1.0)
    await user_asks(server, rig, "What's the weather in Paris?")
    t_turn = now()
    await server.delegation("dlg_1", "client")
    await rig.settle(0.1)
    assert rig.session.agent_state == "thinking"
    assert owed_kinds(rig) == ["client_delegation"]
    await server.wait_for("session.commentary.append", within=10)
    t_sent = now()
    assert commentary(server) == [("dlg_1", "It is 18 degrees and sunny in Paris.")]
    assert t_sent - t_turn == pytest.approx(1.0 + 0.5, abs=0.15)  # the tool, then the LLM
    assert agent.lookups == ["Paris"]
    await rig.settle(0.5)
    # Sent, not yet spoken: the voice model owes it now.
    assert rig.session.agent_state == "thinking"
    assert owed_kinds(rig) == ["answer"]
    t_answer = now()
    await answer(server, rig, "It's 18 degrees and sunny in Paris.")
    assert rig.timeline.agent_states(since=t_turn) == [
        "listening",
        "thinking",
        "speaking",
        "listening",
    ]
    rig.timeline.assert_never("listening", between=(t_turn + 0.05, t_answer))
    rig.timeline.assert_never("away", who="user")
    assert rig.owed == 0 and not rig.errors
    # The LLM saw the conversation with the agent's instructions first.
    first_call = llm.calls[0].chat_ctx
    assert first_call.items[0].role == "system"  # type: ignore[union-attr]
    assert ("user", "What's the weather in Paris?") in [
        (m.role, m.content) for m in first_call.messages()
    ]
    calls = [i for i in rig.session.history.items if isinstance(i, rj.FunctionCall)]
    outputs = [i for i in rig.session.history.items if isinstance(i, rj.FunctionCallOutput)]
    assert [c.name for c in calls] == ["get_weather"]
    assert [o.output for o in outputs] == ["18 C and sunny in Paris"]
    # and in the agent's own context: the next delegation is answered knowing it
    assert [i.name for i in agent.chat_ctx if isinstance(i, rj.FunctionCall)] == ["get_weather"]
    # The timeline tells the story: the debt handed over to the answer, then to audio.
    story = [
        (e["kind"], e["ob"])
        for e in rig.session.timeline.entries("ob_opened", "ob_closed")
        if e["ob"] in ("client_delegation", "answer", "reply")
    ]
    assert story == [
        ("ob_opened", "client_delegation"),
        ("ob_opened", "answer"),
        ("ob_closed", "client_delegation"),
        ("ob_opened", "reply"),
        ("ob_closed", "answer"),
        ("ob_closed", "reply"),
    ]


async def test_on_delegation_overrides_the_answer(server: GPTLiveServer, rigs: list[Rig]) -> None:
    class Custom(rj.Agent):
        async def on_delegation(self, delegation: Any) -> str | None:
            await asyncio.sleep(0.3)
            return f"Order {delegation.id} ships tomorrow."

    rig = await client_live(server, rigs, Custom(instructions="Shop."))
    await server.delegation("dlg_7", "client")
    await server.wait_for("session.commentary.append", within=5)
    assert commentary(server) == [("dlg_7", "Order dlg_7 ships tomorrow.")]
    await answer(server, rig, "Your order ships tomorrow.")
    assert rig.owed == 0


@pytest.mark.parametrize("how", ["llm fails", "hook raises", "no llm"])
async def test_a_failed_answer_closes_the_debt_with_an_error_and_tells_the_model(
    server: GPTLiveServer, rigs: list[Rig], how: str
) -> None:
    class Raising(rj.Agent):
        async def on_delegation(self, delegation: Any) -> str | None:
            raise RuntimeError("inventory offline")

    agent: rj.Agent
    if how == "llm fails":
        agent = Helper(ScriptedLLM([[Delay(0.2), Fail("backend down")]]))
    elif how == "hook raises":
        agent = Raising(instructions="Shop.")
    else:
        agent = rj.Agent(instructions="No model.")
    rig = await client_live(server, rigs, agent)
    t0 = now()
    await server.delegation("dlg_1", "client")
    await server.wait_for("session.commentary.append", within=5)
    await rig.settle(0.2)
    [(delegation_id, content)] = commentary(server)
    assert delegation_id == "dlg_1"
    assert content.startswith(FAILED_NOTE.split("(")[0])
    assert [e.source for e in rig.errors] == ["delegation"]
    assert rig.errors[0].recoverable
    assert rig.owed == 0  # nothing stuck
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "listening"]


async def test_two_overlapping_delegations_are_each_answered(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    # The first question takes longer to answer: its answer is sent second.
    llm = ScriptedLLM([[Delay(2.0), "First answer."], [Delay(0.5), "Second answer."]])
    rig = await client_live(server, rigs, Helper(llm))
    t0 = now()
    await server.delegation("dlg_a", "client")
    await rig.settle(0.3)
    await server.delegation("dlg_b", "client")
    await rig.settle(0.2)
    assert owed_kinds(rig) == ["client_delegation", "client_delegation"]
    await server.wait_for("session.commentary.append", count=2, within=10)
    assert commentary(server) == [("dlg_b", "Second answer."), ("dlg_a", "First answer.")]
    await rig.settle(0.1)
    assert rig.session.agent_state == "thinking"
    await answer(server, rig, "Second answer, then the first.")
    assert rig.owed == 0
    assert rig.timeline.agent_states(since=t0) == ["listening", "thinking", "speaking", "listening"]


async def test_a_reconnect_mid_delegation_reowes_the_answer_on_the_new_connection(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    gate = asyncio.Event()
    rig = await client_live(server, rigs, Helper(ScriptedLLM([[Gate(gate), "It is sunny."]])))
    await user_asks(server, rig, "Is it sunny?")
    t0 = now()
    await server.delegation("dlg_1", "client")
    await rig.settle(0.2)
    await server.drop()
    await server.wait_connected(2, within=10)
    await rig.settle(0.5)
    # The new connection is seeded with the conversation, and the debt is still ours.
    second = server.session_starts[1]
    assert any("Is it sunny?" in str(item) for item in second.get("input", []))
    assert owed_kinds(rig) == ["client_delegation"]
    assert [o.label for o in rig.session.owed()] == ["re-owed"]
    assert rig.session.agent_state == "thinking"
    gate.set()
    await server.wait_for("session.commentary.append", within=5)
    [(delegation_id, content)] = [
        (e["delegation_id"], e["content"])
        for e in server.received_on(2)
        if e.get("type") == "session.commentary.append"
    ]
    assert delegation_id is None  # dlg_1 died with its connection
    assert content.endswith("It is sunny.")
    await rig.settle(0.2)
    await answer(server, rig, "Yes, it is sunny.")
    assert rig.owed == 0 and not rig.errors
    rig.timeline.assert_never("listening", between=(t0 + 0.05, now() - 1.2))


async def test_closing_the_session_mid_answer_cancels_it_and_leaves_nothing_owed(
    server: GPTLiveServer, rigs: list[Rig]
) -> None:
    gate = asyncio.Event()
    rig = await client_live(server, rigs, Helper(ScriptedLLM([[Gate(gate), "never sent"]])))
    await server.delegation("dlg_1", "client")
    await rig.settle(0.2)
    assert owed_kinds(rig) == ["client_delegation"]
    await asyncio.wait_for(rig.session.aclose(), 10)
    assert rig.owed == 0
    assert commentary(server) == []
    [closed] = [
        e for e in rig.session.timeline.entries("ob_closed") if e["ob"] == "client_delegation"
    ]
    assert closed["reason"] == "closed"
