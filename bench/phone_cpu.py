"""Phone calls, server CPU per call: Twilio media streams against SIP/RTP, N calls at once.

The server is its own process, as a user runs it: ``rejoinder serve bench/ws_cost_agent.py
--telephony twilio --sip 127.0.0.1:PORT --max-load 0`` (admission by load off: the cost is
measured, not whether the machine takes one more), pinned to one core (``--server-cpu``,
``taskset``); the callers run in this process, pinned to the other (``--client-cpu``).
The agent (``ws_cost_agent.py``) is cheap and deterministic except for the VAD: a
scripted recognizer, the zero-latency fake model, a scripted TTS (a quiet tone at 24 kHz,
3 s per reply, produced at once); the VAD is the test kit's energy VAD
(``rejoinder.testing.ScriptedVAD``: the transport alone) or Silero (``SileroVAD()``, one
per call), each its own server.

A call (``_phone_callers.py``), on either path: 20 ms of μ-law every 20 ms in real time
(a JSON ``media`` message over the WebSocket, or a PCMU RTP packet after INVITE/200/ACK),
low line noise between phrases; it says a request spoken by Piper (cached by
``_voice.py``, resampled to 8 kHz), waits until the agent's answer came and was played
out (60 ms jitter buffer, marks echoed as the playout passes them), pauses ``--pause`` s,
says the next one: a phrase every 6-7 s. Calls start their clocks and conversations
spread over the 20 ms tick and the conversation's cycle.

For each VAD, path and N (``--calls``): the idle server's CPU over ``--idle`` s, then the
N calls, ``--warmup`` s, then ``--seconds`` s measured: the server's CPU (utime + stime
of every thread, ``/proc/PID/stat``) above the idle server, per call and in total as %
of one core; the event loop's thread alone; the callers' process; and what the callers
heard: answers, answer delay (end of the phrase to the first agent audio: the VAD's
silence and the turn's end included), the latest packet of each answer against the
answer's own schedule (the jitter buffer a phone would need), and the gaps a phone with
60 ms of buffer would have played. Also the time the server was runnable but waited for
its core (``/proc/PID/task/*/schedstat``): other processes on the pinned core disturb
every figure, so a run where it passes ``--disturbed`` % of the wall time is repeated
(``--retries``) and the last attempt kept. Prints one JSON line per run, then a table.

    python bench/phone_cpu.py [--calls 1,10,50] [--vad energy,silero] [--paths twilio,sip]
    python bench/phone_cpu.py --calls 10 --vad energy --seconds 10   # a quick look

Everything is bounded; only 127.0.0.1 is used; the server gets SIGTERM (then SIGKILL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from _phone_callers import Caller, SipCaller, TwilioCaller, percentile, phrase_chunks
from ws_cost import AGENT, HERE, Server, free_port, load_average

TICK = 0.02


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def machine() -> str:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{platform.node()}: {os.cpu_count()} cores, {model}, Python {platform.python_version()}"


class PhoneServer(Server):
    """``rejoinder serve --telephony twilio --sip`` in a child process, optionally pinned
    (``ws_cost.Server``'s health polling, CPU reading and stop)."""

    def __init__(self, max_sessions: int, vad: str, cpu: str | None) -> None:
        from _served import ServedProcess

        port = free_port()
        self.sip_port = free_udp_port()
        exe = Path(sys.executable).parent / "rejoinder"
        command = [str(exe), "serve", str(AGENT), "--port", str(port)]
        command += ["--max-sessions", str(max_sessions), "--drain-timeout", "2", "--max-load", "0"]
        command += ["--telephony", "twilio", "--sip", f"127.0.0.1:{self.sip_port}"]
        if cpu is not None and shutil.which("taskset"):
            command = ["taskset", "-c", cpu, *command]  # taskset execs: the pid is the server's
        env = {**os.environ, "REJOINDER_BENCH_VAD": vad}
        env.pop("TWILIO_AUTH_TOKEN", None)  # no webhook here: the media socket is open
        ServedProcess.__init__(self, command, port, log_prefix="phone_cpu_server_", env=env)


def run_queue_wait(pid: int) -> float:
    """Seconds the process's threads have waited for a CPU while runnable (the second
    field of ``/proc/PID/task/TID/schedstat``): where it grows, something else (another
    process on the pinned core) held the server back and its figures are disturbed."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[1])
    return total / 1e9


async def phrases() -> list[list[bytes]]:
    sys.path.insert(0, str(HERE))
    from _voice import RATE, REQUESTS, clips

    # Cut at the end of speech (Piper leaves a few hundred ms of near-silence): the answer
    # delay then runs from the last spoken word; line noise follows, as on a phone.
    spoken = await clips(REQUESTS[:6])
    return [phrase_chunks(c.pcm[: round(c.speech_end * RATE)], RATE) for c in spoken]


def sums(callers: list[Caller]) -> dict[str, Any]:
    """Counters and the ear's lists, to be subtracted (window = after - before)."""
    ears = [c.ear for c in callers]
    return {
        "sent": sum(c.sent for c in callers),
        "samples": sum(e.samples for e in ears),
        "turns": sum(c.turns for c in callers),
        "unanswered": sum(c.unanswered for c in callers),
        "delays": [len(e.answer_delays) for e in ears],
        "lateness": [len(e.lateness) for e in ears],
        "gaps": [len(e.gaps) for e in ears],
    }


async def run(
    server: PhoneServer,
    vad: str,
    path: str,
    n: int,
    args: argparse.Namespace,
    talk: list[list[bytes]],
) -> dict[str, Any]:
    if not await server.wait_sessions(0, 30.0):
        raise RuntimeError("calls of the previous run are still live")
    await asyncio.sleep(1.0)
    c0, w0 = server.cpu()[0], time.monotonic()
    await asyncio.sleep(args.idle)
    idle_pct = 100 * (server.cpu()[0] - c0) / (time.monotonic() - w0)

    http = aiohttp.ClientSession()
    callers: list[Caller] = []
    talkers: list[asyncio.Task[None]] = []
    refused = 0
    answer_s: list[float] = []
    try:
        async with asyncio.timeout(90):
            for i in range(n):
                phase = i * TICK / n
                caller: Caller
                if path == "twilio":
                    caller = TwilioCaller(i, phase, http, f"ws://{server.base}/twilio")
                else:
                    caller = SipCaller(i, phase, "127.0.0.1", server.sip_port)
                try:
                    await caller.start()
                except (ConnectionError, aiohttp.ClientError, TimeoutError) as e:
                    refused += 1
                    print(f"call {i} not connected: {e!r}", file=sys.stderr)
                    continue
                if isinstance(caller, SipCaller) and caller.answered_after is not None:
                    answer_s.append(caller.answered_after)
                callers.append(caller)
                await asyncio.sleep(0.05)  # calls arrive one after another, not in one burst
            if not await server.wait_sessions(len(callers), 30.0):
                raise RuntimeError(f"{len(callers)} calls connected, not all became sessions")
        cycle = 6.5
        talkers = [
            asyncio.create_task(
                c.converse(talk[i % len(talk) :] + talk[: i % len(talk)], args.pause, i * cycle / n)
            )
            for i, c in enumerate(callers)
        ]
        await asyncio.sleep(args.warmup + cycle)
        load = load_average()
        before = sums(callers)
        (s0, sys0, m0), p0, w0 = server.cpu(), time.process_time(), time.monotonic()
        q0 = run_queue_wait(server.proc.pid)
        await asyncio.sleep(args.seconds)
        wall = time.monotonic() - w0
        s1, sys1, m1 = server.cpu()
        queued_pct = 100 * (run_queue_wait(server.proc.pid) - q0) / wall
        client_pct = 100 * (time.process_time() - p0) / wall
        after = sums(callers)
        load_after = load_average()
        delays = [
            d
            for c, k in zip(callers, before["delays"], strict=True)
            for d in c.ear.answer_delays[k:]
        ]
        lateness = [
            x for c, k in zip(callers, before["lateness"], strict=True) for x in c.ear.lateness[k:]
        ]
        gaps = [g for c, k in zip(callers, before["gaps"], strict=True) for g in c.ear.gaps[k:]]
        send_lag = max((c.send_lag_max for c in callers), default=0.0)
        errors = sorted({e for c in callers for e in c.errors})
        closed = sum(c.closed for c in callers)
    finally:
        for task in talkers:
            task.cancel()
        if talkers:
            await asyncio.wait(talkers, timeout=5.0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30.0):
                await asyncio.gather(*(c.hang_up() for c in callers), return_exceptions=True)
        await http.close()
    server_pct = 100 * (s1 - s0) / wall
    live = len(callers)
    return {
        "bench": "phone_cpu",
        "vad": vad,
        "path": path,
        "calls": n,
        "connected": live,
        "refused": refused,
        "seconds": round(wall, 2),
        "load_1m": round(load, 2),
        "load_1m_after": round(load_after, 2),
        "idle_server_core_pct": round(idle_pct, 2),
        "server_core_pct": round(server_pct, 2),
        "server_sys_pct": round(100 * (sys1 - sys0) / wall, 2),
        "server_loop_thread_pct": round(100 * (m1 - m0) / wall, 2),
        "server_waited_for_cpu_pct": round(queued_pct, 2),
        "per_call_core_pct": round((server_pct - idle_pct) / max(live, 1), 3),
        "client_core_pct": round(client_pct, 2),
        "caller_audio_s_per_s_per_call": round(
            (after["sent"] - before["sent"]) * TICK / wall / max(live, 1), 3
        ),
        "agent_audio_s_per_s_per_call": round(
            (after["samples"] - before["samples"]) / 8000 / wall / max(live, 1), 3
        ),
        "turns": after["turns"] - before["turns"],
        "unanswered": after["unanswered"] - before["unanswered"],
        "answers": len(lateness),
        "answer_delay_ms_p50": round(1000 * percentile(delays, 0.5), 1),
        "answer_delay_ms_p90": round(1000 * percentile(delays, 0.9), 1),
        "late_ms_p50": round(1000 * percentile(lateness, 0.5), 1),
        "late_ms_p99": round(1000 * percentile(lateness, 0.99), 1),
        "late_ms_max": round(1000 * max(lateness, default=float("nan")), 1),
        "gaps_60ms_buffer": len(gaps),
        "gap_ms_total": round(1000 * sum(gaps), 1),
        "gap_ms_max": round(1000 * max(gaps, default=0.0), 1),
        "invite_to_200_ms_p50": round(1000 * percentile(answer_s, 0.5), 1) if answer_s else None,
        "caller_send_lag_ms_max": round(1000 * send_lag, 1),
        "calls_closed_early": closed,
        "errors": errors,
    }


COLUMNS = (
    ("vad", "vad"),
    ("path", "path"),
    ("N", "connected"),
    ("load 1m", "load_1m"),
    ("server %", "server_core_pct"),
    ("loop thr %", "server_loop_thread_pct"),
    ("idle %", "idle_server_core_pct"),
    ("waited %", "server_waited_for_cpu_pct"),
    ("per call %", "per_call_core_pct"),
    ("callers %", "client_core_pct"),
    ("answers", "answers"),
    ("unanswered", "unanswered"),
    ("delay p50 ms", "answer_delay_ms_p50"),
    ("delay p90 ms", "answer_delay_ms_p90"),
    ("late p50 ms", "late_ms_p50"),
    ("late p99 ms", "late_ms_p99"),
    ("late max ms", "late_ms_max"),
    ("gaps", "gaps_60ms_buffer"),
    ("gap ms", "gap_ms_total"),
)


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for r in results:
        lines.append("| " + " | ".join(str(r[key]) for _, key in COLUMNS) + " |")
    return "\n".join(lines)


def header(args: argparse.Namespace) -> str:
    pinned = (
        f"server on CPU {args.server_cpu}, callers on CPU {args.client_cpu}"
        if args.pin
        else "not pinned"
    )
    return "\n".join(
        [
            "# phone_cpu: server CPU per phone call, Twilio media streams vs SIP/RTP",
            f"# machine: {machine()}; {pinned}; load at start {os.getloadavg()}",
            "# server: rejoinder serve bench/ws_cost_agent.py --telephony twilio --sip ..."
            " --max-load 0",
            "# agent: ScriptedSTT, InstantLLM, ScriptedTTS (3 s of tone per reply); VAD per column",
            "# a call: 20 ms μ-law every 20 ms, a Piper request, the 3 s answer played out"
            f" (60 ms buffer), {args.pause} s pause, the next; {args.warmup} s warm-up,"
            f" {args.seconds} s measured",
            "# % = of one core; per call = (server - idle server) / N; late = latest packet of"
            " an answer against its schedule; gaps = silences a 60 ms buffer would play;"
            " waited = server runnable but not running (another process on its core)",
        ]
    )


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    counts = [int(x) for x in args.calls.split(",")]
    talk = await phrases()
    results: list[dict[str, Any]] = []
    for vad in args.vad.split(","):
        server = PhoneServer(max(counts) + 10, vad, args.server_cpu if args.pin else None)
        try:
            await server.wait_up()
            for path in args.paths.split(","):
                for n in counts:
                    for attempt in range(1 + args.retries):
                        result = await run(server, vad, path, n, args, talk)
                        result["attempt"] = attempt + 1
                        print(json.dumps(result), flush=True)
                        if result["server_waited_for_cpu_pct"] <= args.disturbed:
                            break
                        print(f"# disturbed (waited {result['server_waited_for_cpu_pct']} %)")
                    results.append(result)
            errors = [
                line
                for line in server.tail(200_000).splitlines()
                if "ERROR" in line or "Traceback" in line
            ]
            if errors:
                print(
                    f"server log ({vad}): {len(errors)} error lines, e.g. {errors[:3]}",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", default="1,10,50", help="concurrent calls, comma-separated")
    parser.add_argument(
        "--vad", default="energy,silero", help="energy and/or silero, each its own server"
    )
    parser.add_argument("--paths", default="twilio,sip", help="twilio and/or sip")
    parser.add_argument("--seconds", type=float, default=25.0, help="measured wall time per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="s after one conversation cycle")
    parser.add_argument("--idle", type=float, default=3.0, help="idle-server baseline per run")
    parser.add_argument(
        "--pause", type=float, default=1.0, help="s between an answer and the next phrase"
    )
    parser.add_argument(
        "--disturbed", type=float, default=5.0, help="%% of the time the server waited for its core"
    )
    parser.add_argument("--retries", type=int, default=1, help="repeats of a disturbed run")
    parser.add_argument("--server-cpu", default="1", help="taskset CPU list of the server")
    parser.add_argument("--client-cpu", default="0", help="CPU list of the callers (this process)")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args()
    if not set(args.vad.split(",")) <= {"silero", "energy"}:
        parser.error("--vad takes energy and/or silero")
    if not set(args.paths.split(",")) <= {"twilio", "sip"}:
        parser.error("--paths takes twilio and/or sip")
    if args.pin:
        os.sched_setaffinity(0, {int(c) for c in args.client_cpu.split(",")})
    print(header(args), flush=True)
    runs = len(args.vad.split(",")) * len(args.paths.split(",")) * len(args.calls.split(","))
    budget = runs * (1 + args.retries) * (args.seconds + args.warmup + args.idle + 6.5 + 90) + 120
    results = asyncio.run(asyncio.wait_for(bench(args), budget))
    print(header(args))
    print(table(results))
    print(f"# load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
