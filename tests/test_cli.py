"""``rejoinder console`` and the demo it runs, in-process on virtual time (looptime)."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

import rejoinder as rj
from rejoinder.cli import build_parser, main, run_console
from rejoinder.demo import (
    DemoAgent,
    DemoLLM,
    DemoReply,
    decide,
    reply_to_user,
    unreported_outputs,
)
from rejoinder.testing import advance

DEMO_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "demo_script.txt"
STATUS = re.compile(r"^  \[\s*(\d+\.\d{3})s\] (.*)$")
AGENT_STATE = re.compile(r"^agent: (\w+) → (\w+)$")


async def console(argv: Sequence[str], lines: Sequence[str] | None = None) -> tuple[int, str]:
    """Run ``rejoinder console ARGV`` in-process; ``lines`` stands in for stdin."""
    args = build_parser().parse_args(["console", *argv])
    out = io.StringIO()
    source = None if lines is None else _lines(lines)
    code = await run_console(args, out, stderr=out, lines=source)
    return code, out.getvalue()


async def _lines(lines: Sequence[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line + "\n"


def statuses(transcript: str) -> list[tuple[float, str]]:
    return [
        (float(m.group(1)), m.group(2))
        for m in map(STATUS.match, transcript.splitlines())
        if m is not None
    ]


def turn(transcript: str, user_text: str) -> list[str]:
    """The lines from ``you> user_text`` up to the next ``you>`` or end-of-input line."""
    lines = transcript.splitlines()
    start = lines.index(f"you> {user_text}")
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("you> ") or "end of input" in lines[i]
        ),
        len(lines),
    )
    return lines[start + 1 : end]


def agent_states(lines: Sequence[str]) -> list[tuple[str, str]]:
    found = []
    for line in lines:
        status = STATUS.match(line)
        state = AGENT_STATE.match(status.group(2)) if status else None
        if state is not None:
            found.append((state.group(1), state.group(2)))
    return found


# ------------------------------------------------------------ the demo script


async def test_demo_script_transcript() -> None:
    code, out = await console(["--script", str(DEMO_SCRIPT)])

    assert code == 0
    assert "built-in rule-based demo LLM (no model, no network)" in out
    assert "\033[" not in out  # not a terminal: no colour codes
    # Each line of the script was sent, in order.
    sent = [line[5:] for line in out.splitlines() if line.startswith("you> ")]
    assert sent == [
        "hello",
        "What's the weather in Paris?",
        "Set a timer for 3 seconds",
        "Book a flight to Rome",
        "help",
    ]
    replies = [line[7:] for line in out.splitlines() if line.startswith("agent> ")]
    assert replies == [
        "Hello! I'm the rejoinder demo assistant, a rule-based stand-in for a model. "
        "Type help to see what I can do.",
        "Let me check the weather in Paris.",
        "In Paris today: sunny, 22 °C, light wind from the west.",
        "Okay, starting a 3-second timer.",
        "Timer started. I'll tell you when it's done.",
        "Let me try to book a flight to Rome.",
        "Sorry, I couldn't book that flight: the booking service is down.",
        replies[7],
        "Time's up! Timer for 3 seconds is done.",
    ]
    assert replies[7].startswith("I'm a rule-based demo, not a language model")
    assert "agent: thinking → speaking" in out
    assert "agent: initializing → listening" in out
    assert out.rstrip().endswith("session closed")


async def test_weather_turn_never_listens_before_its_follow_up() -> None:
    _, out = await console(["--script", str(DEMO_SCRIPT)])
    weather = turn(out, "What's the weather in Paris?")

    states = agent_states(weather)
    assert [new for _, new in states] == [
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]
    for first, second in itertools.pairwise(states):
        assert (first, second) != (("speaking", "listening"), ("listening", "thinking"))
    # The preamble is spoken first, then the tool runs, then the follow-up reply.
    texts = [line for line in weather if not line.startswith("  [")]
    assert texts == [
        "agent> Let me check the weather in Paris.",
        "agent> In Paris today: sunny, 22 °C, light wind from the west.",
    ]


async def test_timer_result_is_spoken_later_as_a_deferred_reply() -> None:
    _, out = await console(["--script", str(DEMO_SCRIPT)])
    lines = out.splitlines()

    interim = lines.index("agent> Timer started. I'll tell you when it's done.")
    done = lines.index("agent> Time's up! Timer for 3 seconds is done.")
    help_reply = next(i for i, line in enumerate(lines) if line.startswith("agent> I'm a rule"))
    end_of_input = next(i for i, line in enumerate(lines) if "end of input" in line)
    # The conversation went on (flight, help) while the timer ran; the script then
    # waited for the owed result before closing.
    assert interim < help_reply < end_of_input < done
    times = dict((text, t) for t, text in statuses(out))
    started = times['tool call: set_timer({"seconds": 3})']
    finished = times["background tool finished: set_timer → Timer for 3 seconds is done"]
    assert finished - started == pytest.approx(3.0, abs=0.01)
    # Once the result landed, the agent owed a reply: thinking, then speaking it.
    after = agent_states(lines[end_of_input : done + 3])
    assert after == [("listening", "thinking"), ("thinking", "speaking"), ("speaking", "listening")]


async def test_failing_tool_is_apologised_for_and_shown() -> None:
    _, out = await console(["--script", str(DEMO_SCRIPT)])
    flight = turn(out, "Book a flight to Rome")

    assert any("book_flight failed: the booking service is down" in line for line in flight)
    assert "agent> Sorry, I couldn't book that flight: the booking service is down." in flight
    assert [new for _, new in agent_states(flight)] == [
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]


async def test_timer_turn_never_listens_before_the_interim_reply() -> None:
    _, out = await console(["--script", str(DEMO_SCRIPT)])
    timer = turn(out, "Set a timer for 3 seconds")

    assert [new for _, new in agent_states(timer)] == [
        "thinking",
        "speaking",
        "thinking",
        "speaking",
        "listening",
    ]


async def test_states_are_timed_from_session_start_in_order() -> None:
    _, out = await console(["--script", str(DEMO_SCRIPT)])
    found = statuses(out)

    assert found[0] == (0.0, "agent: initializing → listening")
    times = [t for t, _ in found]
    assert times == sorted(times)
    # Each state line starts where the previous one ended.
    states = agent_states(out.splitlines())
    for (_, new), (old, _) in itertools.pairwise(states):
        assert new == old


# ------------------------------------------------------------ interactive mode


async def test_interactive_end_of_input_waits_for_owed_work() -> None:
    code, out = await console([], lines=["set a timer for 2 seconds", ""])

    assert code == 0
    assert "you> set a timer for 2 seconds" in out
    assert "agent> Timer started. I'll tell you when it's done." in out
    assert "agent> Time's up! Timer for 2 seconds is done." in out
    assert out.index("end of input") < out.index("Time's up!")


async def test_interactive_quit_stops_at_once() -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    code, out = await console([], lines=["hello", "set a timer for 60 seconds", "/quit", "help"])

    assert code == 0
    assert "agent> Hello!" in out
    assert "quit: closing now" in out
    assert "you> help" not in out
    assert "Time's up" not in out
    assert loop.time() - t0 < 60


async def test_user_away_after_quiet_and_back_on_input() -> None:
    async def slow_lines() -> AsyncIterator[str]:
        await advance(3.0)
        yield "hello\n"

    args = build_parser().parse_args(["console", "--away-timeout", "2"])
    out = io.StringIO()
    assert await run_console(args, out, lines=slow_lines()) == 0

    found = statuses(out.getvalue())
    assert (2.0, "user: listening → away") in found
    assert (3.0, "user: away → listening") in found


async def test_away_timeout_zero_disables_away() -> None:
    async def slow_lines() -> AsyncIterator[str]:
        await advance(100.0)
        yield "hello\n"

    args = build_parser().parse_args(["console", "--away-timeout", "0"])
    out = io.StringIO()
    assert await run_console(args, out, lines=slow_lines()) == 0
    assert "away" not in out.getvalue().split("user away after")[1].split("\n", 1)[1]


async def test_error_events_are_printed() -> None:
    class BrokenWeather(DemoAgent):
        @rj.function_tool
        async def get_weather(self, city: str) -> str:
            """Get the weather.

            Args:
                city: the city
            """
            raise RuntimeError("sensor offline")

    args = build_parser().parse_args(["console"])
    out = io.StringIO()
    await run_console(args, out, lines=_lines(["weather in Oslo"]), agent=BrokenWeather())

    text = out.getvalue()
    assert re.search(r"^  \[\s*\d+\.\d{3}s\] error \(tool\): sensor offline$", text, re.M)
    assert (
        "agent> Sorry, I couldn't get the weather: "
        "the tool get_weather failed with an internal error." in text
    )


# -------------------------------------------------------------- exit statuses


def test_missing_script_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.txt"
    assert main(["console", "--script", str(missing)]) != 0
    err = capsys.readouterr().err
    assert f"script file not found: {missing}" in err


async def test_missing_script_in_the_async_core() -> None:
    code, out = await console(["--script", "/definitely/not/here.txt"])
    assert code == 2
    assert "script file not found: /definitely/not/here.txt" in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "console" in capsys.readouterr().err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--help"]) == 0
    help_text = capsys.readouterr().out
    for option in ("--llm", "--base-url", "--api-key", "--script", "--away-timeout"):
        assert option in help_text


async def test_script_comments_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("# a comment\n\n   \nhello\n  # indented comment\nhelp\n", encoding="utf-8")
    code, out = await console(["--script", str(script)])
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("you> ")] == [
        "you> hello",
        "you> help",
    ]


# ------------------------------------------------------------- DemoLLM rules


@pytest.mark.parametrize(
    ("text", "tool", "arguments"),
    [
        ("weather in Paris", "get_weather", {"city": "Paris"}),
        ("What's the weather in New York?", "get_weather", {"city": "New York"}),
        ("forecast for tokyo please", "get_weather", {"city": "Tokyo"}),
        ("how's the weather?", "get_weather", {"city": "London"}),
        ("set a timer for 3 seconds", "set_timer", {"seconds": 3}),
        ("timer 2 minutes", "set_timer", {"seconds": 120}),
        ("Book a flight to Rome", "book_flight", {"destination": "Rome"}),
        ("I need a flight to berlin", "book_flight", {"destination": "Berlin"}),
    ],
)
def test_rules_choose_tool_calls(text: str, tool: str, arguments: dict[str, object]) -> None:
    reply = reply_to_user(text)
    assert (reply.tool, reply.arguments) == (tool, arguments)
    assert reply.text  # a preamble is spoken before the call


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("hello", "Hello! I'm the rejoinder demo assistant"),
        ("hi there", "Hello!"),
        ("help", "I'm a rule-based demo, not a language model"),
        ("what can you do?", "I'm a rule-based demo"),
        ("set a timer", "How many seconds"),
        ("book a flight", "Where would you like to fly?"),
        ("sing me a song", "Sorry, I'm only a rule-based demo"),
    ],
)
def test_rules_choose_canned_replies(text: str, start: str) -> None:
    reply = reply_to_user(text)
    assert reply.tool is None
    assert reply.text.startswith(start)


def _ctx(*items: rj.ChatItem) -> rj.ChatContext:
    return rj.ChatContext([rj.ChatMessage(role="system", content="instructions"), *items])


def _call(call_id: str, name: str, output: str, *, error: bool = False) -> list[rj.ChatItem]:
    return [
        rj.FunctionCall(call_id=call_id, name=name, arguments="{}"),
        rj.FunctionCallOutput(call_id=call_id, name=name, output=output, is_error=error),
    ]


def test_follow_up_reports_the_tool_outputs() -> None:
    ctx = _ctx(
        rj.ChatMessage(role="user", content="weather in Paris"),
        rj.ChatMessage(role="assistant", content="Let me check the weather in Paris."),
        *_call("c1", "get_weather", "In Paris today: sunny"),
    )
    assert decide(ctx) == DemoReply("In Paris today: sunny.")


def test_tool_error_gets_an_apology_quoting_it() -> None:
    ctx = _ctx(
        rj.ChatMessage(role="user", content="book a flight to Rome"),
        *_call("c1", "book_flight", "the booking service is down", error=True),
    )
    assert decide(ctx).text == "Sorry, I couldn't book that flight: the booking service is down."


def test_interim_and_final_results_of_a_background_tool() -> None:
    interim = _ctx(
        rj.ChatMessage(role="user", content="set a timer for 3 seconds"),
        *_call("c1", "set_timer", "Timer started"),
    )
    assert decide(interim).text == "Timer started. I'll tell you when it's done."
    final = _ctx(
        *interim.items[1:],
        rj.ChatMessage(role="assistant", content="Timer started. I'll tell you when it's done."),
        *_call("c1_final", "set_timer", "Timer for 3 seconds is done"),
    )
    assert decide(final).text == "Time's up! Timer for 3 seconds is done."


def test_a_result_that_landed_during_another_reply_is_carried_by_the_next() -> None:
    """The timer finished while the flight preamble was being said: the flight's follow-up
    (which carries the deferred result) reports both."""
    ctx = _ctx(
        rj.ChatMessage(role="user", content="set a timer for 1 second"),
        *_call("c1", "set_timer", "Timer started"),
        rj.ChatMessage(role="assistant", content="Timer started. I'll tell you when it's done."),
        rj.ChatMessage(role="user", content="book a flight to Rome"),
        *_call("c1_final", "set_timer", "Timer for 1 seconds is done"),
        rj.ChatMessage(role="assistant", content="Let me try to book a flight to Rome."),
        *_call("c2", "book_flight", "the booking service is down", error=True),
    )
    assert [o.call_id for o in unreported_outputs(ctx)] == ["c1_final", "c2"]
    assert decide(ctx).text == (
        "Time's up! Timer for 1 seconds is done. "
        "Sorry, I couldn't book that flight: the booking service is down."
    )


def test_user_message_after_an_unreported_result_mentions_it_first() -> None:
    ctx = _ctx(
        rj.ChatMessage(role="user", content="set a timer for 1 second"),
        *_call("c1", "set_timer", "Timer started"),
        rj.ChatMessage(role="assistant", content="Timer started. I'll tell you when it's done."),
        *_call("c1_final", "set_timer", "Timer for 1 seconds is done"),
        rj.ChatMessage(role="user", content="hello"),
    )
    reply = decide(ctx)
    assert reply.text.startswith("Time's up! Timer for 1 seconds is done. Hello!")
    assert reply.tool is None


def test_unoffered_tool_is_not_called() -> None:
    ctx = _ctx(rj.ChatMessage(role="user", content="weather in Paris"))
    reply = decide(ctx, tools=[])
    assert reply.tool is None
    assert "isn't available" in reply.text


async def test_demo_llm_streams_words_then_the_tool_call() -> None:
    llm = DemoLLM(chunk_delay=0.03)
    ctx = _ctx(rj.ChatMessage(role="user", content="weather in Paris"))
    tools = [t.definition for t in DemoAgent().tools]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    chunks = [chunk async for chunk in llm.chat(ctx, tools)]

    deltas = [c.delta for c in chunks if c.delta]
    assert deltas == ["Let ", "me ", "check ", "the ", "weather ", "in ", "Paris."]
    assert loop.time() - t0 == pytest.approx(0.03 * len(deltas))
    calls = [call for c in chunks for call in c.tool_calls]
    assert len(calls) == 1
    assert calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert chunks[-1].tool_calls  # the call comes after the preamble


async def test_demo_llm_makes_no_call_when_tool_choice_is_none() -> None:
    llm = DemoLLM()
    ctx = _ctx(rj.ChatMessage(role="user", content="weather in Paris"))
    tools = [t.definition for t in DemoAgent().tools]
    chunks = [chunk async for chunk in llm.chat(ctx, tools, "none")]
    assert not any(c.tool_calls for c in chunks)


def test_demo_llm_says_it_is_not_a_model() -> None:
    llm = DemoLLM()
    assert "rule-based demo" in llm.model
    assert "not a language model" in llm.model
    assert "NOT a language model" in (DemoLLM.__doc__ or "")


def test_demo_agent_tools_and_timer_bounds() -> None:
    tools = {t.name: t for t in DemoAgent().tools}
    assert set(tools) == {"get_weather", "set_timer", "book_flight"}
    seconds = tools["set_timer"].definition.parameters["properties"]["seconds"]
    assert (seconds["type"], seconds["minimum"], seconds["maximum"]) == ("integer", 1, 3600)
    for bad in ('{"seconds": 0}', '{"seconds": 3601}', '{"seconds": "soon"}'):
        with pytest.raises(rj.ToolError):
            tools["set_timer"].parse_arguments(bad)
    assert tools["set_timer"].parse_arguments('{"seconds": 5}') == {"seconds": 5}


def test_the_cli_keeps_numpys_blas_to_one_thread_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rejoinder import cli

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    cli.main(["--help"])
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    cli.main(["--help"])
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


# ------------------------------------------------------------------ --version


def test_the_version_comes_from_pyproject_through_the_installed_metadata(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import tomllib

    with (Path(__file__).resolve().parents[1] / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    assert rj.__version__ == version
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"rejoinder {version}\n"


def test_version_as_a_command_and_import_rejoinder_does_not_read_the_metadata() -> None:
    import subprocess
    import sys

    code = (
        "import sys, rejoinder\n"
        "print('rejoinder._version' in sys.modules)\n"
        "print(rejoinder.__version__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded_at_import, version = done.stdout.split()
    assert loaded_at_import == "False"  # read on first use of rejoinder.__version__
    command = subprocess.run(
        [sys.executable, "-m", "rejoinder.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert command.stdout == f"rejoinder {version}\n"


def test_a_source_tree_never_installed_has_an_unknown_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import PackageNotFoundError

    from rejoinder import _version

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(_version, "version", missing)
    assert _version.installed_version() == "0+unknown"
