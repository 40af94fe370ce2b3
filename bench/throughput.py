"""Throughput: many concurrent text-only sessions each running turns back to back on the
real clock; reports total turns, turns per second and CPU seconds per turn.

    python bench/throughput.py [--sessions 50] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import rejoinder as rj
from _fakes import InstantLLM, InstantSink, clear_context


async def run_session(session: rj.AgentSession[None], stop: asyncio.Event) -> int:
    turns = 0
    while not stop.is_set():
        # Keep the context from growing over the run (see turn_latency.py).
        clear_context(session)
        await session.generate_reply(user_input="hi")
        turns += 1
    return turns


async def bench(n_sessions: int, seconds: float) -> dict[str, object]:
    llm = InstantLLM()  # stateless, so one instance serves every session
    sessions: list[rj.AgentSession[None]] = []
    for _ in range(n_sessions):
        session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
        session.output.transcription = InstantSink()
        await session.start(rj.Agent(instructions="You are a helpful assistant."))
        sessions.append(session)
    # One warm-up turn per session, not counted.
    await asyncio.gather(*(s.generate_reply(user_input="hi") for s in sessions))
    for s in sessions:
        clear_context(s)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    loop.call_later(seconds, stop.set)
    counts = await asyncio.gather(*(run_session(s, stop) for s in sessions))
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    await asyncio.gather(*(s.aclose() for s in sessions))

    total = sum(counts)
    return {
        "bench": "throughput",
        "sessions": n_sessions,
        "seconds": round(wall, 3),
        "turns": total,
        "turns_per_s": round(total / wall, 1),
        "cpu_ms_per_turn": round(cpu / total * 1000, 4) if total else None,
        "cpu_s_per_turn": cpu / total if total else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.sessions, args.seconds)), separators=(",", ":")))


if __name__ == "__main__":
    main()
