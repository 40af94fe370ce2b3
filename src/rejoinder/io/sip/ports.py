"""Binding a call's RTP socket on a free even port of the configured range.

RTP goes on an even port and RTCP on the next odd one (RFC 3550 §11); trunks and
firewalls are configured with a range (Asterisk's default is 10000-20000). Each call
tries even ports from a random place in the range, so two processes sharing it rarely
try the same ones, and the OS says which are taken (``EADDRINUSE``): no registry to keep
in step with the sockets. The range ``(0, 0)`` lets the OS pick any port (tests).

Also the address checks the media needs: an SDP address may be a name (resolved once,
off the loop's thread), a port must be in range.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import random
import socket
from collections.abc import Callable
from typing import Any, cast

__all__ = ["NoFreePort", "RtpSocket", "bind_rtp_socket", "check_port", "is_ip", "resolve"]

logger = logging.getLogger("rejoinder.io.sip")

MAX_TRIES = 64
"""Ports tried before giving up (the range is full, or something else is wrong)."""


class NoFreePort(OSError):
    """No even port of the range could be bound."""


class RtpSocket(asyncio.DatagramProtocol):
    """A bound RTP socket: ``on_datagram(data, (host, port))`` for each datagram;
    ``sendto``; ``close`` (``closed`` resolves once it is)."""

    def __init__(self) -> None:
        self.on_datagram: Callable[[bytes, tuple[str, int]], None] | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.port = 0
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (CPython's selector transport does not subclass DatagramTransport.)
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, ...]) -> None:
        if self.on_datagram is not None:
            self.on_datagram(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        # An ICMP port unreachable for a packet we sent: the far end is not there yet.
        logger.debug("RTP socket error: %s", exc)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(data, address)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        elif not self.closed.done():
            self.closed.set_result(None)


async def bind_rtp_socket(host: str, port_range: tuple[int, int]) -> RtpSocket:
    """Bind a UDP socket on ``host`` and an even port of ``port_range`` (inclusive).
    Raises ``NoFreePort`` when no port was free after ``MAX_TRIES``."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    if not infos:
        raise OSError(f"cannot resolve the RTP bind address {host!r}")
    family, _, _, _, address = infos[0]
    low, high = port_range
    candidates = [0] if (low, high) == (0, 0) else _even_ports(low, high)
    last_error: OSError | None = None
    for port in candidates:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((address[0], port, *address[2:]))
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            last_error = exc
            continue
        sock.setblocking(False)
        try:
            _, protocol = await loop.create_datagram_endpoint(RtpSocket, sock=sock)
        except BaseException:
            sock.close()
            raise
        protocol.port = int(sock.getsockname()[1])
        return protocol
    raise NoFreePort(f"no free even RTP port in {low}-{high} after {MAX_TRIES} tries") from (
        last_error
    )


def _even_ports(low: int, high: int) -> list[int]:
    first = low + (low % 2)
    count = (high - first) // 2 + 1
    if count <= 0:
        return []
    start = random.randrange(count)
    return [first + 2 * ((start + i) % count) for i in range(min(count, MAX_TRIES))]


def check_port(port: int) -> int:
    if not 0 < port < 65536:
        raise ValueError(f"RTP port {port} out of range")
    return port


async def resolve(host: str, port: int) -> str:
    """An IP address for ``host`` (SDP allows a name; sending needs an address)."""
    if is_ip(host):
        return host
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        logger.warning("cannot resolve the SDP address %r: %s", host, exc)
        return host
    return str(infos[0][4][0]) if infos else host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
