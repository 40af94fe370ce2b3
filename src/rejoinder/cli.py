"""``rejoinder console``: talk to the demo agent in a terminal and watch its state live.

Every agent and user state change is printed on its own line with its time since the
session started, so what the runtime reports can be checked against what is happening::

    rejoinder console                                  # built-in rule-based demo LLM
    rejoinder console --script examples/demo_script.txt
    rejoinder console --llm gpt-4o-mini                # needs OPENAI_API_KEY
    rejoinder console --llm llama3.2 --base-url http://localhost:11434/v1
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, TextIO, cast

from .demo import MAX_TIMER_SECONDS, DemoAgent, DemoLLM
from .io.text import ConsoleTextOutput
from .models import LLM, FunctionCall, FunctionCallOutput
from .session import (
    Agent,
    AgentSession,
    AgentStateChangedEvent,
    ConversationItemAddedEvent,
    ErrorEvent,
    UserStateChangedEvent,
)

__all__ = ["build_parser", "main", "run_console"]

PROG = "rejoinder"
DEMO_LLM_DESCRIPTION = "built-in rule-based demo LLM (no model, no network)"
# The longest demo timer must fit under the tool watchdog, and the final wait for owed
# work (script end, end of piped input) must outlast it.
_TOOL_WATCHDOG = float(MAX_TIMER_SECONDS + 60)
DRAIN_TIMEOUT = _TOOL_WATCHDOG + 60.0
_QUIT = frozenset({"/quit", "/exit", "/q"})

_RESET, _DIM, _BOLD, _RED, _CYAN, _YELLOW = (
    "\033[0m",
    "\033[2m",
    "\033[1m",
    "\033[31m",
    "\033[36m",
    "\033[33m",
)


class UsageError(Exception):
    """A problem with the command line or its inputs (exit status 2)."""


# ------------------------------------------------------------------ arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="rejoinder: real-time voice agents with truthful turn state."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    console = commands.add_parser(
        "console",
        help="chat with the demo agent in the terminal, with live agent/user state",
        description=(
            "Chat with the demo agent (weather, a background timer, a failing flight "
            "booking) and watch every agent and user state change as it happens. Without "
            "--llm a built-in rule-based demo LLM answers (no model, no network)."
        ),
    )
    console.add_argument(
        "--llm",
        metavar="MODEL",
        help="use a model through an OpenAI-compatible API (e.g. gpt-4o-mini)",
    )
    console.add_argument(
        "--base-url",
        metavar="URL",
        help="API root of an OpenAI-compatible server (default: $OPENAI_BASE_URL, then OpenAI)",
    )
    console.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get("OPENAI_API_KEY"),
        help="API key (default: $OPENAI_API_KEY)",
    )
    console.add_argument(
        "--script",
        metavar="FILE",
        help=(
            "non-interactive: send each non-empty line of FILE as a user message ('#' "
            "starts a comment line), wait for each whole reply, then for work still owed"
        ),
    )
    console.add_argument(
        "--away-timeout",
        metavar="SECONDS",
        type=float,
        default=15.0,
        help="seconds of quiet before the user is reported away (0 disables; default 15)",
    )
    console.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also log the runtime's internal messages (with tracebacks) to stderr",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already explained
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.script is not None and not os.path.isfile(args.script):
        _print_error(f"script file not found: {args.script}")
        return 2
    _configure_logging(verbose=args.verbose)
    try:
        return asyncio.run(run_console(args, sys.stdout))
    except KeyboardInterrupt:  # Ctrl-C: run_console has closed the session on the way out
        sys.stdout.write("\n")
        sys.stdout.flush()
        return 130


def _configure_logging(*, verbose: bool) -> None:
    """Problems already show up as ``error (...)`` lines; the runtime's own log (which
    repeats them with tracebacks) goes to stderr only with ``--verbose``."""
    logger = logging.getLogger("rejoinder")
    if verbose:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.setLevel(logging.DEBUG)
    else:
        handler = logging.NullHandler()
    logger.addHandler(handler)


def _print_error(message: str, stream: TextIO | None = None) -> None:
    out = stream if stream is not None else sys.stderr
    out.write(f"{PROG} console: error: {message}\n")
    out.flush()


# -------------------------------------------------------------------- output


class Console:
    """The one stream everything is printed to. It remembers whether a reply line is still
    open: a status line that comes while one is (``speaking`` is reported once the first
    words were shown) waits and prints right after that line ends."""

    def __init__(self, stream: TextIO, *, color: bool) -> None:
        self._stream = stream
        self.color = color
        self._at_line_start = True
        self._waiting: list[str] = []

    # The file-like part, for ConsoleTextOutput.
    def write(self, text: str) -> int:
        if text:
            self._stream.write(text)
            self._at_line_start = text.endswith("\n")
            if self._at_line_start and self._waiting:
                waiting, self._waiting = self._waiting, []
                self._stream.write("".join(waiting))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def style(self, text: str, *codes: str) -> str:
        return f"{''.join(codes)}{text}{_RESET}" if self.color and codes else text

    def line(self, text: str = "") -> None:
        if not self._at_line_start:
            self.write("\n")
        self.write(text + "\n")
        self.flush()

    def status(self, seconds: float, text: str, *codes: str) -> None:
        line = self.style(f"  [{seconds:7.3f}s] {text}", *(codes or (_DIM,)))
        if not self._at_line_start:
            self._waiting.append(line + "\n")
            return
        self.line(line)


# --------------------------------------------------------------------- the run


def _is_tty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a stand-in without isatty, or a closed stream
        return False


def _make_llm(args: argparse.Namespace) -> tuple[LLM, str]:
    """The LLM and a line describing it; ``UsageError`` when it cannot be made."""
    if not args.llm:
        return DemoLLM(), DEMO_LLM_DESCRIPTION
    try:
        from .providers.openai import LLM as OpenAILLM
    except Exception as exc:  # the provider is optional; say why it is unavailable
        raise UsageError(
            f"--llm needs the OpenAI-compatible provider (rejoinder.providers.openai), "
            f"which could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        llm = OpenAILLM(model=args.llm, base_url=args.base_url, api_key=args.api_key)
    except Exception as exc:
        raise UsageError(f"could not set up --llm {args.llm}: {exc}") from exc
    where = getattr(llm, "base_url", None) or args.base_url or "the default OpenAI API"
    description = f"{args.llm} via the OpenAI-compatible API at {where}"
    if not args.api_key and not args.base_url and not os.environ.get("OPENAI_BASE_URL"):
        description += " (no API key: set OPENAI_API_KEY or pass --api-key)"
    return llm, description


def _read_script(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        raise UsageError(f"script file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read script file {path}: {exc}") from None
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


async def _from_list(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def stdin_lines(stream: TextIO | None = None) -> AsyncIterator[str]:
    """Lines of ``stream`` (default stdin) without blocking the event loop: a daemon thread
    reads them, so a blocked read never keeps the process from exiting (Ctrl-C, /quit)."""
    source: TextIO | None = stream if stream is not None else sys.stdin
    if source is None:  # started with stdin closed: no input at all
        return
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def put(line: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            return False
        return True

    def pump() -> None:
        try:
            while line := source.readline():
                if not put(line):
                    return
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        put(None)

    threading.Thread(target=pump, name="rejoinder-stdin", daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line


def _describe_item(event: ConversationItemAddedEvent) -> tuple[str, str] | None:
    item = event.item
    if isinstance(item, FunctionCall):
        if item.call_id.endswith("_final"):
            return None  # its output line says it all
        return f"tool call: {item.name}({item.arguments})", _YELLOW
    if isinstance(item, FunctionCallOutput):
        final = item.call_id.endswith("_final")
        what = "background tool finished" if final else "tool result"
        if item.is_error:
            return f"{what}: {item.name} failed: {item.output}", _RED
        return f"{what}: {item.name} → {item.output or '(nothing)'}", _YELLOW
    return None


async def run_console(
    args: argparse.Namespace,
    stdout: TextIO,
    *,
    stderr: TextIO | None = None,
    lines: AsyncIterator[str] | None = None,
    agent: Agent | None = None,
) -> int:
    """The console, as a coroutine (``main`` runs it with ``asyncio.run``; tests await it
    on virtual time). ``lines`` replaces stdin in interactive mode; ``agent`` replaces the
    ``DemoAgent``. Returns the exit status."""
    errors = stderr if stderr is not None else sys.stderr
    try:
        script = _read_script(args.script) if args.script is not None else None
        llm, llm_description = _make_llm(args)
    except UsageError as exc:
        _print_error(str(exc), errors)
        return 2

    color = _is_tty(stdout)
    console = Console(stdout, color=color)
    away = args.away_timeout if args.away_timeout and args.away_timeout > 0 else None
    session: AgentSession[Any] = AgentSession(
        llm=llm, user_away_timeout=away, obligation_timeouts={"tool": _TOOL_WATCHDOG}
    )
    prefix = console.style("agent>", _BOLD, _CYAN) + " "
    session.output.transcription = ConsoleTextOutput(cast(TextIO, console), prefix=prefix)

    agent = agent if agent is not None else DemoAgent()
    interactive_tty = script is None and lines is None and _is_tty(sys.stdin)
    console.line(console.style("rejoinder console", _BOLD))
    console.line(f"  LLM:   {llm_description}")
    console.line(f"  agent: {agent.id} (tools: {', '.join(t.name for t in agent.tools)})")
    if script is not None:
        console.line(f"  input: {args.script} ({len(script)} messages)")
    else:
        console.line("  Type a message and press Enter. /quit or Ctrl-D ends; Ctrl-C stops.")
    away_text = "off" if away is None else f"{away:g} s"
    console.line(f"  state changes are shown as [time since start]; user away after: {away_text}")
    console.line()

    loop = asyncio.get_running_loop()
    started = loop.time()

    def since_start() -> float:
        return loop.time() - started

    def on_agent_state(ev: AgentStateChangedEvent) -> None:
        console.status(ev.created_at - started, f"agent: {ev.old_state} → {ev.new_state}")

    def on_user_state(ev: UserStateChangedEvent) -> None:
        console.status(ev.created_at - started, f"user: {ev.old_state} → {ev.new_state}")

    def on_error(ev: ErrorEvent) -> None:
        console.status(since_start(), f"error ({ev.source}): {ev.error}", _RED)

    def on_item(ev: ConversationItemAddedEvent) -> None:
        described = _describe_item(ev)
        if described is not None:
            console.status(since_start(), *described)

    session.on("agent_state_changed", on_agent_state)
    session.on("user_state_changed", on_user_state)
    session.on("error", on_error)
    session.on("conversation_item_added", on_item)

    source = _from_list(script) if script is not None else (lines or stdin_lines())
    try:
        await session.start(agent)
        async for raw in source:
            text = raw.strip()
            if not text:
                continue
            if text.lower() in _QUIT:
                console.status(since_start(), "quit: closing now; work still owed is dropped")
                break
            if not interactive_tty:  # a terminal already shows what was typed
                console.line(console.style("you>", _BOLD) + " " + text)
            await session.generate_reply(user_input=text)
        else:
            console.status(since_start(), "end of input: finishing anything still owed")
            await session.drain(timeout=DRAIN_TIMEOUT)
    finally:
        close_source = getattr(source, "aclose", None)
        if close_source is not None:
            await close_source()
        await session.aclose()
        await llm.aclose()
    console.status(since_start(), "session closed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
