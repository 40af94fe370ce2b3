"""WebRTC transport CPU: server CPU per session, listening and talking, with N peers.

The server (this process) serves ``POST /api/offer`` on 127.0.0.1 with a voice session per
peer: the VAD (Silero when the local extra is installed, else the test kit's energy VAD),
a scripted recognizer and model, and for talking a scripted TTS speaking a tone. A child
process runs N aiortc clients: each sends a microphone track (20 ms frames of quiet noise,
in real time), plays the agent's track and reports ``played`` over the data channel every
50 ms (as the page does; ``--report-ms``). Only the server's CPU is measured
(``time.process_time`` and ``getrusage``, all threads: aiortc's decoder threads and
onnxruntime included), over ``--seconds`` once every peer is connected and warmed up.

- listening: the agent listens (its track sends the prepared silence packet);
- talking: the agent speaks the whole time (its track encodes Opus every 20 ms).

Also measured: the same server with no peer (the idle floor), reported apart. Each mode
runs ``--repeat`` times; the least disturbed run is printed (a busy shared machine inflates
CPU time per unit of work), with the median. Prints one JSON line per mode. Target:
listening <= 6 % of one core per session.

    python bench/webrtc_cost.py [--sessions 5] [--seconds 10] [--vad silero|energy]
    REJOINDER_BENCH_PROFILE=/tmp/rtc.prof python bench/webrtc_cost.py --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import json
import os
import resource
import sys
import time
from typing import Any

import numpy as np

RATE = 48000
FRAME = 960
PROFILE = os.environ.get("REJOINDER_BENCH_PROFILE")
"""A path: cProfile the event loop's thread over each measured window, written to
PATH.listening and PATH.talking (the last run of each mode)."""
TALK = "This is a long answer that keeps the agent talking for the whole measurement. " * 20


# ------------------------------------------------------------------ the server


MIC_SECONDS = [0.0]
"""Seconds of microphone audio the sessions' VADs were given (the clients kept pace
when it grows by one second per second and session)."""


def make_vad(kind: str) -> Any:
    from rejoinder.models.vad import VAD, VADStream

    if kind == "silero":
        from rejoinder.providers.local import SileroVAD

        inner: VAD = SileroVAD()
    else:
        from rejoinder.testing import ScriptedVAD

        inner = ScriptedVAD()

    class Counting(VAD):
        def stream(self) -> VADStream:
            stream = inner.stream()
            push = stream.push

            def counted(frame: Any) -> Any:
                MIC_SECONDS[0] += frame.duration
                return push(frame)

            stream.push = counted  # type: ignore[method-assign]
            return stream

    return Counting()


def tone_tts() -> Any:
    from rejoinder.testing import ScriptedTTS

    tts = ScriptedTTS(seconds_per_char=0.05)
    t = np.arange(tts.sample_rate // 50) / tts.sample_rate
    tts._frame = ((np.sin(2 * np.pi * 400 * t) * 6000).astype(np.int16), tts.sample_rate)
    return tts


def cpu() -> tuple[float, float, float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.process_time(), usage.ru_utime, usage.ru_stime, time.thread_time()


async def measure(seconds: float) -> dict[str, float]:
    """CPU over ``seconds``: the whole process, user and system, and the event loop's
    thread alone (the rest is aiortc's decoder threads, its encoder pool, onnxruntime)."""
    wall0, (cpu0, user0, sys0, loop0) = time.perf_counter(), cpu()
    await asyncio.sleep(seconds)
    wall, (cpu1, user1, sys1, loop1) = time.perf_counter() - wall0, cpu()
    return {
        "wall_s": wall,
        "cpu_core_pct": 100 * (cpu1 - cpu0) / wall,
        "user_pct": 100 * (user1 - user0) / wall,
        "sys_pct": 100 * (sys1 - sys0) / wall,
        "loop_thread_pct": 100 * (loop1 - loop0) / wall,
    }


async def run_mode(
    mode: str, sessions: int, seconds: float, vad: str, client_flags: list[str]
) -> dict[str, Any]:
    from aiohttp import web

    import rejoinder as rj
    from rejoinder.io import Connection
    from rejoinder.io.webrtc import WebRTCOptions, add_webrtc_routes
    from rejoinder.testing import ScriptedLLM, ScriptedSTT

    started: list[Connection] = []
    all_started = asyncio.Event()

    class Talker(rj.Agent):
        async def on_enter(self) -> None:
            if mode == "talking":
                self.session.say(TALK)

    async def entrypoint(conn: Connection) -> None:
        session: rj.AgentSession[Any] = rj.AgentSession(
            llm=ScriptedLLM([["Okay."]] * 100),
            vad=make_vad(vad),
            stt=ScriptedSTT(["hello"] * 100),
            tts=tone_tts(),
            user_away_timeout=None,
        )
        started.append(conn)
        if len(started) == sessions:
            all_started.set()
        await conn.serve(session, Talker(instructions="bench"))

    app = web.Application()
    server = add_webrtc_routes(app, entrypoint, WebRTCOptions(host_addresses=["127.0.0.1"]))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/api/offer"

    idle = await measure(min(seconds, 3.0))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--client",
        url,
        "--sessions",
        str(sessions),
        *client_flags,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        async with asyncio.timeout(120):
            await all_started.wait()
            line = await child.stdout.readline()
            assert line.strip() == b"connected", line
        await asyncio.sleep(3.0)  # warm up: VAD sessions, encoders, jitter buffers
        states = [c.session.agent_state for c in started if c.session is not None]
        mic, frames_out = MIC_SECONDS[0], sum(p.track.position for p in server._peers)
        profiler = cProfile.Profile() if PROFILE else None
        if profiler is not None:
            profiler.enable()
        figures = await measure(seconds)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{PROFILE}.{mode}")
        mic = MIC_SECONDS[0] - mic
        frames_out = (sum(p.track.position for p in server._peers) - frames_out) // 960
        states_after = [c.session.agent_state for c in started if c.session is not None]
    finally:
        if child.stdin is not None:
            child.stdin.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(20):
                await child.wait()
        if child.returncode is None:
            child.kill()
            await child.wait()
        await server.aclose()
        await runner.cleanup()
    per = figures["cpu_core_pct"] / sessions
    return {
        "bench": "webrtc_cost",
        "mode": mode,
        "sessions": sessions,
        "vad": vad,
        "seconds": round(figures["wall_s"], 2),
        "server_cpu_core_pct": round(figures["cpu_core_pct"], 2),
        "user_pct": round(figures["user_pct"], 2),
        "sys_pct": round(figures["sys_pct"], 2),
        "loop_thread_pct": round(figures["loop_thread_pct"], 2),
        "idle_server_core_pct": round(idle["cpu_core_pct"], 2),
        "per_session_core_pct": round(per, 2),
        "per_session_above_idle_pct": round(
            (figures["cpu_core_pct"] - idle["cpu_core_pct"]) / sessions, 2
        ),
        "mic_s_per_s_per_session": round(mic / figures["wall_s"] / sessions, 2),
        "track_frames_per_s_per_session": round(frames_out / figures["wall_s"] / sessions, 1),
        "agent_states": sorted(set(states) | set(states_after)),
    }


# ----------------------------------------------------------------- the clients


async def clients(url: str, sessions: int, *, mic: bool, report_every: float | None) -> None:
    import fractions

    import aiohttp
    import av
    from aiortc import (
        MediaStreamTrack,
        RTCConfiguration,
        RTCPeerConnection,
        RTCSessionDescription,
    )
    from aiortc.mediastreams import MediaStreamError

    from rejoinder.io.webrtc._ice import offering

    rng = np.random.default_rng(7)
    noise = [(rng.normal(0, 30, FRAME)).astype(np.int16) for _ in range(50)]

    class Mic(MediaStreamTrack):
        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self.n = 0
            self.start: float | None = None

        async def recv(self) -> av.AudioFrame:
            loop = asyncio.get_running_loop()
            if self.start is None:
                self.start = loop.time()
            due = self.start + self.n * FRAME / RATE
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            frame = av.AudioFrame.from_ndarray(
                noise[self.n % len(noise)].reshape(1, -1), format="s16", layout="mono"
            )
            frame.sample_rate = RATE
            frame.pts = self.n * FRAME
            frame.time_base = fractions.Fraction(1, RATE)
            self.n += 1
            return frame

    async def one(http: aiohttp.ClientSession) -> tuple[Any, asyncio.Event]:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        if mic:
            pc.addTrack(Mic())
        else:
            pc.addTransceiver("audio", direction="recvonly")
        channel = pc.createDataChannel("rejoinder")
        ready = asyncio.Event()
        played = [0]

        def message(data: str | bytes) -> None:
            if isinstance(data, str) and '"ready"' in data:
                ready.set()

        async def play(track: MediaStreamTrack) -> None:
            with contextlib.suppress(MediaStreamError):
                while True:
                    frame = await track.recv()
                    played[0] += frame.samples  # type: ignore[union-attr]

        async def report() -> None:
            while report_every is not None:
                await asyncio.sleep(report_every)
                if channel.readyState == "open":
                    channel.send(json.dumps({"type": "played", "samples": played[0]}))

        tasks: list[asyncio.Task[None]] = [asyncio.create_task(report())]
        channel.on("message", message)
        pc.on("track", lambda t: tasks.append(asyncio.create_task(play(t))))
        with offering(["127.0.0.1"]):
            await pc.setLocalDescription(await pc.createOffer())
        body = {"sdp": pc.localDescription.sdp, "type": "offer"}
        async with http.post(url, json=body) as resp:
            answer = await resp.json()
        await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        pc._bench_tasks = tasks
        return pc, ready

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with aiohttp.ClientSession() as http:
        peers = [await one(http) for _ in range(sessions)]
        async with asyncio.timeout(90):
            for _, ready in peers:
                await ready.wait()
        print("connected", flush=True)
        await reader.read()  # until the server closes our stdin
        for pc, _ in peers:
            for task in pc._bench_tasks:
                task.cancel()
            await pc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0)
    default_vad = "silero" if importlib.util.find_spec("silero_vad") else "energy"
    parser.add_argument("--vad", choices=("silero", "energy"), default=default_vad)
    parser.add_argument("--modes", default="listening,talking")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per mode (the least disturbed is reported)"
    )
    parser.add_argument("--no-mic", action="store_true", help="clients send no microphone")
    parser.add_argument(
        "--report-ms", type=float, default=50.0, help="played reports (0: none; the page: 50)"
    )
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        every = args.report_ms / 1000 if args.report_ms > 0 else None
        asyncio.run(clients(args.client, args.sessions, mic=not args.no_mic, report_every=every))
        return
    flags = ["--report-ms", str(args.report_ms), *(["--no-mic"] if args.no_mic else [])]
    for mode in args.modes.split(","):
        runs = [
            asyncio.run(run_mode(mode, args.sessions, args.seconds, args.vad, flags))
            for _ in range(args.repeat)
        ]
        # A shared machine inflates CPU time per unit of work (neighbours on the same
        # core): the least disturbed run is the figure; the median shows the spread.
        result = min(runs, key=lambda r: r["per_session_core_pct"])
        per = sorted(r["per_session_core_pct"] for r in runs)
        result["runs"] = len(runs)
        result["per_session_core_pct_median"] = per[len(per) // 2]
        result["client"] = {"mic": not args.no_mic, "report_ms": args.report_ms}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
