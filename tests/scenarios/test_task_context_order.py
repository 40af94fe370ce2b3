"""A caller resuming from a task reads the task's conversation in speaking order.

When an ``rj.AgentTask`` (here the README's sign-up task, and the keypad's
``rj.CollectDigits``) completes, the caller's model is asked for its follow-up. A real
chat model reads its context as the Chat Completions API lays it out, where a tool's
output must come right after the call that asked for it. If the task's question and the
user's answer sit between the call and its output in the caller's context, the wire
moves the output up, the conversation ends with the user's answer, and a model that
takes the user's last word as a new request calls the tool again: the user is asked for
their e-mail twice.

These tests drive the real OpenAI-compatible client against a loopback server (127.0.0.1)
on virtual time, with a model that is naive the way real models are: it answers in words
only when a tool's output is the last thing it reads; otherwise (the user, or the agent's
own question, came last) it calls the first tool it is offered.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import rejoinder as rj
from rejoinder.providers import openai
from rejoinder.testing import MemoryTextOutput, OpenAIChatServer, StreamReply, advance
from rejoinder.testing.openai_chat_server import chunk, text_chunks, tool_call_delta

# Real sockets on virtual time (as in tests/providers/test_openai_session.py).
pytestmark = pytest.mark.looptime(noop_cycles=2000)

PROMPT = "Please enter your PIN, then press pound."


class NaiveModel:
    """The server's model: records each tool it called, by name."""

    def __init__(self) -> None:
        self.called: list[str] = []

    def __call__(self, body: dict[str, Any]) -> StreamReply:
        messages: list[dict[str, Any]] = body["messages"]
        tools: list[dict[str, Any]] = body.get("tools") or []
        last = messages[-1]
        if last["role"] == "tool" or not tools:
            words = f"Done: {last['content']}." if last["role"] == "tool" else "Hello."
            return StreamReply(text_chunks(words))
        function = tools[0]["function"]
        wanted = function.get("parameters", {}).get("properties", {})
        arguments = {"email": "ada@example.com"} if "email" in wanted else {}
        self.called.append(function["name"])
        call = tool_call_delta(
            0,
            call_id=f"call_{len(self.called)}",
            name=function["name"],
            arguments=json.dumps(arguments),
        )
        return StreamReply(
            [chunk(role="assistant"), chunk(tool_calls=[call]), chunk(finish_reason="tool_calls")]
        )


class GetEmail(rj.AgentTask[str]):
    instructions = "Ask for the user's email address."

    async def on_enter(self) -> None:
        self.session.say("What is your email address?")

    @rj.function_tool
    async def record(self, email: str) -> None:
        """Record the address.

        Args:
            email: the user's email address
        """
        self.complete(email)


class Assistant(rj.Agent):
    instructions = "You are a helpful assistant."

    @rj.function_tool
    async def sign_up(self, ctx: rj.RunContext) -> str:
        """Sign the user up."""
        email = await GetEmail()
        return f"signed up {email}"


class Teller(rj.Agent):
    instructions = "You are a bank teller."

    @rj.function_tool
    async def check_pin(self, ctx: rj.RunContext) -> str:
        """Ask the caller for their PIN."""
        digits = await rj.CollectDigits(PROMPT, max_digits=8, timeout=5.0)
        return f"{digits.reason}:{digits.digits}"


def read(items: list[rj.ChatItem]) -> list[tuple[str, str]]:
    """A context as (kind, text) pairs: what its model reads, in order."""
    out: list[tuple[str, str]] = []
    for item in items:
        if isinstance(item, rj.ChatMessage):
            out.append((item.role, item.content))
        elif isinstance(item, rj.FunctionCall):
            out.append(("call", item.name))
        elif isinstance(item, rj.FunctionCallOutput):
            out.append(("output", item.output))
    return out


@pytest.fixture
async def model() -> AsyncIterator[tuple[NaiveModel, OpenAIChatServer]]:
    naive = NaiveModel()
    async with OpenAIChatServer(naive) as server:
        yield naive, server


async def start(server: OpenAIChatServer, agent: rj.Agent) -> tuple[rj.AgentSession[None], Any]:
    llm = openai.LLM(model="test-model", base_url=server.base_url, api_key="test")
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    output = MemoryTextOutput()
    session.output.transcription = output
    await session.start(agent)
    return session, output


async def test_task_completion_does_not_repeat_the_tool_call(
    model: tuple[NaiveModel, OpenAIChatServer],
) -> None:
    naive, server = model
    assistant = Assistant()
    session, output = await start(server, assistant)
    await session.run(user_input="Sign me up, please.")
    result = await session.run(user_input="It's ada@example.com.")
    await session.aclose()

    assert naive.called == ["sign_up", "record"]
    assert result.final_output == "Done: signed up ada@example.com."
    assert output.segments[-1] == "Done: signed up ada@example.com."
    assert read(assistant.chat_ctx.items) == [
        ("user", "Sign me up, please."),
        ("assistant", "What is your email address?"),
        ("user", "It's ada@example.com."),
        ("call", "sign_up"),
        ("output", "signed up ada@example.com"),
        ("assistant", "Done: signed up ada@example.com."),
    ]
    # On the wire too: the caller's follow-up request ends with the tool's output.
    follow_up = server.requests[-1]["messages"]
    assert [m["role"] for m in follow_up] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert follow_up[-1]["content"] == "signed up ada@example.com"


@pytest.mark.parametrize(
    ("keys", "outcome"),
    [("1234#", "terminator:1234"), (None, "timeout:")],
    ids=["entered", "timed-out"],
)
async def test_keypad_completion_does_not_repeat_the_tool_call(
    model: tuple[NaiveModel, OpenAIChatServer], keys: str | None, outcome: str
) -> None:
    naive, server = model
    teller = Teller()
    session, output = await start(server, teller)
    await session.run(user_input="I'd like to check my balance.")
    assert output.segments[-1] == PROMPT
    if keys is not None:
        session.push_dtmf(keys)
    await advance(10.0)  # past the keypad's timeout: the caller has answered either way
    state = session.agent_state
    await session.aclose()

    assert naive.called == ["check_pin"]
    assert state == "listening"
    assert output.segments[-1] == f"Done: {outcome}."
    assert read(teller.chat_ctx.items) == [
        ("user", "I'd like to check my balance."),
        ("assistant", PROMPT),
        ("call", "check_pin"),
        ("output", outcome),
        ("assistant", f"Done: {outcome}."),
    ]
    # On the wire the prompt and the call are one assistant turn, then the output.
    follow_up = server.requests[-1]["messages"]
    assert [m["role"] for m in follow_up] == ["system", "user", "assistant", "tool"]
    assert follow_up[2]["content"] == PROMPT
    assert [c["function"]["name"] for c in follow_up[2]["tool_calls"]] == ["check_pin"]
