"""WebSocket transport CPU: server CPU per session, listening and talking, with N clients.

The server is its own process: ``rejoinder serve bench/ws_cost_agent.py`` on 127.0.0.1 (a
free port), one voice session per client with Silero VAD, a scripted recognizer, the
zero-latency fake model and a scripted TTS (a tone, 3 s per reply; see the agent file).
The clients run in this process (aiohttp), as a page would: each sends ``start``, then
PCM16 microphone frames of 20 ms at 16 kHz in real time, plays the agent's audio on a
simulated speaker in real time and reports ``played`` every 100 ms while it plays.

- listening: the microphone carries low noise (never speech); the agent never speaks.
- talking: the microphone says requests spoken by Piper (cached, ``bench/_voice.py``);
  after each the client waits (bounded) until the agent answered and its answer was
  played, then pauses ``--pause`` s and says the next one. The server runs the VAD on
  speech, ends the turn, replies and streams the reply's audio.

For each mode and each N the server's CPU time (utime + stime of every thread, from
``/proc/PID/stat``) is read over ``--seconds`` of wall time after a ``--warmup``; the same
server with no client, measured just before over ``--idle`` s, is the baseline. Prints one
JSON line per run and a table: % of one core per session above the idle server, and the
client process's CPU for reference. Target: listening <= 1.5 % of one core per session.

    python bench/ws_cost.py [--sessions 1,5,10,20] [--seconds 15] [--modes listening,talking]
    python bench/ws_cost.py --vad energy   # the test kit's energy VAD: the cost without Silero
    python bench/ws_cost.py --bare         # the floor: a bare aiohttp server receiving frames
    REJOINDER_BENCH_PROFILE=/tmp/ws.prof python bench/ws_cost.py --sessions 10 --modes listening

Everything is bounded (connection, every wait, the whole run); only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from _served import ServedProcess

HERE = Path(__file__).resolve().parent
AGENT = HERE / "ws_cost_agent.py"
MIC_RATE = 16000
FRAME_S = 0.02
REPORT_EVERY = 0.1
TARGET_LISTENING_PCT = 1.5
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------- the server


def proc_cpu(path: str) -> tuple[float, float]:
    """CPU seconds in user and in system mode from a ``/proc/.../stat`` file."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # utime, stime


def load_average() -> float:
    return os.getloadavg()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server(ServedProcess):
    """``rejoinder serve`` (or the bare aiohttp floor) in a child process."""

    def __init__(self, max_sessions: int, vad: str, *, bare: bool = False) -> None:
        port = free_port()
        exe = Path(sys.executable).parent / "rejoinder"
        command = [str(exe), "serve", str(AGENT), "--port", str(port)]
        command += ["--max-sessions", str(max_sessions), "--drain-timeout", "2"]
        # What a session costs is measured, not whether the machine can take one more:
        # admission by load (on by default) would refuse clients past its estimate.
        command += ["--max-load", "0"]
        if bare:
            command = [sys.executable, str(Path(__file__).resolve()), "--bare-server", str(port)]
        env = {**os.environ, "REJOINDER_BENCH_VAD": vad}
        super().__init__(command, port, log_prefix="ws_cost_server_", env=env)

    async def sessions(self) -> int:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{self.base}/healthz", timeout=aiohttp.ClientTimeout(5)) as resp,
        ):
            return int((await resp.json())["sessions"])

    async def wait_sessions(self, n: int, within: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while await self.sessions() != n:  # noqa: ASYNC110 - polling another process
                    await asyncio.sleep(0.2)
                return True
        return False

    def cpu(self) -> tuple[float, float, float]:
        """CPU seconds of the whole process (every thread), the part of it in system
        mode, and the main thread's (the event loop; the rest is onnxruntime's and the
        default executor's threads)."""
        pid = self.proc.pid
        user, system = proc_cpu(f"/proc/{pid}/stat")
        # The scheduler's own count for the thread, in ns (not sampled on ticks).
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            loop = int(f.read().split()[0]) / 1e9
        return user + system, system, loop


def bare_server(port: int) -> None:
    """The floor (``--bare``): aiohttp alone, no rejoinder. ``/ws`` answers ``start`` with
    ``ready`` and hands each binary frame, as int16 samples, through a queue to a task
    that drops it (the hops ``PushAudioInput`` makes); ``/healthz`` counts the sockets."""
    from aiohttp import web

    live = [0]

    async def ws(request: web.Request) -> web.StreamResponse:
        sock = web.WebSocketResponse(heartbeat=15.0, max_msg_size=256 * 1024)
        await sock.prepare(request)
        queue: asyncio.Queue[np.ndarray] = asyncio.Queue()

        async def consume() -> None:
            while True:
                await queue.get()

        task = asyncio.create_task(consume())
        live[0] += 1
        try:
            async for msg in sock:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    queue.put_nowait(np.frombuffer(msg.data, "<i2").astype(np.int16))
                elif msg.type == aiohttp.WSMsgType.TEXT and '"start"' in msg.data:
                    await sock.send_str('{"type":"ready","sample_rate":24000,"protocol":1}')
        finally:
            live[0] -= 1
            task.cancel()
        return sock

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": live[0]})

    app = web.Application()
    app.router.add_get("/ws", ws)
    app.router.add_get("/healthz", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


# ------------------------------------------------------------------ the clients


class Client:
    """One simulated page: microphone, speaker, ``played`` reports."""

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, noise: list[bytes], frame_s: float = FRAME_S
    ) -> None:
        self.ws = ws
        self.noise = noise
        self.frame_s = frame_s
        self.rate = 0
        self.state = "initializing"
        self.state_changed = asyncio.Event()
        self.ready = asyncio.Event()
        self.frames_sent = 0
        self.received = 0  # agent samples received
        self.played = 0  # agent samples played
        self.queued = 0
        self.reported = 0
        self.turns = 0
        self.errors: list[str] = []
        self._speech: tuple[bytes, asyncio.Future[None]] | None = None
        self._offset = 0
        self._burst_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, phase: float = 0.0, within: float = 30.0) -> None:
        await self.ws.send_str(json.dumps({"type": "start", "sample_rate": MIC_RATE}))
        self._tasks.append(asyncio.create_task(self._read()))
        async with asyncio.timeout(within):
            await self.ready.wait()
        self._tasks.append(asyncio.create_task(self._mic(phase)))
        self._tasks.append(asyncio.create_task(self._speaker()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(self._tasks, timeout=5.0)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await self.ws.close()

    # ------------------------------------------------------------- receiving

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                self._advance()
                samples = len(msg.data) // 2
                if self.queued == 0:
                    self._burst_at = time.monotonic()
                self.received += samples
                self.queued += samples
            elif msg.type == aiohttp.WSMsgType.TEXT:
                message = json.loads(msg.data)
                kind = message.get("type")
                if kind == "ready":
                    self.rate = int(message["sample_rate"])
                    self.ready.set()
                elif kind == "agent_state":
                    self.state = message["state"]
                    self.state_changed.set()
                elif kind == "clear":
                    self._advance()
                    self.queued = 0
                    await self._report(cleared=True)
                elif kind == "error":
                    self.errors.append(str(message.get("code")))
            else:
                break

    # --------------------------------------------------------------- speaker

    def _advance(self) -> None:
        """Play in real time: the queue drains at the server's rate since the burst
        began (no jitter buffer)."""
        if self.queued and self.rate:
            now = time.monotonic()
            step = min(self.queued, int((now - self._burst_at) * self.rate))
            if step > 0:
                self.played += step
                self.queued -= step
                self._burst_at += step / self.rate

    async def _report(self, cleared: bool = False) -> None:
        message: dict[str, Any] = {"type": "played", "samples": self.played}
        if cleared:
            message["cleared"] = True
        self.reported = self.played
        await self.ws.send_str(json.dumps(message))

    async def _speaker(self) -> None:
        while not self.ws.closed:
            await asyncio.sleep(REPORT_EVERY)
            self._advance()
            if self.played != self.reported or self.queued:
                await self._report()

    # ------------------------------------------------------------ microphone

    async def _mic(self, phase: float) -> None:
        await asyncio.sleep(phase)  # clients' microphones do not tick together
        began = time.monotonic()
        step = len(self.noise[0])
        while not self.ws.closed:
            data = self.noise[self.frames_sent % len(self.noise)]
            if self._speech is not None:
                pcm, done = self._speech
                data = pcm[self._offset : self._offset + step]
                self._offset += step
                if self._offset >= len(pcm):
                    self._speech = None
                    if not done.done():
                        done.set_result(None)
                if len(data) < step:
                    data += bytes(step - len(data))
            await self.ws.send_bytes(data)
            self.frames_sent += 1
            delay = began + self.frames_sent * self.frame_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async def say(self, pcm: bytes) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._offset = 0
        self._speech = (pcm, done)
        await asyncio.wait_for(done, len(pcm) / 2 / MIC_RATE + 5.0)

    async def wait_state(self, state: str, within: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self.state != state:
                    self.state_changed.clear()
                    await self.state_changed.wait()
                return True
        return False

    async def converse(self, clips: list[bytes], pause: float, first: float) -> None:
        """Say a request, wait for the answer to be played, pause, the next one."""
        await asyncio.sleep(first)
        n = 0
        while not self.ws.closed:
            await self.say(clips[n % len(clips)])
            n += 1
            if await self.wait_state("speaking", 5.0) and await self.wait_state("listening", 15.0):
                self.turns += 1
            await asyncio.sleep(pause)


def noise_frames(seed: int, frame_s: float) -> list[bytes]:
    rng = np.random.default_rng(seed)
    samples = round(MIC_RATE * frame_s)
    return [rng.normal(0, 30, samples).astype("<i2").tobytes() for _ in range(50)]


async def speech_clips() -> list[bytes]:
    sys.path.insert(0, str(HERE))
    from _voice import REQUESTS, clips

    return [c.pcm.astype("<i2").tobytes() for c in await clips(REQUESTS[:6])]


# --------------------------------------------------------------------- a run


async def run(
    server: Server, mode: str, sessions: int, args: argparse.Namespace, speech: list[bytes]
) -> dict[str, Any]:
    if not await server.wait_sessions(0, 20.0):
        raise RuntimeError("sessions of the previous run are still live")
    await asyncio.sleep(1.0)
    frame_s = args.frame_ms / 1000
    c0, w0 = server.cpu()[0], time.monotonic()
    await asyncio.sleep(args.idle)
    idle_pct = 100 * (server.cpu()[0] - c0) / (time.monotonic() - w0)

    http = aiohttp.ClientSession()
    clients: list[Client] = []
    talkers: list[asyncio.Task[None]] = []
    try:
        async with asyncio.timeout(60):
            for i in range(sessions):
                ws = await http.ws_connect(f"ws://{server.base}/ws", heartbeat=None)
                clients.append(Client(ws, noise_frames(i, frame_s), frame_s))
            phases = (i * frame_s / sessions for i in range(sessions))
            await asyncio.gather(*(c.start(p) for c, p in zip(clients, phases, strict=True)))
        if mode == "talking":
            # Staggered, so the clients do not all speak in the same 20 ms.
            talkers = [
                asyncio.create_task(c.converse(speech[i % 3 :], args.pause, i * 0.137))
                for i, c in enumerate(clients)
            ]
        await asyncio.sleep(args.warmup)
        load = load_average()
        frames0 = sum(c.frames_sent for c in clients)
        played0 = sum(c.played for c in clients)
        turns0 = sum(c.turns for c in clients)
        (c0, s0, m0), p0, w0 = server.cpu(), time.process_time(), time.monotonic()
        await asyncio.sleep(args.seconds)
        wall = time.monotonic() - w0
        c1, s1, m1 = server.cpu()
        server_pct = 100 * (c1 - c0) / wall
        sys_pct = 100 * (s1 - s0) / wall
        loop_pct = 100 * (m1 - m0) / wall
        client_pct = 100 * (time.process_time() - p0) / wall
        frames = sum(c.frames_sent for c in clients) - frames0
        played = sum(c.played for c in clients) - played0
        turns = sum(c.turns for c in clients) - turns0
        states = sorted({c.state for c in clients})
        errors = sorted({e for c in clients for e in c.errors})
        rate = clients[0].rate
    finally:
        for task in talkers:
            task.cancel()
        if talkers:
            await asyncio.wait(talkers, timeout=5.0)
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        await http.close()
    per = (server_pct - idle_pct) / sessions
    return {
        "bench": "ws_cost",
        "mode": mode,
        "sessions": sessions,
        "vad": "none: bare aiohttp" if args.bare else args.vad,
        "mic_frame_ms": args.frame_ms,
        "seconds": round(wall, 2),
        "load_1m": round(load, 2),
        "server_cpu_core_pct": round(server_pct, 2),
        "server_sys_pct": round(sys_pct, 2),
        "server_loop_thread_pct": round(loop_pct, 2),
        "idle_server_core_pct": round(idle_pct, 2),
        "per_session_core_pct": round(per, 3),
        "client_cpu_core_pct": round(client_pct, 2),
        "client_per_session_core_pct": round(client_pct / sessions, 3),
        "mic_audio_s_per_s_per_session": round(frames * frame_s / wall / sessions, 3),
        "agent_audio_s_per_s_per_session": round(played / rate / wall / sessions, 3),
        "turns": turns,
        "agent_states_at_end": states,
        "errors": errors,
    }


COLUMNS = (
    ("mode", "mode"),
    ("N", "sessions"),
    ("load 1m", "load_1m"),
    ("server %", "server_cpu_core_pct"),
    ("of it sys %", "server_sys_pct"),
    ("loop thread %", "server_loop_thread_pct"),
    ("idle %", "idle_server_core_pct"),
    ("per session %", "per_session_core_pct"),
    ("client %", "client_cpu_core_pct"),
    ("agent audio s/s", "agent_audio_s_per_s_per_session"),
    ("turns", "turns"),
)


def table(results: list[dict[str, Any]]) -> str:
    """The runs as a Markdown table (% of one core)."""
    lines = ["| " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    for r in results:
        lines.append("| " + " | ".join(str(r[key]) for _, key in COLUMNS) + " |")
    return "\n".join(lines)


async def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    counts = [int(n) for n in args.sessions.split(",")]
    modes = args.modes.split(",")
    speech = await speech_clips() if "talking" in modes else []
    server = Server(max(counts) + 1, args.vad, bare=args.bare)
    results: list[dict[str, Any]] = []
    try:
        await server.wait_up()
        for mode in modes:
            for n in counts:
                result = await run(server, mode, n, args, speech)
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,5,10,20", help="client counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured wall time per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--idle", type=float, default=3.0, help="idle-server baseline per run")
    parser.add_argument("--modes", default="listening,talking")
    parser.add_argument(
        "--vad", choices=("silero", "energy"), default="silero", help="energy: without Silero"
    )
    parser.add_argument(
        "--bare", action="store_true", help="the floor: a bare aiohttp server, listening only"
    )
    parser.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--frame-ms", type=float, default=20.0, help="microphone frame length")
    parser.add_argument("--pause", type=float, default=0.5, help="talking: s between turns")
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server)
        return
    if args.bare:
        args.modes = "listening"
    budget = len(args.modes.split(",")) * len(args.sessions.split(","))
    budget *= args.seconds + args.warmup + args.idle + 40
    results = asyncio.run(asyncio.wait_for(bench(args), budget + 60))
    print(table(results), file=sys.stderr)


if __name__ == "__main__":
    main()
