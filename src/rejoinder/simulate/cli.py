"""``rejoinder simulate FILE.yaml``: run a scripted conversation on virtual time, check it.

Prints what happened as a table (time, agent state, user state, what changed), then each
``expect:`` check as PASS or FAIL with the offending time and state. Exit status: 0 when
every check passes, 1 when one fails, 2 when the scenario file (or an option) cannot be
used; the message says what to fix::

    rejoinder simulate examples/scenarios/tool_follow_up.yaml
    rejoinder simulate bug.yaml --timeline bug.jsonl --picture bug.png --quiet
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .. import _extras
from .checks import Verdict, check_all
from .loading import load_scenario
from .runner import Simulation, simulate
from .scenario import ScenarioError

__all__ = ["build_parser", "main"]

PROG = "rejoinder simulate"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run a scripted conversation (a scenario YAML file) on virtual time and "
        "check its expectations: a field bug report reproduced in a second. Exit 0 when "
        "every check passes, 1 when one fails, 2 for a scenario that cannot be used.",
    )
    parser.add_argument("file", metavar="FILE.yaml", help="the scenario")
    parser.add_argument(
        "--timeline",
        metavar="OUT.jsonl",
        help="write the session timeline as JSON lines (`rejoinder timeline` draws it)",
    )
    parser.add_argument(
        "--picture", metavar="OUT.png", help="draw the timeline (needs the plot extra)"
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no table; only failed checks and the summary"
    )
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    stdout = out if out is not None else sys.stdout
    stderr = out if out is not None else sys.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        scenario = load_scenario(args.file)
        sim = simulate(scenario, Path(args.file).resolve().parent)
    except ScenarioError as exc:
        stderr.write(f"{PROG}: {exc}\n")
        return 2
    verdicts = check_all(sim)
    code = 0 if all(v.passed for v in verdicts) else 1
    try:
        if not args.quiet:
            stdout.write(table(sim) + "\n\n")
        report(sim, verdicts, stdout, quiet=args.quiet)
        stdout.flush()
    except BrokenPipeError:  # rejoinder simulate x.yaml | head: the reader left
        _detach(stdout)
    if args.timeline is not None:
        try:
            write_jsonl(sim.entries, Path(args.timeline))
        except OSError as exc:
            stderr.write(f"{PROG}: cannot write {args.timeline}: {exc}\n")
            return 2
    if args.picture is not None:
        problem = draw(sim.entries, Path(args.picture))
        if problem is not None:
            stderr.write(f"{PROG}: {problem}\n")
            return 2
    return code


def _detach(stream: TextIO) -> None:
    """Point a closed pipe at the null device, so the last flush at exit is quiet."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def table(sim: Simulation) -> str:
    lines = [f"{'t':>8}  {'agent':<12} {'user':<10} what changed"]
    for row in sim.rows:
        lines.append(f"{row.t:8.3f}  {row.agent:<12} {row.user:<10} {row.what}")
    return "\n".join(lines)


def report(sim: Simulation, verdicts: list[Verdict], out: TextIO, *, quiet: bool) -> None:
    name = sim.scenario.name or "scenario"
    for verdict in verdicts:
        if verdict.passed and not quiet:
            out.write(f"PASS  {verdict.what}\n")
        elif not verdict.passed:
            out.write(f"FAIL  {verdict.what}: {verdict.why}\n")
    for problem in sim.problems:
        out.write(f"note  {problem}\n")
    failed = sum(not v.passed for v in verdicts)
    result = "all passed" if not failed else f"{failed} failed"
    out.write(
        f"{name}: {len(verdicts)} check(s), {result} "
        f"(simulated {sim.end:g} s in {sim.wall_seconds:.2f} s)\n"
    )


def write_jsonl(entries: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", encoding="utf-8") as file:
        for entry in entries:
            file.write(json.dumps(entry, separators=(",", ":"), default=str) + "\n")


def draw(entries: list[dict[str, Any]], path: Path) -> str | None:
    """Draw with ``rejoinder.timeline_plot``; the problem, if it cannot."""
    try:
        # By its full name: a package attribute left by an earlier import must not hide
        # a module that cannot be imported now.
        timeline_plot = importlib.import_module("rejoinder.timeline_plot")
    except ImportError as exc:
        return _extras.missing_message("plot", "--picture", exc)
    try:
        timeline_plot.draw_timeline(entries, path)
    except ImportError as exc:  # draw_timeline's message names the extra
        return f"--picture: {exc}"
    except Exception as exc:
        return f"drawing {path} failed: {type(exc).__name__}: {exc}"
    return None
