"""What every host of the transports does, without a web framework.

Two hosts serve the same framework-free cores: the aiohttp application (``app.py``,
``socket_loop.py``, ``telephony/routes.py``) and the ASGI application (``asgi.py``, for
Starlette, uvicorn or Ray Serve). Each one only translates its framework's requests and
sockets; everything that decides something lives here or in the cores:

- ``run_socket(socket, binding)``: one WebSocket's life. Frames go into a peer
  (``WebSocketPeer``, ``MediaStreamPeer``), its ``Outbox`` goes out through one writer,
  the peer's ``start`` runs the entry point, and every wait is bounded (the start
  timeout, the entry point's exit, the writer). A host gives it a ``FrameSocket``: four
  small methods over its own socket object.
- ``HttpAnswer``: a response as data (status, body, media type, headers), and the
  answers both hosts give: ``health_answer``, ``refused_answer``, ``metrics_answer``.
- ``host_gate``, ``observed`` and ``close_session``: the ``SessionGate`` an application
  admits through, and the entry point wrapped so ``/metrics`` watches its session;
  ``resume_registry``: where an application's sessions wait for a client that dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .admission import SessionGate
from .connection import Connection, Entrypoint
from .outbox import CloseRequest, Outbox, bounded
from .protocol import CloseCode

if TYPE_CHECKING:
    from ..session import AgentSession
    from .resume import ResumeRegistry
    from .server_metrics import ServerMetrics

__all__ = [
    "FrameSocket",
    "HttpAnswer",
    "SocketBinding",
    "close_session",
    "first_values",
    "health_answer",
    "host_gate",
    "metrics_answer",
    "observed",
    "refused_answer",
    "resume_registry",
    "run_socket",
    "write_frames",
]

logger = logging.getLogger("rejoinder.io")

WRITER_TIMEOUT = 5.0
"""Seconds the socket writer gets to finish once the peer is done."""


# ----------------------------------------------------------------- sockets


class FrameSocket(Protocol):
    """An accepted WebSocket, as the socket loop sees it."""

    @property
    def closed(self) -> bool:
        """A close was sent or received: nothing more can be written."""
        ...

    async def receive(self) -> str | bytes | None:
        """The next text or binary frame; ``None`` once the socket is closing or gone
        (the host sends a close of its own first when a frame broke its limits)."""
        ...

    async def send_text(self, text: str) -> None:
        """Write a text frame; raises ``ConnectionError`` when the socket is gone."""
        ...

    async def send_bytes(self, data: bytes) -> None:
        """Write a binary frame; raises ``ConnectionError`` when the socket is gone."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame (a no-op once closed)."""
        ...


@dataclass(frozen=True, slots=True)
class SocketBinding:
    """How one framework-free peer is plugged into a socket."""

    outbox: Outbox
    receive_text: Callable[[str], Connection | None]
    """A text frame; returns the ``Connection`` when it was the client's start."""
    receive_bytes: Callable[[bytes], None]
    run_agent: Callable[[Connection], Awaitable[None]]
    no_start: Callable[[], None]
    """Called when no start came within ``start_timeout`` seconds."""
    left: Callable[[], None]
    """Called once the socket is done (whatever the reason)."""
    start_timeout: float
    close_timeout: float
    name: str


async def run_socket(socket: FrameSocket, binding: SocketBinding) -> None:
    """Read ``socket`` until it closes: text and binary frames go to the peer; the
    ``Connection`` a text frame returns (the client's start) gets ``run_agent``. Without
    one within ``start_timeout`` seconds, ``no_start()``. When the socket is done,
    ``left()``, then the agent gets ``close_timeout`` seconds to finish and the writer
    five, and the socket is closed."""
    b = binding
    writer = asyncio.create_task(write_frames(socket, b.outbox), name=f"rejoinder-{b.name}-writer")
    agent: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    start_deadline = loop.call_later(b.start_timeout, b.no_start)

    async def run(conn: Connection) -> None:
        await b.run_agent(conn)

    try:
        # The writer's close (after a refusal, or once the agent is done) ends this loop:
        # the host's receive then reports the socket closing.
        while (frame := await socket.receive()) is not None:
            if isinstance(frame, str):
                conn = b.receive_text(frame)
                if conn is not None and agent is None:
                    start_deadline.cancel()
                    agent = asyncio.create_task(run(conn), name=f"rejoinder-{b.name}")
            else:
                b.receive_bytes(frame)
    finally:
        start_deadline.cancel()
        b.left()
        if agent is not None:
            await bounded(agent, b.close_timeout, "the entry point")
        await bounded(writer, WRITER_TIMEOUT, "the socket writer")
        if not socket.closed:
            with contextlib.suppress(Exception):
                await socket.close(int(CloseCode.NORMAL), "")


async def write_frames(socket: FrameSocket, outbox: Outbox) -> None:
    """Drain ``outbox`` into ``socket`` until its close request, then close the socket."""
    try:
        while True:
            item = await outbox.get()
            if isinstance(item, CloseRequest):
                await socket.close(int(item.code), item.reason)
                return
            if isinstance(item, str):
                await socket.send_text(item)
            else:
                await socket.send_bytes(item)
    except (ConnectionError, RuntimeError) as exc:  # the socket went away under us
        logger.debug("websocket writer stopped: %r", exc)
        outbox.close(CloseCode.NORMAL, "socket closed")


def first_values(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """A query string's fields, the first value of each (as ``dict(request.query)`` is
    in aiohttp): what ``Connection.query`` holds on every host."""
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


# -------------------------------------------------------------------- HTTP


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """An HTTP response as data: each host writes it with its own framework. A ``str``
    body is sent as UTF-8 with ``charset=utf-8``; ``bytes`` with ``media_type`` as is."""

    status: int
    body: str | bytes
    media_type: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def json(
        cls, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> HttpAnswer:
        return cls(status, json.dumps(data), "application/json", dict(headers or {}))

    @classmethod
    def text(cls, text: str, status: int = 200) -> HttpAnswer:
        return cls(status, text, "text/plain")

    @classmethod
    def xml(cls, document: str, status: int = 200) -> HttpAnswer:
        return cls(status, document, "application/xml")

    @property
    def content_type(self) -> str:
        """The ``Content-Type`` header's value."""
        if isinstance(self.body, str):
            return f"{self.media_type}; charset=utf-8"
        return self.media_type

    @property
    def body_bytes(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body


def health_answer(
    gate: SessionGate[Connection], resume: ResumeRegistry | None = None
) -> HttpAnswer:
    """``GET /healthz``: the status and the session counts; 503 once draining, so a load
    balancer stops sending clients. ``detached`` (when the app resumes sessions): how many
    of the ``sessions`` wait for their client to come back; they still run, and still
    count against ``max_sessions``."""
    status = gate.status
    body: dict[str, Any] = {
        "status": status,
        "sessions": gate.live,
        "max_sessions": gate.max_sessions,
    }
    if resume is not None:
        body["detached"] = resume.detached
    if gate.load is not None:
        body["capacity"] = gate.load.capacity
        body["load"] = round(gate.load.utilization, 3)
    return HttpAnswer.json(body, status=200 if status == "ok" else 503)


def refused_answer(
    gate: SessionGate[Connection],
    fallback: str = "the server cannot take a session now",
    *,
    retry_after: bool = True,
) -> HttpAnswer:
    """The 503 a refused session request gets, with the gate's reason."""
    reason = gate.refusal() or fallback
    headers = {"Retry-After": "5"} if retry_after else {}
    return HttpAnswer.json({"error": reason}, status=503, headers=headers)


def metrics_answer(metrics: ServerMetrics) -> HttpAnswer:
    """``GET /metrics``: the application's registry in the Prometheus text format."""
    from .server_metrics import CONTENT_TYPE

    return HttpAnswer(200, metrics.render(), CONTENT_TYPE)


# ---------------------------------------------------------------- sessions


async def close_session(conn: Connection) -> None:
    """End a live connection from the server side: its session closes, ``serve`` returns
    and the transport closes the socket or peer connection."""
    if conn.session is not None:
        await conn.session.aclose()
    else:
        conn.client_left()


def host_gate(
    max_sessions: int | None, gate: SessionGate[Connection] | None
) -> SessionGate[Connection]:
    """The gate an application admits through: ``gate``, or a new one limited to
    ``max_sessions``; either way one that closes a live session gracefully on a drain."""
    if gate is None:
        gate = SessionGate(max_sessions=max_sessions, close=close_session)
    elif max_sessions is not None:
        raise ValueError("give max_sessions to the gate, not to create_app as well")
    if gate.close is None:
        gate.close = close_session
    return gate


def resume_registry(grace: float, gate: SessionGate[Connection]) -> ResumeRegistry | None:
    """The registry an application's sessions wait in after their client dropped, for
    ``grace`` seconds (0: none, resuming is off). It closes as ``gate`` starts draining:
    behind a load balancer, a client coming back then is sent to another server, so the
    sessions waiting for theirs end and no more are kept."""
    if grace == 0:
        return None
    from .resume import ResumeRegistry

    registry = ResumeRegistry(grace)
    gate.on_draining.append(registry.close)
    return registry


def observed(entrypoint: Entrypoint, metrics: ServerMetrics) -> Entrypoint:
    """``entrypoint``, with the session its connection serves watched by ``metrics``
    (every transport calls it inside ``gate.run``)."""

    async def observed_entrypoint(conn: Connection) -> None:
        detach: list[Callable[[], None]] = []

        def observe(session: AgentSession[Any]) -> None:
            detach.append(metrics.observe(session))

        conn.session_observers.append(observe)
        try:
            await entrypoint(conn)
        finally:
            for stop in detach:  # the session closed, unless serve() never returned
                stop()
            with contextlib.suppress(ValueError):
                conn.session_observers.remove(observe)

    return observed_entrypoint
