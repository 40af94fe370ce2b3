"""Phone transport CPU: server CPU per concurrent call (Twilio Media Streams), with N calls.

The server is its own process: ``rejoinder serve bench/ws_cost_agent.py --telephony twilio``
on 127.0.0.1 (a free port), the agent ``ws_cost.py`` serves (per call Silero VAD, a scripted
recognizer, the zero-latency fake model and a scripted TTS: a tone, 3 s per reply). The
calls run in this process: one ``rejoinder.testing.FakePhoneCall`` per call on
``ws://127.0.0.1:PORT/twilio``, each with its own call and stream ids, in real time. A call
sends 20 ms of base64 μ-law in a JSON ``media`` message 50 times a second, plays the
agent's audio on its simulated line in real time (after a 60 ms jitter buffer) and echoes
the server's marks as it plays past them. Where the caller says nothing the line carries
low noise (``--line noise``, the default; FakePhoneCall alone sends digital silence,
``--line silence``), so the VAD runs on non-zero audio, as on a real phone line.

- listening: the line carries the noise only; the agent never speaks.
- talking: the caller says requests spoken by Piper (cached, ``bench/_voice.py``; the
  local extra), resampled to 8 kHz by ``FakePhoneCall.say``; after each it waits
  (bounded) until the answer arrived and was played out, pauses ``--pause`` s and says the
  next one. The server decodes and resamples the caller's audio for the VAD, ends the
  turn, replies, resamples the reply to 8 kHz, encodes it and sends it with marks.

For each VAD (``--vad``: Silero, then the test kit's energy VAD: the transport path alone,
i.e. G.711, resampling, JSON, base64 and marks), each mode and each N, the server's CPU
(utime + stime of every thread, ``/proc/PID/stat``) is read over ``--seconds`` after a
``--warmup``, minus the same server with no call just before (``--idle`` s). Prints one JSON
line per run, a table and a summary next to the target: the transport path (codec +
resampling + VAD) <= 1 % of one core per call.

    python bench/phone_cost.py [--sessions 1,5,10,20] [--seconds 15] [--vad silero,energy]
    python bench/phone_cost.py --seconds 8 --sessions 1,10 --modes listening
    REJOINDER_BENCH_PROFILE=/tmp/phone.prof python bench/phone_cost.py --vad silero \\
        --sessions 10 --modes listening   # cProfile of the server's event loop thread

Everything is bounded (connecting, every wait, each run, the whole bench); only 127.0.0.1
is used; the server gets SIGTERM (then SIGKILL) and its log file is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from rejoinder.testing import FakePhoneCall
from ws_cost import AGENT, HERE, Server, free_port, load_average

RATE = 8000
CHUNK = 160  # 20 ms at 8 kHz, one media message
TICK = 0.02
TARGET_PCT = 1.0  # of one core per call: codec + resampling + VAD


# ------------------------------------------------------------------- the server


class PhoneServer(Server):
    """``rejoinder serve --telephony twilio`` in a child process (``ws_cost.Server``'s
    health polling, CPU reading and SIGTERM-then-kill stop)."""

    def __init__(self, max_sessions: int, vad: str) -> None:
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            "w+", prefix="phone_cost_server_", suffix=".log", delete=False
        )
        exe = Path(sys.executable).parent / "rejoinder"
        command = [str(exe), "serve", str(AGENT), "--port", str(self.port)]
        command += ["--max-sessions", str(max_sessions), "--drain-timeout", "2"]
        # What a session costs is measured, not whether the machine can take one more:
        # admission by load (on by default) would refuse clients past its estimate.
        command += ["--max-load", "0"]
        command += ["--telephony", "twilio"]
        env = {**os.environ, "REJOINDER_BENCH_VAD": vad}
        env.pop("TWILIO_AUTH_TOKEN", None)  # no webhook here: the media socket is open
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.base = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.base}"  # what ServedProcess.wait_up polls


# -------------------------------------------------------------------- the calls


LINE_NOISE = 30.0
"""RMS of the idle line's noise (of 32768, about -60 dBFS): Silero runs on real audio."""


class Caller:
    """One call and what it did: the counts the bench reads between two instants."""

    def __init__(self, call: FakePhoneCall) -> None:
        self.call = call
        self.turns = 0
        self.missed = 0
        self._played = 0
        self._seen = 0

    @property
    def played(self) -> int:
        """Agent samples the caller heard (kept as a running sum: ``heard`` grows)."""
        heard = self.call.heard
        for h in heard[self._seen :]:
            self._played += len(h.pcm)
        self._seen = len(heard)
        return self._played

    @property
    def sent(self) -> int:
        return self.call.media_sent

    async def _answer_heard(self, before: int, quiet: float = 0.5) -> bool:
        """The answer began arriving (within 8 s), then all of it was played and nothing
        new came for ``quiet`` s (within 20 s)."""
        call = self.call
        try:
            await call.until(lambda: call.received_samples > before, timeout=8.0)
        except TimeoutError:
            return False
        last = [call.received_samples, time.monotonic()]

        def done() -> bool:
            now = time.monotonic()
            if call.received_samples != last[0]:
                last[:] = [call.received_samples, now]
            return self.played >= call.received_samples and now - last[1] >= quiet

        try:
            await call.until(done, timeout=20.0)
        except TimeoutError:
            return False
        return True

    async def converse(
        self, clips: list[np.ndarray], rate: int, pause: float, first: float
    ) -> None:
        """Say a request, wait until its answer was heard, pause, the next one."""
        await asyncio.sleep(first)
        n = 0
        while not self.call.closed:
            before = self.call.received_samples
            await self.call.say(clips[n % len(clips)], rate)
            n += 1
            if await self._answer_heard(before):
                self.turns += 1
            else:
                self.missed += 1
            await asyncio.sleep(pause)


async def speech_clips() -> tuple[list[np.ndarray], int]:
    sys.path.insert(0, str(HERE))
    try:
        from _voice import RATE as VOICE_RATE
        from _voice import REQUESTS, clips
    except ImportError as e:  # pragma: no cover - without the local extra
        raise SystemExit(f"talking needs the local extra (Piper): {e}") from e
    return [c.pcm.astype(np.int16) for c in await clips(REQUESTS[:6])], VOICE_RATE


# --------------------------------------------------------------------- a run


async def run(
    server: PhoneServer,
    vad: str,
    mode: str,
    sessions: int,
    args: argparse.Namespace,
    speech: tuple[list[np.ndarray], int],
) -> dict[str, Any]:
    if not await server.wait_sessions(0, 20.0):
        raise RuntimeError("calls of the previous run are still live")
    await asyncio.sleep(1.0)
    c0, w0 = server.cpu()[0], time.monotonic()
    await asyncio.sleep(args.idle)
    idle_pct = 100 * (server.cpu()[0] - c0) / (time.monotonic() - w0)

    http = aiohttp.ClientSession()
    callers: list[Caller] = []
    talkers: list[asyncio.Task[None]] = []
    url = f"ws://{server.base}/twilio"
    try:
        async with asyncio.timeout(60):
            for i in range(sessions):
                ws = await http.ws_connect(url)
                call = FakePhoneCall(
                    ws,
                    call_sid=f"CA{i + 1:032x}",
                    stream_sid=f"MZ{i + 1:032x}",
                    line_noise=LINE_NOISE if args.line == "noise" else 0.0,
                )
                await call.start({"From": f"+1555{i:07d}", "To": "+15550000000"})
                callers.append(Caller(call))
                await asyncio.sleep(TICK / sessions)  # the calls' 20 ms clocks do not tick together
            if not await server.wait_sessions(sessions, 20.0):
                raise RuntimeError(f"{sessions} calls connected, not all became sessions")
        if mode == "talking":
            clips, rate = speech
            # Staggered, so the callers do not all speak in the same 20 ms.
            talkers = [
                asyncio.create_task(c.converse(clips[i % 3 :], rate, args.pause, i * 0.137))
                for i, c in enumerate(callers)
            ]
        await asyncio.sleep(args.warmup)
        load = load_average()
        sent0 = sum(c.sent for c in callers)
        played0 = sum(c.played for c in callers)
        turns0 = sum(c.turns for c in callers)
        missed0 = sum(c.missed for c in callers)
        marks0 = sum(len(c.call.marks_echoed) for c in callers)
        (c0, s0, m0), p0, w0 = server.cpu(), time.process_time(), time.monotonic()
        await asyncio.sleep(args.seconds)
        wall = time.monotonic() - w0
        c1, s1, m1 = server.cpu()
        client_pct = 100 * (time.process_time() - p0) / wall
        server_pct = 100 * (c1 - c0) / wall
        sys_pct = 100 * (s1 - s0) / wall
        loop_pct = 100 * (m1 - m0) / wall
        sent = sum(c.sent for c in callers) - sent0
        played = sum(c.played for c in callers) - played0
        turns = sum(c.turns for c in callers) - turns0
        missed = sum(c.missed for c in callers) - missed0
        marks = sum(len(c.call.marks_echoed) for c in callers) - marks0
        closed = sum(c.call.closed for c in callers)
        other = sum(len(c.call.other) for c in callers)
    finally:
        for task in talkers:
            task.cancel()
        if talkers:
            await asyncio.wait(talkers, timeout=5.0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15.0):
                await asyncio.gather(*(c.call.hang_up() for c in callers), return_exceptions=True)
        await http.close()
    per = (server_pct - idle_pct) / sessions
    return {
        "bench": "phone_cost",
        "vad": vad,
        "mode": mode,
        "sessions": sessions,
        "line": args.line,
        "seconds": round(wall, 2),
        "load_1m": round(load, 2),
        "server_cpu_core_pct": round(server_pct, 2),
        "server_sys_pct": round(sys_pct, 2),
        "server_loop_thread_pct": round(loop_pct, 2),
        "idle_server_core_pct": round(idle_pct, 2),
        "per_call_core_pct": round(per, 3),
        "target_per_call_core_pct": TARGET_PCT,
        "client_cpu_core_pct": round(client_pct, 2),
        "client_per_call_core_pct": round(client_pct / sessions, 3),
        "caller_audio_s_per_s_per_call": round(sent * TICK / wall / sessions, 3),
        "agent_audio_s_per_s_per_call": round(played / RATE / wall / sessions, 3),
        "marks_echoed_per_s_per_call": round(marks / wall / sessions, 2),
        "turns": turns,
        "unanswered": missed,
        "calls_closed_early": closed,
        "unexpected_messages": other,
    }


COLUMNS = (
    ("vad", "vad"),
    ("mode", "mode"),
    ("N", "sessions"),
    ("load 1m", "load_1m"),
    ("server %", "server_cpu_core_pct"),
    ("of it sys %", "server_sys_pct"),
    ("loop thread %", "server_loop_thread_pct"),
    ("idle %", "idle_server_core_pct"),
    ("per call %", "per_call_core_pct"),
    ("target %", "target_per_call_core_pct"),
    ("client %", "client_cpu_core_pct"),
    ("agent audio s/s", "agent_audio_s_per_s_per_call"),
    ("marks/s", "marks_echoed_per_s_per_call"),
    ("turns", "turns"),
)


def table(results: list[dict[str, Any]]) -> str:
    """The runs as a Markdown table (% of one core)."""
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for r in results:
        lines.append("| " + " | ".join(str(r[key]) for _, key in COLUMNS) + " |")
    return "\n".join(lines)


def summary(results: list[dict[str, Any]]) -> str:
    """Per VAD and mode, the per-call figure at the largest N (the least noisy) and the
    target."""
    lines = []
    for vad in dict.fromkeys(r["vad"] for r in results):
        for mode in dict.fromkeys(r["mode"] for r in results if r["vad"] == vad):
            runs = [r for r in results if r["vad"] == vad and r["mode"] == mode]
            top = max(runs, key=lambda r: r["sessions"])
            per = top["per_call_core_pct"]
            verdict = "meets" if per <= TARGET_PCT else "misses"
            lines.append(
                f"{vad:>6} {mode:>9}: {per:.3f} % of one core per call at N={top['sessions']}"
                f" (target <= {TARGET_PCT} %: {verdict}; load 1m {top['load_1m']})"
            )
    return "\n".join(lines)


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    counts = [int(n) for n in args.sessions.split(",")]
    modes = args.modes.split(",")
    vads = args.vad.split(",")
    speech = await speech_clips() if "talking" in modes else ([], 0)
    results: list[dict[str, Any]] = []
    for vad in vads:
        server = PhoneServer(max(counts) + 1, vad)
        try:
            await server.wait_up()
            for mode in modes:
                for n in counts:
                    result = await run(server, vad, mode, n, args, speech)
                    print(json.dumps(result), flush=True)
                    results.append(result)
        finally:
            server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,5,10,20", help="call counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured wall time per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--idle", type=float, default=3.0, help="idle-server baseline per run")
    parser.add_argument("--modes", default="listening,talking")
    parser.add_argument(
        "--vad",
        default="silero,energy",
        help="comma-separated, each its own server: silero, energy (the path without Silero)",
    )
    parser.add_argument(
        "--line", choices=("noise", "silence"), default="noise", help="what an idle line carries"
    )
    parser.add_argument("--pause", type=float, default=0.5, help="talking: s between turns")
    args = parser.parse_args()
    if not set(args.vad.split(",")) <= {"silero", "energy"}:
        parser.error("--vad takes silero and/or energy")
    if not set(args.modes.split(",")) <= {"listening", "talking"}:
        parser.error("--modes takes listening and/or talking")
    runs = len(args.vad.split(",")) * len(args.modes.split(",")) * len(args.sessions.split(","))
    budget = runs * (args.seconds + args.warmup + args.idle + 60) + 90 * len(args.vad.split(","))
    results = asyncio.run(asyncio.wait_for(bench(args), budget))
    print(table(results), file=sys.stderr)
    print(summary(results), file=sys.stderr)


if __name__ == "__main__":
    main()
