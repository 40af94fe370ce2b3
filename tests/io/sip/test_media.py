"""RtpCall over real UDP sockets on 127.0.0.1 (real time, each test well under a
second): the port and the ``Connection``, symmetric RTP latching, junk and foreign
payload types ignored, keys both ways, hold, liveness and closing."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from rejoinder.io.sip.media import RtpCall, SipMediaOptions
from rejoinder.io.sip.ports import NoFreePort
from rejoinder.io.sip.rfc4733 import build_event, parse_event
from rejoinder.io.sip.rtp import RtpPacket, RtpSender, build_rtp, parse_rtp
from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame

pytestmark = [pytest.mark.looptime(False), pytest.mark.timeout(30)]

OPTIONS = SipMediaOptions(rtp_ports=(0, 0), mic_batch_interval=0)


class Peer(asyncio.DatagramProtocol):
    """The far end: a UDP socket that records what it receives and sends RTP."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.received: list[tuple[float, RtpPacket]] = []
        self.sender = RtpSender(0, origin=self.loop.time())
        self.transport: asyncio.DatagramTransport | None = None
        self.target: tuple[str, int] | None = None
        self.arrived = asyncio.Event()

    @classmethod
    async def open(cls) -> Peer:
        loop = asyncio.get_running_loop()
        _, peer = await loop.create_datagram_endpoint(cls, local_addr=("127.0.0.1", 0))
        return peer

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        packet = parse_rtp(data)
        assert isinstance(packet, RtpPacket), packet
        self.received.append((self.loop.time(), packet))
        self.arrived.set()

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def send(
        self, payload: bytes, *, pt: int = 0, marker: bool = False, ts: int | None = None
    ) -> None:
        assert self.transport is not None and self.target is not None
        timestamp = self.sender.timestamp_at(self.loop.time()) if ts is None else ts
        data = self.sender.packet(payload, timestamp=timestamp, marker=marker, payload_type=pt)
        self.transport.sendto(data, self.target)

    def send_raw(self, data: bytes) -> None:
        assert self.transport is not None and self.target is not None
        self.transport.sendto(data, self.target)

    async def say(self, pcm: np.ndarray[Any, np.dtype[np.int16]]) -> None:
        """Stream ``pcm`` as 20 ms μ-law packets in real time."""
        start = self.loop.time()
        first_ts = self.sender.timestamp_at(start)
        for i in range(0, len(pcm) - 159, 160):
            delay = start + i / 8000 - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.send(g711.ulaw_encode(pcm[i : i + 160]), marker=i == 0, ts=first_ts + i)

    async def press(self, key: int, ts: int) -> None:
        for duration in (160, 320, 480):
            self.send(build_event(key, end=False, duration=duration), pt=101, ts=ts)
            await asyncio.sleep(0.02)
        for _ in range(3):
            self.send(build_event(key, end=True, duration=640), pt=101, ts=ts)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_call(peer: Peer, **overrides: Any) -> RtpCall:
    params: dict[str, Any] = {
        "bind_host": "127.0.0.1",
        "remote_host": "127.0.0.1",
        "remote_port": peer.port,
        "codec": "PCMU",
        "payload_type": 0,
        "dtmf_payload_type": 101,
        "call_id": "call-1",
        "from_number": "+15550001",
        "to_number": "+15550002",
        "parameters": {"X-Customer": "42"},
        "remote": "127.0.0.1:5060",
        "options": OPTIONS,
    }
    params.update(overrides)
    call = await RtpCall.open(**params)
    peer.target = ("127.0.0.1", call.local_port)
    return call


@pytest.fixture
async def peers() -> AsyncIterator[Callable[[], Any]]:
    made: list[Peer] = []
    calls: list[RtpCall] = []

    async def make() -> tuple[Peer, Callable[..., Any]]:
        peer = await Peer.open()
        made.append(peer)

        async def opener(**overrides: Any) -> RtpCall:
            call = await open_call(peer, **overrides)
            calls.append(call)
            return call

        return peer, opener

    yield make
    for call in calls:
        await call.aclose()
    for peer in made:
        peer.close()


async def until(condition: Callable[[], bool], timeout: float = 2.0) -> None:  # noqa: ASYNC109
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - conditions on sockets' side effects
            await asyncio.sleep(0.005)


async def test_the_call_binds_a_port_and_describes_itself(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    assert call.local_port > 0
    conn = call.connection
    assert conn.transport == "sip" and conn.remote == "127.0.0.1:5060"
    assert conn.call is not None
    assert (conn.call.provider, conn.call.call_id, conn.call.codec) == ("sip", "call-1", "mulaw")
    assert (conn.call.from_number, conn.call.to_number) == ("+15550001", "+15550002")
    assert conn.call.parameters == {"X-Customer": "42"} and conn.call.sample_rate == 8000
    assert call.sending_to == ("127.0.0.1", peer.port)
    with pytest.raises(ValueError, match="unsupported codec"):
        await open_(codec="G729", payload_type=18)


def test_options_are_validated() -> None:
    for bad in (
        {"rtp_ports": (20000, 10000)},
        {"rtp_ports": (80, 100)},
        {"jitter_depth": 0.0},
        {"jitter_capacity": 0.02, "jitter_depth": 0.06},
        {"rtp_timeout": 0},
        {"playout_delay": -1},
    ):
        with pytest.raises(ValueError, match="must"):
            SipMediaOptions(**bad)


def occupy_even_port() -> tuple[socket.socket, int]:
    """A socket on an even port whose odd neighbour and the next even one are free."""
    for _ in range(50):
        base = random.randrange(42000, 58000, 2)
        taken = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            taken.bind(("127.0.0.1", base))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.bind(("127.0.0.1", base + 2))
        except OSError:
            taken.close()
            continue
        return taken, base
    raise RuntimeError("no free ports to test with")


async def test_a_taken_port_is_skipped_and_a_full_range_refused(peers: Any) -> None:
    _, open_ = await peers()
    taken, base = occupy_even_port()
    with taken:
        opts = SipMediaOptions(rtp_ports=(base, base + 3))
        call = await open_(options=opts)
        assert call.local_port == base + 2  # even ports only, the taken one skipped
        with pytest.raises(NoFreePort):
            await open_(options=opts)


async def test_caller_audio_reaches_the_microphone_in_order(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    tone = (np.sin(np.arange(1600) / 8000 * 2 * np.pi * 300) * 8000).astype(np.int16)
    await peer.say(tone)
    heard: list[np.ndarray[Any, np.dtype[np.int16]]] = []

    async def listen() -> None:
        async for frame in call.connection.audio_input:
            heard.append(frame.data)
            if sum(np.abs(f).max() > 1000 for f in heard) == 10:
                return

    await asyncio.wait_for(listen(), 2)
    audio = np.concatenate(heard)
    start = int(np.argmax(np.abs(audio) > 1000)) // 160 * 160
    expected = g711.ulaw_decode(g711.ulaw_encode(tone))
    assert np.array_equal(audio[start : start + 1600], expected)


async def test_symmetric_rtp_latches_to_where_the_packets_come_from(
    peers: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sdp_peer, open_ = await peers()
    nat_peer, _ = await peers()  # the far end's real address, behind a NAT
    stranger, _ = await peers()
    call = await open_()
    assert call.sending_to == ("127.0.0.1", sdp_peer.port)
    nat_peer.target = stranger.target = ("127.0.0.1", call.local_port)
    caplog.set_level(logging.WARNING, "rejoinder.io.sip")
    nat_peer.send(b"\xff" * 160, marker=True)
    await until(lambda: call.sending_to == ("127.0.0.1", nat_peer.port))
    # From now on a stranger's packets are dropped, and our audio goes to the NAT side.
    stranger.send(b"\x00" * 160)
    await until(lambda: call.dropped_sources == 1)
    await call.playback.capture_frame(AudioFrame(np.full(160, 500, np.int16), 8000))
    await until(lambda: bool(nat_peer.received))
    assert not sdp_peer.received and not stranger.received
    # Junk and foreign payload types are ignored, each kind logged once.
    for _ in range(3):
        nat_peer.send_raw(b"\x00junk")
        nat_peer.send(b"\xff" * 20, pt=18)
    await until(lambda: call.junk == 7)  # the stranger's packet and these six
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("payload type 18" in w for w in warnings) == 1
    assert sum("shorter than an RTP header" in w for w in warnings) == 1
    # A re-INVITE latches afresh.
    call.update_remote("127.0.0.1", stranger.port, 8, "PCMA", None)
    assert call.sending_to == ("127.0.0.1", stranger.port)
    assert call.connection.call is not None and call.connection.call.codec == "alaw"


async def test_keys_pressed_become_keypad_presses_once_each(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    keys: list[str] = []
    call.connection.keypad = keys.append  # type: ignore[method-assign]
    await peer.press(1, ts=1000)
    await peer.press(11, ts=3000)
    await until(lambda: len(keys) == 2)
    await asyncio.sleep(0.05)
    assert keys == ["1", "#"]


async def test_keys_sent_as_rfc4733_events(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    loop = asyncio.get_running_loop()
    start = loop.time()
    await call.send_dtmf("5w#")
    took = loop.time() - start
    assert took == pytest.approx(0.2 + 0.5 + 0.2, abs=0.05)
    await until(lambda: len(peer.received) == 14)
    events = [(t, p, parse_event(p.payload)) for t, p in peer.received]
    assert all(p.payload_type == 101 for _, p, _ in events)
    five = [(t, p, e) for t, p, e in events if e is not None and e.key == "5"]
    pound = [(t, p, e) for t, p, e in events if e is not None and e.key == "#"]
    assert len(five) == len(pound) == 7
    for press in (five, pound):
        assert len({p.timestamp for _, p, _ in press}) == 1  # one event, one timestamp
        assert [p.marker for _, p, _ in press] == [True] + [False] * 6
        assert [e.end for _, _, e in press if e is not None] == [False] * 4 + [True] * 3
    # The pause: the second key starts 0.5 s after the first one's quiet gap.
    assert pound[0][0] - five[0][0] == pytest.approx(0.7, abs=0.05)
    seqs = [p.sequence for _, p, _ in events]
    assert all((b - a) % 65536 == 1 for a, b in itertools.pairwise(seqs))
    with pytest.raises(ValueError, match="cannot press"):
        await call.send_dtmf("12x")
    plain = await open_(dtmf_payload_type=None)
    with pytest.raises(RuntimeError, match="telephone-event"):
        await plain.send_dtmf("1")


async def test_hold_stops_sending_and_silences_the_caller(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    call.set_hold(True)
    assert call.held and call.playback.on_hold
    capture = asyncio.ensure_future(
        call.playback.capture_frame(AudioFrame(np.full(800, 500, np.int16), 8000))
    )
    peer.send(g711.ulaw_encode(np.full(160, 8000, np.int16)))
    await asyncio.sleep(0.15)
    assert not peer.received and len(call.jitter) == 0  # music on hold is not the caller
    with pytest.raises(RuntimeError, match="on hold"):
        await call.send_dtmf("1")
    call.set_hold(False)
    await capture
    await until(lambda: len(peer.received) == 5)


async def test_no_rtp_for_the_timeout_calls_on_dead_once_but_not_on_hold(peers: Any) -> None:
    peer, open_ = await peers()
    # RTP every 0.1 s against a 0.6 s timeout: a loaded machine's stall is no silence
    opts = SipMediaOptions(rtp_ports=(0, 0), rtp_timeout=0.6)
    live = await open_(options=opts)
    held = await open_(options=opts)
    dead: list[str] = []
    live.on_dead = dead.append
    held.on_dead = lambda why: dead.append(f"held: {why}")
    held.set_hold(True)
    peer.target = ("127.0.0.1", live.local_port)
    for _ in range(10):  # RTP keeps it alive, past the timeout
        peer.send(b"\xff" * 160)
        await asyncio.sleep(0.1)
    assert dead == []
    await until(lambda: bool(dead), 2)
    await asyncio.sleep(0.7)
    assert dead == ["no RTP for 0.6 s"]


async def test_hanging_up_ends_the_session_and_closes_the_socket(peers: Any) -> None:
    peer, open_ = await peers()
    call = await open_()
    call.client_left("call ended")
    assert call.connection.left and call.connection.left_reason == "call ended"
    assert call.closed
    await call.aclose()
    await call.aclose()  # idempotent
    peer.send(b"\xff" * 160)
    await asyncio.sleep(0.05)
    assert call.junk == 0 and len(call.jitter) == 0


async def test_random_datagrams_never_break_the_receive_path(peers: Any) -> None:
    """Well-formed headers with junk payloads, truncated packets and noise, on both
    negotiated payload types: nothing raises, the buffer stays bounded, the call lives."""
    peer, open_ = await peers()
    call = await open_()
    keys: list[str] = []
    call.connection.keypad = keys.append  # type: ignore[method-assign]
    rng = random.Random(7)
    source = ("127.0.0.1", peer.port)
    for i in range(3000):
        kind = i % 3
        if kind == 0:
            data = rng.randbytes(rng.randrange(0, 40))
        else:
            pt = 0 if kind == 1 else 101
            header = RtpPacket(pt, rng.randrange(65536), rng.randrange(2**32), 5, b"")
            data = build_rtp(header) + rng.randbytes(rng.randrange(0, 300))
        call._datagram(data, source)
        assert len(call.jitter) <= call.jitter.capacity
    await asyncio.sleep(0.05)  # the playout clock ticked over whatever was held
    assert not call.closed and all(k in "0123456789*#ABCD" for k in keys)


async def test_a_quiet_call_sends_keepalive_silence(peers: Any) -> None:
    peer, open_ = await peers()
    await open_(options=SipMediaOptions(rtp_ports=(0, 0), keepalive=0.1))
    await until(lambda: len(peer.received) >= 1, 1.5)
    _, packet = peer.received[0]
    assert packet.marker and packet.payload == b"\xff" * 160  # μ-law silence
