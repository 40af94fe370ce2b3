"""The parts of ``rejoinder.deploy.ray`` that need no Ray cluster: the Serve options, the
proxy's close for a lost replica, the labelled metrics, the replica's bounded drain and
the CLI's checks, the webhook secrets every replica checks (``make test-scale``, with the
others)."""

from __future__ import annotations

import asyncio
import base64
import io
import time
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest

import rejoinder.deploy.ray as deploy
from rejoinder.cli import main
from rejoinder.deploy.ray import (
    CLOSE_MARGIN,
    SESSION_LOST,
    CloseLostSessions,
    RayOptions,
    RejoinderReplica,
    deployment_options,
)

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(60)]

AGENT = """
import asyncio

async def entrypoint(conn):
    await asyncio.Event().wait()
"""


def test_deployment_options() -> None:
    options = RayOptions(path="agent.py", sessions_per_replica=3, min_replicas=1, max_replicas=5)
    config = deployment_options(options)
    assert config["max_ongoing_requests"] == 3
    assert config["graceful_shutdown_timeout_s"] == options.drain_timeout + CLOSE_MARGIN
    scaling = config["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["max_replicas"]) == (1, 5)
    assert scaling["target_ongoing_requests"] == 3
    assert scaling["metrics_interval_s"] < scaling["look_back_period_s"]
    assert config["ray_actor_options"] == {"num_cpus": 1.0}
    assert Path(options.path).is_absolute()
    with pytest.raises(ValueError, match="min_replicas"):
        RayOptions(path="a.py", min_replicas=3, max_replicas=2)


class _Socket:
    """An ASGI WebSocket server side: what the middleware sends, and a client that
    leaves when told to."""

    def __init__(self, client_leaves: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.client_leaves = client_leaves

    async def receive(self) -> dict[str, Any]:
        if self.client_leaves:
            return {"type": "websocket.disconnect", "code": 1000}
        await asyncio.sleep(3600)
        raise AssertionError

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


async def test_a_lost_replica_gets_its_clients_a_close_frame() -> None:
    async def lost(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        raise RuntimeError("the replica died")

    socket = _Socket()
    with pytest.raises(RuntimeError):
        await CloseLostSessions(lost)({"type": "websocket"}, socket.receive, socket.send)
    assert socket.sent[-1]["type"] == "websocket.close"
    assert socket.sent[-1]["code"] == SESSION_LOST


async def test_no_extra_close_after_a_close_or_a_client_that_left() -> None:
    async def closes(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 1000})

    socket = _Socket()
    await CloseLostSessions(closes)({"type": "websocket"}, socket.receive, socket.send)
    assert [m["type"] for m in socket.sent] == ["websocket.accept", "websocket.close"]

    async def client_left(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})
        await receive()

    socket = _Socket(client_leaves=True)
    await CloseLostSessions(client_left)({"type": "websocket"}, socket.receive, socket.send)
    assert [m["type"] for m in socket.sent] == ["websocket.accept"]

    async def http(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200})

    socket = _Socket()
    await CloseLostSessions(http)({"type": "http"}, socket.receive, socket.send)
    assert socket.sent == [{"type": "http.response.start", "status": 200}]


class _Conn:
    """A connection whose session ends when the server closes it."""

    transport = "websocket"
    session = None

    def __init__(self) -> None:
        self.left = asyncio.Event()

    def client_left(self) -> None:
        self.left.set()


async def _replica(tmp_path: Path, **options: Any) -> RejoinderReplica:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    replica = RejoinderReplica(RayOptions(path=str(agent), **options))
    await replica.__serve_build_asgi_app__()
    return replica


async def test_metrics_are_labelled_by_replica(tmp_path: Path) -> None:
    replica = await _replica(tmp_path, sessions_per_replica=2)
    try:
        [route] = [r for r in replica.rejoinder_app.router.routes if r.path == "/metrics"]
        response = await route.endpoint(None)
        text = response.body.decode()
        label = replica.rejoinder_labels["replica"]
        lines = [line for line in text.splitlines() if line.startswith("rejoinder_sessions_live")]
        assert lines and all(f'replica="{label}"' in line for line in lines), text
    finally:
        await replica.aclose()


async def test_a_replica_resumes_with_its_grace_and_refuses_a_bad_one(tmp_path: Path) -> None:
    replica = await _replica(tmp_path, resume_grace=12.0)
    try:
        resume = replica.rejoinder_app.state.resume
        assert resume is not None and resume.grace == 12.0
    finally:
        await replica.aclose()
    off = await _replica(tmp_path, resume_grace=0)
    try:
        assert off.rejoinder_app.state.resume is None
    finally:
        await off.aclose()
    with pytest.raises(ValueError, match="resume_grace"):
        RayOptions(path="agent.py", resume_grace=float("nan"))


async def test_a_stopping_replica_drains_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopping = False
    monkeypatch.setattr(deploy, "replica_stopping", lambda: stopping)
    replica = await _replica(tmp_path, sessions_per_replica=2, drain_timeout=1.0)
    gate = replica.rejoinder_app.state.gate
    conn = _Conn()

    async def entrypoint(c: _Conn) -> None:
        await c.left.wait()

    with gate.admit():
        session = asyncio.create_task(gate.run(entrypoint, conn))
        await asyncio.sleep(0.1)
    assert gate.live == 1
    stopping = True
    await asyncio.sleep(0.5)
    assert gate.draining and gate.refusal() is not None and gate.live == 1  # still live
    assert replica.rejoinder_drained is not None
    await asyncio.wait_for(replica.rejoinder_drained.wait(), 5)
    assert conn.left.is_set() and gate.live == 0  # closed at the drain timeout
    assert replica.rejoinder_app.state.resume.closed  # no session waits for a client now
    await session
    await replica.aclose()


async def _post(app: Any, path: str, body: bytes, headers: dict[str, str]) -> int:
    """One HTTP POST through the ASGI app, as a proxy would pass it: the status code."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(next(m["status"] for m in sent if m["type"] == "http.response.start"))


async def test_every_replica_checks_each_providers_webhook_signature(tmp_path: Path) -> None:
    """A replica serving Telnyx and Plivo calls refuses their unsigned webhooks (403), as
    it does Twilio's: the secrets reach every replica."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    replica = await _replica(
        tmp_path,
        telephony=("twilio", "telnyx", "plivo"),
        public_url="https://agent.example.com",
        twilio_auth_token="twilio-secret",
        telnyx_public_key=base64.b64encode(public).decode(),
        plivo_auth_token="plivo-secret",
    )
    app = replica.rejoinder_app
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    try:
        event = b'{"data": {"event_type": "call.initiated", "payload": {}}}'
        json_headers = {"Content-Type": "application/json"}
        assert await _post(app, "/telnyx/events", event, json_headers) == 403
        assert await _post(app, "/plivo/answer", b"CallUUID=abc", form) == 403
        assert await _post(app, "/twilio/twiml", b"CallSid=CA1", form) == 403
        # A correctly signed Telnyx event passes the check (whatever it then answers).
        stamp = str(int(time.time()))
        signature = base64.b64encode(private.sign(stamp.encode() + b"|" + event)).decode()
        signed = {
            **json_headers,
            "telnyx-signature-ed25519": signature,
            "telnyx-timestamp": stamp,
        }
        assert await _post(app, "/telnyx/events", event, signed) != 403
    finally:
        await replica.aclose()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-sessions", "3"], "--sessions-per-replica"),
        (["--port", "0"], "fixed --port"),
        (["--min-replicas", "5", "--max-replicas", "2"], "--min-replicas"),
    ],
)
def test_cli_checks(tmp_path: Path, extra: list[str], message: str) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    err = io.StringIO()
    with redirect_stderr(err):
        assert main(["serve", "--ray", str(agent), *extra]) == 2
    assert message in err.getvalue()
