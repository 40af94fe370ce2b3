"""The ``rejoinder`` command line: its commands and their arguments.

``dev``, ``serve`` and ``call`` take the arguments in ``server_args``; ``simulate`` and
``timeline`` parse their own (``DELEGATED``); ``console`` is here.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..console import PROG
from .server_args import add_call_command, add_server_commands

__all__ = ["DELEGATED", "build_parser"]

DELEGATED = {
    "simulate": (
        "rejoinder.simulate.cli",
        "simulate",
        "run a scripted conversation (scenario YAML) on virtual time and check it",
    ),
    "timeline": (
        "rejoinder.timeline_plot",
        "plot",
        "draw a session timeline (JSON lines) as a picture (needs the plot extra)",
    ),
}
"""Commands that parse their own arguments: listed in the help here, run by their module
(the module, the extra it needs, the help line)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="rejoinder: real-time voice agents with truthful turn state."
    )
    parser.add_argument(
        "--version", action="store_true", help="print the installed version and exit"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_console_command(commands)
    add_server_commands(commands)
    add_call_command(commands)
    for name, (_, _, help_text) in DELEGATED.items():
        sub = commands.add_parser(name, help=help_text, add_help=False)
        sub.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


def _add_console_command(commands: Any) -> None:
    console = commands.add_parser(
        "console",
        help="talk to an agent file (or the built-in demo) in the terminal",
        description=(
            "With FILE: run the agent file's `entrypoint`, the one `rejoinder dev FILE` "
            "serves, with the terminal as its connection: type to it (or, with --audio, "
            "talk to it through the microphone and hear it on the speaker). Without FILE: "
            "chat with the built-in demo agent (weather, a background timer, a failing "
            "flight booking); without --llm a rule-based demo LLM answers (no model, no "
            "network). Every agent and user state change is shown as it happens; typing "
            "while the agent talks interrupts it."
        ),
    )
    console.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        help="an agent file defining `async def entrypoint(conn)` (default: the demo agent)",
    )
    console.add_argument(
        "--audio",
        action="store_true",
        help="with FILE: the microphone and the speaker instead of text (the audio extra; "
        "use headphones: the microphone would hear the agent)",
    )
    demo = console.add_argument_group("the built-in demo agent (without FILE)")
    demo.add_argument(
        "--llm",
        metavar="MODEL",
        help=(
            "use a real model: a name for an OpenAI-compatible API (gpt-4o-mini, llama3.2), "
            "or provider/model (anthropic/claude-sonnet-4-5, google/gemini-2.5-flash, "
            "or a provider a package adds)"
        ),
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="API root of an OpenAI-compatible server (default: $OPENAI_BASE_URL, then OpenAI)",
    )
    demo.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key (default: the provider's variable, $OPENAI_API_KEY or $ANTHROPIC_API_KEY)",
    )
    demo.add_argument(
        "--away-timeout",
        metavar="SECONDS",
        type=float,
        default=15.0,
        help="seconds of quiet before the user is reported away (0 disables; default 15)",
    )
    console.add_argument(
        "--script",
        metavar="SCRIPT",
        help=(
            "non-interactive: send each non-empty line of SCRIPT as a user message "
            "('#' starts a comment line), wait for each whole reply, then for work still owed"
        ),
    )
    console.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also log the runtime's internal messages (with tracebacks) to stderr",
    )
