"""The ASGI host (``rejoinder.io.asgi``, Starlette under uvicorn) beside the aiohttp one,
over real sockets on 127.0.0.1: health, ``/metrics``, admission (503 when full), and
Twilio's webhook with a valid and an invalid signature. Each test runs on both hosts and
expects the same answer from each.

The fixture ``host`` here starts either: aiohttp's ``TestServer``, or uvicorn in-process on
a socket bound to a free port, with a bounded start and shutdown. ``test_asgi_websocket``
and ``test_asgi_telephony`` use it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import uvicorn
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from rejoinder.io import Connection, create_app
from rejoinder.io.admission import SessionGate
from rejoinder.io.app import GATE
from rejoinder.io.asgi import create_asgi_app
from rejoinder.io.telephony import TelephonyOptions
from rejoinder.io.telephony.twilio_webhook import TOKEN_PARAMETER, twilio_signature

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

HOSTS = ["aiohttp", "asgi"]
AUTH = "test-auth-token"
CALL = {
    "AccountSid": "AC00000000000000000000000000000001",
    "CallSid": "CA00000000000000000000000000000001",
    "From": "+14158675310",
    "To": "+18005551212",
}


@contextlib.asynccontextmanager
async def uvicorn_serving(app: Any, *, within: float = 5.0) -> AsyncIterator[int]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port, yielded) in this loop."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        http="h11",
        ws="websockets-sansio",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(within):
            while not server.started:
                if task.done():
                    task.result()
                    raise AssertionError("uvicorn stopped before it started")
                await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, within)
        finally:
            sock.close()


@dataclass
class Host:
    kind: str
    port: int
    app: Any

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def gate(self) -> SessionGate[Connection]:
        gate: SessionGate[Connection] = (
            self.app[GATE] if self.kind == "aiohttp" else self.app.state.gate
        )
        return gate


Start = Callable[..., Awaitable[Host]]


@pytest.fixture(params=HOSTS)
async def host(request: pytest.FixtureRequest) -> AsyncIterator[Start]:
    """``await host(entrypoint, **create_app options)``: the app on this test's host."""
    kind: str = request.param
    async with contextlib.AsyncExitStack() as stack:

        async def start(entrypoint: Any, **options: Any) -> Host:
            if kind == "aiohttp":
                app: Any = create_app(entrypoint, webrtc=False, page=False, **options)
                server = TestServer(app, host="127.0.0.1")
                await server.start_server()
                stack.push_async_callback(server.close)
                assert server.port is not None
                return Host(kind, server.port, app)
            app = create_asgi_app(entrypoint, page=False, **options)
            port = await stack.enter_async_context(uvicorn_serving(app))
            return Host(kind, port, app)

        yield start


async def idle(conn: Connection) -> None:
    await conn.wait_left()


def samples(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


# ------------------------------------------------------- health and metrics


async def test_health_and_metrics_report_the_gate_and_draining(host: Start) -> None:
    served = await host(idle, max_sessions=2)
    async with aiohttp.ClientSession() as http:
        async with http.get(served.base + "/healthz") as resp:
            assert resp.status == 200 and resp.content_type == "application/json"
            assert await resp.json() == {
                "status": "ok",
                "sessions": 0,
                "max_sessions": 2,
                "detached": 0,
            }
        async with http.get(served.base + "/metrics") as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
            before = samples(await resp.text())
        assert before["rejoinder_sessions_live"] == 0 and before["rejoinder_draining"] == 0
        served.gate.stop_admitting()
        async with http.get(served.base + "/healthz") as resp:
            assert resp.status == 503
            assert (await resp.json())["status"] == "draining"
        async with http.get(served.base + "/metrics") as resp:
            assert samples(await resp.text())["rejoinder_draining"] == 1


async def test_two_apps_keep_their_own_registries() -> None:
    one, two = create_asgi_app(idle, page=False), create_asgi_app(idle, page=False)
    one.state.gate.stop_admitting()
    assert one.state.metrics.registry is not two.state.metrics.registry
    assert b"rejoinder_draining 1.0" in one.state.metrics.render()
    assert b"rejoinder_draining 0.0" in two.state.metrics.render()


# --------------------------------------------------------------- admission


async def test_a_full_server_refuses_the_upgrade_with_503_and_the_reason(host: Start) -> None:
    served = await host(idle, max_sessions=1)
    url = served.ws + "/ws"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as first:
        await first.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
        async with asyncio.timeout(5):
            while served.gate.live == 0:  # noqa: ASYNC110 - the gate has no event
                await asyncio.sleep(0.01)
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url)
        assert refused.value.status == 503
        assert refused.value.headers is not None
        assert refused.value.headers.get("Retry-After") == "5"
        async with http.get(served.base + "/healthz") as resp:
            assert (await resp.json())["sessions"] == 1
        async with http.get(served.base + "/metrics") as resp:
            counts = samples(await resp.text())
        assert counts["rejoinder_sessions_refused_total"] == 1
        assert counts["rejoinder_sessions_live"] == 1
        assert counts["rejoinder_transport_sessions"] == 1
    async with asyncio.timeout(5):
        while served.gate.live:  # noqa: ASYNC110 - the client left: its entry point returns
            await asyncio.sleep(0.01)
    # the place is free again
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as again:
        assert not again.closed


async def test_without_the_denial_extension_a_refusal_closes_before_accepting() -> None:
    app = create_asgi_app(idle, page=False, max_sessions=1)
    app.state.gate.stop_admitting()
    sent: list[dict[str, Any]] = []
    scope = {"type": "websocket", "path": "/ws", "query_string": b"", "headers": []}

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), 5)
    assert [(m["type"], m.get("code")) for m in sent] == [("websocket.close", 1013)]
    assert app.state.gate.refused_total == 1


# ------------------------------------------------------------ the webhook


def stream_of(twiml: str) -> tuple[str, dict[str, str]]:
    stream = ET.fromstring(twiml.encode()).find("Connect/Stream")
    assert stream is not None, twiml
    params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return stream.get("url", ""), params


async def post(
    http: aiohttp.ClientSession, url: str, params: dict[str, str], signature: str | None
) -> tuple[int, str, str]:
    headers = {} if signature is None else {"X-Twilio-Signature": signature}
    async with http.post(url, data=params, headers=headers) as resp:
        return resp.status, resp.headers["Content-Type"], await resp.text()


@pytest.mark.parametrize("query", ["", "?tenant=7&x=a+b"])
async def test_a_signed_twiml_webhook_is_answered_and_a_bad_signature_refused(
    host: Start, query: str
) -> None:
    served = await host(
        idle, telephony=["twilio"], telephony_options=TelephonyOptions(twilio_auth_token=AUTH)
    )
    url = served.base + "/twilio/twiml" + query
    async with aiohttp.ClientSession() as http:
        status, content_type, body = await post(http, url, CALL, twilio_signature(AUTH, url, CALL))
        assert (status, content_type) == (200, "application/xml; charset=utf-8")
        stream_url, params = stream_of(body)
        assert stream_url == served.ws + "/twilio"
        assert params["From"] == CALL["From"] and params["To"] == CALL["To"]
        assert len(params[TOKEN_PARAMETER]) >= 16

        bad = twilio_signature("another-token", url, CALL)
        status, content_type, body = await post(http, url, CALL, bad)
        assert (status, body) == (403, "invalid X-Twilio-Signature")
        assert content_type == "text/plain; charset=utf-8"
        tampered = {**CALL, "From": "+15555550100"}
        assert (await post(http, url, tampered, twilio_signature(AUTH, url, CALL)))[0] == 403
        assert (await post(http, url, CALL, None))[0] == 403


async def test_a_get_webhook_is_signed_over_its_url(host: Start) -> None:
    served = await host(
        idle, telephony=["twilio"], telephony_options=TelephonyOptions(twilio_auth_token=AUTH)
    )
    url = served.base + "/twilio/twiml?" + "&".join(f"{k}={v}" for k, v in CALL.items())
    url = url.replace("+", "%2B")
    async with aiohttp.ClientSession() as http:
        signed = {"X-Twilio-Signature": twilio_signature(AUTH, url, {})}
        async with http.get(url, headers=signed) as resp:
            assert resp.status == 200
            assert stream_of(await resp.text())[1]["From"] == CALL["From"]
        async with http.get(url.replace("CA", "CB"), headers=signed) as resp:
            assert resp.status == 403


async def test_the_asgi_app_takes_the_public_url_and_auth_token_directly() -> None:
    app = create_asgi_app(
        idle,
        telephony=["twilio", "plivo"],
        public_url="https://abc.example/base",
        twilio_auth_token=AUTH,
        page=False,
    )
    public = "https://abc.example/base/twilio/twiml"
    async with uvicorn_serving(app) as port, aiohttp.ClientSession() as http:
        local = f"http://127.0.0.1:{port}"
        status, _, body = await post(
            http, local + "/twilio/twiml", CALL, twilio_signature(AUTH, public, CALL)
        )
        assert status == 200 and stream_of(body)[0] == "wss://abc.example/base/twilio"
        signed_locally = twilio_signature(AUTH, local + "/twilio/twiml", CALL)
        assert (await post(http, local + "/twilio/twiml", CALL, signed_locally))[0] == 403
        status, _, body = await post(http, local + "/plivo/answer", {"CallUUID": "x"}, None)
        stream = ET.fromstring(body.encode()).find("Stream")
        assert status == 200 and stream is not None
        assert stream.text == "wss://abc.example/base/plivo"


def test_importing_rejoinder_io_does_not_import_starlette() -> None:
    import subprocess
    import sys

    code = "import sys, rejoinder.io; rejoinder.io.create_app; print('starlette' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("built", [True, False])
async def test_the_page_and_its_client_bundle_are_served_as_the_aiohttp_app_serves_them(
    monkeypatch: pytest.MonkeyPatch, built: bool
) -> None:
    """The bundle is looked for on each request: a rebuild is picked up, and a bundle
    never built is a 404 that says how to build it, never a host that fails to start."""
    from rejoinder.io import static

    monkeypatch.setattr(static, "client_bundle", lambda: b"export {};" if built else None)
    app = create_asgi_app(idle)
    async with uvicorn_serving(app) as port, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{port}"
        async with http.get(base + "/") as resp:
            assert resp.status == 200 and "page.js" in await resp.text()
        async with http.get(base + static.BUNDLE_ROUTE) as resp:
            if built:
                assert resp.status == 200 and resp.content_type == "text/javascript"
                assert await resp.text() == "export {};"
            else:
                assert resp.status == 404
                assert static.BUNDLE_MISSING in await resp.text()
