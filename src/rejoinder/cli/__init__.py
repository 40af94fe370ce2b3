"""The ``rejoinder`` command (``rejoinder.cli:main``).

``rejoinder console FILE`` runs an agent file's ``entrypoint`` (the one ``rejoinder dev
FILE`` serves) with the terminal as its connection: typed text, or the microphone and
the speaker with ``--audio`` (``rejoinder.console_agent``). Without FILE it is a chat
with the built-in demo agent, every agent and user state change printed with its time
since the session started (``rejoinder.console``)::

    rejoinder console examples/voice_agent.py          # type to your agent
    rejoinder console examples/voice_agent.py --audio  # talk to it (the audio extra)
    rejoinder console                                  # the demo, rule-based demo LLM
    rejoinder console --script examples/demo_script.txt
    rejoinder console --llm gpt-4o-mini                # needs OPENAI_API_KEY
    rejoinder console --llm anthropic/claude-sonnet-4-5  # needs ANTHROPIC_API_KEY
    rejoinder console --llm llama3.2 --base-url http://localhost:11434/v1

``rejoinder dev FILE`` and ``rejoinder serve FILE`` host an agent file's ``entrypoint``
(the browser page, WebSocket and WebRTC transports, phones); they live in
``rejoinder.devserver``, and log a line per session and per turn (``rejoinder.server_log``;
``--log-format json`` for JSON lines)::

    rejoinder dev examples/voice_agent.py             # 127.0.0.1:8000, reloads on change
    rejoinder serve app/agent.py --host 0.0.0.0 --max-sessions 50 --log-format json

``rejoinder simulate FILE.yaml`` runs a scripted conversation on virtual time and checks
it (``rejoinder.simulate.cli``); ``rejoinder timeline FILE.jsonl -o out.png`` draws a
session timeline (``rejoinder.timeline_plot``). Both parse their own arguments.
``rejoinder --version`` prints the installed version.

Modules: ``parser`` and ``server_args`` (the arguments), ``servers`` (running dev/serve).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from ..console import (
    DEMO_LLM_DESCRIPTION,
    DRAIN_TIMEOUT,
    EXIT_OUTPUT_CLOSED,
    PROG,
    Console,
    ReplyOutput,
    UsageError,
    print_error,
    run_console,
    stdin_lines,
)
from .parser import DELEGATED, build_parser

__all__ = [
    "DEMO_LLM_DESCRIPTION",
    "DRAIN_TIMEOUT",
    "EXIT_OUTPUT_CLOSED",
    "PROG",
    "Console",
    "ReplyOutput",
    "UsageError",
    "build_parser",
    "main",
    "run_console",
    "stdin_lines",
]


def main(argv: Sequence[str] | None = None) -> int:
    _one_blas_thread()
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in DELEGATED:
        return _run_delegated(args_list[0], args_list[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.version:
            from .._version import __version__

            print(f"{PROG} {__version__}")
            return 0
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
    except SystemExit as exc:  # --help, or a usage error argparse already explained
        return exc.code if isinstance(exc.code, int) else 2
    except BrokenPipeError:  # the help went into a closed pipe (rejoinder --help | head -1)
        _detach_stdout()
        return EXIT_OUTPUT_CLOSED
    if args.command in ("dev", "serve"):
        from .servers import run_server_command

        return run_server_command(args)
    if args.command == "call":
        from ..io.telephony.call_command import run_call_command

        return run_call_command(args)
    return _run_console_command(args)


def _run_console_command(args: argparse.Namespace) -> int:
    if args.script is not None and not os.path.isfile(args.script):
        print_error(f"script file not found: {args.script}")
        return 2
    if args.audio and args.file is None:
        print_error("--audio needs an agent FILE with a voice (examples/voice_agent.py)")
        return 2
    _configure_logging(verbose=args.verbose)
    try:
        if args.file is not None:
            from ..console_agent import run_agent_console

            code = asyncio.run(run_agent_console(args, sys.stdout))
        else:
            code = asyncio.run(run_console(args, sys.stdout))
    except KeyboardInterrupt:  # Ctrl-C: the session was closed on the way out
        try:
            sys.stdout.write("\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            _detach_stdout()
        return 130
    if code == EXIT_OUTPUT_CLOSED:
        _detach_stdout()
    return code


def _run_delegated(name: str, argv: Sequence[str]) -> int:
    import importlib

    from .._extras import missing_message

    module_name, extra, _ = DELEGATED[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        sys.stderr.write(f"{PROG} {name}: {missing_message(extra, 'this command', exc)}\n")
        return 2
    code: int = module.main(list(argv))
    return code


def _one_blas_thread() -> None:
    """A voice server computes many small matrix products (the audio features of
    Whisper and Smart Turn) for many sessions: numpy's BLAS worker threads speed none of
    them up, and spin after each one, doubling its CPU and holding the cores the event
    loop needs (``bench/smart_turn.py``: 68 instead of 34 ms of CPU per Smart Turn
    decision, the loop up to 27 ms late). One thread, unless the user chose. It only
    takes effect before numpy is first imported, which ``import rejoinder`` does not do."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


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


def _configure_server_logging(*, verbose: bool, log_format: str = "text") -> None:
    """A server has no console to show problems on: warnings go to stderr, everything
    with ``--verbose``, and a line per session and per turn; each line names the session
    and agent it came from (``rejoinder.server_log.configure``)."""
    from ..server_log import configure

    configure(verbose=verbose, log_format="json" if log_format == "json" else "text")


def _detach_stdout() -> None:
    """Point the stdout file descriptor at the null device, so the interpreter's last flush
    of a closed pipe at exit neither complains nor changes the exit status."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
