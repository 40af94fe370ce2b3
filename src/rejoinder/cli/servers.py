"""Running ``rejoinder dev``, ``serve`` (``rejoinder.devserver``), ``serve --ray``
(``rejoinder.deploy.ray``) from their parsed arguments."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from ..console import PROG
from ..server_log import configure as configure_server_logging

__all__ = ["run_server_command"]


def run_server_command(args: argparse.Namespace) -> int:
    from ..devserver import ServerOptions, run_server

    configure_server_logging(verbose=args.verbose, log_format=args.log_format)
    if getattr(args, "ray", False):
        return _run_ray(args)
    try:
        sip = _sip_options(args)
        from ..io.webrtc.ice_config import webrtc_options_from_args

        webrtc = webrtc_options_from_args(args)
    except ValueError as exc:  # a bad --sip-allow network, half the credentials, bad ICE
        sys.stderr.write(f"{PROG} {args.command}: error: {exc}\n")
        return 2
    options = ServerOptions(
        sip=sip,
        webrtc=webrtc,
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
        log_transcripts=args.log_transcripts,
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
    from ..deploy.ray import RayOptions, RayUnavailable, serve_until_signalled

    def usage(text: str) -> int:
        sys.stderr.write(f"{PROG} serve: error: {text}\n")
        return 2

    if args.max_sessions is not None:
        return usage("with --ray, give the limit per replica: --sessions-per-replica N")
    if args.sip is not None:
        return usage("--sip serves from one process: run `rejoinder serve --sip` beside Ray")
    if args.ice_servers or os.environ.get("REJOINDER_ICE_SERVERS"):
        return usage("--ice-server is for WebRTC, which --ray does not serve")
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


def _sip_options(args: argparse.Namespace) -> Any:
    if args.sip is None:
        return None
    from ..io.sip import LOOPBACK_ONLY, SipOptions

    host, port = args.sip
    return SipOptions(
        host=host,
        port=port,
        public_host=args.sip_public_host,
        allow_from=tuple(args.sip_allow) or LOOPBACK_ONLY,
        username=os.environ.get("SIP_USERNAME") or None,
        password=os.environ.get("SIP_PASSWORD") or None,
    )
