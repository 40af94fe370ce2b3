"""A server the benchmark talks to from outside: a child process (``rejoinder serve``, as
a user runs it) with its output in a temporary log, up once ``/healthz`` answers 200,
stopped with SIGTERM (killed if it hangs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp


class ServedProcess:
    def __init__(
        self,
        command: Sequence[str],
        port: int,
        *,
        log_prefix: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port = port
        self.base = f"127.0.0.1:{port}"
        self.url = f"http://{self.base}"
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            "w+", prefix=log_prefix, suffix=".log", delete=False
        )
        self.proc = subprocess.Popen(
            list(command), stdout=self.log, stderr=subprocess.STDOUT, env=env
        )

    async def wait_up(self, within: float = 60.0, poll: float = 0.2) -> None:
        async with asyncio.timeout(within), aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited: {self.tail()}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{self.url}/healthz") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(poll)

    def tail(self, chars: int = 2000) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)
