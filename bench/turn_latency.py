"""Turn latency: time from ``generate_reply`` to the first delta at the sink, and to the
awaited handle resolving, for one text-only session on the real clock.

    python bench/turn_latency.py [--turns 300] [--warmup 30]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import time

import rejoinder as rj
from _fakes import InstantLLM, InstantSink, clear_context, summary_ms


async def bench(turns: int, warmup: int) -> dict[str, object]:
    session: rj.AgentSession[None] = rj.AgentSession(llm=InstantLLM(), user_away_timeout=None)
    sink = InstantSink()
    session.output.transcription = sink
    await session.start(rj.Agent(instructions="You are a helpful assistant."))
    first_output: list[float] = []
    turn_done: list[float] = []
    try:
        for i in range(warmup + turns):
            # Outside the timed region: empty the agent's context and the session history,
            # so turn 330 sees the same context size as turn 1 (otherwise the context, and
            # the copy of it each reply builds, would grow without bound and skew results).
            clear_context(session)
            sink.reset()
            t0 = time.perf_counter()
            handle = session.generate_reply(user_input="hi")
            await handle
            t1 = time.perf_counter()
            if sink.first_delta_at is None:
                raise RuntimeError(f"turn {i} produced no output")
            if i >= warmup:
                first_output.append(sink.first_delta_at - t0)
                turn_done.append(t1 - t0)
    finally:
        await session.aclose()
    return {
        "bench": "turn_latency",
        "turns": turns,
        "first_output_ms": summary_ms(first_output),
        "turn_done_ms": summary_ms(turn_done),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    gc.collect()
    print(json.dumps(asyncio.run(bench(args.turns, args.warmup)), separators=(",", ":")))


if __name__ == "__main__":
    main()
