"""``rejoinder dev`` and ``rejoinder serve``: host an agent file's entry point over HTTP.

Both load the file (``rejoinder.discover``), build the app (``rejoinder.io.app``: the page
at ``/``, the WebSocket transport at ``/ws``, WebRTC signalling at ``/api/offer`` when the
``webrtc`` extra is installed, ``/healthz``) and serve it until SIGINT or SIGTERM.

Before listening they run the file's ``prewarm`` (if it defines one), so the models every
session shares (``rj.shared``) are loaded once per process, before the first caller; they
close the shared models when they stop.

- ``dev`` binds 127.0.0.1:8000 by default and reloads the agent file when it changes: it
  polls the file's modification time (every ``RELOAD_POLL`` seconds) and runs the file
  again in-process (and its ``prewarm``). New connections get the new ``entrypoint`` once
  that is done; sessions already live keep
  the code they started with. A file that no longer loads is reported and the previous
  entry point stays in use. Modules the agent file imports are not reloaded (restart the
  server for those). On Ctrl-C live sessions get ``DEV_DRAIN_TIMEOUT`` seconds.
- ``serve`` is for production: no reload, ``--max-sessions`` (over it, the WebSocket
  upgrade and the WebRTC offer get HTTP 503) and a graceful drain: on SIGTERM or SIGINT it
  stops admitting sessions (503, ``/healthz`` says ``draining``), lets live sessions finish
  for up to ``--drain-timeout`` seconds, closes the rest, and exits 0. A second signal
  during the drain closes the live sessions at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .discover import AgentFile, EntrypointError, load_agent_file
from .io.admission import SessionGate
from .io.resume import DEFAULT_GRACE
from .server_log import SessionLines

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEV_DRAIN_TIMEOUT",
    "RELOAD_POLL",
    "ReloadingEntrypoint",
    "ServerOptions",
    "run_server",
]

logger = logging.getLogger("rejoinder.devserver")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_DRAIN_TIMEOUT = 30.0
DEV_DRAIN_TIMEOUT = 2.0
"""``dev`` stops soon after Ctrl-C: live sessions get this long, then they are closed."""
RELOAD_POLL = 0.5
SHUTDOWN_TIMEOUT = 2.0
"""Seconds the HTTP server waits for requests still open after the sessions are closed."""

EXIT_USAGE = 2
EXIT_FAILED = 1


@dataclass(frozen=True, slots=True)
class ServerOptions:
    path: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    reload: bool = False
    max_sessions: int | None = None
    max_load: float | None = None
    """Admission by measured load (``rejoinder.io.load``): the target share of the cores."""
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    command: str = "serve"
    inspect: bool = False
    """Serve ``GET /sessions`` (live sessions' obligations and timelines)."""
    webrtc: Any = None
    """``WebRTCOptions`` carrying the ICE servers for browsers
    (``rejoinder.io.webrtc.ice_config.webrtc_options_from_args``); None: the default."""
    telephony: tuple[str, ...] = ()
    """Phone providers whose webhooks and media sockets to serve."""
    public_url: str | None = None
    twilio_auth_token: str | None = field(default=None, repr=False)
    telnyx_public_key: str | None = field(default=None, repr=False)
    plivo_auth_token: str | None = field(default=None, repr=False)
    call_credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The providers' REST credentials (``TWILIO_ACCOUNT_SID``...: see
    ``rejoinder.io.telephony.environment``): with them, the calls streamed in can be
    transferred."""
    resume_grace: float = DEFAULT_GRACE
    """Seconds a session whose client dropped waits for it to resume (0: off)."""
    sip: Any = None
    """``SipOptions``: answer calls from a SIP trunk too (None: no SIP)."""
    log_transcripts: bool = False
    """The turn lines (``server_log``) quote what the user said."""


class ReloadingEntrypoint:
    """The entry point the app calls: the current one loaded from the agent file."""

    def __init__(self, path: str, out: TextIO, lines: SessionLines | None = None) -> None:
        self.path = path
        self._out = out
        self._lines = lines
        self.loaded = load_agent_file(path)
        self._current: Callable[[Any], Awaitable[None]] = self.loaded.entrypoint
        self._stamp = self._mtime()
        self.reloads = 0

    async def __call__(self, conn: Any) -> None:
        if self._lines is not None:
            self._lines.watch(conn)  # a line per session and per turn (server_log)
        await self._current(conn)

    def _mtime(self) -> int | None:
        try:
            return Path(self.path).stat().st_mtime_ns
        except OSError:
            return None

    def check(self) -> AgentFile | None:
        """Load the file again if it changed since it was last loaded (not yet serving
        it: see ``watch``)."""
        stamp = self._mtime()
        if stamp is None or stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            return load_agent_file(self.path)
        except EntrypointError as exc:
            _say(self._out, f"reload failed, still serving the previous version: {exc}")
            return None

    async def prewarm(self, loaded: AgentFile) -> bool:
        """Run the file's ``prewarm``; whether it succeeded (a failure is printed)."""
        try:
            await loaded.run_prewarm()
        except Exception as exc:
            _say(self._out, f"prewarm in {self.path} failed: {type(exc).__name__}: {exc}")
            return False
        return True

    async def watch(self, interval: float = RELOAD_POLL) -> None:
        while True:
            await asyncio.sleep(interval)
            # Loading runs the agent file: off the loop, so live sessions keep their pace.
            loaded = await asyncio.to_thread(self.check)
            if loaded is None:
                continue
            # New connections get the new version once its models are warm.
            await self.prewarm(loaded)
            self.loaded, self._current = loaded, loaded.entrypoint
            self.reloads += 1
            _say(self._out, f"reloaded {self.path}: new connections use the new entrypoint")


def _say(out: TextIO, text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        out.write(text + "\n")
        out.flush()


def _error(command: str, text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"rejoinder {command}: error: {text}\n")
        sys.stderr.flush()


def _url(host: str, port: int, path: str = "/", scheme: str = "http") -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if ":" in shown:  # an IPv6 address
        shown = f"[{shown}]" if shown != "::" else "[::1]"
    return f"{scheme}://{shown}:{port}{path}"


async def run_server(options: ServerOptions, out: TextIO | None = None) -> int:
    """Serve until SIGINT/SIGTERM, then drain; returns the exit status."""
    stream = out if out is not None else sys.stdout
    command = options.command
    try:
        lines = SessionLines(transcripts=options.log_transcripts)
        entry = ReloadingEntrypoint(options.path, stream, lines)
    except EntrypointError as exc:
        _error(command, str(exc))
        return EXIT_USAGE

    from aiohttp import web

    from .io.app import WEBRTC, create_app, webrtc_unavailable
    from .io.load import LoadGauge

    load = LoadGauge(target=options.max_load) if options.max_load else None
    gate: SessionGate[Any] = SessionGate(options.max_sessions, load=load)
    try:
        app = create_app(
            entry,
            gate=gate,
            telephony=options.telephony,
            telephony_options=_phone(options),
            inspect=options.inspect,
            resume_grace=options.resume_grace,
            webrtc=options.webrtc,
        )
    except ValueError as exc:  # a bad --public-url
        _error(command, str(exc))
        return EXIT_USAGE
    webrtc = None if app[WEBRTC] is not None else (webrtc_unavailable() or "off")
    # Before listening: the first caller must not wait for the models to load.
    await entry.prewarm(entry.loaded)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT)
    await runner.setup()
    site = web.TCPSite(runner, options.host, options.port, shutdown_timeout=SHUTDOWN_TIMEOUT)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        _error(command, f"cannot listen on {options.host}:{options.port}: {exc.strerror or exc}")
        return EXIT_FAILED
    port = _bound_port(runner, options.port)
    controls = _call_controls(app, options, port)
    sip = None
    if options.sip is not None:
        from .io.sip import SipEndpoint

        sip = SipEndpoint(entry, gate=gate, options=options.sip)
        try:
            sip_address = await sip.start()
        except OSError as exc:
            await runner.cleanup()
            where = f"{options.sip.host}:{options.sip.port}"
            _error(command, f"cannot listen for SIP on udp {where}: {exc.strerror or exc}")
            return EXIT_FAILED

    stop = asyncio.Event()
    force = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            force.set()
        else:
            stop.set()

    handled = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            handled.append(signum)

    _banner(stream, options, port, webrtc)
    if sip is not None:
        allowed = ", ".join(options.sip.allow_from)
        auth = "digest auth" if options.sip.username else "no digest auth"
        _say(stream, f"  SIP:       udp {sip_address[0]}:{sip_address[1]} ({auth}; from {allowed})")
    watcher = asyncio.create_task(entry.watch()) if options.reload else None
    try:
        await stop.wait()
        if watcher is not None:
            watcher.cancel()
        await _drain(stream, gate, options.drain_timeout, force)
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.wait((watcher,))
        for signum in handled:
            loop.remove_signal_handler(signum)
        if sip is not None:
            await sip.aclose()  # BYE to calls still up (the drain ended their sessions)
        await runner.cleanup()
        for control in controls:
            await control.aclose()
        from .models.claims import close_shared

        await close_shared()
    _say(stream, "stopped")
    return 0


async def _drain(out: TextIO, gate: SessionGate[Any], seconds: float, force: asyncio.Event) -> None:
    live = gate.live
    if live:
        _say(
            out,
            f"draining: no new sessions; waiting up to {seconds:g} s for {live} live "
            f"session(s) to finish (signal again to close them now)",
        )
    else:
        _say(out, "shutting down: no live sessions")
    gate.stop_admitting()
    idle = asyncio.create_task(gate.wait_idle(seconds))
    forced = asyncio.create_task(force.wait())
    try:
        await asyncio.wait((idle, forced), return_when=asyncio.FIRST_COMPLETED)
    finally:
        idle.cancel()
        forced.cancel()
        await asyncio.wait((idle, forced))
    remaining = gate.live
    if remaining:
        _say(out, f"closing {remaining} live session(s)")
        await gate.close_all()


def _phone(options: ServerOptions) -> Any:
    if not options.telephony:
        return None
    from .io.telephony import TelephonyOptions
    from .io.telephony.twilio_webhook import stream_url_for

    if options.public_url is not None:
        stream_url_for(options.public_url, options.public_url)  # a bad URL fails now
    return TelephonyOptions(
        public_url=options.public_url,
        twilio_auth_token=options.twilio_auth_token,
        telnyx_public_key=options.telnyx_public_key,
        plivo_auth_token=options.plivo_auth_token,
    )


def _call_controls(app: Any, options: ServerOptions, port: int) -> list[Any]:
    """Each provider's call control from its credentials, handed to the phone service
    (once the port is known: Plivo fetches a transfer's instructions from this server)."""
    if not options.telephony or not options.call_credentials:
        return []
    from .io.telephony import TELEPHONY
    from .io.telephony.environment import controls_from_env

    public = options.public_url or _url(options.host, port)
    controls = controls_from_env(options.telephony, options.call_credentials, public_url=public)
    app[TELEPHONY].controls.update(controls)
    return list(controls.values())


def _bound_port(runner: Any, default: int) -> int:
    """The port actually bound (``--port 0`` picks a free one)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return default


def _banner(out: TextIO, options: ServerOptions, port: int, webrtc: str | None) -> None:
    page = _url(options.host, port)
    lines = [
        f"rejoinder {options.command}: {options.path}",
        f"  open {page} in a browser",
        f"  WebSocket: {_url(options.host, port, '/ws', 'ws')}",
        f"  WebRTC:    {webrtc or 'POST ' + _url(options.host, port, '/api/offer')}",
        f"  health:    {_url(options.host, port, '/healthz')}",
    ]
    if options.webrtc is not None and options.webrtc.ice is not None:
        lines.append(f"  ICE:       {options.webrtc.ice.summary()}")
    if options.inspect:
        lines.append(f"  sessions:  {_url(options.host, port, '/sessions')} (owed now, timelines)")
    for provider in options.telephony:
        lines.append(f"  phone:     {_phone_line(options, port, provider)}")
    if options.max_sessions is not None:
        lines.append(f"  at most {options.max_sessions} live session(s); more get HTTP 503")
    if options.resume_grace:
        lines.append(
            f"  a client that drops may resume its session within {options.resume_grace:g} s"
        )
    began = _demo_began()
    if began is not None:
        took = max(time.time() - began, 0.0)
        lines.append(f"  the page is up {took:.1f} s after make demo began")
    if options.reload:
        lines.append(f"  reloading {options.path} when it changes; Ctrl-C stops")
    else:
        lines.append(f"  SIGTERM or Ctrl-C drains (up to {options.drain_timeout:g} s), then stops")
    _say(out, "\n".join(lines))


def _demo_began() -> float | None:
    """When ``make demo`` began (Unix time, ``REJOINDER_DEMO_STARTED_AT``), to say how long
    a fresh clone took to its first page; None when not started that way."""
    try:
        return float(os.environ["REJOINDER_DEMO_STARTED_AT"])
    except (KeyError, ValueError):
        return None


def _phone_line(options: ServerOptions, port: int, provider: str) -> str:
    base = (options.public_url or _url(options.host, port)).rstrip("/")
    if provider == "twilio":
        checked = "signature checked" if options.twilio_auth_token else "TWILIO_AUTH_TOKEN unset"
        return f"Twilio voice webhook POST {base}/twilio/twiml ({checked})"
    if provider == "plivo":
        return f"Plivo answer URL POST {base}/plivo/answer"
    return f"Telnyx stream_url {base.replace('http', 'ws', 1)}/telnyx"
