"""Framework overhead as a ratio: rejoinder's text turns against a plain-asyncio reference
doing the least a turn must do, in the same process, in alternating rounds.

    python bench/overhead_ratio.py [--sessions 50] [--seconds 2] [--rounds 5]

A machine's speed moves both figures alike (a slower or busier machine slows the
reference too), so the ratio says what the framework costs over the least possible work
even where absolute turns per second cannot be compared between machines. A change that
makes the ratio grow gave speed back; say so when it does.

The reference turn is what any runtime must do for one text reply, written directly on
asyncio: a task per turn, the model's 12 chunks read from an async generator, each handed
to an async text sink, the reply joined and appended to a history, and a future the
caller awaits resolved. The rejoinder turn is ``await session.generate_reply(...)`` with
the zero-latency ``InstantLLM`` and ``InstantSink`` (bench/_fakes.py), the timeline on as
always. Both run ``--sessions`` loops of back-to-back turns for ``--seconds``, one after
the other, ``--rounds`` times; printed: turns per second and CPU ms per turn of each (the
median of the rounds) and the ratios, reference over rejoinder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import rejoinder as rj
from _fakes import CHUNKS, InstantLLM, InstantSink, clear_context

Turn = Callable[[], Awaitable[None]]


class _ReferenceConversation:
    """The least work of a text turn, on asyncio alone (see the module's docstring)."""

    def __init__(self) -> None:
        self.history: list[dict[str, str]] = []
        self.sink: list[str] = []

    async def _model(self) -> AsyncIterator[str]:
        for chunk in CHUNKS:
            yield chunk

    async def _capture(self, text: str) -> None:
        self.sink.append(text)

    async def _reply(self, done: asyncio.Future[None]) -> None:
        parts: list[str] = []
        async for delta in self._model():
            parts.append(delta)
            await self._capture(delta)
        self.history.append({"role": "assistant", "content": "".join(parts)})
        done.set_result(None)

    async def turn(self) -> None:
        self.history.append({"role": "user", "content": "hi"})
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._reply(done))
        await done
        await task
        # As the rejoinder loop clears its context: every turn sees the same one.
        self.history.clear()
        self.sink.clear()


async def _loops(turns: list[Turn], seconds: float) -> tuple[int, float, float]:
    """Run every ``turn`` back to back for ``seconds``: (turns done, wall s, CPU s)."""
    stop = asyncio.Event()

    async def one(turn: Turn) -> int:
        n = 0
        while not stop.is_set():
            await turn()
            n += 1
        return n

    loop = asyncio.get_running_loop()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    loop.call_later(seconds, stop.set)
    counts = await asyncio.gather(*(one(t) for t in turns))
    return sum(counts), time.perf_counter() - wall0, time.process_time() - cpu0


async def _rejoinder_turns(n: int) -> tuple[list[Turn], list[rj.AgentSession[None]]]:
    llm = InstantLLM()
    sessions: list[rj.AgentSession[None]] = []
    for _ in range(n):
        session: rj.AgentSession[None] = rj.AgentSession(llm=llm, user_away_timeout=None)
        session.output.transcription = InstantSink()
        await session.start(rj.Agent(instructions="You are a helpful assistant."))
        sessions.append(session)

    def turn_of(session: rj.AgentSession[None]) -> Turn:
        async def turn() -> None:
            clear_context(session)
            await session.generate_reply(user_input="hi")

        return turn

    return [turn_of(s) for s in sessions], sessions


async def bench(n_sessions: int, seconds: float, rounds: int) -> dict[str, object]:
    reference = [_ReferenceConversation().turn for _ in range(n_sessions)]
    framework, sessions = await _rejoinder_turns(n_sessions)
    await _loops(reference, 0.2)  # warm-up, not counted
    await _loops(framework, 0.2)
    rows: dict[str, list[tuple[float, float]]] = {"reference": [], "rejoinder": []}
    for _ in range(rounds):
        for name, turns in (("reference", reference), ("rejoinder", framework)):
            done, wall, cpu = await _loops(turns, seconds)
            rows[name].append((done / wall, cpu / done * 1000))
    await asyncio.gather(*(s.aclose() for s in sessions))

    def median(name: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[name])

    ref_tps, fw_tps = median("reference", 0), median("rejoinder", 0)
    ref_cpu, fw_cpu = median("reference", 1), median("rejoinder", 1)
    return {
        "bench": "overhead_ratio",
        "sessions": n_sessions,
        "rounds": rounds,
        "reference_turns_per_s": round(ref_tps, 1),
        "rejoinder_turns_per_s": round(fw_tps, 1),
        "reference_cpu_ms_per_turn": round(ref_cpu, 4),
        "rejoinder_cpu_ms_per_turn": round(fw_cpu, 4),
        "slowdown": round(ref_tps / fw_tps, 2),
        "cpu_ratio": round(fw_cpu / ref_cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = asyncio.run(bench(args.sessions, args.seconds, args.rounds))
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
