"""A Python WebRTC client of protocol v1 (aiortc), for the real-time tests and the bench.

It offers a microphone track (real-time 20 ms frames at 48 kHz: silence, or what
``speak`` queued) and a data channel, posts the offer to ``/api/offer``, receives the
agent's track and "plays" it: a frame counts as played ``jitter`` seconds after it
arrived (a jitter buffer), and the client reports its count of played *track* samples
over the data channel every 50 ms, as a browser would from its receiver's statistics.

Host candidates are narrowed to 127.0.0.1 for the client as ``WebRTCOptions``'s
``host_addresses`` does for the server: aioice skips loopback addresses otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from rejoinder.io.protocol import AgentStateMessage, ServerMessage, parse_server_message
from rejoinder.io.webrtc._ice import offering

RATE = 48000
FRAME = 960
REPORT_EVERY = 0.05


class MicTrack(MediaStreamTrack):
    """A microphone: real-time 20 ms frames, queued PCM first, silence otherwise."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[np.ndarray[Any, Any]] = deque()
        self._start: float | None = None
        self._frames = 0
        self.spoken_until = 0.0
        """Loop time at which the queued speech will have gone out."""
        self._stalled = asyncio.Event()
        self.first_speech_at: float | None = None
        """Loop time the first queued frame went out."""

    def say(self, pcm48: np.ndarray[Any, Any]) -> None:
        """Queue 48 kHz mono int16 samples (whole frames; the tail is padded)."""
        loop = asyncio.get_running_loop()
        pad = (-len(pcm48)) % FRAME
        data = np.concatenate([pcm48, np.zeros(pad, np.int16)])
        for i in range(0, len(data), FRAME):
            self._queue.append(data[i : i + FRAME])
        self.spoken_until = max(self.spoken_until, loop.time()) + len(data) / RATE

    def stall(self) -> None:
        """Send nothing more (as a peer that vanished would)."""
        self._stalled.set()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._stalled.is_set():
            await asyncio.Event().wait()
        loop = asyncio.get_running_loop()
        if self._start is None:
            self._start = loop.time()
        due = self._start + self._frames * FRAME / RATE
        if due > loop.time():
            await asyncio.sleep(due - loop.time())
        if self._queue and self.first_speech_at is None:
            self.first_speech_at = loop.time()
        pcm = self._queue.popleft() if self._queue else np.zeros(FRAME, np.int16)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._frames * FRAME
        frame.time_base = fractions.Fraction(1, RATE)
        self._frames += 1
        return frame


@dataclass
class Report:
    at: float
    samples: int


@dataclass
class WebRTCClient:
    url: str
    """The server's ``/api/offer`` URL."""
    jitter: float = 0.1
    loud: float = 1000.0
    """RMS above which a received frame counts as agent audio (not silence)."""
    messages: list[tuple[float, ServerMessage]] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    audible_frames: list[tuple[float, int]] = field(default_factory=list)
    """(arrival time, track position) of each received frame louder than ``loud``."""
    received: int = 0
    """Track samples received (per channel)."""
    played: int = 0
    errors: list[str] = field(default_factory=list)
    raw_messages: list[str] = field(default_factory=list)
    camera: MediaStreamTrack | None = None
    """A video track to share (offered after the microphone), or none."""
    pc: RTCPeerConnection = field(init=False)
    mic: MicTrack = field(init=False)
    channel: RTCDataChannel = field(init=False)
    _arrivals: deque[tuple[float, int]] = field(default_factory=deque)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _analyse: bool = True

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def connect(self, http: aiohttp.ClientSession, *, analyse: bool = True) -> None:
        self._analyse = analyse
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = MicTrack()
        self.pc.addTrack(self.mic)
        if self.camera is not None:
            self.pc.addTrack(self.camera)
        self.channel = self.pc.createDataChannel("rejoinder")
        self.channel.on("message", self._message)
        self.pc.on("track", self._track)
        with offering(["127.0.0.1"]):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription
        async with http.post(self.url, json={"sdp": offer.sdp, "type": offer.type}) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise AssertionError(f"offer refused: {resp.status} {body}")
        await self.pc.setRemoteDescription(RTCSessionDescription(body["sdp"], body["type"]))
        self._tasks.append(asyncio.create_task(self._report_loop()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.pc.close()

    # ------------------------------------------------------------- reading

    def states(self) -> list[tuple[float, str]]:
        return [(t, m.state) for t, m in self.messages if isinstance(m, AgentStateMessage)]

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [m for _, m in self.messages if isinstance(m, kind)]

    async def wait_for(
        self, predicate: Callable[[ServerMessage], bool], within: float
    ) -> ServerMessage:
        async with asyncio.timeout(within):
            seen = 0
            while True:
                for _, message in self.messages[seen:]:
                    if predicate(message):
                        return message
                seen = len(self.messages)
                self._changed.clear()
                await self._changed.wait()

    async def until(self, condition: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    def send(self, message: dict[str, Any]) -> None:
        self.channel.send(json.dumps(message))

    def _message(self, data: str | bytes) -> None:
        assert isinstance(data, str)
        self.raw_messages.append(data)
        self.messages.append((self.now, parse_server_message(data)))
        self._changed.set()

    # ------------------------------------------------------------- playing

    def _track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._receive(track)))

    async def _receive(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                assert isinstance(frame, av.AudioFrame)
                position = self.received
                self.received += frame.samples
                self._arrivals.append((self.now, self.received))
                if self._analyse:
                    data = frame.to_ndarray().astype(np.float32)
                    if float(np.sqrt(np.mean(data * data))) > self.loud:
                        self.audible_frames.append((self.now, position))
                self._changed.set()

    def _advance(self) -> None:
        heard_before = self.now - self.jitter
        while self._arrivals and self._arrivals[0][0] <= heard_before:
            self.played = self._arrivals.popleft()[1]

    async def _report_loop(self) -> None:
        last = -1
        while True:
            await asyncio.sleep(REPORT_EVERY)
            self._advance()
            if self.played != last and self.channel.readyState == "open":
                last = self.played
                self.reports.append(Report(self.now, self.played))
                self.send({"type": "played", "samples": self.played})
                self._changed.set()
