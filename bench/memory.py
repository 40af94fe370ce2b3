"""Memory per idle session: RSS and tracemalloc growth over N started sessions, each with
a started agent and no turns.

    python bench/memory.py [--sessions 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import tracemalloc

import rejoinder as rj
from _fakes import InstantLLM, InstantSink

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Current resident set size, from /proc/self/statm (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


async def start_session(llm: rj.LLM) -> rj.AgentSession[None]:
    session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
    session.output.transcription = InstantSink()
    await session.start(rj.Agent(instructions="You are a helpful assistant."))
    return session


async def settle() -> None:
    # Let on_enter hooks and other start-up tasks run to completion, then collect.
    for _ in range(5):
        await asyncio.sleep(0)
    gc.collect()


async def bench(n: int) -> dict[str, object]:
    llm = InstantLLM()
    # Warm-up: first-use allocations (imports, caches, interned strings) are not per session.
    warm = await start_session(llm)
    await warm.generate_reply(user_input="hi")
    await settle()

    rss0 = rss_bytes()
    sessions = [await start_session(llm) for _ in range(n)]
    await settle()
    rss1 = rss_bytes()

    # Second pass under tracemalloc (it slows allocation and adds its own overhead to RSS,
    # so RSS is measured on the untraced pass above).
    tracemalloc.start()
    await settle()
    traced_a, _ = tracemalloc.get_traced_memory()
    traced_sessions = [await start_session(llm) for _ in range(n)]
    await settle()
    traced_b, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    await asyncio.gather(*(s.aclose() for s in (*sessions, *traced_sessions, warm)))
    return {
        "bench": "memory",
        "sessions": n,
        "rss_kib_per_session": round((rss1 - rss0) / n / 1024, 2),
        "tracemalloc_kib_per_session": round((traced_b - traced_a) / n / 1024, 2),
        "tracemalloc_bytes_per_session": round((traced_b - traced_a) / n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.sessions)), separators=(",", ":")))


if __name__ == "__main__":
    main()
