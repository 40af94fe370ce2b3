"""Running the built layout as the container would run it, as far as this machine allows.

As root, with util-linux's ``unshare`` and ``nsenter``, a "container" here is: a new PID
namespace (the server is PID 1, as under Docker, so SIGTERM reaches it only through the
handler it installs), a new network namespace (only its own loopback: port 8000 is its
own, and nothing outside is reachable), and the image's user (uid 10001, no
supplementary groups), its environment, its working folder. Docker's other walls (the
mount namespace with the image as ``/``, cgroups, seccomp, dropped capabilities) are not
built: the base image's files are this machine's. Without root, or without
``unshare``, commands run as plain processes of the current user on a free port, and the
report says so.

The probes that talk to the server run inside the same network namespace (``nsenter``),
as ``docker exec`` would run the HEALTHCHECK.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ContainerProcess", "Sandbox", "free_port", "run_once"]

# Brings the loopback up (when asked), drops to the image's user, then becomes the
# command: run by this machine's Python as PID 1 of the new namespaces, so the command
# is PID 1 too once it is exec'd.
_LAUNCHER = r"""
import fcntl, os, socket, struct, sys
uid, gid, loopback = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "lo"
if loopback:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        # SIOCSIFFLAGS on "lo": IFF_UP | IFF_LOOPBACK | IFF_RUNNING
        fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", 0x1 | 0x8 | 0x40))
if (uid, gid) != (os.getuid(), os.getgid()):
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
os.execvp(sys.argv[4], sys.argv[4:])
"""


@dataclass(frozen=True)
class Sandbox:
    """How commands are run: in namespaces as the image's user, or plainly."""

    namespaces: bool
    why_not: str = ""
    launcher_python: str = sys.executable

    @classmethod
    def detect(cls) -> Sandbox:
        if os.geteuid() != 0:
            return cls(False, "not root: no PID/network namespaces, no switch to the image's user")
        for tool in ("unshare", "nsenter"):
            if shutil.which(tool) is None:
                return cls(False, f"{tool} (util-linux) is missing")
        probe = subprocess.run(
            ["unshare", "--net", "--pid", "--fork", "true"], capture_output=True, text=True
        )
        if probe.returncode != 0:
            return cls(False, f"unshare refused here: {probe.stderr.strip()}")
        return cls(True)

    def command(self, argv: Sequence[str], *, uid: int, gid: int, network: str) -> list[str]:
        """``argv`` as PID 1 of fresh namespaces; ``network``: "lo" (its own loopback
        only) or "none" (no interface up at all)."""
        if not self.namespaces:
            return list(argv)
        return [
            "unshare", "--net", "--pid", "--fork", "--kill-child", "--",
            self.launcher_python, "-c", _LAUNCHER, str(uid), str(gid), network, *argv,
        ]  # fmt: skip

    def enter(self, pid: int, argv: Sequence[str], *, uid: int, gid: int) -> list[str]:
        """``argv`` in the network namespace of process ``pid`` (``docker exec``)."""
        if not self.namespaces:
            return list(argv)
        return [
            "nsenter", f"--target={pid}", "--net", "--",
            self.launcher_python, "-c", _LAUNCHER, str(uid), str(gid), "none", *argv,
        ]  # fmt: skip


def run_once(
    command: Sequence[str], *, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run to the end (killed after ``timeout`` seconds), output kept."""
    try:
        return subprocess.run(
            list(command), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return subprocess.CompletedProcess(list(command), 124, out, f"timed out after {timeout} s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ContainerProcess:
    """A long-running command (the server), its output collected line by line."""

    popen: subprocess.Popen[str]
    sandbox: Sandbox
    lines: list[str] = field(default_factory=list)
    _arrived: threading.Condition = field(default_factory=threading.Condition)
    _ended: bool = False

    @classmethod
    def start(
        cls, sandbox: Sandbox, argv: Sequence[str], *, env: dict[str, str], cwd: Path,
        uid: int, gid: int,
    ) -> ContainerProcess:  # fmt: skip
        popen = subprocess.Popen(
            sandbox.command(argv, uid=uid, gid=gid, network="lo"),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: cleaned up as one
        )
        process = cls(popen, sandbox)
        threading.Thread(target=process._pump, daemon=True).start()
        return process

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            with self._arrived:
                self.lines.append(raw.rstrip("\n"))
                self._arrived.notify_all()
        with self._arrived:
            self._ended = True
            self._arrived.notify_all()

    def wait_line(self, pattern: str, timeout: float) -> str | None:
        """The first line matching ``pattern`` (None: not within ``timeout`` or it ended)."""
        deadline = time.monotonic() + timeout
        index = 0
        with self._arrived:
            while True:
                while index < len(self.lines):
                    if re.search(pattern, self.lines[index]):
                        return self.lines[index]
                    index += 1
                left = deadline - time.monotonic()
                if self._ended or left <= 0:
                    return None
                self._arrived.wait(left)

    @property
    def server_pid(self) -> int:
        """This machine's id of the command (PID 1 of its namespace): the unshare's child."""
        if not self.sandbox.namespaces:
            return self.popen.pid
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            children = _children(self.popen.pid)
            if children:
                return children[0]
            time.sleep(0.02)
        raise RuntimeError("the namespaced process did not start")

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """Its whole process group, by id (only what this check started)."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    with contextlib.suppress(OSError):
        return [int(x) for x in path.read_text().split()]
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def loaded_libraries(pid: int) -> list[str]:
    """The shared objects a live process has mapped (what it really loaded, dlopen too)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if ".so" in line.split()[-1]})


class ProbeClient:
    """The session probe (``PROBE`` below) in the server's network, read event by event."""

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: Path) -> None:
        self.popen = subprocess.Popen(
            list(command), env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self.events: queue.Queue[dict[str, object] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                self.events.put(json.loads(raw))
        self.events.put(None)

    def until(self, name: str, timeout: float) -> Iterator[dict[str, object]]:
        """Events up to and including the one called ``name``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the probe said no {name!r} within {timeout:g} s") from None
            if event is None:
                stderr = self.popen.stderr.read() if self.popen.stderr else ""
                raise RuntimeError(f"the probe ended before {name!r}: {stderr[-2000:]}")
            yield event
            if event.get("event") == name:
                return

    def go_on(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write("go\n")
        self.popen.stdin.flush()

    def close(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)


# Run by the image's Python, as the image's user, with no network at all: every offline
# model the image carries is loaded and used once. The last line is the result.
MODELS = r"""
import asyncio, json, os, sys, time
import numpy as np

async def main():
    from rejoinder.models.audio import AudioFrame
    from rejoinder.providers import local
    out, took = {}, {}
    def lap(name, started):
        took[name] = round(time.monotonic() - started, 2)
    t = time.monotonic()
    piper = local.PiperTTS(); await piper.load()
    speech = [f async for f in piper.synthesize("What is the weather like in Paris today?")]
    lap("piper", t)
    out["piper_seconds"] = round(sum(f.duration for f in speech), 2)
    rate = speech[0].sample_rate
    quiet = AudioFrame(np.zeros(rate // 2, dtype=np.int16), rate)
    t = time.monotonic()
    stream = local.SileroVAD().stream()
    out["silero_events"] = [e.type for f in [quiet, *speech, quiet, quiet] for e in stream.push(f)]
    lap("silero", t)
    t = time.monotonic()
    whisper = local.WhisperSTT(); await whisper.load()
    out["whisper"] = (await whisper.transcribe(speech)).text
    lap("whisper tiny.en", t)
    t = time.monotonic()
    out["smart_turn"] = round(await local.SmartTurn().probability(speech), 3)
    lap("smart turn", t)
    t = time.monotonic()
    espeak = [f async for f in local.EspeakTTS().synthesize("Hello there.")]
    out["espeak_seconds"] = round(sum(f.duration for f in espeak), 2)
    lap("espeak", t)
    t = time.monotonic()
    out["pocketsphinx"] = await local.PocketSphinxSTT().recognize(speech)
    lap("pocketsphinx", t)
    t = time.monotonic()
    base = local.WhisperSTT(model="base", language=None); await base.load()
    out["whisper_base"] = "loaded" if base.loaded else "not loaded"  # both wheels, joined
    lap("whisper base", t)
    out["seconds"] = took
    with open("/proc/self/maps") as maps:
        out["libraries"] = sorted({l.split()[-1] for l in maps if ".so" in l.split()[-1]})
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # the model threads are done; nothing is left to close

asyncio.run(main())
"""

# Run by the image's Python inside the server's network (as root, like a client): one
# session over the WebSocket protocol, then the drain seen from the client's side.
PROBE = r"""
import asyncio, json, sys, time
import aiohttp

BASE = sys.argv[1]
WS = BASE.replace("http", "ws", 1) + "/ws"

def say(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)

async def main():
    async with aiohttp.ClientSession() as http:
        async with http.get(BASE + "/healthz") as r:
            say("health", status=r.status, body=await r.json())
        async with http.get(BASE + "/") as r:
            say("page", status=r.status, size=len(await r.read()))
        async with http.get(BASE + "/rejoinder-client.js") as r:
            say("sdk", status=r.status, size=len(await r.read()))
        ws = await http.ws_connect(WS)
        await ws.send_str(json.dumps({"type": "start", "sample_rate": 16000}))
        played, finals = 0, asyncio.Queue()
        closed = asyncio.get_running_loop().create_future()

        async def read():
            nonlocal played
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    played += len(msg.data) // 2  # heard at once: the reply may finish
                    await ws.send_str(json.dumps({"type": "played", "samples": played}))
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    m = json.loads(msg.data)
                    if m["type"] == "ready":
                        await finals.put(("ready", m.get("protocol")))
                    if m["type"] == "transcript" and m["role"] == "agent" and m["final"]:
                        await finals.put(("agent", m["text"]))
            closed.set_result((ws.close_code, time.monotonic()))

        reader = asyncio.create_task(read())
        ready = await asyncio.wait_for(finals.get(), 30)
        greeting = await asyncio.wait_for(finals.get(), 60)
        await ws.send_str(json.dumps({"type": "text", "text": "What's the weather in Paris?"}))
        reply = await asyncio.wait_for(finals.get(), 60)
        say("session", ready=ready, greeting=greeting[1], reply=reply[1], audio_samples=played)
        say("live")
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        signalled = time.monotonic()
        draining = None
        for _ in range(50):
            async with http.get(BASE + "/healthz") as r:
                body = await r.json()
                if body.get("status") == "draining":
                    draining = {"status": r.status, "body": body}
                    break
            await asyncio.sleep(0.1)
        say("draining", health=draining)
        try:
            refused = await http.ws_connect(WS)
            await refused.close()
            say("refused", status=101)
        except aiohttp.WSServerHandshakeError as exc:
            say("refused", status=exc.status)
        code, at = await asyncio.wait_for(closed, 120)
        say("closed", code=code, after=round(at - signalled, 2))
        await reader

asyncio.run(main())
"""
