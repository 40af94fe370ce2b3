"""Time to the first spoken greeting, session after session: do sessions pay for loading
the models again?

    python bench/first_audio.py [--sessions 10] [--agent examples/voice_agent.py]

Starts ``rejoinder serve AGENT`` on 127.0.0.1 (the demo agent by default: its ``prewarm``
loads the shared Whisper and Piper before the server listens; Silero and Smart Turn have
one engine per process), then opens ``--sessions`` sessions one after another over the
client protocol: for each, the seconds from sending ``start`` to the first agent audio
frame (the greeting), and from process start to ``/healthz`` answering. Prints one JSON
line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


async def serve(agent: str) -> tuple[asyncio.subprocess.Process, int, float]:
    began = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv" / "bin" / "rejoinder"),
        "serve",
        agent,
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        cwd=ROOT,
    )
    assert process.stdout is not None
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 180)).decode()
        if not line:
            raise RuntimeError("rejoinder serve exited")
        if match := re.search(r"health: +http://127\.0\.0\.1:(\d+)/healthz", line):
            return process, int(match.group(1)), time.perf_counter() - began


async def first_audio(http: aiohttp.ClientSession, port: int) -> float:
    async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
        sent = time.perf_counter()
        await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
        async with asyncio.timeout(60):
            async for message in ws:
                if message.type == aiohttp.WSMsgType.BINARY:
                    return time.perf_counter() - sent
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
        raise RuntimeError("no greeting audio")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--agent", default="examples/voice_agent.py")
    args = parser.parse_args()
    process, port, ready = await serve(args.agent)
    try:
        async with aiohttp.ClientSession() as http:
            seconds = [await first_audio(http, port) for _ in range(args.sessions)]
    finally:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 60)
    print(
        json.dumps(
            {
                "bench": "first_audio",
                "agent": args.agent,
                "server_ready_s": round(ready, 2),
                "first_s": round(seconds[0], 3),
                "tenth_s": round(seconds[min(9, len(seconds) - 1)], 3),
                "all_s": [round(x, 3) for x in seconds],
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
