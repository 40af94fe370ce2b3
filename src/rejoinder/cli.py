"""``rejoinder console``: talk to the demo agent in a terminal and watch its state live.

Every agent and user state change is printed on its own line with its time since the
session started, so what the runtime reports can be checked against what is happening.
Typing while the agent talks interrupts it, as saying something would. The loop itself
lives in ``rejoinder.console``::

    rejoinder console                                  # built-in rule-based demo LLM
    rejoinder console --script examples/demo_script.txt
    rejoinder console --llm gpt-4o-mini                # needs OPENAI_API_KEY
    rejoinder console --llm anthropic/claude-sonnet-4-5  # needs ANTHROPIC_API_KEY
    rejoinder console --llm google/gemini-2.5-flash      # needs GEMINI_API_KEY
    rejoinder console --llm llama3.2 --base-url http://localhost:11434/v1

``rejoinder dev FILE`` and ``rejoinder serve FILE`` host an agent file's ``entrypoint``
(the browser page, WebSocket and WebRTC transports); they live in ``rejoinder.devserver``::

    rejoinder dev examples/voice_agent.py             # 127.0.0.1:8000, reloads on change
    rejoinder serve app/agent.py --host 0.0.0.0 --max-sessions 50 --drain-timeout 60

``rejoinder simulate FILE.yaml`` runs a scripted conversation on virtual time and checks
it (``rejoinder.simulate.cli``); ``rejoinder timeline FILE.jsonl -o out.png`` draws a
session timeline (``rejoinder.timeline_plot``). Both parse their own arguments::

    rejoinder simulate examples/scenarios/tool_follow_up.yaml --timeline turn.jsonl
    rejoinder timeline turn.jsonl -o turn.png
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from .console import (
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
            "booking) and watch every agent and user state change as it happens. Typing "
            "while the agent talks interrupts it. Without --llm a built-in rule-based demo "
            "LLM answers (no model, no network)."
        ),
    )
    console.add_argument(
        "--llm",
        metavar="MODEL",
        help=(
            "use a real model: a name for an OpenAI-compatible API (gpt-4o-mini, llama3.2), "
            "or provider/model (anthropic/claude-sonnet-4-5, google/gemini-2.5-flash, "
            "or a provider a package adds)"
        ),
    )
    console.add_argument(
        "--base-url",
        metavar="URL",
        help="API root of an OpenAI-compatible server (default: $OPENAI_BASE_URL, then OpenAI)",
    )
    console.add_argument(
        "--api-key",
        metavar="KEY",
        help="API key (default: the provider's variable, $OPENAI_API_KEY or $ANTHROPIC_API_KEY)",
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
    _add_server_commands(commands)
    _add_delegated_commands(commands)
    return parser


# Commands that parse their own arguments: listed in the help here, run by their module.
_DELEGATED = {
    "simulate": (
        "rejoinder.simulate.cli",
        "run a scripted conversation (scenario YAML) on virtual time and check it",
    ),
    "timeline": (
        "rejoinder.timeline_plot",
        "draw a session timeline (JSON lines) as a picture (needs the plot extra)",
    ),
}


def _add_delegated_commands(commands: Any) -> None:
    for name, (_, help_text) in _DELEGATED.items():
        sub = commands.add_parser(name, help=help_text, add_help=False)
        sub.add_argument("rest", nargs=argparse.REMAINDER)


def _run_delegated(name: str, argv: Sequence[str]) -> int:
    import importlib

    module_name = _DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = "plot" if name == "timeline" else "simulate"
        sys.stderr.write(
            f"{PROG} {name}: not available ({exc}); install the extra: "
            f"pip install 'rejoinder[{extra}]'\n"
        )
        return 2
    code: int = module.main(list(argv))
    return code


def _add_server_commands(commands: Any) -> None:
    from .devserver import DEFAULT_DRAIN_TIMEOUT, DEFAULT_HOST, DEFAULT_PORT, DEV_DRAIN_TIMEOUT
    from .io.resume import DEFAULT_GRACE

    about = (
        "FILE defines `async def entrypoint(conn)`, called once per connection; it builds "
        "an AgentSession and runs `await conn.serve(session, agent)`."
    )
    dev = commands.add_parser(
        "dev",
        help="serve an agent file for development (page, WebSocket, WebRTC), reloading it",
        description=f"Serve an agent file on {DEFAULT_HOST}:{DEFAULT_PORT} for development: "
        f"the browser page at /, the WebSocket transport at /ws, WebRTC at /api/offer (with "
        f"the webrtc extra). The file is loaded again when it changes; new connections use "
        f"the new version. {about}",
    )
    serve = commands.add_parser(
        "serve",
        help="serve an agent file in production (session limit, graceful drain on SIGTERM)",
        description=f"Serve an agent file without reloading: the page, /ws, /api/offer, "
        f"/healthz. Over --max-sessions new sessions get HTTP 503; SIGTERM or SIGINT stops "
        f"admitting, lets live sessions finish for up to --drain-timeout seconds, closes "
        f"the rest and exits 0. {about}",
    )
    for sub, drain in ((dev, DEV_DRAIN_TIMEOUT), (serve, DEFAULT_DRAIN_TIMEOUT)):
        sub.add_argument("file", metavar="FILE", help="the agent file (a .py file)")
        sub.add_argument(
            "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
        )
        sub.add_argument(
            "--port",
            type=_port,
            default=DEFAULT_PORT,
            help=f"port to bind (default {DEFAULT_PORT}; 0 picks a free one)",
        )
        sub.add_argument(
            "--max-sessions",
            metavar="N",
            type=_positive_int,
            help="at most N live sessions; more are refused with HTTP 503 (default: no limit)",
        )
        sub.add_argument(
            "--max-load",
            metavar="SHARE",
            type=_load_share,
            default=0.75,
            help="refuse new sessions (HTTP 503, /healthz 'full') while the process's "
            "measured CPU use with one more session would pass this share of the machine's "
            "cores (default 0.75; 0 turns admission by load off)",
        )
        sub.add_argument(
            "--drain-timeout",
            metavar="SECONDS",
            type=float,
            default=drain,
            help=f"on SIGTERM/SIGINT, how long live sessions may go on before they are "
            f"closed (default {drain:g})",
        )
        sub.add_argument(
            "--resume-grace",
            metavar="SECONDS",
            type=_grace,
            default=DEFAULT_GRACE,
            help=f"how long a session whose client dropped waits for it to resume with its "
            f"token (default {DEFAULT_GRACE:g}; 0 turns resuming off: a drop ends the session)",
        )
        sub.add_argument(
            "--telephony",
            metavar="PROVIDER",
            action="append",
            choices=("twilio", "telnyx", "plivo"),
            default=[],
            help="serve phone calls from PROVIDER (twilio: POST /twilio/twiml and GET "
            "/twilio; telnyx: GET /telnyx; plivo: POST /plivo/answer and GET /plivo); "
            "repeat for several. Twilio webhooks are checked when TWILIO_AUTH_TOKEN is set",
        )
        sub.add_argument(
            "--public-url",
            metavar="URL",
            help="the server's public base URL (https://abc.ngrok.app) for the phone "
            "webhooks' stream URL and Twilio's signature (default: from each request)",
        )
        _add_sip_options(sub)
        sub.add_argument(
            "-v", "--verbose", action="store_true", help="log the runtime's messages to stderr"
        )
    dev.add_argument(
        "--no-reload", dest="reload", action="store_false", help="do not reload FILE on change"
    )
    serve.add_argument(
        "--inspect",
        action="store_true",
        help="serve GET /sessions: what each live session owes and its timeline (they "
        "hold transcripts: keep it behind your own authentication); dev always does",
    )
    dev.set_defaults(inspect=True)
    serve.set_defaults(reload=False)
    _add_ray_options(serve)
    _add_call_command(commands)


def _add_call_command(commands: Any) -> None:
    """``rejoinder call NUMBER --agent FILE --telephony PROVIDER`` (``io.telephony.call_command``,
    imported only when the command runs: it costs half a second)."""
    call = commands.add_parser(
        "call",
        help="place a phone call with an agent file through Twilio, Telnyx or Plivo",
        description="Serve FILE as `serve --telephony PROVIDER` does, place one call to NUMBER "
        "through the provider's REST API, print its status as it changes and exit when it "
        "ends: 0 answered and completed, 3 busy, 4 no answer, 1 failed, 2 bad usage. "
        "Credentials come from the environment (TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN; "
        "TELNYX_API_KEY, TELNYX_CONNECTION_ID and TELNYX_PUBLIC_KEY; PLIVO_AUTH_ID and "
        "PLIVO_AUTH_TOKEN).",
    )
    call.add_argument("to", metavar="NUMBER", help="the number to call, E.164 (+15551234567)")
    call.add_argument("--agent", required=True, metavar="FILE", help="the agent file")
    call.add_argument("--telephony", required=True, choices=("twilio", "telnyx", "plivo"))
    call.add_argument(
        "--from",
        dest="from_",
        metavar="NUMBER",
        help="the caller ID (default $<PROVIDER>_FROM_NUMBER, e.g. TWILIO_FROM_NUMBER)",
    )
    call.add_argument(
        "--public-url",
        metavar="URL",
        help="the server's public base URL the provider reaches (a tunnel: https://abc.ngrok.app)",
    )
    call.add_argument(
        "--no-machine-detection",
        dest="machine_detection",
        action="store_false",
        help="do not ask the provider to detect answering machines",
    )
    call.add_argument(
        "--ring-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="give up when nobody answers within SECONDS (default 30)",
    )
    call.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    call.add_argument(
        "--port", type=_port, default=8000, help="port to bind (default 8000; 0 picks a free one)"
    )


def _add_ray_options(serve: argparse.ArgumentParser) -> None:
    """``serve --ray``: a Ray Serve application (``rejoinder.deploy.ray``, the ray extra)."""
    from .deploy.ray import DEFAULT_SESSIONS_PER_REPLICA  # (Ray itself is not imported)

    ray = serve.add_argument_group(
        "Ray Serve (--ray; needs the ray extra)",
        "replicas autoscaled on live sessions; --host/--port are the Serve proxy's, "
        "--drain-timeout bounds each stopping replica's drain",
    )
    ray.add_argument(
        "--ray",
        action="store_true",
        help="deploy FILE on a Ray cluster as a Serve application instead of one process",
    )
    ray.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="the Ray cluster to join (default: $RAY_ADDRESS, else a new local one)",
    )
    ray.add_argument(
        "--sessions-per-replica",
        metavar="N",
        type=_positive_int,
        default=DEFAULT_SESSIONS_PER_REPLICA,
        help=f"live sessions per replica (max_ongoing_requests; default "
        f"{DEFAULT_SESSIONS_PER_REPLICA})",
    )
    ray.add_argument(
        "--min-replicas",
        metavar="N",
        type=int,
        default=1,
        help="replicas kept running (default 1)",
    )
    ray.add_argument(
        "--max-replicas",
        metavar="N",
        type=_positive_int,
        default=4,
        help="replicas at most (default 4)",
    )


def _add_sip_options(sub: argparse.ArgumentParser) -> None:
    """``--sip HOST:PORT``: answer calls from a SIP trunk directly (``rejoinder.io.sip``)."""
    sip = sub.add_argument_group(
        "SIP trunks (--sip)",
        "answer INVITEs with RTP (PCMU/PCMA, RFC 4733 keys); digest credentials come from "
        "SIP_USERNAME and SIP_PASSWORD when set",
    )
    sip.add_argument(
        "--sip",
        metavar="HOST:PORT",
        type=_sip_address,
        help="listen for SIP on UDP HOST:PORT (0.0.0.0:5060 for every interface)",
    )
    sip.add_argument(
        "--sip-allow",
        metavar="CIDR",
        action="append",
        default=[],
        help="networks whose calls are answered (repeat; default loopback only: name your "
        "trunk's published networks, others get 403)",
    )
    sip.add_argument(
        "--sip-public-host",
        metavar="HOST",
        help="the address the trunk reaches this server at, for Contact and SDP (behind NAT)",
    )


def _sip_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"give HOST:PORT (e.g. 0.0.0.0:5060), got {text!r}")
    try:
        number = _port(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {port!r}") from None
    return host.strip("[]"), number


def _sip_options(args: argparse.Namespace) -> Any:
    if args.sip is None:
        return None
    from .io.sip import LOOPBACK_ONLY, SipOptions

    host, port = args.sip
    return SipOptions(
        host=host,
        port=port,
        public_host=args.sip_public_host,
        allow_from=tuple(args.sip_allow) or LOOPBACK_ONLY,
        username=os.environ.get("SIP_USERNAME") or None,
        password=os.environ.get("SIP_PASSWORD") or None,
    )


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _load_share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0-1 (a share of the cores), got {text}")
    return value


def _grace(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 24 * 3600:  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be 0 (off) to 86400 seconds, got {text}")
    return value


def _run_server(args: argparse.Namespace) -> int:
    from .devserver import ServerOptions, run_server

    _configure_server_logging(verbose=args.verbose)
    if getattr(args, "ray", False):
        return _run_ray(args)
    try:
        sip = _sip_options(args)
    except ValueError as exc:  # a bad --sip-allow network, half the credentials
        sys.stderr.write(f"{PROG} {args.command}: error: {exc}\n")
        return 2
    options = ServerOptions(
        sip=sip,
        path=args.file,
        host=args.host,
        port=args.port,
        reload=args.reload,
        max_sessions=args.max_sessions,
        max_load=args.max_load or None,
        drain_timeout=args.drain_timeout,
        resume_grace=args.resume_grace,
        command=args.command,
        telephony=tuple(args.telephony),
        inspect=args.inspect,
        public_url=args.public_url,
        twilio_auth_token=os.environ.get("TWILIO_AUTH_TOKEN") or None,
        telnyx_public_key=os.environ.get("TELNYX_PUBLIC_KEY") or None,
        plivo_auth_token=os.environ.get("PLIVO_AUTH_TOKEN") or None,
        call_credentials=_call_credentials(),
    )
    try:
        return asyncio.run(run_server(options))
    except KeyboardInterrupt:  # Ctrl-C while the agent file was still loading
        return 130


def _call_credentials() -> dict[str, str]:
    """The phone providers' REST credentials set in the environment (names only from
    ``CALL_CONTROL_CREDENTIALS``: nothing else of the environment is passed on)."""
    names = {
        "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TELNYX_API_KEY", "TELNYX_CONNECTION_ID",
        "TELNYX_PUBLIC_KEY", "PLIVO_AUTH_ID", "PLIVO_AUTH_TOKEN",
    }  # fmt: skip
    return {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}


def _run_ray(args: argparse.Namespace) -> int:
    """``serve --ray``: the agent file as a Ray Serve application (``rejoinder.deploy.ray``)."""
    from .deploy.ray import RayOptions, RayUnavailable, serve_until_signalled

    def usage(text: str) -> int:
        sys.stderr.write(f"{PROG} serve: error: {text}\n")
        return 2

    if args.max_sessions is not None:
        return usage("with --ray, give the limit per replica: --sessions-per-replica N")
    if args.sip is not None:
        return usage("--sip serves from one process: run `rejoinder serve --sip` beside Ray")
    if args.port == 0 or not 0 <= args.min_replicas <= args.max_replicas:
        return usage("--ray needs a fixed --port and 0 <= --min-replicas <= --max-replicas")
    if not os.path.isfile(args.file):
        return usage(f"agent file not found: {args.file}")
    options = RayOptions(
        path=args.file,
        sessions_per_replica=args.sessions_per_replica,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        drain_timeout=args.drain_timeout,
        resume_grace=args.resume_grace,
        telephony=tuple(args.telephony),
        public_url=args.public_url,
        twilio_auth_token=os.environ.get("TWILIO_AUTH_TOKEN") or None,
        telnyx_public_key=os.environ.get("TELNYX_PUBLIC_KEY") or None,
        plivo_auth_token=os.environ.get("PLIVO_AUTH_TOKEN") or None,
        inspect=args.inspect,
    )
    try:
        return serve_until_signalled(
            options, host=args.host, port=args.port, address=args.ray_address
        )
    except RayUnavailable as exc:
        return usage(str(exc))


def _one_blas_thread() -> None:
    """A voice server computes many small matrix products (the audio features of
    Whisper and Smart Turn) for many sessions: numpy's BLAS worker threads speed none of
    them up, and spin after each one, doubling its CPU and holding the cores the event
    loop needs (``bench/smart_turn.py``: 68 instead of 34 ms of CPU per Smart Turn
    decision, the loop up to 27 ms late). One thread, unless the user chose. It only
    takes effect before numpy is first imported, which ``import rejoinder`` does not do."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    _one_blas_thread()
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _DELEGATED:
        return _run_delegated(args_list[0], args_list[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
    except SystemExit as exc:  # --help, or a usage error argparse already explained
        return exc.code if isinstance(exc.code, int) else 2
    except BrokenPipeError:  # the help went into a closed pipe (rejoinder --help | head -1)
        _detach_stdout()
        return EXIT_OUTPUT_CLOSED
    if args.command in ("dev", "serve"):
        return _run_server(args)
    if args.command == "call":
        from .io.telephony.call_command import run_call_command

        return run_call_command(args)
    if args.script is not None and not os.path.isfile(args.script):
        print_error(f"script file not found: {args.script}")
        return 2
    _configure_logging(verbose=args.verbose)
    try:
        code = asyncio.run(run_console(args, sys.stdout))
    except KeyboardInterrupt:  # Ctrl-C: run_console has closed the session on the way out
        try:
            sys.stdout.write("\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            _detach_stdout()
        return 130
    if code == EXIT_OUTPUT_CLOSED:
        _detach_stdout()
    return code


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


def _configure_server_logging(*, verbose: bool) -> None:
    """A server has no console to show problems on: warnings go to stderr, everything
    with ``--verbose``; each line names the session and agent it came from."""
    from .session.log_context import SessionLogFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(SessionLogFilter())
    handler.setFormatter(
        logging.Formatter("%(levelname)s %(name)s [%(session_id)s %(agent_id)s]: %(message)s")
    )
    logger = logging.getLogger("rejoinder")
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.addHandler(handler)


def _detach_stdout() -> None:
    """Point the stdout file descriptor at the null device, so the interpreter's last flush
    of a closed pipe at exit neither complains nor changes the exit status."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
