"""A real TURN server for the ICE tests: Debian's coturn (``turnserver``) on 127.0.0.1.

``coturn(...)`` starts one for a test, on a free port, with a static user
(``--lt-cred-mech --user``) or a TURN REST shared secret (``--use-auth-secret``), and
stops it after. Its log (``--log-file=stdout --verbose``) is read as it comes, so a test
can wait for what coturn says: that it refused a credential (401), or how many packets it
relayed to and from the peer (its "peer usage" line when an allocation closes).

Loopback: coturn refuses to relay to peers on 127.x (``no-loopback-peers`` is its default
since it is a way into the TURN host's own services); ``--allow-loopback-peers`` lifts
that, and coturn accepts it only with the telnet CLI off or password-protected, hence
``--no-cli``. The relay addresses are 127.0.0.1 too (``--relay-ip``), so a client's relay
candidate and our server's host candidate (``WebRTCOptions.host_addresses``) meet on
loopback and nothing leaves the machine. TLS, DTLS and RFC 5780's second address are off:
nothing here needs them, and each would open one more port. One thread (``--relay-threads
0``): coturn's default of one UDP listener per core lets a client's second request land
on a thread that does not know its nonce, while the listeners are still opening.

Needs ``turnserver`` (``apt-get install coturn``; ``make turn-tools``): ``needs_coturn``
skips, saying why, without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TURNSERVER = shutil.which("turnserver")
needs_coturn = pytest.mark.skipif(
    TURNSERVER is None,
    reason="coturn's turnserver is missing (apt-get install coturn, or make turn-tools)",
)
REALM = "rejoinder.test"
START_WITHIN = 5.0
_PEER_USAGE = re.compile(
    r"peer usage: realm=<[^>]*>, username=<([^>]*)>, rp=(\d+), rb=\d+, sp=(\d+)"
)


@dataclass
class Coturn:
    port: int
    process: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, transport: str = "udp") -> str:
        return f"turn:127.0.0.1:{self.port}?transport={transport}"

    async def wait_for(self, pattern: str, within: float) -> re.Match[str]:
        """The first log line (from the start) that matches ``pattern``."""
        wanted = re.compile(pattern)
        try:
            async with asyncio.timeout(within):
                seen = 0
                while True:
                    for line in self.lines[seen:]:
                        if found := wanted.search(line):
                            return found
                    seen = len(self.lines)
                    if self.process.returncode is not None:
                        raise AssertionError(f"turnserver exited: {self.lines[-20:]}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            tail = "\n".join(self.lines[-30:])
            raise AssertionError(f"coturn did not log {pattern!r} in {within} s:\n{tail}") from None

    async def until_relayed(self, packets: int, within: float) -> dict[str, tuple[int, int]]:
        """``relayed()`` once one username's closed allocations relayed more than
        ``packets`` each way (a client's unused allocations close first, with next to
        nothing relayed, and the one it used when it leaves)."""
        async with asyncio.timeout(within):
            while True:
                counts = self.relayed()
                if any(got > packets and sent > packets for got, sent in counts.values()):
                    return counts
                if self.process.returncode is not None:
                    raise AssertionError(f"turnserver exited: {self.lines[-20:]}")
                self._changed.clear()
                await self._changed.wait()

    def relayed(self) -> dict[str, tuple[int, int]]:
        """Packets relayed per TURN username, from the peer and to it (closed allocations)."""
        counts: dict[str, tuple[int, int]] = {}
        for line in self.lines:
            if found := _PEER_USAGE.search(line):
                got, sent = counts.get(found[1], (0, 0))
                counts[found[1]] = (got + int(found[2]), sent + int(found[3]))
        return counts

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip())
            self._changed.set()
        self._changed.set()


def free_port() -> int:
    """A port free on 127.0.0.1 for both UDP and TCP (at the time of asking)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port: int = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise AssertionError("no port free for both UDP and TCP on 127.0.0.1")


@contextlib.asynccontextmanager
async def coturn(
    folder: Path,
    *,
    user: tuple[str, str] | None = None,
    secret: str | None = None,
    loopback_peers: bool = True,
) -> AsyncIterator[Coturn]:
    """coturn on 127.0.0.1 with a static ``user`` (name, password) or a TURN REST
    ``secret``, until the block ends; its database and pid file in ``folder``.
    ``loopback_peers`` False: coturn's default, which refuses to relay to our server on
    127.0.0.1 (allocations succeed, then ICE finds no path)."""
    assert TURNSERVER is not None
    port = free_port()
    auth = (
        ["--lt-cred-mech", f"--user={user[0]}:{user[1]}"]
        if user is not None
        else ["--use-auth-secret", f"--static-auth-secret={secret}"]
    )
    process = await asyncio.create_subprocess_exec(
        TURNSERVER,
        "-n",  # no configuration file: only these options
        "--listening-ip=127.0.0.1",
        "--relay-ip=127.0.0.1",
        f"--listening-port={port}",
        f"--realm={REALM}",
        *auth,
        *(["--allow-loopback-peers"] if loopback_peers else []),
        "--no-cli",
        "--no-tls",
        "--no-dtls",
        "--no-rfc5780",
        # One thread: with one per core, a client's next request can reach another
        # thread's socket, which does not know the nonce the first one gave it (438).
        "--relay-threads=0",
        "--log-file=stdout",
        "--verbose",
        f"--pidfile={folder / 'turnserver.pid'}",
        f"--userdb={folder / 'turndb'}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    server = Coturn(port, process)
    reader = asyncio.create_task(server._read())
    try:
        await server.wait_for(rf"UDP listener opened on: 127\.0\.0\.1:{port}\b", START_WITHIN)
        await server.wait_for(r"Total General servers: 1\b", START_WITHIN)  # all listening
        yield server
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 3)
            except TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.wait_for(reader, 3)
