"""``rejoinder console`` reads input while the agent talks (barge-in), on virtual time.

A line that arrives during a reply is a user turn at once: it interrupts the reply when
the reply allows that, or waits behind it otherwise, and the printed transcript stays one
clean line per thing said.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import rejoinder as rj
from rejoinder.cli import build_parser, run_console
from rejoinder.demo import DemoAgent
from rejoinder.testing import Delay, ScriptedLLM, ToolCall, advance

STATUS = re.compile(r"^  \[\s*(\d+\.\d{3})s\] (.*)$")
GREETING = (
    "Hello! I'm the rejoinder demo assistant, a rule-based stand-in for a model. "
    "Type help to see what I can do."
)


class Watched(DemoAgent):
    """The demo agent, keeping the session it runs in and every agent state change."""

    def __init__(self, *, llm: rj.LLM | None = None, interruptible: bool = True) -> None:
        super().__init__()
        self.llm = llm
        self.allow_interruptions = None if interruptible else False
        self.watched: rj.AgentSession[Any] | None = None
        self.changes: list[rj.AgentStateChangedEvent] = []
        self._first_line: tuple[int, str] | None = None

    async def on_enter(self) -> None:
        self.watched = self.session
        self.session.on("agent_state_changed", self.changes.append)
        self.session.on("user_input_transcribed", self._user_typed)

    def _user_typed(self, _: rj.UserInputTranscribedEvent) -> None:
        if self._first_line is None:
            self._first_line = (len(self.changes), str(self.session.agent_state))

    @property
    def states(self) -> list[str]:
        """The agent's states from the user's first line on (how the session starts is
        not what these tests are about)."""
        assert self._first_line is not None
        seen, state = self._first_line
        return [state, *(c.new_state for c in self.changes[seen:])]

    @property
    def history(self) -> list[rj.ChatItem]:
        assert self.watched is not None
        return list(self.watched.history.items)


async def typed(*steps: str | float) -> AsyncIterator[str]:
    """Lines as a person types them: a string is a line, a number a pause (seconds)."""
    for step in steps:
        if isinstance(step, str):
            yield step + "\n"
        else:
            await advance(step)


async def console(agent: Watched, lines: AsyncIterator[str], *argv: str) -> tuple[int, str]:
    args = build_parser().parse_args(["console", *argv])
    out = io.StringIO()
    code = await run_console(args, out, stderr=out, lines=lines, agent=agent, barge_in=True)
    return code, out.getvalue()


def messages(items: Sequence[rj.ChatItem]) -> list[tuple[str, str, bool]]:
    return [
        (item.role, item.content, item.interrupted)
        for item in items
        if isinstance(item, rj.ChatMessage) and item.role != "system"
    ]


def body(transcript: str) -> list[str]:
    """The transcript after the header (which ends with an empty line)."""
    lines = transcript.splitlines()
    return lines[lines.index("") + 1 :]


def status_at(lines: Sequence[str], text: str) -> float:
    for line in lines:
        m = STATUS.match(line)
        if m is not None and m.group(2) == text:
            return float(m.group(1))
    raise AssertionError(f"no status {text!r} in {lines}")


def assert_clean(lines: Sequence[str]) -> None:
    """Every line is one thing: a status, or one agent's or user's line."""
    for line in lines:
        assert STATUS.match(line) or re.match(r"^(agent|you)> \S", line), line
        assert line.count("agent> ") + line.count("you> ") <= 1, line
        if STATUS.match(line):
            assert "agent> " not in line and "you> " not in line, line


# ---------------------------------------------------------------- interrupting


async def test_a_line_typed_during_a_reply_interrupts_it_and_is_answered() -> None:
    agent = Watched()
    # The greeting streams one word per 0.03 s (about 0.5 s in all); the second line is
    # typed 0.2 s in, while it is being shown.
    code, out = await console(agent, typed("hello", 0.2, "weather in Paris"))
    assert code == 0

    # (a) Straight from the interrupted reply to the answer: never listening between.
    assert agent.states == [
        "listening",
        "thinking",  # the greeting
        "speaking",
        "thinking",  # interrupted at 0.2 s: the answer to the typed line is owed at once
        "speaking",  # "Let me check the weather in Paris."
        "thinking",  # get_weather
        "speaking",  # the forecast
        "listening",
    ]
    cut = next(c for c in agent.changes if c.old_state == "speaking")
    assert (cut.new_state, round(cut.created_at, 3)) == ("thinking", 0.2)
    for first, second in itertools.pairwise(agent.changes):
        pair = ((first.old_state, first.new_state), (second.old_state, second.new_state))
        assert pair != (("speaking", "listening"), ("listening", "thinking"))

    # (b) The typed line is a user message, after what was heard of the greeting, which is
    # on record as interrupted; the answer saw that order (it is about the weather).
    said = messages(agent.history)
    assert said[0] == ("user", "hello", False)
    role, partial, interrupted = said[1]
    assert (role, interrupted) == ("assistant", True)
    assert partial and GREETING.startswith(partial) and partial != GREETING
    assert said[2:] == [
        ("user", "weather in Paris", False),
        ("assistant", "Let me check the weather in Paris.", False),
        ("assistant", "In Paris today: sunny, 22 °C, light wind from the west.", False),
    ]

    # (c) The partial reply line was ended before the typed line and its statuses.
    lines = body(out)
    assert_clean(lines)
    shown = lines.index(f"agent> {partial}")
    typed_at = lines.index("you> weather in Paris")
    # Only what waited for the reply line to end comes between (its "speaking" status).
    assert [STATUS.match(line) is not None for line in lines[shown + 1 : typed_at]] == [True]
    after = lines[typed_at + 1 :]
    assert STATUS.match(after[0]) and after[0].endswith("] interrupting the reply")
    assert status_at(after, "interrupting the reply") == 0.2
    assert status_at(after, "agent: speaking → thinking") == 0.2
    assert f"agent> {GREETING}" not in lines
    assert "agent> Let me check the weather in Paris." in after
    assert out.rstrip().endswith("session closed")


async def test_a_line_typed_while_the_reply_is_still_thinking_replaces_it() -> None:
    llm = ScriptedLLM([[Delay(1.0), "A slow answer."], ["A quick one."]])
    agent = Watched(llm=llm)
    code, out = await console(agent, typed("first", 0.5, "second"))
    assert code == 0

    # Nothing of the first reply was shown, so nothing of it is on record.
    assert messages(agent.history) == [
        ("user", "first", False),
        ("user", "second", False),
        ("assistant", "A quick one.", False),
    ]
    assert [m.content for m in llm.calls[1].chat_ctx.messages() if m.role != "system"] == [
        "first",
        "second",
    ]
    lines = body(out)
    assert_clean(lines)
    assert [line for line in lines if not STATUS.match(line)] == [
        "you> first",
        "you> second",
        "agent> A quick one.",
    ]
    assert status_at(lines, "interrupting the reply") == 0.5


class WithSlowTool(Watched):
    @rj.function_tool
    async def look_up(self, what: str) -> str:
        """Look something up (slowly).

        Args:
            what: the thing to look up
        """
        await advance(5.0)
        return f"found {what}"


async def test_a_line_typed_while_a_tool_runs_cancels_it_and_is_answered() -> None:
    llm = ScriptedLLM(
        [["Let me look that up.", ToolCall("look_up", {"what": "x"})], ["Sure, forget it."]]
    )
    agent = WithSlowTool(llm=llm)
    code, out = await console(agent, typed("look up x", 1.0, "never mind"))
    assert code == 0

    assert agent.states == [
        "listening",
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    # The call stays paired with an output (cancelled by the user's message, so recorded
    # after it; model adapters put it next to its call), and the reply comes after both.
    kinds = [
        (type(item).__name__, getattr(item, "content", None))
        for item in agent.history
        if not (isinstance(item, rj.ChatMessage) and item.role == "system")
    ]
    assert kinds == [
        ("ChatMessage", "look up x"),
        ("ChatMessage", "Let me look that up."),
        ("FunctionCall", None),
        ("ChatMessage", "never mind"),
        ("FunctionCallOutput", None),
        ("ChatMessage", "Sure, forget it."),
    ]
    assert llm.calls[1].chat_ctx.items[-2] == agent.history[3]
    lines = body(out)
    assert_clean(lines)
    assert status_at(lines, "interrupting the reply") == 1.0
    assert "found x" not in out


async def test_quit_typed_during_a_reply_stops_at_once() -> None:
    agent = Watched()
    code, out = await console(agent, typed("help", 0.1, "/quit", "hello"))
    assert code == 0
    lines = body(out)
    assert_clean(lines)
    assert "you> hello" not in lines
    assert status_at(lines, "quit: closing now; work still owed is dropped") == 0.1
    assert out.rstrip().endswith("session closed")


# ------------------------------------------------------------- uninterruptible


async def test_an_uninterruptible_reply_finishes_and_the_line_waits_behind_it() -> None:
    llm = ScriptedLLM([["Important ", Delay(0.5), "notice."], ["Sure, here is help."]])
    agent = Watched(llm=llm, interruptible=False)
    code, out = await console(agent, typed("hello", 0.2, "help"))
    assert code == 0

    # Not interrupted: said in full, then the queued turn is answered.
    said = messages(agent.history)
    assert ("assistant", "Important notice.", False) in said
    assert ("user", "help", False) in said
    assert said[-1] == ("assistant", "Sure, here is help.", False)
    assert not any(interrupted for *_, interrupted in said)
    assert len(llm.calls) == 2
    assert agent.states == [
        "listening",
        "thinking",
        "speaking",  # "Important notice." (the line is typed 0.2 s in)
        "thinking",  # at 0.5 s: the queued turn is owed, no listening in between
        "speaking",
        "listening",
    ]
    second = [c for c in agent.changes if c.new_state == "speaking"][1]
    assert second.created_at >= 0.5

    # The reply line stays whole; the typed line follows it.
    lines = body(out)
    assert_clean(lines)
    assert [line for line in lines if not STATUS.match(line)] == [
        "you> hello",
        "agent> Important notice.",
        "you> help",
        "agent> Sure, here is help.",
    ]
    queued = lines.index("you> help")
    assert lines[queued + 1].endswith("] the reply cannot be interrupted: yours comes next")
    assert "interrupting" not in out


# ---------------------------------------------------------------- piped input


async def test_piped_input_keeps_the_turn_by_turn_pace() -> None:
    """Without a terminal, every line is there at once; each is still sent only after the
    previous reply is over, so nothing is interrupted."""
    agent = Watched()
    args = build_parser().parse_args(["console"])
    out = io.StringIO()
    assert await run_console(args, out, lines=typed("hello", "help"), agent=agent) == 0

    assert "interrupting" not in out.getvalue()
    said = messages(agent.history)
    assert [(role, content) for role, content, _ in said][:3] == [
        ("user", "hello"),
        ("assistant", GREETING),
        ("user", "help"),
    ]
    assert not any(interrupted for *_, interrupted in said)
    # Each reply ended before the next line was sent: listening in between.
    assert agent.states == ["listening", *["thinking", "speaking", "listening"] * 2]
