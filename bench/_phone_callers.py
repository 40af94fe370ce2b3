"""Real-time phone callers for the phone benchmarks (``phone_cpu.py``, ``sip_load.py``).

Two kinds of caller, with the same line and the same ear:

- ``TwilioCaller``: a Twilio Media Streams peer on a real WebSocket (``connected``,
  ``start``, then one JSON ``media`` message of base64 μ-law every 20 ms; the server's
  marks are echoed once the caller's playout has passed them, a ``clear`` empties it).
- ``SipCaller``: a SIP user agent over UDP: INVITE with an SDP offer (PCMU, telephone-
  event), ACK of the 200, then one RTP packet of PCMU (160 bytes) every 20 ms from its
  own port to the port in the answer; BYE at the end (a BYE from the server is answered).

Both send their line on an absolute 20 ms clock (a phase per caller so that N callers do
not all send in the same instant): low noise (``LINE_NOISE`` RMS, about -60 dBFS, so a
VAD has real audio between phrases) or, while the caller speaks, the phrase. ``converse``
says a phrase, waits until the agent's answer began and was played out, pauses and says
the next one.

``Ear`` is what the caller hears: a playout that starts each answer after a fixed jitter
buffer (``JITTER``, as a phone does) and plays it in real time. It records the answer
delay (end of the caller's phrase to the answer's first audio), how late each packet came
against the answer's own schedule (first packet + the audio before it: the buffer a
phone would need never to run dry) and the gaps a phone with ``JITTER`` of buffer would
have played (the audio came after the buffer ran dry).

Wire formats: Twilio Media Streams messages
(https://www.twilio.com/docs/voice/media-streams/websocket-messages), SIP (RFC 3261,
https://www.rfc-editor.org/rfc/rfc3261), SDP offer/answer (RFC 3264) and RTP (RFC 3550,
https://www.rfc-editor.org/rfc/rfc3550). Everything is bounded and on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rejoinder.models import g711
from rejoinder.models.audio import AudioFrame
from rejoinder.models.audio_utils import resample

RATE = 8000
TICK = 0.02
CHUNK = 160  # samples (and μ-law bytes) per 20 ms
LINE_NOISE = 30.0
JITTER = 0.06
"""Seconds a caller's phone buffers before it plays an answer."""
NEW_ANSWER_GAP = 1.0
"""Audio this long after the playout ran dry, with no phrase in between, starts a new
answer (a keepalive packet, an unprompted remark) rather than counting as late."""


# ------------------------------------------------------------------- the line


def noise_chunks(seed: int, rms: float = LINE_NOISE) -> list[bytes]:
    """One second of line noise as 50 μ-law chunks (looped by the callers)."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, rms, RATE).clip(-32768, 32767).astype(np.int16)
    encoded = g711.ulaw_encode(noise)
    return [encoded[i : i + CHUNK] for i in range(0, RATE, CHUNK)]


def phrase_chunks(pcm: np.ndarray, rate: int) -> list[bytes]:
    """A phrase (int16 at ``rate``) as 20 ms μ-law chunks at 8 kHz."""
    audio = resample(AudioFrame(np.asarray(pcm, np.int16), rate), RATE).data
    encoded = g711.ulaw_encode(audio)
    silence = g711.ulaw_encode(np.zeros(1, np.int16))
    return [encoded[i : i + CHUNK].ljust(CHUNK, silence) for i in range(0, len(encoded), CHUNK)]


# -------------------------------------------------------------------- the ear


@dataclass
class Ear:
    """The caller's playout and what it measured (see the module docstring)."""

    jitter: float = JITTER
    answers: int = 0
    samples: int = 0
    answer_delays: list[float] = field(default_factory=list)
    lateness: list[float] = field(default_factory=list)
    """Per answer, the latest packet against the answer's schedule (s)."""
    gaps: list[float] = field(default_factory=list)
    """Silences the playout had to insert inside an answer (s)."""
    phrase_end: float | None = None
    play_end: float = 0.0
    _start: float = 0.0
    _answer_samples: int = 0

    def heard(self, now: float, n: int) -> None:
        """``n`` samples of agent audio arrived at ``now`` (monotonic seconds)."""
        self.samples += n
        if self.phrase_end is not None or now > self.play_end + NEW_ANSWER_GAP:
            self.answers += 1
            if self.phrase_end is not None:
                self.answer_delays.append(now - self.phrase_end)
                self.phrase_end = None
            self._start, self._answer_samples = now, 0
            self.lateness.append(0.0)
            self.play_end = now + self.jitter
        else:
            late = now - (self._start + self._answer_samples / RATE)
            self.lateness[-1] = max(self.lateness[-1], late)
            if now > self.play_end:
                self.gaps.append(now - self.play_end)
                self.play_end = now
        self._answer_samples += n
        self.play_end += n / RATE

    def cleared(self, now: float) -> None:
        self.play_end = min(self.play_end, now)

    def playing(self, now: float) -> bool:
        return now < self.play_end


# ------------------------------------------------------------ a caller's clock


class Caller:
    """The part both callers share: the 20 ms line clock, phrases, the ear."""

    def __init__(self, index: int, phase: float) -> None:
        self.index = index
        self.phase = phase
        self.noise = noise_chunks(index)
        self.ear = Ear()
        self.sent = 0
        self.send_lag_max = 0.0
        self.late_ticks = 0  # ticks our own loop sent more than 10 ms late
        self.turns = 0
        self.unanswered = 0
        self.errors: list[str] = []
        self._phrase: list[bytes] = []
        self._phrase_done: asyncio.Event = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self.closed = False

    async def start(self) -> None:
        raise NotImplementedError

    async def hang_up(self) -> None:
        raise NotImplementedError

    async def send_chunk(self, chunk: bytes) -> None:
        raise NotImplementedError

    def tick(self, now: float) -> None:
        """Called on each tick before the chunk is sent (the marks' echo)."""

    async def _clock(self) -> None:
        await asyncio.sleep(self.phase)
        began = time.monotonic()
        while not self.closed:
            now = time.monotonic()
            lag = now - (began + self.sent * TICK)
            self.send_lag_max = max(self.send_lag_max, lag)
            self.late_ticks += lag > 0.01
            self.tick(now)
            if self._phrase:
                chunk = self._phrase.pop(0)
                if not self._phrase:
                    self.ear.phrase_end = time.monotonic()
                    self._phrase_done.set()
            else:
                chunk = self.noise[self.sent % len(self.noise)]
            try:
                await self.send_chunk(chunk)
            except (ConnectionError, OSError, RuntimeError) as e:
                self.errors.append(f"send: {e!r}")
                self.closed = True
                return
            self.sent += 1
            delay = began + self.sent * TICK - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async def say(self, chunks: Sequence[bytes]) -> None:
        self._phrase_done.clear()
        self._phrase = list(chunks)
        async with asyncio.timeout(len(chunks) * TICK + 10.0):
            await self._phrase_done.wait()

    async def _answer_heard(self, answers_before: int) -> bool:
        """The answer began within 10 s and was played out (within 30 s)."""
        try:
            async with asyncio.timeout(10.0):
                while self.ear.answers == answers_before and not self.closed:  # noqa: ASYNC110
                    await asyncio.sleep(TICK)
            async with asyncio.timeout(30.0):
                # Played out, and 0.3 s without anything new.
                while not self.closed and time.monotonic() < self.ear.play_end + 0.3:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        except TimeoutError:
            return False
        return not self.closed

    async def converse(
        self, phrases: Sequence[Sequence[bytes]], pause: float, first: float
    ) -> None:
        """Say a phrase, wait for the answer to be heard, pause, the next one."""
        await asyncio.sleep(first)
        n = 0
        while not self.closed:
            before = self.ear.answers
            await self.say(phrases[n % len(phrases)])
            n += 1
            if await self._answer_heard(before):
                self.turns += 1
            else:
                self.unanswered += 1
                self.ear.phrase_end = None
            await asyncio.sleep(pause)

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        self._tasks = []


# ------------------------------------------------------------ Twilio streams


class TwilioCaller(Caller):
    """A Twilio Media Streams call on ``url`` (``ws://HOST:PORT/twilio``)."""

    def __init__(self, index: int, phase: float, http: Any, url: str) -> None:
        super().__init__(index, phase)
        self.http = http
        self.url = url
        self.ws: Any = None
        self.stream_sid = f"MZ{index + 1:032x}"
        self.call_sid = f"CA{index + 1:032x}"
        self.marks_echoed = 0
        self._marks: list[tuple[float, str]] = []  # (due, name)
        self._sequence = 0

    def _next(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    async def start(self) -> None:
        self.ws = await self.http.ws_connect(self.url, heartbeat=None)
        await self.ws.send_str(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )
        start = {
            "accountSid": "AC" + "0" * 32,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"From": f"+1555{self.index:07d}", "To": "+15550000000"},
        }
        message = {"event": "start", "sequenceNumber": self._next(), "start": start}
        await self.ws.send_str(json.dumps({**message, "streamSid": self.stream_sid}))
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._clock())]

    async def send_chunk(self, chunk: bytes) -> None:
        media = {
            "track": "inbound",
            "chunk": str(self.sent + 1),
            "timestamp": str(self.sent * 20),
            "payload": base64.b64encode(chunk).decode(),
        }
        message = {"event": "media", "sequenceNumber": self._next(), "media": media}
        await self.ws.send_str(json.dumps({**message, "streamSid": self.stream_sid}))

    def tick(self, now: float) -> None:
        while self._marks and self._marks[0][0] <= now:
            _, name = self._marks.pop(0)
            self._echo(name)

    def _echo(self, name: str) -> None:
        message = {"event": "mark", "sequenceNumber": self._next(), "mark": {"name": name}}
        task = asyncio.create_task(
            self.ws.send_str(json.dumps({**message, "streamSid": self.stream_sid}))
        )
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self.marks_echoed += 1

    async def _read(self) -> None:
        import aiohttp

        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            message = json.loads(msg.data)
            event = message.get("event")
            now = time.monotonic()
            if event == "media":
                self.ear.heard(now, len(base64.b64decode(message["media"]["payload"])))
            elif event == "mark":
                # Echoed when the playout passes it (at once when nothing is playing).
                self._marks.append((max(now, self.ear.play_end), message["mark"]["name"]))
            elif event == "clear":
                self.ear.cleared(now)
                for _, name in self._marks:
                    self._echo(name)
                self._marks.clear()
            else:
                self.errors.append(f"unexpected {event}")
        self.closed = True

    async def hang_up(self) -> None:
        if self.ws is not None and not self.ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                stop = {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}
                message = {"event": "stop", "sequenceNumber": self._next(), "stop": stop}
                await self.ws.send_str(json.dumps({**message, "streamSid": self.stream_sid}))
        self.closed = True
        await self._cancel_tasks()
        if self.ws is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5.0):
                    await self.ws.close()


# ------------------------------------------------------------------ SIP / RTP


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, on_datagram: Any) -> None:
        self.on_datagram = on_datagram

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on_datagram(data, addr)


def _header(message: str, name: str) -> str:
    match = re.search(rf"^{name}:\s*(.*?)\s*$", message, re.IGNORECASE | re.MULTILINE)
    return match.group(1) if match else ""


class SipCaller(Caller):
    """A SIP call to ``host:port`` (the server's ``--sip``); RTP on its own port."""

    def __init__(self, index: int, phase: float, host: str, port: int) -> None:
        super().__init__(index, phase)
        self.server = (host, port)
        self.call_id = f"{random.getrandbits(64):016x}-{index}@bench"
        self.tag = f"{random.getrandbits(32):08x}"
        self.from_number = f"+1555{index:07d}"
        self.to_tag = ""
        self.contact = ""
        self.rtp_to: tuple[str, int] | None = None
        self.answered_after: float | None = None  # INVITE to 200 OK (s)
        self.rtp_received = 0
        self._sip: asyncio.DatagramTransport | None = None
        self._rtp: asyncio.DatagramTransport | None = None
        self._responses: dict[str, asyncio.Queue[tuple[int, str]]] = {}
        self._ssrc = random.getrandbits(32)
        self._timestamp = random.getrandbits(32)
        self._sequence = random.getrandbits(16)
        self._cseq = 1

    # ----------------------------------------------------------- signalling

    def _on_sip(self, data: bytes, addr: Any) -> None:
        text = data.decode(errors="replace")
        first = text.split("\r\n", 1)[0]
        if first.startswith("SIP/2.0 "):
            status = int(first.split()[1])
            method = _header(text, "CSeq").split()[-1].upper()
            queue = self._responses.get(method)
            if queue is not None:
                queue.put_nowait((status, text))
            if method == "INVITE" and status == 200 and self.to_tag and self._sip:
                self._sip.sendto(self._ack(), self.server)  # a retransmitted 200: ACK again
        elif first.startswith("BYE "):
            self._sip_reply(text, 200, "OK")
            self.closed = True
            self.errors.append("the server hung up")
        else:
            method = first.split(" ", 1)[0]
            if method != "ACK":
                self._sip_reply(text, 200 if method == "OPTIONS" else 501, "OK")

    def _sip_reply(self, request: str, status: int, reason: str) -> None:
        lines = [f"SIP/2.0 {status} {reason}"]
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            lines += [
                f"{name}: {v}" for v in re.findall(rf"^{name}:\s*(.*?)\s*$", request, re.I | re.M)
            ]
        lines.append("Content-Length: 0")
        assert self._sip is not None
        self._sip.sendto(("\r\n".join(lines) + "\r\n\r\n").encode(), self.server)

    def _request(self, method: str, uri: str, cseq: int, body: str = "", to_tag: str = "") -> bytes:
        local_host, local_port = self._sip.get_extra_info("sockname")[:2]  # type: ignore[union-attr]
        branch = f"z9hG4bK{random.getrandbits(48):012x}"
        to = f"<sip:+15550000000@{self.server[0]}:{self.server[1]}>" + (
            f";tag={to_tag}" if to_tag else ""
        )
        lines = [
            f"{method} {uri} SIP/2.0",
            f"Via: SIP/2.0/UDP {local_host}:{local_port};branch={branch};rport",
            f"From: <sip:{self.from_number}@{local_host}>;tag={self.tag}",
            f"To: {to}",
            f"Call-ID: {self.call_id}",
            f"CSeq: {cseq} {method}",
            f"Contact: <sip:caller@{local_host}:{local_port}>",
            "Max-Forwards: 70",
            "User-Agent: rejoinder-bench",
        ]
        if body:
            lines.append("Content-Type: application/sdp")
        lines.append(f"Content-Length: {len(body.encode())}")
        return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()

    def _ack(self) -> bytes:
        return self._request("ACK", self.contact, 1, to_tag=self.to_tag)

    async def _transact(self, method: str, message: bytes, within: float) -> tuple[int, str]:
        """Send (retransmitting every 0.5 s, RFC 3261's T1) until a final response."""
        queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._responses[method] = queue
        assert self._sip is not None
        async with asyncio.timeout(within):
            self._sip.sendto(message, self.server)
            provisional = False
            while True:
                try:
                    status, text = await asyncio.wait_for(queue.get(), 0.5)
                except TimeoutError:
                    if not provisional:
                        self._sip.sendto(message, self.server)
                    continue
                if status >= 200:
                    return status, text
                provisional = True

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._sip, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self._on_sip), local_addr=("127.0.0.1", 0)
        )
        self._rtp, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self._on_rtp), local_addr=("127.0.0.1", 0)
        )
        rtp_port = self._rtp.get_extra_info("sockname")[1]
        sdp = "\r\n".join(
            [
                "v=0",
                f"o=bench {self._ssrc} 1 IN IP4 127.0.0.1",
                "s=-",
                "c=IN IP4 127.0.0.1",
                "t=0 0",
                f"m=audio {rtp_port} RTP/AVP 0 101",
                "a=rtpmap:0 PCMU/8000",
                "a=rtpmap:101 telephone-event/8000",
                "a=fmtp:101 0-16",
                "a=ptime:20",
                "a=sendrecv",
                "",
            ]
        )
        uri = f"sip:+15550000000@{self.server[0]}:{self.server[1]}"
        began = time.monotonic()
        status, text = await self._transact("INVITE", self._request("INVITE", uri, 1, sdp), 15.0)
        self.answered_after = time.monotonic() - began
        if status != 200:
            raise ConnectionError(f"INVITE answered {status}")
        self.to_tag = (re.search(r";tag=([^;>\s]+)", _header(text, "To")) or [None, ""])[1]
        contact = re.search(r"<([^>]+)>", _header(text, "Contact"))
        self.contact = contact.group(1) if contact else uri
        body = text.split("\r\n\r\n", 1)[1]
        host = re.search(r"^c=IN IP4 (\S+)", body, re.M)
        port = re.search(r"^m=audio (\d+)", body, re.M)
        if not (host and port):
            raise ConnectionError("the 200 OK has no usable SDP answer")
        self.rtp_to = (host.group(1), int(port.group(1)))
        self._sip.sendto(self._ack(), self.server)
        self._tasks = [asyncio.create_task(self._clock())]

    # ----------------------------------------------------------------- media

    def _on_rtp(self, data: bytes, addr: Any) -> None:
        if len(data) < 12 or data[0] >> 6 != 2:
            return
        self.rtp_received += 1
        if data[1] & 0x7F == 0:  # PCMU; telephone-events are not audio
            self.ear.heard(time.monotonic(), len(data) - 12)

    async def send_chunk(self, chunk: bytes) -> None:
        assert self._rtp is not None and self.rtp_to is not None
        header = struct.pack(
            "!BBHII",
            0x80,
            0x80 if self.sent == 0 else 0,
            self._sequence,
            self._timestamp,
            self._ssrc,
        )
        self._rtp.sendto(header + chunk, self.rtp_to)
        self._sequence = (self._sequence + 1) & 0xFFFF
        self._timestamp = (self._timestamp + CHUNK) & 0xFFFFFFFF

    async def hang_up(self) -> None:
        was_closed = self.closed
        self.closed = True
        await self._cancel_tasks()
        if self._sip is not None and self.to_tag and not was_closed:
            with contextlib.suppress(TimeoutError):
                status, _ = await self._transact(
                    "BYE", self._request("BYE", self.contact, 2, to_tag=self.to_tag), 5.0
                )
                if status != 200:
                    self.errors.append(f"BYE answered {status}")
        for transport in (self._sip, self._rtp):
            if transport is not None:
                transport.close()


# ------------------------------------------------------------------ summaries


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
