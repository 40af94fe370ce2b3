"""An agent file as a Ray Serve application: ``rejoinder serve --ray FILE``.

One deployment (``RejoinderReplica``) whose replicas each hold many sessions. Each replica
loads the agent file and serves it with the ASGI host (``rejoinder.io.asgi``): ``/ws``
(the client protocol), the phone providers' routes, ``/healthz``, ``/metrics`` and the
page. Ray Serve's proxy forwards every request to a replica and counts a live WebSocket
as one ongoing request for as long as it is open, so:

- ``max_ongoing_requests`` = ``sessions_per_replica``: the proxy never sends a replica
  more sessions than that (the replica's own ``SessionGate`` has the same limit, as a
  safety net); a session over the cluster's capacity waits in the proxy's queue
  (``max_queued_sessions``, unbounded by default) until a replica has room;
- autoscaling on ongoing requests (``autoscaling_config``: ``min_replicas``,
  ``max_replicas``, ``target_ongoing_requests`` = ``target_sessions``): as calls arrive
  (queued ones included) Serve adds replicas, new sessions go to the replicas with room,
  and sessions already live stay where they are (a WebSocket never moves);
- a graceful scale-down: Serve stops routing to the replica it removes and waits for its
  ongoing requests; the replica sees that (``replica_stopping()``), stops admitting
  (``/healthz`` says ``draining``), lets live sessions finish for up to ``drain_timeout``
  seconds, then closes the rest cleanly (close code 1000, as ``rejoinder serve`` does on
  SIGTERM). Serve's ``graceful_shutdown_timeout_s`` is ``drain_timeout`` plus
  ``CLOSE_MARGIN``: the bound after which Ray kills the replica anyway;
- metrics labelled by replica: the replica's ``GET /metrics`` carries ``replica``,
  ``deployment`` and ``application`` labels on every sample, and the session counts are
  also recorded as Ray Serve metrics (``ray_rejoinder_replica_*``, tagged with
  ``replica``, ``deployment`` and ``application`` by Ray) on each node's Ray metrics
  endpoint, which answers even when every replica is full (a ``/metrics`` request through
  the proxy waits for a free place like any request).

The autoscaler's reaction time is set by ``look_back_period_s`` and ``upscale_delay_s``,
and by how often replicas and the proxy report their load to Serve's controller: Serve
2.60 still takes that from the deployment's (deprecated) ``metrics_interval_s``, which is
set here to half the look-back window (Serve's own default is 10 s).

Needs the ``ray`` extra (``pip install 'rejoinder[ray]'``). The agent file must be at the
same path on every node (or ship it with ``ray_actor_options={"runtime_env": ...}``).
Ray is imported only when this module is, never by ``import rejoinder``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .. import _extras
from ..io.resume import DEFAULT_GRACE

__all__ = [
    "CLOSE_MARGIN",
    "DEFAULT_SESSIONS_PER_REPLICA",
    "DEPLOYMENT_NAME",
    "PROXY_CALLBACK",
    "SESSION_LOST",
    "CloseLostSessions",
    "RayOptions",
    "RayUnavailable",
    "RejoinderReplica",
    "autoscaling_config",
    "build_app",
    "deployment_options",
    "proxy_middlewares",
    "replica_stopping",
    "run",
    "serve_until_signalled",
    "use_in_proxy",
]

logger = logging.getLogger("rejoinder.deploy.ray")

INSTALL_HINT = _extras.install_command("ray")
DEFAULT_SESSIONS_PER_REPLICA = 8
"""Live sessions a replica takes by default (``--sessions-per-replica``: its
``max_ongoing_requests``)."""
DEPLOYMENT_NAME = "RejoinderAgent"
"""The Serve deployment's name."""
CLOSE_MARGIN = 15.0
"""Seconds past ``drain_timeout`` before Ray kills a stopping replica: time to close the
sessions still live (``SessionGate.close_all``: up to twice ``CANCEL_GRACE``)."""
WATCH_INTERVAL = 0.25
"""How often a replica checks whether Serve is stopping it, and records its metrics."""


class RayUnavailable(ImportError):
    """Ray Serve is not installed."""


def _module(name: str) -> Any:
    """A module of Ray, untyped (Ray's own annotations are not checked here)."""
    return _extras.import_module("ray", name, what="rejoinder serve --ray", error=RayUnavailable)


@dataclass(frozen=True, slots=True)
class RayOptions:
    """What ``build_app`` deploys: the agent file and how its replicas scale."""

    path: str
    """The agent file (made absolute: replicas run in other processes)."""
    sessions_per_replica: int = DEFAULT_SESSIONS_PER_REPLICA
    """``max_ongoing_requests``: live sessions one replica holds at most."""
    min_replicas: int = 1
    max_replicas: int = 4
    initial_replicas: int | None = None
    target_sessions: float | None = None
    """``target_ongoing_requests``: the sessions per replica the autoscaler aims at
    (default ``sessions_per_replica``: a new replica when the live ones are full)."""
    upscale_delay_s: float = 2.0
    downscale_delay_s: float = 60.0
    look_back_period_s: float = 5.0
    max_queued_sessions: int = -1
    """Sessions the proxy queues for a replica with room (``max_queued_requests``; -1:
    no limit). Past it the upgrade is refused with HTTP 503."""
    drain_timeout: float = 30.0
    """How long a stopping replica lets its live sessions go on before closing them."""
    replica_cpus: float = 1.0
    """CPUs each replica reserves from Ray (its scheduling weight on a node)."""
    ray_actor_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """More Ray actor options for the replicas (``resources``, ``runtime_env``, ...)."""
    telephony: tuple[str, ...] = ()
    public_url: str | None = None
    twilio_auth_token: str | None = field(default=None, repr=False)
    telnyx_public_key: str | None = field(default=None, repr=False)
    plivo_auth_token: str | None = field(default=None, repr=False)
    """The webhook secrets, as ``TelephonyOptions`` takes them: every replica checks the
    signatures of the providers it serves."""
    inspect: bool = False
    resume_grace: float = DEFAULT_GRACE
    """Seconds a session whose client dropped waits for it on its replica (0: off). A
    resume reaches that replica only if the proxy happens to route it there; elsewhere it
    is refused (``resume_failed``) and the client starts anew."""

    def __post_init__(self) -> None:
        if self.sessions_per_replica < 1:
            raise ValueError(f"sessions_per_replica must be >= 1: {self.sessions_per_replica}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(
                f"need 0 <= min_replicas <= max_replicas, max_replicas >= 1: "
                f"{self.min_replicas}, {self.max_replicas}"
            )
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be >= 0: {self.drain_timeout}")
        if not self.resume_grace >= 0:  # NaN fails this too
            raise ValueError(f"resume_grace must be >= 0 (0: off): {self.resume_grace}")
        object.__setattr__(self, "path", str(Path(self.path).resolve()))


def autoscaling_config(options: RayOptions) -> dict[str, Any]:
    """Serve's ``autoscaling_config`` for ``options``."""
    config: dict[str, Any] = {
        "min_replicas": options.min_replicas,
        "max_replicas": options.max_replicas,
        "target_ongoing_requests": options.target_sessions or options.sessions_per_replica,
        "upscale_delay_s": options.upscale_delay_s,
        "downscale_delay_s": options.downscale_delay_s,
        "look_back_period_s": options.look_back_period_s,
        # Deprecated by Serve, but in 2.60 still how often replicas and the proxy report
        # their load (default 10 s), and checked to be under look_back_period_s.
        "metrics_interval_s": min(10.0, options.look_back_period_s / 2),
    }
    if options.initial_replicas is not None:
        config["initial_replicas"] = options.initial_replicas
    return config


def deployment_options(options: RayOptions) -> dict[str, Any]:
    """The ``@serve.deployment`` options for ``options``."""
    return {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": options.sessions_per_replica,
        "max_queued_requests": options.max_queued_sessions,
        "autoscaling_config": autoscaling_config(options),
        "graceful_shutdown_wait_loop_s": 0.5,
        "graceful_shutdown_timeout_s": options.drain_timeout + CLOSE_MARGIN,
        "ray_actor_options": {"num_cpus": options.replica_cpus, **options.ray_actor_options},
    }


def build_app(options: RayOptions) -> Any:
    """The Serve application (``serve.run(build_app(options))``)."""
    serve = _module("ray.serve")
    wrapped = serve.ingress()(RejoinderReplica)
    return serve.deployment(wrapped, **deployment_options(options)).bind(options)


# ------------------------------------------------------------------- replica


def replica_stopping() -> bool | None:
    """Whether Serve has begun stopping the replica this process runs (it no longer
    routes to it and waits for its ongoing requests); ``None`` if that cannot be seen
    (not in a replica, or a Ray version whose replica keeps it elsewhere)."""
    try:
        worker = importlib.import_module("ray._private.worker").global_worker
        actor = worker.actors.get(worker.actor_id)
        flag = getattr(getattr(actor, "_replica_impl", None), "_shutting_down", None)
    except Exception:  # internal layout: anything unexpected means "cannot tell"
        return None
    return flag if isinstance(flag, bool) else None


def _replica_labels() -> dict[str, str]:
    try:
        context = _module("ray.serve").get_replica_context()
        return {
            "replica": str(context.replica_tag),
            "deployment": str(context.deployment),
            "application": str(context.app_name),
        }
    except Exception:  # outside a replica (tests)
        return {"replica": f"pid-{os.getpid()}", "deployment": "", "application": ""}


class RejoinderReplica:
    """One Serve replica: the agent file behind the ASGI host, with many sessions.

    Its attributes are prefixed: Serve mixes its own ASGI wrapper (``app``, ...) into it."""

    def __init__(self, options: RayOptions) -> None:
        self.rejoinder_options = options
        self.rejoinder_labels: dict[str, str] = {}
        self.rejoinder_app: Any = None
        self.rejoinder_drained: asyncio.Event | None = None
        self._rejoinder_watcher: asyncio.Task[None] | None = None

    async def __serve_build_asgi_app__(self) -> Any:
        """Called by Serve once the replica is constructed; the replica is ready (gets
        requests) only after this returns, so loading the agent file (and whatever it
        loads at import, and its ``prewarm``) counts towards it."""
        from ..discover import load_agent_file
        from ..io.asgi import create_asgi_app
        from ..io.telephony import TelephonyOptions

        options = self.rejoinder_options
        loaded = await asyncio.to_thread(load_agent_file, options.path)
        await loaded.run_prewarm()
        entrypoint = loaded.entrypoint
        self.rejoinder_labels = _replica_labels()
        self.rejoinder_app = create_asgi_app(
            entrypoint,
            max_sessions=options.sessions_per_replica,
            telephony=options.telephony,
            telephony_options=TelephonyOptions(
                public_url=options.public_url,
                twilio_auth_token=options.twilio_auth_token,
                telnyx_public_key=options.telnyx_public_key,
                plivo_auth_token=options.plivo_auth_token,
            ),
            inspect=options.inspect,
            metrics_labels=self.rejoinder_labels,
            resume_grace=options.resume_grace,
        )
        self.rejoinder_drained = asyncio.Event()
        self._rejoinder_watcher = asyncio.create_task(self._watch(), name="rejoinder-replica-watch")
        return self.rejoinder_app

    async def _watch(self) -> None:
        gate = self.rejoinder_app.state.gate
        recorder = _RayMetrics.create(gate)
        warned = False
        try:
            while not gate.draining:
                await asyncio.sleep(WATCH_INTERVAL)
                recorder.record()
                stopping = replica_stopping()
                if stopping is None and not warned:
                    warned = True
                    logger.warning(
                        "cannot see when Serve stops this replica: live sessions are "
                        "bounded only by graceful_shutdown_timeout_s"
                    )
                if stopping:
                    break
            await self._drain()
            recorder.record()
        finally:
            if self.rejoinder_drained is not None:
                self.rejoinder_drained.set()

    async def _drain(self) -> None:
        gate = self.rejoinder_app.state.gate
        seconds = self.rejoinder_options.drain_timeout
        logger.info(
            "replica %s stopping: no new sessions; %d live may go on for up to %g s",
            self.rejoinder_labels.get("replica"),
            gate.live,
            seconds,
        )
        gate.stop_admitting()
        if not await gate.wait_idle(seconds):
            closed = await gate.close_all()
            logger.info(
                "replica %s: closed %d live session(s)",
                self.rejoinder_labels.get("replica"),
                closed,
            )

    async def aclose(self) -> None:
        """Stop watching and close whatever is still live (outside Serve: tests). In a
        replica there is nothing left by then: Serve stops a replica only once its
        requests (sessions) ended, which the watcher bounds."""
        watcher = self._rejoinder_watcher
        if watcher is not None and not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if self.rejoinder_app is not None and self.rejoinder_app.state.gate.live:
            await self.rejoinder_app.state.gate.drain(0)


class _RayMetrics:
    """The replica's session counts as Ray Serve metrics (Ray adds the ``replica``,
    ``deployment`` and ``application`` tags), on each node's Ray metrics endpoint."""

    def __init__(self, gate: Any, metrics: Any) -> None:
        self._gate = gate
        self._live = metrics.Gauge(
            "rejoinder_replica_sessions_live", description="Live sessions on the replica."
        )
        self._draining = metrics.Gauge(
            "rejoinder_replica_draining", description="1 once the replica is draining."
        )
        self._max = metrics.Gauge(
            "rejoinder_replica_max_sessions", description="Sessions the replica holds at most."
        )
        self._started = metrics.Counter(
            "rejoinder_replica_sessions_started", description="Sessions started on the replica."
        )
        self._refused = metrics.Counter(
            "rejoinder_replica_sessions_refused", description="Sessions the replica refused."
        )
        self._seen_started = 0
        self._seen_refused = 0

    @classmethod
    def create(cls, gate: Any) -> _RayMetrics | _NoMetrics:
        try:
            return cls(gate, _module("ray.serve.metrics"))
        except Exception as exc:  # not in a Ray worker
            logger.debug("Ray metrics unavailable: %r", exc)
            return _NoMetrics()

    def record(self) -> None:
        gate = self._gate
        try:
            self._live.set(gate.live)
            self._draining.set(1 if gate.draining else 0)
            if gate.max_sessions is not None:
                self._max.set(gate.max_sessions)
            if gate.started_total > self._seen_started:
                self._started.inc(gate.started_total - self._seen_started)
                self._seen_started = gate.started_total
            if gate.refused_total > self._seen_refused:
                self._refused.inc(gate.refused_total - self._seen_refused)
                self._seen_refused = gate.refused_total
        except Exception as exc:  # a metrics agent that went away must not stop the drain
            logger.debug("recording Ray metrics failed: %r", exc)


class _NoMetrics:
    def record(self) -> None:
        pass


# --------------------------------------------------------------------- proxy

SESSION_LOST = 1012
"""The close code a client gets when the replica holding its session is lost (its node
died): RFC 6455's "service restart"; the client may reconnect and start a new session."""
SESSION_LOST_REASON = "session lost: its replica went away; reconnect"


class CloseLostSessions:
    """ASGI middleware for Serve's HTTP proxy (``proxy_middlewares``): when
    the replica behind an accepted WebSocket dies, the proxy's handler returns without a
    close, and the client would see the TCP connection drop (1006); this sends it a
    close frame (``SESSION_LOST``) instead."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "websocket":
            await self.app(scope, receive, send)
            return
        accepted = False
        ended = False

        async def watched_send(message: Any) -> None:
            nonlocal accepted, ended
            kind = message.get("type")
            if kind == "websocket.accept":
                accepted = True
            elif kind in ("websocket.close", "websocket.http.response.start"):
                ended = True
            await send(message)

        async def watched_receive() -> Any:
            nonlocal ended
            message = await receive()
            if message.get("type") == "websocket.disconnect":
                ended = True  # the client left first: nothing to close
            return message

        try:
            await self.app(scope, watched_receive, watched_send)
        finally:
            if accepted and not ended:
                with contextlib.suppress(Exception):
                    await send(
                        {
                            "type": "websocket.close",
                            "code": SESSION_LOST,
                            "reason": SESSION_LOST_REASON,
                        }
                    )


PROXY_CALLBACK = "rejoinder.deploy.ray:proxy_middlewares"
"""Set ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` to this in the environment of the
Ray cluster's processes (before ``ray start``) to put ``CloseLostSessions`` in Serve's
proxy; ``run`` sets it for a cluster it starts itself."""


def proxy_middlewares() -> list[Any]:
    """The middlewares for Serve's proxy (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``)."""
    from starlette.middleware import Middleware

    return [Middleware(CloseLostSessions)]


def use_in_proxy(environ: Any = None) -> None:
    """Put ``CloseLostSessions`` in the proxy of any Ray cluster started from this
    process from now on (sets the environment variable unless already set)."""
    env = os.environ if environ is None else environ
    env.setdefault("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", PROXY_CALLBACK)


# ------------------------------------------------------------------- running


def run(
    options: RayOptions,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
    name: str = "rejoinder",
    proxy_location: str = "HeadOnly",
) -> Any:
    """Deploy ``options`` on the Ray cluster at ``address`` (``None``: ``$RAY_ADDRESS``
    or a new local one), its HTTP proxy on ``host:port``; returns once the application
    is running (replicas ready). ``proxy_location``: ``HeadOnly`` (one entry point) or
    ``EveryNode`` (one proxy per node on the same port, for a load balancer in front)."""
    ray = _module("ray")
    serve = _module("ray.serve")
    if not ray.is_initialized():
        if address is None and not os.environ.get("RAY_ADDRESS"):
            use_in_proxy()  # a local cluster, started here: its proxy closes lost sessions
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": host, "port": port}, proxy_location=proxy_location)
    return serve.run(build_app(options), name=name, route_prefix="/")


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def serve_until_signalled(
    options: RayOptions,
    *,
    host: str,
    port: int,
    address: str | None = None,
    name: str = "rejoinder",
    say: Any = None,
) -> int:
    """``rejoinder serve --ray``: deploy, then wait for SIGINT/SIGTERM and delete the
    application (its replicas drain as on a scale-down), then disconnect."""
    ray = _module("ray")
    serve = _module("ray.serve")
    started_ray = not ray.is_initialized()
    say = say or _say
    run(options, host=host, port=port, address=address, name=name)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    say(
        f"rejoinder serve --ray: {options.path}\n"
        f"  WebSocket: ws://{shown}:{port}/ws (Ray Serve proxy)\n"
        f"  health:    http://{shown}:{port}/healthz\n"
        f"  {options.sessions_per_replica} session(s) per replica, "
        f"{options.min_replicas} to {options.max_replicas} replica(s), autoscaled on live "
        f"sessions\n"
        f"  SIGTERM or Ctrl-C drains (up to {options.drain_timeout:g} s per replica), then stops"
    )
    stop = threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: stop.set())
        for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        while not stop.wait(0.5):
            pass
        say("draining: deleting the application (live sessions finish, bounded)")
        serve.delete(name)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if started_ray:
            ray.shutdown()
    say("stopped")
    return 0
