"""RunResult.expect: ordered assertions over a turn's events, readable when they fail."""

from __future__ import annotations

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedLLM as LLM
from rejoinder.testing import ToolCall

from ..conftest import MakeSession


@rj.function_tool
async def lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


async def weather_turn(make_session: MakeSession) -> rj.RunResult:
    llm = LLM([["Checking.", ToolCall("lookup", {"city": "Paris"})], ["It is sunny."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    return await h.session.run(user_input="weather in Paris?")


async def test_expectations_walk_the_turn_in_order(make_session: MakeSession) -> None:
    result = await weather_turn(make_session)
    result.expect.next_event().is_message(role="assistant", content="Checking")
    call = result.expect.next_event().is_function_call(name="lookup", arguments={"city": "Paris"})
    assert call.name == "lookup"
    result.expect.next_event().is_function_call_output(output="sunny in Paris", is_error=False)
    result.expect.next_event().is_message(role="assistant", content="sunny")
    result.expect.no_more_events()


async def test_a_failed_expectation_dumps_the_events(make_session: MakeSession) -> None:
    result = await weather_turn(make_session)
    with pytest.raises(AssertionError) as failure:
        result.expect.next_event().is_function_call(name="lookup")
    text = str(failure.value)
    assert (
        "event #0: expected a function call to lookup, got message assistant: 'Checking.'" in text
    )
    assert "#1 function_call lookup" in text
    assert "#2 function_call_output lookup: 'sunny in Paris'" in text


async def test_skip_and_no_more_events(make_session: MakeSession) -> None:
    result = await weather_turn(make_session)
    result.expect.skip_next(3)
    result.expect.next_event().is_message(role="assistant")
    with pytest.raises(AssertionError, match="had no more"):
        result.expect.next_event()
    fresh = await weather_turn(make_session)
    fresh.expect.skip_next(1)
    with pytest.raises(AssertionError, match="expected no more events"):
        fresh.expect.no_more_events()


async def test_handoff_is_an_event_of_the_turn(make_session: MakeSession) -> None:
    @rj.function_tool
    async def transfer() -> rj.Agent:
        """Transfer."""
        return rj.Agent(instructions="billing", id="billing")

    h = await make_session(
        LLM([["Transferring.", ToolCall("transfer")]]),
        rj.Agent(instructions="front", tools=[transfer], id="front"),
    )
    result = await h.session.run(user_input="billing")
    result.expect.skip_next(3)
    handoff = result.expect.next_event().is_agent_handoff(new_agent_id="billing")
    assert handoff.old_agent_id == "front"
    result.expect.no_more_events()
