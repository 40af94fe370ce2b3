"""Shared pieces of the SIP signalling tests: a stand-in for the call's RTP (it binds a
UDP port and counts what arrives, nothing more), an endpoint on a free loopback port,
and SIPp run as a bounded subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rejoinder.io.admission import SessionGate
from rejoinder.io.connection import Connection, PushAudioInput
from rejoinder.io.playback import ReportedPlayback
from rejoinder.io.sip import SipEndpoint, SipOptions
from rejoinder.io.telephony.dialects import CallInfo
from rejoinder.models import g711

SCENARIOS = Path(__file__).parent / "scenarios"
SIPP = shutil.which("sipp")


class _Counter(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.packets = 0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.packets += 1


class StandInMedia:
    """Binds an RTP port on 127.0.0.1 and counts packets; what ``RtpCall`` does with
    audio is the media helper's, not tested here."""

    def __init__(
        self, transport: asyncio.DatagramTransport, counter: _Counter, kwargs: Mapping[str, Any]
    ) -> None:
        self.transport = transport
        self.counter = counter
        self.opened_with = dict(kwargs)
        self.local_port = int(transport.get_extra_info("sockname")[1])
        self.on_dead: Callable[[str], None] | None = None
        self.updates: list[tuple[str, int, int, str, int | None]] = []
        self.holds: list[bool] = []
        self.keys: list[str] = []
        self.left: list[str] = []
        self.closed = False

        async def no_audio(frame: object) -> None:
            return None

        call = CallInfo(
            provider="sip",
            call_id=kwargs["call_id"],
            stream_id=kwargs["call_id"],
            codec="mulaw" if kwargs["codec"] == "PCMU" else "alaw",
            sample_rate=8000,
            from_number=kwargs["from_number"],
            to_number=kwargs["to_number"],
            parameters=dict(kwargs["parameters"]),
        )
        self.connection = Connection(
            transport="sip",
            audio_input=PushAudioInput(8000),
            audio_output=ReportedPlayback(8000, send_audio=no_audio, send_clear=lambda: None),
            send=lambda message: None,
            remote=kwargs["remote"],
            call=call,
        )

    def update_remote(
        self, host: str, port: int, payload_type: int, codec: str, dtmf_payload_type: int | None
    ) -> None:
        self.updates.append((host, port, payload_type, codec, dtmf_payload_type))

    def set_hold(self, held: bool) -> None:
        self.holds.append(held)

    async def send_dtmf(self, digits: str) -> None:
        self.keys.append(digits)

    def client_left(self, reason: str) -> None:
        self.left.append(reason)
        self.connection.client_left(reason)

    async def aclose(self) -> None:
        self.closed = True
        self.transport.close()


@dataclass
class MediaFactory:
    """``open_media`` for the endpoint: stand-ins, kept for the test to look at."""

    delay: float = 0.0
    fail: Exception | None = None
    opened: list[StandInMedia] = field(default_factory=list)

    async def __call__(self, **kwargs: Any) -> StandInMedia:
        if self.fail is not None:
            raise self.fail
        if self.delay:
            await asyncio.sleep(self.delay)  # a slow media open: room for a CANCEL
        counter = _Counter()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: counter, local_addr=("127.0.0.1", 0)
        )
        media = StandInMedia(transport, counter, kwargs)
        self.opened.append(media)
        return media


@dataclass
class Entry:
    """An entry point that records its calls and waits for the caller to leave (or
    hangs up itself after ``hang_up_after`` seconds)."""

    hang_up_after: float | None = None
    conns: list[Connection] = field(default_factory=list)
    ended: list[str | None] = field(default_factory=list)

    async def __call__(self, conn: Connection) -> None:
        self.conns.append(conn)
        if self.hang_up_after is None:
            await conn.wait_left()
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.wait_left(), self.hang_up_after)
        self.ended.append(conn.left_reason)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def running_endpoint(
    entry: Callable[[Connection], Awaitable[None]],
    *,
    gate: SessionGate[Connection] | None = None,
    media: MediaFactory | None = None,
    **options: Any,
) -> AsyncIterator[tuple[SipEndpoint, int]]:
    options.setdefault("port", 0)
    endpoint = SipEndpoint(
        entry,
        gate=gate or SessionGate(),
        options=SipOptions(**options),
        open_media=media if media is not None else MediaFactory(),
    )
    _, port = await endpoint.start()
    try:
        yield endpoint, port
    finally:
        await endpoint.aclose()


@dataclass
class SippResult:
    returncode: int
    stats: dict[str, str]
    errors: str
    screen: str


def ulaw_tone(path: Path, seconds: float = 1.0) -> None:
    """A raw μ-law file for SIPp's ``rtp_stream`` (a 440 Hz tone)."""
    t = np.arange(int(8000 * seconds)) / 8000
    pcm = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    path.write_bytes(g711.ulaw_encode(pcm))


async def run_sipp(
    scenario: str,
    port: int,
    *,
    calls: int = 1,
    rate: float = 1.0,
    limit: int = 1,
    seconds: float = 8.0,
    extra: tuple[str, ...] = (),
) -> SippResult:
    """Run SIPp's UAC ``scenario`` against 127.0.0.1:``port``; bounded by ``seconds``."""
    assert SIPP is not None
    with tempfile.TemporaryDirectory(prefix="sipp-") as tmp:
        work = Path(tmp)
        ulaw_tone(work / "caller.ulaw")
        args = [
            SIPP,
            f"127.0.0.1:{port}",
            "-sf",
            str(SCENARIOS / scenario),
            "-i",
            "127.0.0.1",
            "-p",
            str(free_udp_port()),
            "-mp",
            str(free_udp_port()),
            "-m",
            str(calls),
            "-r",
            str(rate),
            "-l",
            str(limit),
            "-timeout",
            f"{int(seconds)}s",
            "-timeout_error",
            "-nostdin",
            "-trace_stat",
            "-stf",
            str(work / "stat.csv"),
            "-trace_err",
            "-error_file",
            str(work / "errors.log"),
            "-trace_screen",
            "-screen_file",
            str(work / "screen.log"),
            "-max_recv_loops",
            "1000",
            "-recv_timeout",
            f"{int(seconds * 1000)}",
            *extra,
        ]
        process = await asyncio.create_subprocess_exec(
            *args, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), seconds + 2)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        stats: dict[str, str] = {}
        stat_file = work / "stat.csv"
        if stat_file.exists():
            rows = list(csv.reader(stat_file.read_text().splitlines(), delimiter=";"))
            if len(rows) >= 2:
                stats = dict(zip(rows[0], rows[-1], strict=False))
        errors = (work / "errors.log").read_text() if (work / "errors.log").exists() else ""
        screen = (work / "screen.log").read_text() if (work / "screen.log").exists() else ""
        return SippResult(process.returncode or 0, stats, errors + stderr.decode(), screen)
