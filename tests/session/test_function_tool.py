"""@function_tool: schema from hints + docstring; bad arguments become errors the model sees."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

import rejoinder as rj
from rejoinder.testing import ScriptedLLM as LLM
from rejoinder.testing import ToolCall

from ..conftest import MakeSession


@rj.function_tool
async def lookup(
    ctx: rj.RunContext[None], city: str, days: int = 1, unit: Literal["c", "f"] = "c"
) -> str:
    """Look up the weather.

    Args:
        city: the city name
        days: how many days ahead
        unit: temperature unit
    """
    return f"{city} {days} {unit}"


def test_schema_from_hints_and_docstring() -> None:
    definition = lookup.definition
    assert definition.name == "lookup"
    assert definition.description == "Look up the weather."
    assert definition.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city name"},
            "days": {"type": "integer", "description": "how many days ahead", "default": 1},
            "unit": {
                "type": "string",
                "enum": ["c", "f"],
                "description": "temperature unit",
                "default": "c",
            },
        },
        "required": ["city"],
    }


def test_name_and_description_overrides() -> None:
    @rj.function_tool(name="weather", description="Forecast.")
    async def anything() -> None:
        """Ignored."""

    assert (anything.name, anything.definition.description) == ("weather", "Forecast.")


def test_sync_functions_are_rejected() -> None:
    with pytest.raises(TypeError, match="async"):
        rj.function_tool(lambda: None)  # type: ignore[arg-type]


def test_methods_bind_to_the_agent() -> None:
    class Weather(rj.Agent):
        def __init__(self) -> None:
            super().__init__(instructions="w")
            self.suffix = "!"

        @rj.function_tool
        async def shout(self, text: str) -> str:
            """Shout."""
            return text.upper() + self.suffix

    agent = Weather()
    assert [t.name for t in agent.tools] == ["shout"]
    assert "self" not in agent.tools[0].definition.parameters["properties"]
    assert asyncio.run(agent.tools[0](text="hi")) == "HI!"


def test_duplicate_tool_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="duplicate tool names"):
        rj.Agent(instructions="x", tools=[lookup, lookup])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"city": 3}', "invalid arguments for lookup: city: Input should be a valid string"),
        ("{}", "invalid arguments for lookup: city: Field required"),
        ('{"city": "Oslo", "unit": "k"}', "invalid arguments for lookup: unit: Input should be"),
        ("{not json", "arguments for lookup are not valid JSON"),
        ("[1, 2]", "arguments for lookup must be a JSON object"),
    ],
)
async def test_bad_arguments_become_tool_errors(
    make_session: MakeSession, arguments: str, message: str
) -> None:
    llm = LLM([[ToolCall("lookup", arguments)], ["Let me retry."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    result = await h.session.run(user_input="weather")
    output = result.function_call_outputs[0]
    assert output.is_error
    assert output.output.startswith(message)
    assert result.final_output == "Let me retry."
    assert h.errors == []


async def test_unknown_tool_is_an_error_the_model_sees(make_session: MakeSession) -> None:
    llm = LLM([[ToolCall("teleport")], ["I can't do that."]])
    h = await make_session(llm, rj.Agent(instructions="t", tools=[lookup]))
    result = await h.session.run(user_input="beam me up")
    assert result.function_call_outputs[0].output == "unknown tool 'teleport'"
    assert result.final_output == "I can't do that."


async def test_valid_call_gets_parsed_arguments_and_context(make_session: MakeSession) -> None:
    seen: list[object] = []

    @rj.function_tool
    async def remember(ctx: rj.RunContext[dict[str, str]], key: str) -> str:
        """Remember something."""
        seen.append((ctx.userdata, ctx.function_call.name, ctx.speech_handle.source))
        return ctx.userdata[key]

    llm = LLM([[ToolCall("remember", {"key": "name"})], ["Hi Ada."]])
    h = await make_session(
        llm, rj.Agent(instructions="t", tools=[remember]), userdata={"name": "Ada"}
    )
    result = await h.session.run(user_input="who am I?")
    assert result.function_call_outputs[0].output == "Ada"
    assert seen == [({"name": "Ada"}, "remember", "generate_reply")]


@pytest.mark.parametrize(
    ("value", "text"),
    [({"a": 1}, '{"a": 1}'), (42, "42"), (rj.ToolResult({"ok": True}), '{"ok": true}')],
)
async def test_return_values_are_serialised(
    make_session: MakeSession, value: object, text: str
) -> None:
    @rj.function_tool
    async def produce() -> object:
        """Produce."""
        return value

    h = await make_session(
        LLM([[ToolCall("produce")], ["ok"]]), rj.Agent(instructions="t", tools=[produce])
    )
    result = await h.session.run(user_input="go")
    assert result.function_call_outputs[0].output == text
