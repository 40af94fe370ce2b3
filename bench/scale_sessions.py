"""Sessions per replica: voice latency of one server process as its sessions grow.

    python bench/scale_sessions.py [--sessions 1,2,3,4,6,8] [--questions 4] [--cycle 8]
    python bench/scale_sessions.py --admission [--offer N]

``--admission``: admission by load. One session alone first (the baseline), then, on a
fresh server, ``--offer`` sessions (default: twice the capacity its /healthz advertises
before any session) arriving over one cycle: how many were admitted and refused (HTTP
503), and the admitted ones' latency against the baseline (target: p90 within 20 %).

For each count N, a ``rejoinder serve`` process (one replica's worth: the offline demo
agent of ``tests/scale/agent.py``: Silero VAD per session, one shared Whisper tiny.en and
Piper, the rule-based demo LLM) is started on 127.0.0.1, and N protocol clients
(``scale_client.VoiceClient``, in this process) open sessions and each speak
``--questions`` weather questions, one every ``--cycle`` seconds, their starts spread
evenly over the cycle (so questions overlap as calls on one replica would, not all at
once). Latency: the end of the question's speech to the first agent audio the client got.
Reports the median and p90 per N and the largest N whose median stays within 10 % of
N = 1 (on this machine: 2 cores, the server and the clients sharing them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from scale_client import VoiceClient, question_clips

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "tests" / "scale" / "agent.py"


async def _start_server(port: int) -> asyncio.subprocess.Process:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    process = await asyncio.create_subprocess_exec(
        str(ROOT / ".venv" / "bin" / "rejoinder"),
        "serve",
        str(AGENT),
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), 120)
        if not line:
            raise RuntimeError("rejoinder serve exited")
        if b"SIGTERM" in line:
            return process


async def _session(
    http: aiohttp.ClientSession,
    url: str,
    index: int,
    offset: float,
    questions: int,
    cycle: float,
    spoken: list,
) -> list[float]:
    await asyncio.sleep(offset)
    client = VoiceClient(url, name=str(index))
    try:
        await client.open(http)
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status != 503:
            raise
        REFUSED.append(index)  # the server is full and says so
        return []
    latencies = []
    try:
        start = time.perf_counter()
        for k in range(questions):
            clip, word = spoken[(index + k) % len(spoken)]
            answer = await client.ask(clip, word)
            latencies.append(answer.latency)
            next_at = start + (k + 1) * cycle
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    finally:
        await client.close()
    return latencies


def _busy_seconds() -> float:
    """CPU seconds every process on the machine has used (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _process_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


REFUSED: list[int] = []
"""Sessions refused with 503 (admission by load)."""

OTHERS: dict[int, float] = {}
"""Per N: CPU seconds used by processes other than this one and its server (a busy
machine makes the figures worse than the stack is)."""


async def measure(n: int, questions: int, cycle: float, port: int, spoken: list) -> list[float]:
    server = await _start_server(port)
    busy0, ours0 = _busy_seconds(), _process_seconds(os.getpid())
    server0 = _process_seconds(server.pid)
    started = time.perf_counter()
    try:
        async with aiohttp.ClientSession() as http:
            url = f"ws://127.0.0.1:{port}/ws"
            runs = [
                _session(http, url, i, cycle * i / n, questions, cycle, spoken) for i in range(n)
            ]
            results = await asyncio.gather(*runs)
        ours = _process_seconds(os.getpid()) - ours0 + _process_seconds(server.pid) - server0
        OTHERS[n] = (_busy_seconds() - busy0 - ours) / (time.perf_counter() - started)
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 60)
    return [latency for result in results for latency in result[1:]]  # first: warm-up


async def _capacity(port: int) -> int:
    server = await _start_server(port)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as response,
        ):
            return int((await response.json())["capacity"])
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 60)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


async def admission(args: argparse.Namespace, spoken: list) -> None:
    alone = await measure(1, args.questions, args.cycle, args.port, spoken)
    capacity = await _capacity(args.port)
    offer = args.offer or 2 * capacity
    REFUSED.clear()
    admitted = await measure(offer, args.questions, args.cycle, args.port, spoken)
    row = {
        "bench": "scale_admission",
        "cpus": os.cpu_count(),
        "advertised_capacity": capacity,
        "offered": offer,
        "refused": len(REFUSED),
        "admitted": offer - len(REFUSED),
        "alone_median_s": round(statistics.median(alone), 3),
        "alone_p90_s": round(_p90(alone), 3),
        "admitted_median_s": round(statistics.median(admitted), 3),
        "admitted_p90_s": round(_p90(admitted), 3),
        "p90_vs_alone": round(_p90(admitted) / _p90(alone) - 1.0, 3),
        "other_processes_cpus": round(OTHERS.get(offer, 0.0), 2),
    }
    print(json.dumps(row, separators=(",", ":")))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", default="1,2,3,4,6,8")
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--cycle", type=float, default=8.0)
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--admission", action="store_true")
    parser.add_argument("--offer", type=int, default=0)
    args = parser.parse_args()
    spoken = await question_clips()
    if args.admission:
        await admission(args, spoken)
        return
    rows = []
    for n in (int(x) for x in args.sessions.split(",")):
        latencies = sorted(await measure(n, args.questions, args.cycle, args.port, spoken))
        p90 = latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))]
        row = {
            "sessions": n,
            "turns": len(latencies),
            "median_s": round(statistics.median(latencies), 3),
            "p90_s": round(p90, 3),
            "all_s": [round(x, 2) for x in latencies],
            "other_processes_cpus": round(OTHERS.get(n, 0.0), 2),
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    base = rows[0]["median_s"]
    within = [rows[0]["sessions"]]
    for row in rows[1:]:
        if row["median_s"] > base * 1.10:
            break
        within.append(row["sessions"])
    print(
        json.dumps(
            {
                "bench": "scale_sessions",
                "cpus": os.cpu_count(),
                "rows": rows,
                "max_sessions_within_10pct_of_one": max(within),
            },
            separators=(",", ":"),
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
