"""SIP call rate: SIPp's own statistics at the highest rate that keeps the answer on time.

The server is its own process, ``rejoinder serve bench/ws_cost_agent.py --sip
127.0.0.1:PORT --max-load 0`` with the energy VAD (``REJOINDER_BENCH_VAD=energy``: the
test kit's ``ScriptedVAD``; a scripted recognizer, the zero-latency fake model, a scripted
TTS of 3 s of tone per reply), pinned to one core (``--server-cpu``); SIPp (``/usr/bin/sipp``)
to the other (``--client-cpu``). Admission by load is off, so calls are refused only by
what fails.

A call is ``bench/sip/answer.xml``: INVITE with an SDP offer (PCMU), the 200 OK timed from
the INVITE (SIPp's response time ``answer``: ``start_rtd``/``rtd``), ACK, then the caller's
line as RTP (SIPp's ``rtp_stream``: a request spoken by Piper, 8 kHz μ-law, then line
noise, looped: the agent hears a request, ends the turn and answers with 3 s of audio) for
``--length`` s, then BYE. Answer latency = INVITE to 200 OK.

SIPp times the answer in whole milliseconds of its own clock (on 127.0.0.1 it mostly
reads 0, now and then 4 or more): too coarse for a latency of a few ms. So beside SIPp the
bench places a probe call of its own every ``--probe-every`` s (``SipCaller``: INVITE to
200 OK timed with ``time.monotonic``, hung up at once), and the criterion is the probe's.

First the probe alone for ``--alone`` s (for reference: the server with no call). Then
SIPp one call at a time (``-l 1``, ``--single`` calls) with the probe beside it: the
single-call latency (the probe's median; SIPp's own figures beside it). Then
each rate of ``--rates`` (calls per second, ``-r``) with ``--calls-per-rate`` s worth of
calls (at least 10), the probe beside it; a rate passes when no call failed and the
probe's median is within ``--limit`` (1.2) times the single call's. The bench stops at the
first rate that fails (``--keep-going``: only at failed calls, to see the whole curve).
Per rate: SIPp's successful and failed calls, its per-call answer times (``-trace_rtt
-rtt_freq 1``: mean, p90, max), the probe's median and p90, the server's CPU (% of one
core), the time it waited for its core (others on it: a disturbed run) and the 1-minute
load. At the end, SIPp's final statistics screen at the highest
rate that passed (the rates after the first late one do not count).

    python bench/sip_load.py [--rates 1,2,5,10,20,40] [--length 3] [--single 10] [--keep-going]

Everything is bounded (SIPp gets ``-timeout``, each run a wall-clock limit); only
127.0.0.1 is used; the server gets SIGTERM (then SIGKILL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _phone_callers import SipCaller, noise_chunks, percentile, phrase_chunks
from phone_cpu import PhoneServer, free_udp_port, machine, run_queue_wait
from ws_cost import HERE

SCENARIO = HERE / "sip" / "answer.xml"
SIPP = shutil.which("sipp")


@dataclass
class SippRun:
    """One SIPp run: its statistics, every answer latency SIPp traced (whole ms) and our
    probe's (µs)."""

    rate: float
    calls: int
    successful: int
    failed: int
    returncode: int
    latencies_ms: list[float]
    probe_ms: list[float]
    sipp_mean_ms: float | None
    screen: str
    errors: str
    server_pct: float
    waited_pct: float
    """% of the time the server was runnable but waited for its core (others on it)."""
    seconds: float
    load_1m: float

    def mean(self) -> float:
        """The mean of SIPp's per-call times: whole milliseconds each, but a mean over
        many calls resolves less (the clock's ticks fall anywhere in a response)."""
        return statistics.fmean(self.latencies_ms) if self.latencies_ms else float("nan")

    def failed_calls(self) -> bool:
        return bool(self.failed) or self.successful != self.calls or self.returncode not in (0, 1)

    def on_time(self, ceiling_ms: float) -> bool:
        """Our probe's median answer time within ``ceiling_ms``."""
        return percentile(self.probe_ms, 0.5) <= ceiling_ms

    def summary(self) -> dict[str, Any]:
        return {
            "bench": "sip_load",
            "rate_cps": self.rate,
            "calls": self.calls,
            "successful": self.successful,
            "failed": self.failed,
            "sipp_exit": self.returncode,
            "answer_ms_mean": round(self.mean(), 2),
            "answer_ms_p90": round(percentile(self.latencies_ms, 0.9), 1),
            "answer_ms_max": round(max(self.latencies_ms, default=float("nan")), 1),
            "sipp_stat_mean_ms": self.sipp_mean_ms,
            "probe_calls": len(self.probe_ms),
            "probe_ms_p50": round(percentile(self.probe_ms, 0.5), 2),
            "probe_ms_p90": round(percentile(self.probe_ms, 0.9), 2),
            "server_core_pct": round(self.server_pct, 1),
            "server_waited_pct": round(self.waited_pct, 1),
            "seconds": round(self.seconds, 1),
            "load_1m": round(self.load_1m, 2),
        }


async def caller_line(path: Path) -> None:
    """The looped line SIPp streams: a Piper request, then 3 s of line noise."""
    sys.path.insert(0, str(HERE))
    from _voice import RATE, REQUESTS, clips

    clip = (await clips(REQUESTS[:1]))[0]
    spoken = b"".join(phrase_chunks(clip.pcm[: round(clip.speech_end * RATE)], RATE))
    noise = b"".join(noise_chunks(0)) * 3
    path.write_bytes(spoken + noise)  # noqa: ASYNC240 - set-up, before any timing


def sipp_time_ms(text: str) -> float | None:
    """SIPp's ``HH:MM:SS:mmm[uuu]`` (or plain) time in ms."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 4:
            h, m, s, frac = parts
            return (int(h) * 3600 + int(m) * 60 + int(s)) * 1000 + float(frac) / 10 ** (
                len(frac) - 3
            )
        return float(text)
    except ValueError:
        return None


async def probe(server: PhoneServer, every: float, latencies: list[float]) -> None:
    """One short call of our own every ``every`` s (INVITE to 200 OK timed to the µs,
    where SIPp counts whole milliseconds), hung up at once."""
    n = 0
    while True:
        caller = SipCaller(100_000 + n, 0.0, "127.0.0.1", server.sip_port)
        n += 1
        try:
            await caller.start()
            if caller.answered_after is not None:
                latencies.append(1000 * caller.answered_after)
        except (ConnectionError, TimeoutError):
            pass
        finally:
            await caller.hang_up()
        await asyncio.sleep(every)


def clean(work: Path) -> None:
    """The previous run's statistics and traces out of SIPp's folder."""
    for old in [*work.glob("*.csv"), *work.glob("*.log")]:
        old.unlink()


def read_results(work: Path) -> tuple[dict[str, str], list[float], str, str]:
    """SIPp's last statistics row, its per-call answer times (ms), screen and errors."""
    stats: dict[str, str] = {}
    if (work / "stat.csv").exists():
        rows = list(csv.reader((work / "stat.csv").read_text().splitlines(), delimiter=";"))
        if len(rows) >= 2:
            stats = dict(zip(rows[0], rows[-1], strict=False))
    latencies: list[float] = []
    for rtt in work.glob("*_rtt.csv"):
        for row in csv.reader(rtt.read_text().splitlines()[1:], delimiter=";"):
            if len(row) >= 2:
                latencies.append(float(row[1]))
    screen = (work / "screen.log").read_text() if (work / "screen.log").exists() else ""
    errors = (work / "errors.log").read_text() if (work / "errors.log").exists() else ""
    return stats, latencies, screen, errors


async def run_sipp(
    server: PhoneServer,
    work: Path,
    *,
    rate: float,
    calls: int,
    limit: int,
    args: argparse.Namespace,
) -> SippRun:
    assert SIPP is not None
    clean(work)
    budget = calls / rate + args.length + 30
    command = [SIPP, f"127.0.0.1:{server.sip_port}", "-sf", str(SCENARIO)]
    command += ["-i", "127.0.0.1", "-p", str(free_udp_port()), "-mp", str(free_udp_port())]
    command += ["-m", str(calls), "-r", str(rate), "-l", str(limit)]
    command += ["-d", str(int(args.length * 1000))]
    command += ["-timeout", f"{int(budget)}s", "-timeout_error", "-nostdin"]
    command += ["-trace_stat", "-stf", "stat.csv", "-fd", "1", "-trace_rtt", "-rtt_freq", "1"]
    command += ["-trace_err", "-error_file", "errors.log"]
    command += ["-trace_screen", "-screen_file", "screen.log", "-max_recv_loops", "1000"]
    if args.pin:
        command = ["taskset", "-c", args.client_cpu, *command]
    load = os.getloadavg()[0]
    c0, w0, q0 = server.cpu()[0], time.monotonic(), run_queue_wait(server.proc.pid)
    probed: list[float] = []
    prober = asyncio.create_task(probe(server, args.probe_every, probed))
    process = await asyncio.create_subprocess_exec(
        *command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), budget + 10)
    except TimeoutError:
        process.kill()
        _, stderr = await process.communicate()
    finally:
        prober.cancel()
        await asyncio.wait([prober], timeout=10.0)
    wall = time.monotonic() - w0
    server_pct = 100 * (server.cpu()[0] - c0) / wall
    waited_pct = 100 * (run_queue_wait(server.proc.pid) - q0) / wall
    stats, latencies, screen, errors = read_results(work)
    if process.returncode not in (0, 1):
        errors += stderr.decode(errors="replace")
    mean = stats.get("ResponseTimeanswer(C)")
    return SippRun(
        rate=rate,
        calls=calls,
        successful=int(stats.get("SuccessfulCall(C)", 0) or 0),
        failed=int(stats.get("FailedCall(C)", 0) or 0),
        returncode=process.returncode or 0,
        latencies_ms=latencies,
        probe_ms=probed,
        sipp_mean_ms=sipp_time_ms(mean) if mean else None,
        screen=screen,
        errors=errors,
        server_pct=server_pct,
        waited_pct=waited_pct,
        seconds=wall,
        load_1m=load,
    )


def table(runs: list[dict[str, Any]]) -> str:
    keys = ("rate_cps", "calls", "successful", "failed", "answer_ms_mean", "answer_ms_p90")
    keys += ("answer_ms_max", "probe_ms_p50", "probe_ms_p90", "server_core_pct")
    keys += ("server_waited_pct", "load_1m")
    keys += ("verdict",)
    lines = ["| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in runs]
    return "\n".join(lines)


async def bench(
    args: argparse.Namespace, server: PhoneServer
) -> tuple[list[dict[str, Any]], SippRun | None]:
    await server.wait_up()
    results: list[dict[str, Any]] = []
    best: SippRun | None = None
    with tempfile.TemporaryDirectory(prefix="sip-load-") as tmp:
        work = Path(tmp)
        await caller_line(work / "caller.ulaw")
        # The first calls of a fresh server pay for imports and first uses: not counted.
        await run_sipp(server, work, rate=10.0, calls=2, limit=1, args=args)
        # One call: our probe alone, then SIPp one call at a time (its own figures).
        alone: list[float] = []
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(probe(server, args.probe_every, alone), args.alone)
        results.append(
            {
                "rate_cps": "probe alone",
                "probe_calls": len(alone),
                "probe_ms_p50": round(percentile(alone, 0.5), 2),
                "probe_ms_p90": round(percentile(alone, 0.9), 2),
                "verdict": "no call",
            }
        )
        print(json.dumps(results[-1]), flush=True)
        single = await run_sipp(server, work, rate=10.0, calls=args.single, limit=1, args=args)
        results.append({**single.summary(), "rate_cps": "one at a time", "verdict": "single call"})
        print(json.dumps(results[-1]), flush=True)
        if single.failed_calls() or not single.latencies_ms:
            raise SystemExit(f"the single calls failed: {single.errors[-2000:]}")
        ceiling = args.limit * percentile(single.probe_ms, 0.5)
        print(f"# ceiling: probe median <= {ceiling:.2f} ms", flush=True)
        late = False
        for rate in [float(r) for r in args.rates.split(",")]:
            if not await server.wait_sessions(0, 30.0):
                raise RuntimeError("the previous rate's calls are still live")
            calls = max(10, round(rate * args.calls_per_rate))
            limit = int(rate * (args.length + 2)) + 10  # concurrent calls SIPp may hold
            run = await run_sipp(server, work, rate=rate, calls=calls, limit=limit, args=args)
            failed, on_time = run.failed_calls(), run.on_time(ceiling)
            verdict = "calls failed" if failed else "pass" if on_time else "late"
            results.append({**run.summary(), "verdict": verdict})
            print(json.dumps(results[-1]), flush=True)
            late = late or not on_time
            if not late and not failed:
                best = run
            if failed:
                if run.errors:
                    print("# SIPp errors (tail):\n" + run.errors[-1500:], file=sys.stderr)
                break
            if late and not args.keep_going:
                break
    return results, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,2,5,10,20,40", help="calls per second, increasing")
    parser.add_argument("--length", type=float, default=3.0, help="s of RTP per call")
    parser.add_argument(
        "--calls-per-rate", type=float, default=10.0, help="s worth of calls per rate"
    )
    parser.add_argument("--single", type=int, default=10, help="calls one at a time, first")
    parser.add_argument("--limit", type=float, default=1.2, help="of the single-call mean")
    parser.add_argument("--alone", type=float, default=10.0, help="s of the probe alone, first")
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="go on past the first late rate (not past failures)",
    )
    parser.add_argument("--probe-every", type=float, default=0.5, help="s between probe calls")
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--client-cpu", default="0")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args()
    if SIPP is None:
        raise SystemExit("SIPp is not installed (apt-get install sip-tester)")
    if args.pin and not shutil.which("taskset"):
        args.pin = False
    if args.pin:
        os.sched_setaffinity(0, {int(c) for c in args.client_cpu.split(",")})
    top = max(float(r) for r in args.rates.split(",")) * (args.length + 2) + 20
    header = [
        "# sip_load: answer latency (INVITE to 200 OK) against the call rate, SIPp",
        f"# machine: {machine()}; "
        + (
            f"server on CPU {args.server_cpu}, SIPp and probe on CPU {args.client_cpu}"
            if args.pin
            else "not pinned"
        ),
        "# server: rejoinder serve bench/ws_cost_agent.py --sip ... --max-load 0, energy VAD",
        f"# a call: bench/sip/answer.xml, INVITE/200/ACK, {args.length} s of RTP (a request, then"
        " line noise; the agent answers with 3 s of audio), BYE",
        f"# probe: one short call of ours every {args.probe_every} s beside SIPp's, INVITE to"
        " 200 OK timed to the µs (SIPp times whole ms, and mostly reads 0 here)",
        f"# pass: no failed call, probe median <= {args.limit} x its median beside SIPp's calls"
        " one at a time",
    ]
    print("\n".join(header), f"\n# load at start {os.getloadavg()}", flush=True)
    server = PhoneServer(int(top), "energy", args.server_cpu if args.pin else None)
    try:
        results, best = asyncio.run(bench(args, server))
    finally:
        server.stop()
    print("\n".join(header))
    print(table(results))
    if best is not None:
        print(f"\n# SIPp's statistics at {best.rate:g} calls/s (the highest passing rate):")
        print(best.screen.strip())
    else:
        print("\n# no rate passed")
    print(f"# load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
