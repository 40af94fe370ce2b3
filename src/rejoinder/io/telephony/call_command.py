"""``rejoinder call +15551234567 --agent FILE --telephony twilio``: place one call to the agent.

It serves the agent file as ``rejoinder serve --telephony PROVIDER`` does (the same
``devserver`` loading and prewarm, the same app) with that provider's webhook secret
set, places the call through the provider's REST API (``outbound.dial``), prints each
status as it comes, and exits when the call ends: 0 for a call answered and completed,
``EXIT_BUSY`` (3), ``EXIT_NO_ANSWER`` (4), 1 for a failed or refused call, 2 for bad
usage (a missing credential is named). Ctrl-C hangs the call up and exits 130.

Credentials come from the environment: ``TWILIO_ACCOUNT_SID`` and ``TWILIO_AUTH_TOKEN``;
``TELNYX_API_KEY``, ``TELNYX_CONNECTION_ID`` and ``TELNYX_PUBLIC_KEY``; ``PLIVO_AUTH_ID``
and ``PLIVO_AUTH_TOKEN``. The caller ID is ``--from`` or ``<PROVIDER>_FROM_NUMBER``.
The provider must reach the server: give ``--public-url`` (a tunnel such as
``https://abc.ngrok.app``); without it the server's own address is used, which only a
provider on the same machine (the test kit's fake carriers) can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from .carriers.base import CarrierError, Dialing
from .environment import (
    CALL_CONTROL_CREDENTIALS,
    call_control_from_env,
    missing_credentials,
    secrets_from_env,
)
from .outbound import CallEvent, OutboundCall

__all__ = [
    "EXIT_BUSY",
    "EXIT_NO_ANSWER",
    "CallOptions",
    "options_from_args",
    "run_call",
    "run_call_command",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3
EXIT_NO_ANSWER = 4
EXIT_INTERRUPTED = 130


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What ``rejoinder call`` was asked (see the module docstring)."""

    to: str
    agent: str
    telephony: str = "twilio"
    from_: str | None = None
    public_url: str | None = None
    machine_detection: bool = True
    ring_timeout: float = 30.0
    host: str = "127.0.0.1"
    port: int = 8000
    api_url: str | None = None
    """The provider's API base URL (default: the real one; tests point it at a fake)."""
    env: Mapping[str, str] | None = field(default=None, repr=False)
    """Where credentials are read (default: ``os.environ``)."""


def options_from_args(args: argparse.Namespace) -> CallOptions:
    """``rejoinder call``'s parsed arguments (``to``, ``agent``, ``telephony``, ``from_``,
    ``public_url``, ``machine_detection``, ``ring_timeout``, ``host``, ``port``)."""
    return CallOptions(
        to=args.to,
        agent=args.agent,
        telephony=args.telephony,
        from_=args.from_,
        public_url=args.public_url,
        machine_detection=args.machine_detection,
        ring_timeout=args.ring_timeout,
        host=args.host,
        port=args.port,
    )


def run_call_command(args: argparse.Namespace) -> int:
    """What ``rejoinder call`` runs: ``run_call`` on the parsed arguments."""
    try:
        return asyncio.run(run_call(options_from_args(args)))
    except KeyboardInterrupt:  # Ctrl-C while the agent file was still loading
        return EXIT_INTERRUPTED


def _say(out: TextIO, text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        out.write(text + "\n")
        out.flush()


def _usage(text: str) -> int:
    _say(sys.stderr, f"rejoinder call: error: {text}")
    return EXIT_USAGE


def _control(options: CallOptions, env: Mapping[str, str], public_url: str) -> Dialing:
    return call_control_from_env(
        options.telephony, env, public_url=public_url, api_url=options.api_url
    )


def _event_line(call: OutboundCall, event: CallEvent) -> str:
    if event.answered_by is not None:
        beep = ", beep" if event.beep else ""
        return f"answered by: {event.answered_by}{beep} ({event.detail})"
    if event.status is None:
        return event.detail
    return f"{event.status}" + (f" ({event.detail})" if event.detail else "")


def exit_code(call: OutboundCall) -> int:
    """0 answered and completed; ``EXIT_BUSY``, ``EXIT_NO_ANSWER``; 1 otherwise."""
    answered = any(e.status == "answered" for e in call.events)
    if call.status == "completed" and answered:
        return 0
    return {"busy": EXIT_BUSY, "no-answer": EXIT_NO_ANSWER}.get(call.status, EXIT_FAILED)


async def run_call(options: CallOptions, out: TextIO | None = None) -> int:
    """Serve the agent, place the call, report it, return the exit status."""
    import os

    from ...devserver import ReloadingEntrypoint
    from ...discover import EntrypointError

    stream = out if out is not None else sys.stdout
    env = options.env if options.env is not None else os.environ
    if options.telephony not in CALL_CONTROL_CREDENTIALS:
        return _usage(f"--telephony is one of {', '.join(CALL_CONTROL_CREDENTIALS)}")
    missing = missing_credentials(options.telephony, env)
    if missing:
        return _usage(f"set {' and '.join(missing)} in the environment")
    caller_id = options.from_ or env.get(f"{options.telephony.upper()}_FROM_NUMBER")
    if not caller_id:
        return _usage(f"give --from NUMBER (or set {options.telephony.upper()}_FROM_NUMBER)")
    if not options.ring_timeout > 0:
        return _usage("--ring-timeout must be positive")
    try:
        entry = ReloadingEntrypoint(options.agent, stream)
    except EntrypointError as exc:
        return _usage(str(exc))
    server = await _Server.start(options, entry, env)
    if isinstance(server, int):
        return server
    try:
        return await _place(options, server, caller_id, env, stream)
    finally:
        await server.aclose()


class _Server:
    """The app ``serve --telephony PROVIDER`` builds, listening, with its service."""

    def __init__(self, runner: Any, service: Any, public_url: str) -> None:
        self.runner, self.service, self.public_url = runner, service, public_url

    @classmethod
    async def start(cls, options: CallOptions, entry: Any, env: Mapping[str, str]) -> _Server | int:
        from aiohttp import web

        from ...devserver import SHUTDOWN_TIMEOUT, _bound_port, _url
        from ..app import GATE, create_app
        from . import TelephonyOptions
        from .routes import add_telephony_routes

        secrets = secrets_from_env(env)
        app = create_app(entry, webrtc=False, page=False)
        try:
            phone = TelephonyOptions(
                public_url=options.public_url, twilio_auth_token=secrets.twilio_auth_token
            )
            service = add_telephony_routes(
                app,
                entry,
                gate=app[GATE],
                providers=[options.telephony],
                options=phone,
                secrets=secrets,
            )
        except ValueError as exc:  # a bad --public-url
            return _usage(str(exc))
        await entry.prewarm(entry.loaded)
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
        await runner.setup()
        site = web.TCPSite(runner, options.host, options.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            _say(sys.stderr, f"rejoinder call: error: cannot listen: {exc.strerror or exc}")
            return EXIT_FAILED
        public_url = options.public_url or _url(options.host, _bound_port(runner, options.port))
        return cls(runner, service, public_url.rstrip("/"))

    async def aclose(self) -> None:
        from ...models.claims import close_shared

        await self.runner.cleanup()
        await close_shared()


async def _place(
    options: CallOptions, server: _Server, caller_id: str, env: Mapping[str, str], out: TextIO
) -> int:
    from .outbound import dial

    control = _control(options, env, server.public_url)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, interrupted.set)
            handled.append(signum)
    try:
        _say(out, f"calling {options.to} from {caller_id} via {options.telephony}")
        try:
            call = await dial(
                options.to,
                from_=caller_id,
                control=control,
                service=server.service,
                public_url=server.public_url,
                machine_detection=options.machine_detection,
                ring_timeout=options.ring_timeout,
            )
        except (CarrierError, ValueError) as exc:
            _say(out, f"failed: {exc}")
            return EXIT_FAILED
        for event in call.events:
            _say(out, _event_line(call, event))
        call.on_event(lambda event: _say(out, _event_line(call, event)))
        ended = asyncio.ensure_future(call.ended())
        stop = asyncio.ensure_future(interrupted.wait())
        await asyncio.wait((ended, stop), return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not ended.done():
            ended.cancel()
            _say(out, "interrupted: hanging up")
            with contextlib.suppress(CarrierError):
                await call.hangup()
            return EXIT_INTERRUPTED
        return exit_code(call)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        await control.aclose()
