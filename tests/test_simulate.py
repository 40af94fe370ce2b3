"""``rejoinder simulate``: every example scenario passes, failures name the time, bad files
exit 2 with a readable message, and a minute of conversation takes far less than a second.

These run the command's ``main`` synchronously: it makes its own virtual-time loop."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from rejoinder.cli import main as rejoinder_main
from rejoinder.simulate import load_scenario, simulate
from rejoinder.simulate.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "scenarios"
SCENARIOS = sorted(EXAMPLES.glob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


TOOL_TURN = """\
    agent: {scripted: {instructions: weather, id: weather}}
    tools:
      - {name: lookup, result: "sunny in {city}", duration: 3.0}
    llm:
      - ["Let me check.", {tool: lookup, args: {city: Paris}}]
      - ["It is sunny."]
    tts: {seconds_per_char: 0.05}
    events:
      - {at: 1.0, say: "Weather?"}
    until: 10.0
"""


def test_there_are_examples() -> None:
    assert len(SCENARIOS) >= 4, SCENARIOS


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_example_passes(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FAIL" not in out
    assert "all passed" in out


def test_the_rejoinder_command_runs_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    assert rejoinder_main(["simulate", str(EXAMPLES / "tool_follow_up.yaml"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("(simulated 12 s in " + out.split(" in ")[-1].strip())
    assert "agent listening → thinking" not in out  # --quiet: no table


def test_the_table_shows_states_and_what_changed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLES / "tool_follow_up.yaml")]) == 0
    out = capsys.readouterr().out
    assert "agent speaking → thinking" in out
    assert 'tool lookup returned "sunny in Paris"' in out
    assert "PASS  never agent listening between 1 and 5" in out


def test_a_failing_check_exits_1_and_names_the_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        TOOL_TURN
        + """\
    expect:
      - {never: listening, between: [1.0, 9.0]}
      - {state_at: {t: 3.0, agent: speaking}}
      - {history_contains: "rainy"}
    """,
    )
    code = main([str(path)])
    out = capsys.readouterr().out
    assert code == 1, out
    # the answer ends at 4.0 + 0.6 = 4.6 s: the agent is listening from then on
    assert "FAIL  never agent listening between 1 and 9: agent went to listening at t=4.6" in out
    assert "(speaking → listening" in out
    assert (
        "FAIL  state at t=3: agent speaking: agent was thinking since t=1.640, not speaking" in out
    )
    assert "FAIL  history contains 'rainy'" in out
    assert "3 failed" in out


def test_a_zero_length_listening_pulse_fails(tmp_path: Path) -> None:
    sim = simulate(load_scenario(write(tmp_path, TOOL_TURN)), tmp_path)
    from rejoinder.simulate.checks import check_one
    from rejoinder.simulate.scenario import Check
    from rejoinder.testing import StateChange

    at = 2.0
    sim.changes += [  # a forged pulse, as the field reports had it
        StateChange(at, "agent", "thinking", "listening"),
        StateChange(at, "agent", "listening", "thinking"),
    ]
    sim.changes.sort(key=lambda c: c.at)
    verdict = check_one(sim, Check(never="listening", between=(1.0, 3.0)))
    assert not verdict.passed
    assert "t=2.000" in verdict.why and "for 0 ms" in verdict.why


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("agent: [unclosed\n", "not valid YAML"),
        ("llm: [[hi]]\nevnets: []\n", "evnets (line 2): unknown key"),
        ("events:\n  - {at: soon, say: hi}\n", "events[0].at (line 2): Input should be a valid"),
        ("events:\n  - {at: 1.0}\n", "exactly one of say, speak"),
        ("expect:\n  - {never: sleeping}\n", "the agent's states are initializing"),
        ("expect:\n  - {final: dancing}\n", "expect[0].final.agent"),
        ("agent: {module: nowhere.py, class: X}\n", "agent module not found"),
        ("agent: {scripted: {}, module: x.py}\n", "give either `scripted"),
        ("llm:\n  - [{tool: x, delay: 1}]\n", "a step is text"),
        ("- just\n- a list\n", "a scenario is a mapping"),
    ],
)
def test_a_bad_scenario_exits_2_with_a_readable_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = write(tmp_path, text)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.yaml")]) == 2
    assert "scenario file not found" in capsys.readouterr().err


def test_timeline_writes_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "turn.jsonl"
    assert main([str(EXAMPLES / "tool_follow_up.yaml"), "--timeline", str(out), "-q"]) == 0
    entries = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    states = [e["state"] for e in entries if e["kind"] == "agent_state"]
    assert states[-3:] == ["thinking", "speaking", "listening"], states
    assert all(isinstance(e["t"], int | float) for e in entries)
    assert any(e["kind"] == "scenario" and e["event"] == "say" for e in entries)
    times = [e["t"] for e in entries]
    assert times == sorted(times)


def test_picture_without_the_plot_module_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "rejoinder.timeline_plot", None)  # import fails
    code = main([str(EXAMPLES / "tool_follow_up.yaml"), "--picture", str(tmp_path / "t.png")])
    assert code == 2
    assert "--picture needs rejoinder.timeline_plot" in capsys.readouterr().err


USER_AGENT = """\
    import rejoinder as rj


    class Desk(rj.Agent):
        instructions = "You are a desk."

        def __init__(self, greeting: str = "Hello.") -> None:
            super().__init__(id="desk")
            self.greeting = greeting

        async def on_enter(self) -> None:
            self.session.say(self.greeting)

        @rj.function_tool
        async def opening_hours(self) -> str:
            \"\"\"The opening hours.\"\"\"
            return "nine to five"


    class Billing(rj.Agent):
        instructions = "You do billing."

        def __init__(self) -> None:
            super().__init__(id="billing")

        async def on_enter(self) -> None:
            self.session.say("Billing here.")
"""


def test_a_users_agent_module_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, USER_AGENT, name="my_agent.py")
    path = write(
        tmp_path,
        """\
        agent: {module: my_agent.py, class: Desk, args: {greeting: "Welcome to the desk."}}
        llm:
          - [{tool: opening_hours}]
          - ["We are open nine to five."]
        tts: {}
        events:
          - {at: 3.0, say: "When are you open?"}
          - {at: 8.0, handoff: Billing}
        until: 12.0
        expect:
          - {history_contains: "Welcome to the desk.", role: assistant}
          - {history_contains: "nine to five", role: tool}
          - {history_contains: "Billing here.", role: assistant}
          - {never: listening, between: [3.0, 4.0]}
          - {final_agent: billing}
          - {no_errors: true}
        """,
    )
    code = main([str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "session started with agent desk" in out
    assert "handoff desk → billing" in out


def test_a_missing_class_names_the_ones_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, USER_AGENT, name="my_agent.py")
    path = write(tmp_path, "agent: {module: my_agent.py, class: Desc}\n")
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "defines no class 'Desc'; its agent classes: Billing, Desk" in err


def test_an_agent_module_that_fails_to_load_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path, "import rejoinder as rj\nraise RuntimeError('boom')\n", name="bad.py")
    path = write(tmp_path, "agent: {module: bad.py, class: X}\n")
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "at line 2" in err


def test_a_minute_of_voice_conversation_takes_well_under_a_second(tmp_path: Path) -> None:
    turns = "\n".join(
        f"  - {{at: {t}, speak: 1.0, text: 'Question {t}.'}}" for t in range(1, 60, 6)
    )
    replies = "\n".join(
        '  - ["Let me see.", {tool: lookup}]\n  - ["Here is the answer."]' for _ in range(10)
    )
    path = write(
        tmp_path,
        f"""\
tools: [{{name: lookup, duration: 1.0}}]
llm:
{replies}
tts: {{seconds_per_char: 0.05}}
session: {{user_away_timeout: 10}}
events:
{turns}
until: 60.0
expect:
  - {{history_contains: "Question 55."}}
  - {{final: listening}}
  - {{no_errors: true}}
""",
    )
    started = time.perf_counter()
    assert main([str(path), "--quiet"]) == 0
    assert time.perf_counter() - started < 2.0


def test_the_virtual_loop_agrees_with_looptime(tmp_path: Path) -> None:
    """The built-in virtual clock gives the same timeline as the test suite's looptime."""
    looptime = pytest.importorskip("looptime")
    scenario = load_scenario(EXAMPLES / "parked_speculation_before_task.yaml")
    ours = simulate(scenario, EXAMPLES)
    theirs = simulate(scenario, EXAMPLES, loop_factory=lambda: looptime.new_event_loop(start=0))
    assert [(round(c.at, 6), c.who, c.new) for c in ours.changes] == [
        (round(c.at, 6), c.who, c.new) for c in theirs.changes
    ]
