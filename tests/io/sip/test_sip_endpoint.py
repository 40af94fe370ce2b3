"""``SipEndpoint`` over a real UDP socket on 127.0.0.1 with junk, floods and the
options' validation: bad input never breaks it (it still answers afterwards), and each
kind of fault is logged once, not once per datagram."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from rejoinder.io.sip import SipOptions
from rejoinder.io.sip.message import parse

from ._sip_support import Entry, running_endpoint

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(10)]


def options_request(branch: str) -> bytes:
    return (
        f"OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK{branch}\r\n"
        "From: <sip:probe@127.0.0.1>;tag=p\r\nTo: <sip:127.0.0.1>\r\nCall-ID: probe\r\n"
        "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    ).encode()


async def exchange(
    port: int, datagrams: list[bytes], wait: float = 0.3, host: str = "127.0.0.1"
) -> list[bytes]:
    """Send ``datagrams`` from one socket; everything that came back within ``wait``."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))
        probe.setblocking(False)
        for data in datagrams:
            probe.sendto(data, (host, port))
        answers: list[bytes] = []
        deadline = loop.time() + wait
        while (left := deadline - loop.time()) > 0:
            try:
                answers.append(await asyncio.wait_for(loop.sock_recv(probe, 65536), left))
            except TimeoutError:
                break
        return answers


async def test_junk_is_dropped_logged_once_per_kind_and_the_endpoint_still_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "rejoinder.io.sip")
    broken = options_request("b").replace(b"CSeq: 1 OPTIONS", b"CSeq: 1 INVITE")
    junk = [b"\x00\xff" * 40, b"GET / HTTP/1.1\r\n\r\n", b"x" * 40_000, b"\r\n\r\n", broken]
    async with running_endpoint(Entry()) as (_, port):
        answers = await exchange(port, junk * 3 + [options_request("ok")])
    statuses = sorted(parse(a).status or 0 for a in answers)
    assert statuses == [200, 400, 400, 400]  # the near-request answered, the rest dropped
    logged = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    kinds = {m.split(": ")[1] for m in logged}
    assert len(logged) == len(kinds)  # once per kind, not per datagram
    assert kinds >= {"truncated", "version", "cseq", "oversized"}


async def test_a_flood_is_cut_to_the_rate_limit() -> None:
    async with running_endpoint(Entry(), max_datagrams_per_second=20, burst=10) as (_, port):
        answers = await exchange(port, [options_request(str(i)) for i in range(60)])
    assert 10 <= len(answers) <= 20  # the burst, and what refilled while they came


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"allow_from": ("not-a-network",)}, "allow_from"),
        ({"allow_from": ()}, "allow_from is empty"),
        ({"username": "u"}, "both username and password"),
        ({"port": 70000}, "not a port"),
        ({"hangup_delay": -1}, "hangup_delay"),
        ({"public_host": "sip.example.com"}, "must be an IP address"),
        ({"username": "u", "password": "p", "digest_algorithms": ("SHA-1",)}, "algorithms"),
    ],
)
def test_bad_options_are_refused_when_made(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SipOptions(**options)  # type: ignore[arg-type]


async def test_ipv6_loopback_is_answered_and_other_ipv6_sources_are_not() -> None:
    async with running_endpoint(Entry(), host="::1") as (_, port):
        answers = await exchange(port, [options_request("v6")], host="::1")
    assert [parse(a).status for a in answers] == [200]
    async with running_endpoint(Entry(), host="::1", allow_from=("127.0.0.0/8",)) as (_, port):
        answers = await exchange(port, [options_request("v6")], host="::1")
    assert [parse(a).status for a in answers] == [403]
