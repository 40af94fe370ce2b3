"""A ``rejoinder`` command (``dev``, ``serve``) as a subprocess on 127.0.0.1, for tests that
drive it from outside as a client would: started with ``--port 0``, its port read from the
URLs it prints, its output kept, killed at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REJOINDER = [sys.executable, "-m", "rejoinder.cli"]
STARTUP_TIMEOUT = 15.0


@dataclass
class Server:
    process: asyncio.subprocess.Process
    port: int
    lines: list[str] = field(default_factory=list)
    """Every line it printed so far (stdout, and stderr when asked for), read as it comes,
    so a chatty server never blocks on a full pipe."""
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _ended: bool = False

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def pump(self) -> None:
        assert self.process.stdout is not None
        try:
            while raw := await self.process.stdout.readline():
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._arrived.set()
        finally:
            self._ended = True
            self._arrived.set()

    async def wait_line(self, pattern: str, within: float = 10.0) -> str:
        """The first line (seen before or arriving) that matches ``pattern``."""
        async with asyncio.timeout(within):
            index = 0
            while True:
                while index < len(self.lines):
                    if re.search(pattern, self.lines[index]):
                        return self.lines[index]
                    index += 1
                if self._ended:
                    raise AssertionError(f"the server exited; its output: {self.lines}")
                self._arrived.clear()
                await self._arrived.wait()

    async def exit_code(self, within: float) -> int:
        async with asyncio.timeout(within):
            code = await self.process.wait()
            while not self._ended:
                self._arrived.clear()
                await self._arrived.wait()
            return code


@contextlib.asynccontextmanager
async def server(
    argv: Sequence[str],
    command: Sequence[str] = REJOINDER,
    *,
    with_stderr: bool = False,
    startup_timeout: float = STARTUP_TIMEOUT,
) -> AsyncIterator[Server]:
    """``command ARGV --port 0`` in the repository, until it printed its URLs within
    ``startup_timeout`` seconds (``with_stderr``: its log lines go to ``lines`` too)."""
    process = await asyncio.create_subprocess_exec(
        *command,
        *argv,
        "--port",
        "0",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if with_stderr else None,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    running = Server(process, 0)
    pump = asyncio.create_task(running.pump())
    try:
        line = await running.wait_line(r"health: +http://127\.0\.0\.1:\d+/healthz", startup_timeout)
        match = re.search(r":(\d+)/healthz", line)
        assert match is not None
        running.port = int(match.group(1))
        yield running
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await asyncio.wait_for(pump, 5)
