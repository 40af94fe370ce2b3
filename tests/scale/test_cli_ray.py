"""``rejoinder serve --ray`` end to end (``make test-scale``): the command starts a local
Ray cluster, deploys the demo agent, answers a spoken question through the Serve proxy,
serves ``/healthz`` and ``/metrics`` labelled by replica, and on SIGTERM drains (the live
session is closed with 1000 once ``--drain-timeout`` is up) and exits 0. Every process
it started is stopped by its id at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from scale_client import VoiceClient, question_clips  # noqa: E402

from .test_ray_serve import _alive, _descendants  # noqa: E402

pytest.importorskip("ray.serve")

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(200)]

PORT = 8766
AGENT = str(Path(__file__).with_name("agent.py"))


async def _wait_line(stream: asyncio.StreamReader, text: str, within: float) -> list[str]:
    seen: list[str] = []
    deadline = time.perf_counter() + within
    while time.perf_counter() < deadline:
        try:
            line = await asyncio.wait_for(stream.readline(), deadline - time.perf_counter())
        except TimeoutError:
            break
        if not line:
            break
        seen.append(line.decode(errors="replace").rstrip())
        if text in seen[-1]:
            return seen
    raise AssertionError(f"no {text!r} in the output: {seen}")


async def test_serve_ray_command(tmp_path: Path) -> None:
    questions = await question_clips()
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    command = [
        str(ROOT / ".venv" / "bin" / "rejoinder"),
        "serve",
        "--ray",
        AGENT,
        "--port",
        str(PORT),
        "--sessions-per-replica",
        "2",
        "--max-replicas",
        "1",
        "--drain-timeout",
        "4",
    ]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    started: set[int] = set()
    try:
        assert process.stdout is not None
        await _wait_line(process.stdout, "SIGTERM or Ctrl-C drains", 120)
        started |= _descendants({process.pid})
        url = f"http://127.0.0.1:{PORT}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/healthz") as response:
                assert response.status == 200
                health = await response.json()
                assert health["status"] == "ok" and health["max_sessions"] == 2
            client = VoiceClient(f"ws://127.0.0.1:{PORT}/ws", name="cli")
            await client.open(http)
            answer = await client.ask(*questions[0])
            assert "sunny" in answer.text.lower()
            async with http.get(f"{url}/metrics") as response:
                text = await response.text()
            live = [
                line for line in text.splitlines() if line.startswith("rejoinder_sessions_live")
            ]
            assert live and 'replica="' in live[0] and live[0].endswith(" 1.0"), live
            started |= _descendants({process.pid})

            stopping = time.perf_counter()
            process.send_signal(signal.SIGTERM)
            assert await client.wait_closed(30)
            assert client.close_code == 1000
            closed_after = time.perf_counter() - stopping
            assert 3.0 <= closed_after <= 15.0, closed_after
            await client.close()
        await _wait_line(process.stdout, "stopped", 60)
        assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        await asyncio.sleep(1.0)
        for pid in sorted(started - {os.getpid()}):
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
