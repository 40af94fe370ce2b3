"""The container image, built and run.

Without Docker (these machines have none): container/check_image.py builds the image's
layout from the Dockerfile and runs it as PID 1 of its own namespaces, as uid 10001 (see
its docstring for what that checks and what it cannot). Where Docker or Podman works,
the real image is built, run, health-checked, talked to and stopped instead.

Slow: a pip install of the offline stack into a new venv, an npm build, the models and
a served session (about two minutes on 2 cores), so marked ``container`` (and
``alone``: its CPU would change what the models of the real-time tests beside it hear).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.container, pytest.mark.alone, pytest.mark.looptime(False)]

CHECKS = [
    "the Dockerfile builds",
    "the build context leaves out .venv, node_modules, tests, caches and .env",
    "the offline models load and work",
    "the HEALTHCHECK fails when nothing answers",
    "the HEALTHCHECK passes once the server listens",
    "GET /healthz answers 200 ok",
    "the page and the SDK bundle are served",
    "a WebSocket session is greeted and answers a turn",
    "on SIGTERM /healthz says 503 draining and new sessions are refused",
    "the live session is closed (1000) when the 3 s drain ends",
    "after SIGTERM the server closes what is left and exits 0",
    "the models and the server write nothing but to /tmp",
    "native libraries the base image must provide are in python:3.11-slim-bookworm",
    "compose.yaml, turnserver.conf and env.example agree with the image",
]


def container_engine() -> str | None:
    """docker or podman, when one of them can actually build and run here."""
    for engine in ("docker", "podman"):
        if shutil.which(engine) is None:
            continue
        info = subprocess.run([engine, "info"], capture_output=True, timeout=60)
        if info.returncode == 0:
            return engine
    return None


@pytest.mark.timeout(900)
def test_the_image_layout_builds_serves_and_drains(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("the image's SDK stage needs node and npm (make node)")
    report_file = tmp_path / "report.json"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(ROOT / "container/check_image.py"), "--json", str(report_file)],
        capture_output=True,
        text=True,
        timeout=850,
    )
    took = time.monotonic() - started
    print(result.stdout[-6000:], f"\ncheck_image.py took {took:.0f} s")
    assert report_file.exists(), result.stderr[-3000:]
    report = json.loads(report_file.read_text())
    statuses = {check["name"]: check for check in report["checks"]}
    for name in CHECKS:
        found = [check for title, check in statuses.items() if title.startswith(name)]
        assert found, f"check_image.py did not run {name!r}: {result.stdout[-3000:]}"
        assert found[0]["status"] == "pass", found[0]
    assert not [c for c in report["checks"] if c["status"] == "fail"]
    # compose's TURN wiring runs for real once `serve` has the ICE options (else pending).
    ice = [c for t, c in statuses.items() if t.startswith("compose's agent hands browsers TURN")]
    pending = [c for t, c in statuses.items() if t.startswith("compose.yaml's ICE flags")]
    assert (ice and ice[0]["status"] == "pass") or (pending and pending[0]["status"] == "pending")
    assert result.returncode == 0
    if report["mode"].startswith("namespaces"):  # root here: the image's user and PID 1
        assert report["session"]["pid1"] is True
        assert any(t.startswith("every file is readable by uid 10001") for t in statuses)
    assert 2.5 <= report["session"]["closed_after"] <= 8
    assert 300 < report["sizes"]["venv_mb"] < 2000


@pytest.mark.timeout(1800)
async def test_the_real_image_builds_serves_and_drains(tmp_path: Path) -> None:
    engine = container_engine()
    if engine is None:
        pytest.skip("no working docker or podman here: container/check_image.py checks the layout")
    import aiohttp

    tag = "rejoinder-agent:test"
    name = f"rejoinder-test-{int(time.time())}"

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([engine, *args], capture_output=True, text=True, timeout=timeout)

    built = run("build", "-t", tag, str(ROOT), timeout=1500)
    assert built.returncode == 0, built.stderr[-3000:]
    started = run(
        "run", "-d", "--name", name, "-p", "127.0.0.1::8000", tag,
        "examples/voice_agent.py", "--drain-timeout", "3",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        await _wait_healthy(engine, name, run)
        port = run("port", name, "8000/tcp").stdout.strip().splitlines()[0].rsplit(":", 1)[1]
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200
            ws = await http.ws_connect(f"{base.replace('http', 'ws', 1)}/ws")
            await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
            greeted = False
            async with asyncio.timeout(90):
                while not greeted:
                    msg = await ws.receive()
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        m = json.loads(msg.data)
                        greeted = m["type"] == "transcript" and m["role"] == "agent" and m["final"]
            stopping = asyncio.create_task(asyncio.to_thread(run, "stop", "-t", "30", name))
            async with asyncio.timeout(20):
                while (msg := await ws.receive()).type not in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSED,
                ):
                    pass
            assert ws.close_code == 1000
            assert (await stopping).returncode == 0
        state = json.loads(run("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0
        assert run("logs", name).stdout.strip().splitlines()[-1] == "stopped"
    finally:
        run("rm", "-f", name)


async def _wait_healthy(
    engine: str, name: str, run: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    async with asyncio.timeout(120):
        while True:
            if engine == "podman":  # podman runs health checks from systemd timers: by hand
                healthy = run("healthcheck", "run", name).returncode == 0
            else:
                inspect = run("inspect", "--format", "{{.State.Health.Status}}", name)
                healthy = inspect.stdout.strip() == "healthy"
            if healthy:
                return
            await asyncio.sleep(2)
