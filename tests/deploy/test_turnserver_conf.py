"""container/turnserver.conf in a real coturn: Debian's turnserver (4.6.1 here; the
compose file runs coturn's image, 4.17) started with that file and the options compose
adds, on 127.0.0.1. A TURN client (aioice's) then finds what the file promises:

- credentials made from the shared secret (the TURN REST scheme) get an allocation;
  others are refused (401);
- a permission for the agent's network (172.31.240.0/24) is granted, and one for any
  other private, loopback or link-local address is refused (403), as is a TCP relay;
- coturn read every line of the file without an error.

Real time on loopback, about a second; skipped without ``turnserver``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .conftest import CONTAINER

stun = pytest.importorskip("aioice.stun", reason="the TURN client is aioice's (rejoinder[webrtc])")
turn = pytest.importorskip("aioice.turn")

TURNSERVER = shutil.which("turnserver")
pytestmark = [
    pytest.mark.skipif(
        TURNSERVER is None, reason="coturn's turnserver is missing (make turn-tools)"
    ),
    pytest.mark.looptime(False),
]
SECRET = "0123456789abcdef" * 4
REALM = "rejoinder.test"


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (coturn listens on both)."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port: int = udp.getsockname()[1]
            with socket.socket() as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise AssertionError("no port free for UDP and TCP")


def credentials(secret: str = SECRET) -> tuple[str, str]:
    username = f"{int(time.time()) + 3600}:session_test"
    password = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(password).decode()


@contextlib.asynccontextmanager
async def coturn(folder: Path) -> AsyncIterator[tuple[int, list[str]]]:
    """coturn with container/turnserver.conf and what compose.yaml adds (the secret, the
    realm, the external address), moved onto loopback and a free port."""
    assert TURNSERVER is not None
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        TURNSERVER,
        "-c", str(CONTAINER / "turnserver.conf"),
        f"--static-auth-secret={SECRET}",
        f"--realm={REALM}",
        "--external-ip=127.0.0.1",
        # loopback instead of the host's addresses, and the port a test can have
        "--listening-ip=127.0.0.1",
        "--relay-ip=127.0.0.1",
        f"--listening-port={port}",
        # one listener thread: with one per core a client's second request may reach a
        # thread that does not know the nonce (as tests/io/_turn_server.py found)
        "--relay-threads=0",
        "--verbose",  # it logs its listeners only then: when they are open, it is ready
        f"--pidfile={folder / 'turnserver.pid'}",
        f"--userdb={folder / 'turndb'}",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []

    async def read() -> None:
        assert process.stdout is not None
        async for raw in process.stdout:
            lines.append(raw.decode("utf-8", "replace").rstrip())

    reader = asyncio.create_task(read())
    try:
        async with asyncio.timeout(10):
            while not any(
                f"UDP listener opened on: 127.0.0.1:{port}" in x for x in lines
            ) or not any("Total General servers" in x for x in lines):
                assert process.returncode is None, lines[-20:]
                await asyncio.sleep(0.05)
        yield port, lines
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 3)
            except TimeoutError:
                process.kill()
                await process.wait()
        await asyncio.wait_for(reader, 3)


@contextlib.asynccontextmanager
async def client(port: int, username: str, password: str) -> AsyncIterator[object]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: turn.TurnClientUdpProtocol(
            ("127.0.0.1", port), username=username, password=password, lifetime=600,
            channel_refresh_time=500,
        ),
        remote_addr=("127.0.0.1", port),
    )  # fmt: skip
    try:
        yield protocol
    finally:
        if protocol.refresh_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(protocol.delete(), 3)
        transport.close()


async def refused(call: object) -> int:
    try:
        await asyncio.wait_for(call, 10)  # type: ignore[arg-type]
    except stun.TransactionFailed as exc:
        return int(exc.response.attributes["ERROR-CODE"][0])
    return 0


async def test_coturn_takes_the_secrets_credentials_and_relays_to_the_agent_only(
    tmp_path: Path,
) -> None:
    async with coturn(tmp_path) as (port, lines):
        async with client(port, *credentials()) as relay:
            relayed = await asyncio.wait_for(relay.connect(), 10)  # type: ignore[attr-defined]
            assert relayed[0] == "127.0.0.1"
            # the agent's network: granted
            await asyncio.wait_for(relay.channel_bind(0x4000, ("172.31.240.2", 40000)), 10)  # type: ignore[attr-defined]
            # everything else private: refused, whatever the port
            for number, peer in enumerate(
                ["10.0.0.5", "192.168.1.1", "172.17.0.1", "169.254.169.254", "127.0.0.1",
                 "100.64.0.1", "172.31.241.2"],
                start=0x4001,
            ):  # fmt: skip
                code = await refused(relay.channel_bind(number, (peer, 40000)))  # type: ignore[attr-defined]
                assert code == 403, f"{peer}: {code}"
        # a TCP relay (RFC 6062) is not offered
        async with client(port, *credentials()) as tcp_relay:
            request = stun.Message(
                message_method=stun.Method.ALLOCATE, message_class=stun.Class.REQUEST
            )
            request.attributes["REQUESTED-TRANSPORT"] = 6 << 24  # TCP
            assert await refused(tcp_relay.request_with_retry(request)) == 442  # type: ignore[attr-defined]
        # credentials from another secret: no allocation
        async with client(port, *credentials("not-the-secret")) as stranger:
            assert await refused(stranger.connect()) == 401  # type: ignore[attr-defined]
    errors = [line for line in lines if "ERROR" in line and "403" not in line and "401" not in line]
    assert not [line for line in errors if "onfig" in line or "format" in line.lower()], errors
    assert not [line for line in lines if "Wrong address format" in line]
