"""The arguments of ``rejoinder dev``, ``serve`` (and ``serve --ray``, ``--sip``) and ``call``."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_call_command", "add_server_commands"]


def add_server_commands(commands: Any) -> None:
    from ..devserver import DEFAULT_DRAIN_TIMEOUT, DEFAULT_HOST, DEFAULT_PORT, DEV_DRAIN_TIMEOUT
    from ..io.resume import DEFAULT_GRACE

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
        from ..io.webrtc.ice_config import add_ice_arguments

        add_ice_arguments(sub)
        sub.add_argument(
            "-v", "--verbose", action="store_true", help="log the runtime's messages to stderr"
        )
        sub.add_argument(
            "--log-format",
            choices=("text", "json"),
            default="text",
            help="the log on stderr: lines for a person (default), or one JSON object a "
            "line, each with its session_id and agent_id",
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
    serve.add_argument(
        "--log-transcripts",
        action="store_true",
        help="log what the user said on each turn line (dev always does; off by default "
        "in production: they are personal data)",
    )
    dev.set_defaults(inspect=True, log_transcripts=True)
    serve.set_defaults(reload=False)
    _add_ray_options(serve)


def add_call_command(commands: Any) -> None:
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
    from ..deploy.ray import DEFAULT_SESSIONS_PER_REPLICA  # (Ray itself is not imported)

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
